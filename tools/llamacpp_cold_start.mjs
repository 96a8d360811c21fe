// Cold start of llama.cpp (node-llama-cpp's prebuilt CPU build): load MODEL, make a context, feed a short prompt
// and take the first greedy token; prints the milliseconds since the process started (performance.now()) when the
// first token is out, and when node-llama-cpp had been imported (node's own start-up, to compare like with like).
// bench/compare_llamacpp.sh copies it into $KVIK_PEER_DIR (ES modules resolve packages next to the script).
// Usage: node llamacpp_cold_start.mjs MODEL.gguf [THREADS] -> JSON {imported_ms, first_token_ms}
import {getLlama} from "node-llama-cpp";

const imported = performance.now();
const [modelPath, threadsArg] = process.argv.slice(2);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const ctx = await model.createContext({contextSize: 256, threads: Number(threadsArg ?? 2), batchSize: 64});
const seq = ctx.getSequence();
const prompt = [model.tokens.bos, ...model.tokenize("Once upon a time", false)];
for await (const tok of seq.evaluate(prompt, {temperature: 0})) break;
console.log(JSON.stringify({imported_ms: imported, first_token_ms: performance.now()}));
process.exit(0);
