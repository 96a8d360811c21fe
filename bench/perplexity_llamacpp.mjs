// llama.cpp's side of bench/perplexity.sh when the native llama-perplexity is not built: the same windows
// (llama.cpp's tokens, BOS first, ctx tokens each) prefilled through node-llama-cpp, BATCH / CTX sequences at a
// time, timed without model load. It computes no log-softmax, so it slightly flatters llama.cpp.
// Usage (from the peer folder): node perplexity_llamacpp.mjs MODEL TEXT CTX BATCH THREADS  -> {"tok_s":..,"chunks":..}
import fs from "node:fs";
import {getLlama} from "node-llama-cpp";

const [modelPath, textPath, ctxArg, batchArg, threadsArg] = process.argv.slice(2);
const ctx = Number(ctxArg), batch = Number(batchArg), threads = Number(threadsArg);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
let ids = model.tokenize(fs.readFileSync(textPath, "utf8"), false);
if (!(ids.length && ids[0] === model.tokens.bos)) ids = [model.tokens.bos, ...ids];
const chunks = Math.floor(ids.length / ctx), nseq = Math.max(1, Math.floor(batch / ctx));
const context = await model.createContext({contextSize: ctx * nseq, sequences: nseq, batchSize: batch, threads});
const seqs = Array.from({length: nseq}, () => context.getSequence());
const t0 = performance.now();
for (let c = 0; c < chunks; c += nseq)
  await Promise.all(seqs.slice(0, Math.min(nseq, chunks - c)).map(async (s, k) => {
    await s.clearHistory();
    const w = ids.slice((c + k) * ctx, (c + k + 1) * ctx);
    w[0] = model.tokens.bos;
    await s.evaluateWithoutGeneratingNewTokens(w);
  }));
const s = (performance.now() - t0) / 1000;
console.log(JSON.stringify({tok_s: chunks * ctx / s, chunks}));
process.exit(0);
