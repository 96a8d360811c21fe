// llama-perplexity's computation done through llama.cpp itself (node-llama-cpp, CPU, f16 KV cache): the text
// tokenized by llama.cpp with BOS first, non-overlapping windows of CTX tokens, each window's first token replaced
// by BOS, every second-half position's next-token probabilities taken from llama.cpp, and
//   PPL = exp(mean -ln p(next)), its +/- as llama-perplexity prints it;
// with BASE, the --kl-divergence figures against BASE's probabilities on the same windows (in double precision:
// mean KL(base || model) over base log-probs above -16, share of equal argmax, RMS of p - p_base of the target).
// Used where the native llama-perplexity is not built (tools/make_perplexity_fixture.sh).
// Usage (from the peer folder, where node-llama-cpp resolves): node llamacpp_perplexity_ref.mjs MODEL TEXT CTX [BASE]
import fs from "node:fs";
import {getLlama} from "node-llama-cpp";

const [modelPath, textPath, ctxArg, basePath] = process.argv.slice(2);
const ctx = Number(ctxArg), first = ctx >> 1;
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});

async function windowProbs(path, windows) {
  const model = await llama.loadModel({modelPath: path});
  const context = await model.createContext({contextSize: ctx, batchSize: ctx, sequences: 1, threads: 2});
  const seq = context.getSequence();
  const out = [];
  for (const w of windows) {
    await seq.clearHistory();
    const items = w.map((t, k) => (k >= first && k < ctx - 1 ? [t, {generateNext: {probabilities: true}}] : t));
    const res = await seq.controlledEvaluate(items);
    const rows = [];
    for (let k = first; k < ctx - 1; k++) rows.push(res[k].next.probabilities);
    out.push(rows);
  }
  return {model, rows: out};
}

const text = fs.readFileSync(textPath, "utf8");
const tokModel = await llama.loadModel({modelPath: basePath ?? modelPath});
let ids = tokModel.tokenize(text, false);
if (!(ids.length && ids[0] === tokModel.tokens.bos)) ids = [tokModel.tokens.bos, ...ids];
const chunks = Math.floor(ids.length / ctx);
const windows = [];
for (let c = 0; c < chunks; c++) {
  const w = ids.slice(c * ctx, (c + 1) * ctx);
  w[0] = tokModel.tokens.bos;
  windows.push(w);
}
const m = await windowProbs(modelPath, windows);
const b = basePath ? await windowProbs(basePath, windows) : null;
let nll = 0, nll2 = 0, count = 0, kld = 0, same = 0, dp2 = 0;
const argmax = map => map.entries().next().value[0];
for (let c = 0; c < chunks; c++)
  for (let r = 0; r < ctx - 1 - first; r++) {
    const target = ids[c * ctx + first + r + 1];
    const p = m.rows[c][r].get(target) ?? 0;
    const v = -Math.log(p);
    nll += v, nll2 += v * v, count++;
    if (b) {
      const pm = m.rows[c][r], pb = b.rows[c][r];
      let s = 0;
      for (const [tok, q] of pb) {
        const lq = Math.log(q);
        if (lq > -16) s += q * (lq - Math.log(pm.get(tok) ?? 1e-45));
      }
      kld += s;
      same += argmax(pm) === argmax(pb);
      const d = p - (pb.get(target) ?? 0);
      dp2 += d * d;
    }
  }
const mean = nll / count, ppl = Math.exp(mean);
const v = nll2 / count - mean * mean;
const result = {ppl, ppl_stderr: v > 0 ? Math.sqrt(v / (count - 1)) * ppl : 0, tokens: count, chunks, text_tokens: ids.length};
if (b) Object.assign(result, {kld_mean: kld / count, top1_agreement: same / count, delta_p_rms: Math.sqrt(dp2 / count)});
console.log(JSON.stringify(result));
process.exit(0);
