// Greedy reference from llama.cpp (node-llama-cpp) that keeps
// going through end-of-generation tokens (EOS/EOT are yielded and fed back like any other token), so random-weight
// models that happen to pick </s> still give N tokens. Otherwise the same: context 2048 (f16 KV cache), 2 threads,
// batch 512, the prompt tokenized with BOS, temperature 0, and the top-k of the full softmax at every step.
// ES modules resolve packages next to the script: tools/make_ref_fixtures.sh copies it into $KVIK_PEER_DIR.
// With --lora FILE SCALE first, the context applies that adapter (llama.cpp's --lora-scaled FILE S;
// tools/make_lora_fixture.sh).
// Usage: node llamacpp_ref_greedy.mjs [--lora LORA.gguf SCALE] MODEL.gguf "prompt text" N_TOKENS [TOPK]
//   -> JSON {model, prompt, prompt_ids, generated, text, steps: [{token, top: [[id, prob], ...]}]}
import {getLlama} from "node-llama-cpp";

const args = process.argv.slice(2);
const lora = args[0] === "--lora" ? {adapters: [{filePath: args[1], scale: Number(args[2])}]} : undefined;
const [modelPath, promptText, nArg, topkArg] = lora ? args.slice(3) : args;
const n = Number(nArg), topk = Number(topkArg ?? 10);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const ctx = await model.createContext({contextSize: 2048, threads: 2, batchSize: 512, ...(lora ? {lora} : {})});
const seq = ctx.getSequence();
const prompt = model.tokenize(promptText, false);
const ids = [prompt.length && prompt[0] === model.tokens.bos ? [] : [model.tokens.bos], prompt].flat();
const steps = [];
let next = ids;
for (let i = 0; i < n; i++) {
  const it = seq.evaluateWithMetadata(next, {probabilities: true}, {temperature: 0, yieldEogToken: true});
  const {value} = await it.next();
  await it.return();
  if (!value) throw new Error(`llama.cpp produced no token at step ${i}`);
  const top = [...value.probabilities.entries()].sort((a, b) => b[1] - a[1]).slice(0, topk);
  steps.push({token: value.token, top});
  next = [value.token];
}
console.log(JSON.stringify({model: modelPath, prompt: promptText, prompt_ids: ids, generated: steps.map(s => s.token),
  text: model.detokenize(steps.map(s => s.token)), steps}));
