// llama.cpp (node-llama-cpp's prebuilt CPU build) timings with a chosen KV cache type, for the rows of
// bench/compare_llamacpp.sh when KV_TYPE is not f16 (the shared peer script has no KV option). Same measurements as
// llamacpp-ref.mjs bench / bench-batch; the KV cache's K and V are KV_TYPE (Q8_0, F16, ...) with flash attention on,
// which llama.cpp needs for a quantized V cache. compare_llamacpp.sh copies it into $KVIK_PEER_DIR (ES modules
// resolve packages next to the script).
// Usage: node llamacpp_bench.mjs bench MODEL.gguf PROMPT_TOKENS GEN_TOKENS THREADS KV_TYPE
//        node llamacpp_bench.mjs bench-batch MODEL.gguf SEQUENCES PROMPT_TOKENS GEN_TOKENS THREADS KV_TYPE
// -> one JSON line as llamacpp-ref.mjs prints it, plus kv_type.
import {getLlama} from "node-llama-cpp";

const [mode, modelPath, ...rest] = process.argv.slice(2);
const kvType = (rest.at(-1) ?? "F16").toUpperCase();
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const kv = {experimentalKvCacheKeyType: kvType, experimentalKvCacheValueType: kvType, flashAttention: true};
const tokens = (p, s) => Array.from({length: p}, (_, i) => 3 + (i * 7919 + s * 104729) % 400);

if (mode === "bench") {
  const [p, g, threads] = rest.slice(0, 3).map(Number);
  const ctx = await model.createContext({contextSize: p + g + 16, threads, batchSize: Math.max(p, 1), ...kv});
  const seq = ctx.getSequence();
  const prompt = tokens(p, 0);
  let t = performance.now();
  await seq.evaluateWithoutGeneratingNewTokens(prompt);
  const prefill = performance.now() - t;
  t = performance.now();
  let k = 0;
  for await (const tok of seq.evaluate([prompt[p - 1]], {temperature: 0})) { if (++k >= g) break; }
  const decode = performance.now() - t;
  console.log(JSON.stringify({model: modelPath, threads, prompt_tokens: p, gen_tokens: g, kv_type: kvType,
    prefill_tok_s: p / (prefill / 1000), decode_tok_s: g / (decode / 1000)}));
} else if (mode === "bench-batch") {
  const [nseq, p, g, threads] = rest.slice(0, 4).map(Number);
  const ctx = await model.createContext({contextSize: nseq * (p + g + 16), sequences: nseq, threads, batchSize: 2048,
    ...kv});
  const t = performance.now();
  const counts = await Promise.all(Array.from({length: nseq}, async (_, s) => {
    const seq = ctx.getSequence();
    let k = 0;
    for await (const tok of seq.evaluate(tokens(p, s), {temperature: 0})) { if (++k >= g) break; }
    return k;
  }));
  const secs = (performance.now() - t) / 1000, out = counts.reduce((a, b) => a + b, 0);
  console.log(JSON.stringify({model: modelPath, threads, sequences: nseq, prompt_tokens: p, gen_tokens: g,
    kv_type: kvType, duration_s: secs, output_tok_s: out / secs, total_tok_s: (out + nseq * p) / secs}));
} else {
  console.error("modes: bench | bench-batch"); process.exit(2);
}
process.exit(0);
