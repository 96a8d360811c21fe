// Greedy reference from llama.cpp (node-llama-cpp) with a LoRA adapter applied (llama.cpp's --lora FILE /
// --lora-scaled FILE S): as tools/llamacpp_ref_greedy.mjs (context 2048, f16 KV cache, 2 threads, batch 512, BOS +
// prompt, temperature 0, top-k of the full softmax per step, through EOS), the context created with
// lora: {adapters: [{filePath, scale}]}. tools/make_lora_fixture.sh copies it into $KVIK_PEER_DIR.
// Usage: node llamacpp_lora_ref.mjs MODEL.gguf LORA.gguf SCALE "prompt text" N_TOKENS [TOPK]
//   -> JSON {prompt, prompt_ids, generated, text, steps: [{token, top: [[id, prob], ...]}]}
import {getLlama} from "node-llama-cpp";

const [modelPath, loraPath, scaleArg, promptText, nArg, topkArg] = process.argv.slice(2);
const n = Number(nArg), topk = Number(topkArg ?? 10);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const ctx = await model.createContext({contextSize: 2048, threads: 2, batchSize: 512,
  lora: {adapters: [{filePath: loraPath, scale: Number(scaleArg)}]}});
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
  steps.push({token: value.token, top: [...value.probabilities.entries()].sort((a, b) => b[1] - a[1]).slice(0, topk)});
  next = [value.token];
}
console.log(JSON.stringify({prompt: promptText, prompt_ids: ids, generated: steps.map(s => s.token),
  text: model.detokenize(steps.map(s => s.token)), steps}));
