// End-to-end: `kvik serve` on stories260K driven by the official openai client, curl and promtool.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, metrics, post, curl, promtool, waitIdle } from './helpers.mjs';

const KEY = 'sk-kvik-test';
let srv;
let client;

before(async () => {
  srv = await startServer(['--api-key', KEY, '--max-num-seqs', '64', '--threads', '1']);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60000 });
});

after(async () => {
  const { code } = await srv.stop();
  assert.equal(code, 0, `graceful shutdown exits 0\n${srv.log()}`);
});

async function streamCompletion(params) {
  const stream = await client.completions.create({ ...params, stream: true });
  const texts = [];
  const finish = [];
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      texts[c.index] = (texts[c.index] ?? '') + c.text;
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  return { texts, finish, usage, chunks };
}

async function streamChat(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  const texts = [];
  const finish = [];
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      texts[c.index] = (texts[c.index] ?? '') + (c.delta.content ?? '');
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  return { texts, finish, usage };
}

test('startup log prints the KV capacity and the listening address', () => {
  assert.match(srv.log(), /KV cache size: \d+ tokens/);
  assert.match(srv.log(), /Maximum concurrency for \d+ tokens per request/);
  assert.match(srv.log(), new RegExp(`Listening on http://127\\.0\\.0\\.1:${srv.port}`));
});

test('models lists the served model', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ['stories260K']);
});

test('completions: non-streaming response shape and usage', async () => {
  const r = await client.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 12, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.model, 'stories260K');
  assert.equal(typeof r.created, 'number');
  assert.equal(r.choices.length, 1);
  assert.ok(r.choices[0].text.length > 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 12);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('completions: streamed text equals non-streamed text for the same seed', async () => {
  for (const params of [
    { prompt: 'The little dog', max_tokens: 40, temperature: 0.9, seed: 1234 },
    { prompt: 'Lily went to the park', max_tokens: 30, temperature: 0 },
  ]) {
    const whole = await client.completions.create({ model: 'stories260K', ...params });
    const streamed = await streamCompletion({ model: 'stories260K', ...params, stream_options: { include_usage: true } });
    assert.equal(streamed.texts[0], whole.choices[0].text);
    assert.equal(streamed.finish[0], whole.choices[0].finish_reason);
    assert.equal(streamed.usage.completion_tokens, whole.usage.completion_tokens);
    assert.equal(streamed.usage.prompt_tokens, whole.usage.prompt_tokens);
    assert.ok(streamed.chunks >= 2, 'one chunk per step');
  }
});

test('chat: non-streaming and streaming agree, with the assistant role', async () => {
  const params = { model: 'stories260K', messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 25, temperature: 0.7, seed: 7 };
  const whole = await client.chat.completions.create(params);
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.ok(whole.choices[0].message.content.length > 0);
  const streamed = await streamChat({ ...params, stream_options: { include_usage: true } });
  assert.equal(streamed.texts[0], whole.choices[0].message.content);
  assert.equal(streamed.finish[0], whole.choices[0].finish_reason);
  assert.equal(streamed.usage.total_tokens, whole.usage.total_tokens);
});

test('n=2: two choices, seeds seed and seed+1, streamed equals non-streamed', async () => {
  const params = { model: 'stories260K', prompt: 'One day', max_tokens: 20, temperature: 1.0, seed: 99, n: 2 };
  const whole = await client.completions.create(params);
  assert.equal(whole.choices.length, 2);
  assert.deepEqual(whole.choices.map((c) => c.index), [0, 1]);
  const one = await client.completions.create({ ...params, n: 1, seed: 100 });
  assert.equal(whole.choices[1].text, one.choices[0].text, 'choice 1 uses seed + 1');
  const streamed = await streamCompletion(params);
  assert.deepEqual(streamed.texts, whole.choices.map((c) => c.text));
  const chat = await client.chat.completions.create({ model: 'stories260K', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8, n: 2, seed: 3 });
  assert.equal(chat.choices.length, 2);
  assert.equal(chat.usage.completion_tokens, 16);
});

test('n=3 parallel sampling: choices equal separate requests with seed, seed+1, seed+2; the prompt counts once', async () => {
  const base = { model: 'stories260K', max_tokens: 24, temperature: 1.0, seed: 4242 };
  const params = { ...base, prompt: 'Parallel sampling: a cat and a dog', n: 3, logprobs: 2, ignore_eos: true };
  const before = (await metrics(srv.url)).values;
  const whole = await client.completions.create(params);
  const after = (await metrics(srv.url)).values;
  assert.deepEqual(whole.choices.map((c) => c.index), [0, 1, 2]);
  const d = (k) => (after[k] ?? 0) - (before[k] ?? 0);
  // One prefill: prompt tokens once in usage and metrics; every step after it computes one token per choice.
  assert.equal(d('kvik:prompt_tokens_total'), whole.usage.prompt_tokens);
  assert.equal(d('kvik:generation_tokens_total'), 3 * 24);
  assert.equal(d('kvik:iteration_tokens_total'), whole.usage.prompt_tokens + 3 * (24 - 1));
  assert.equal(d('kvik:request_success_total{finished_reason="length"}'), 3);
  assert.equal(whole.usage.completion_tokens, 3 * 24);
  for (let i = 0; i < 3; i++) {
    const one = await client.completions.create({ ...params, n: 1, seed: 4242 + i });
    assert.equal(whole.choices[i].text, one.choices[0].text, `choice ${i} uses seed + ${i}`);
    assert.deepEqual(whole.choices[i].logprobs, one.choices[0].logprobs);
    assert.equal(whole.usage.prompt_tokens, one.usage.prompt_tokens);
  }
  assert.ok(new Set(whole.choices.map((c) => c.text)).size > 1, 'temperature 1: the choices differ');

  const messages = [{ role: 'user', content: 'Tell me about a parallel cat.' }];
  const chat = await client.chat.completions.create({ ...base, messages, n: 3 });
  assert.deepEqual(chat.choices.map((c) => c.index), [0, 1, 2]);
  let completion = 0;
  for (let i = 0; i < 3; i++) {
    const one = await client.chat.completions.create({ ...base, messages, seed: 4242 + i });
    assert.equal(chat.choices[i].message.content, one.choices[0].message.content, `chat choice ${i}`);
    assert.equal(chat.choices[i].finish_reason, one.choices[0].finish_reason);
    assert.equal(chat.usage.prompt_tokens, one.usage.prompt_tokens);
    completion += one.usage.completion_tokens;
  }
  assert.equal(chat.usage.completion_tokens, completion);

  // A stop string ends only the choice that produced it; the others go on as alone.
  const stopping = { ...base, prompt: 'Parallel sampling: once upon a time', max_tokens: 40, n: 3, stop: ['the'] };
  const stopped = await client.completions.create(stopping);
  for (let i = 0; i < 3; i++) {
    const one = await client.completions.create({ ...stopping, n: 1, seed: 4242 + i });
    assert.equal(stopped.choices[i].text, one.choices[0].text, `stop choice ${i}`);
    assert.equal(stopped.choices[i].finish_reason, one.choices[0].finish_reason);
  }
});

test('n=2 streaming: every chunk names its choice, texts equal the non-streamed ones', async () => {
  const params = { model: 'stories260K', prompt: 'Parallel streams', max_tokens: 16, temperature: 1.0, seed: 77, n: 2 };
  const whole = await client.completions.create(params);
  const stream = await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  const texts = ['', ''];
  const finish = [];
  const seen = new Set();
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      assert.ok(c.index === 0 || c.index === 1, `index ${c.index}`);
      assert.equal(finish[c.index], undefined, 'no chunk after a choice finished');
      seen.add(c.index);
      texts[c.index] += c.text;
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  assert.deepEqual([...seen].sort(), [0, 1]);
  assert.deepEqual(texts, whole.choices.map((c) => c.text));
  assert.deepEqual(finish, whole.choices.map((c) => c.finish_reason));
  assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  const chat = await client.chat.completions.create({ model: 'stories260K', messages: [{ role: 'user', content: 'Hi' }],
    max_tokens: 10, temperature: 1.0, seed: 5, n: 2, stream: true });
  const chatTexts = ['', ''];
  for await (const chunk of chat) for (const c of chunk.choices) chatTexts[c.index] += c.delta.content ?? '';
  const chatWhole = await client.chat.completions.create({ model: 'stories260K', messages: [{ role: 'user', content: 'Hi' }],
    max_tokens: 10, temperature: 1.0, seed: 5, n: 2 });
  assert.deepEqual(chatTexts, chatWhole.choices.map((c) => c.message.content));
});

test('stop strings end the text before the stop string, streamed and not, never leaking a part of it', async () => {
  const base = { model: 'stories260K', prompt: 'Once upon a time', max_tokens: 60, temperature: 0 };
  const full = (await client.completions.create(base)).choices[0].text;
  // A stop string from the middle of the greedy text, spanning token boundaries.
  const at = Math.floor(full.length / 2);
  const stop = full.slice(at, at + 7);
  const expected = full.slice(0, full.indexOf(stop));
  for (const s of [stop, [stop, 'zzzz-never']]) {
    const whole = await client.completions.create({ ...base, stop: s });
    assert.equal(whole.choices[0].text, expected);
    assert.equal(whole.choices[0].finish_reason, 'stop');
    const streamed = await streamCompletion({ ...base, stop: s });
    assert.equal(streamed.texts[0], expected);
    assert.equal(streamed.finish[0], 'stop');
  }
  // A stop string that starts a partial match and then diverges must not hold back text forever.
  const partial = full.slice(0, 3) + '\u0001';
  const notStopped = await streamCompletion({ ...base, stop: partial });
  assert.equal(notStopped.texts[0], full);
  assert.equal(notStopped.finish[0], 'length');
});

test('logprobs: completions and chat', async () => {
  const r = await client.completions.create({ model: 'stories260K', prompt: 'The cat', max_tokens: 6, temperature: 0, logprobs: 3 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 6);
  assert.equal(lp.token_logprobs.length, 6);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  for (let i = 0; i < 6; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    const top = Object.values(lp.top_logprobs[i]);
    assert.equal(top.length, 3);
    // Greedy: the chosen token is the most likely one.
    assert.ok(Math.abs(Math.max(...top) - lp.token_logprobs[i]) < 1e-5);
  }
  const c = await client.chat.completions.create({ model: 'stories260K', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 2 });
  const content = c.choices[0].logprobs.content;
  assert.equal(content.length, c.usage.completion_tokens);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 2);
    assert.ok(t.logprob <= 0);
  }
});

test('penalties are accepted and change greedy output', async () => {
  const base = { model: 'stories260K', prompt: 'Once upon a time', max_tokens: 60, temperature: 0 };
  const plain = (await client.completions.create(base)).choices[0].text;
  const pen = (await client.completions.create({ ...base, frequency_penalty: 2, presence_penalty: 1.5, repetition_penalty: 1.3 })).choices[0].text;
  assert.notEqual(plain, pen);
});

test('curl: completion, streaming chat, tokenize and detokenize', async () => {
  const auth = ['-H', `Authorization: Bearer ${KEY}`, '-H', 'Content-Type: application/json'];
  const r = JSON.parse(curl([...auth, `${srv.url}/v1/completions`, '-d', JSON.stringify({ prompt: 'Tom had', max_tokens: 5, temperature: 0 })]));
  assert.equal(r.choices[0].finish_reason, 'length');
  const sse = curl(['-N', ...auth, `${srv.url}/v1/chat/completions`, '-d', JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 5, stream: true })]);
  const events = sse.split('\n\n').filter((e) => e.startsWith('data: '));
  assert.equal(events.at(-1), 'data: [DONE]');
  assert.ok(events.length >= 3);
  const tok = JSON.parse(curl([...auth, `${srv.url}/tokenize`, '-d', JSON.stringify({ prompt: 'Hello world' })]));
  assert.ok(tok.tokens.length >= 2);
  const detok = JSON.parse(curl([...auth, `${srv.url}/detokenize`, '-d', JSON.stringify({ tokens: tok.tokens })]));
  assert.equal(detok.prompt, 'Hello world');
});

test('metrics pass promtool (but for its colon naming rule) and their counters add up', async () => {
  const before = (await metrics(srv.url)).values;
  const sent = [];
  for (let i = 0; i < 5; i++) sent.push(await client.completions.create({ model: 'stories260K', prompt: `Story number ${i}`, max_tokens: 10 + i, temperature: 0, ignore_eos: true }));
  const { text, values: after } = await metrics(srv.url);
  const check = promtool(text);
  // promtool's lint flags every `name:with_colon` (a convention for recording rules); vLLM's own `vllm:` metrics
  // get the same line. Anything else (a parse error, a missing HELP/TYPE, a bad suffix) fails the test.
  const problems = check.output.split('\n').filter((l) => l.trim() && !l.includes("metric names should not contain ':'"));
  assert.ok(check.code === 0 || check.code === 3, check.output);
  assert.deepEqual(problems, []);
  for (const name of ['time_to_first_token_seconds', 'inter_token_latency_seconds', 'request_queue_time_seconds', 'request_prefill_time_seconds', 'request_decode_time_seconds'])
    assert.match(text, new RegExp(`# TYPE kvik:${name} histogram`));
  for (const name of ['num_requests_running', 'num_requests_waiting', 'kv_cache_usage_perc']) assert.match(text, new RegExp(`# TYPE kvik:${name} gauge`));
  for (const name of ['prefix_cache_queries_total', 'prefix_cache_hits_total', 'num_preemptions_total', 'iteration_tokens_total', 'prompt_tokens_total', 'generation_tokens_total', 'request_success_total'])
    assert.match(text, new RegExp(`# TYPE kvik:${name} counter`));
  const d = (k) => (after[k] ?? 0) - (before[k] ?? 0);
  const sum = (f) => sent.reduce((a, r) => a + f(r), 0);
  assert.equal(d('kvik:request_success_total{finished_reason="length"}'), 5);
  assert.equal(d('kvik:prompt_tokens_total'), sum((r) => r.usage.prompt_tokens));
  assert.equal(d('kvik:generation_tokens_total'), sum((r) => r.usage.completion_tokens));
  assert.equal(d('kvik:time_to_first_token_seconds_count'), 5);
  assert.equal(d('kvik:inter_token_latency_seconds_count'), sum((r) => r.usage.completion_tokens - 1));
  assert.ok(d('kvik:iteration_tokens_total') >= sum((r) => r.usage.prompt_tokens + r.usage.completion_tokens - 1));
  assert.ok(d('kvik:prefix_cache_queries_total') >= sum((r) => r.usage.prompt_tokens));
  assert.equal(after['kvik:num_requests_running'], 0);
});

test('64 concurrent streaming clients get the same greedy outputs as alone', async () => {
  const prompts = Array.from({ length: 64 }, (_, i) => `Once upon a time there was a ${['cat', 'dog', 'girl', 'boy'][i % 4]} number ${i}`);
  const params = (p) => ({ model: 'stories260K', prompt: p, max_tokens: 24, temperature: 0 });
  const alone = [];
  for (const p of prompts) alone.push((await client.completions.create(params(p))).choices[0].text);
  const together = await Promise.all(prompts.map((p) => streamCompletion(params(p))));
  together.forEach((r, i) => assert.equal(r.texts[0], alone[i], `client ${i}`));
});

test('clients that disconnect mid-stream free their KV blocks', async () => {
  const before = (await metrics(srv.url)).values;
  await Promise.all(
    Array.from({ length: 20 }, async (_, i) => {
      const stream = await client.completions.create({ model: 'stories260K', prompt: `Hello ${i}`, max_tokens: 1500, temperature: 0, ignore_eos: true, stream: true });
      let n = 0;
      for await (const _chunk of stream) if (++n === 3) break; // leaving the loop aborts the HTTP request
    }),
  );
  let m = await waitIdle(srv.url);
  assert.equal(m['kvik:num_requests_running'], 0);
  assert.equal(m['kvik:kv_cache_usage_perc'], 0);
  assert.equal(m['kvik:request_success_total{finished_reason="abort"}'] - (before['kvik:request_success_total{finished_reason="abort"}'] ?? 0), 20);

  // n = 3: the three sequences share the prompt's blocks; a disconnect aborts all three and frees them.
  const mid = m;
  await Promise.all(
    Array.from({ length: 8 }, async (_, i) => {
      const stream = await client.completions.create({ model: 'stories260K', prompt: `Hello again ${i}`, max_tokens: 1500, temperature: 1, ignore_eos: true, stream: true, n: 3 });
      let n = 0;
      for await (const _chunk of stream) if (++n === 4) break;
    }),
  );
  m = await waitIdle(srv.url);
  assert.equal(m['kvik:num_requests_running'], 0);
  assert.equal(m['kvik:kv_cache_usage_perc'], 0);
  assert.equal(m['kvik:request_success_total{finished_reason="abort"}'] - mid['kvik:request_success_total{finished_reason="abort"}'], 8 * 3);
});

// [description, body or raw string, headers, expected status, path]
const C = '/v1/completions';
const H = '/v1/chat/completions';
const ok = { prompt: 'Hi', max_tokens: 2 };
const hostile = [
  ['malformed JSON', '{"prompt": "x",', {}, 400, C],
  ['empty body', '', {}, 400, C],
  ['JSON array body', '[1,2,3]', {}, 400, C],
  ['JSON string body', '"hello"', {}, 400, C],
  ['deeply nested JSON', '['.repeat(100000) + ']'.repeat(100000), {}, 400, C],
  ['invalid UTF-8', Buffer.concat([Buffer.from('{"prompt": "'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}')]), {}, 400, C],
  ['missing prompt', { max_tokens: 2 }, {}, 400, C],
  ['prompt is a number', { prompt: 42 }, {}, 400, C],
  ['prompt is an object', { prompt: { a: 1 } }, {}, 400, C],
  ['prompt token id negative', { prompt: [1, -5] }, {}, 400, C],
  ['prompt token id past the vocabulary', { prompt: [1, 99999999] }, {}, 400, C],
  ['empty prompt list', { prompt: [] }, {}, 400, C],
  ['prompt longer than max_model_len', { prompt: Array(5000).fill(100) }, {}, 400, C],
  ['max_tokens that cannot fit', { prompt: 'Hi', max_tokens: 100000 }, {}, 400, C],
  ['max_tokens negative', { ...ok, max_tokens: -1 }, {}, 400, C],
  ['max_tokens zero', { ...ok, max_tokens: 0 }, {}, 400, C],
  ['max_tokens huge', { ...ok, max_tokens: 1e300 }, {}, 400, C],
  ['max_tokens a string', { ...ok, max_tokens: '5' }, {}, 400, C],
  ['max_tokens fractional', { ...ok, max_tokens: 2.5 }, {}, 400, C],
  ['temperature negative', { ...ok, temperature: -1 }, {}, 400, C],
  ['temperature a string', { ...ok, temperature: 'hot' }, {}, 400, C],
  ['temperature huge', { ...ok, temperature: 1e300 }, {}, 400, C],
  ['top_p zero', { ...ok, top_p: 0 }, {}, 400, C],
  ['top_p above 1', { ...ok, top_p: 1.5 }, {}, 400, C],
  ['top_k below -1', { ...ok, top_k: -7 }, {}, 400, C],
  ['min_p above 1', { ...ok, min_p: 3 }, {}, 400, C],
  ['n zero', { ...ok, n: 0 }, {}, 400, C],
  ['n huge', { ...ok, n: 1000000 }, {}, 400, C],
  ['presence_penalty out of range', { ...ok, presence_penalty: 5 }, {}, 400, C],
  ['frequency_penalty a bool', { ...ok, frequency_penalty: true }, {}, 400, C],
  ['repetition_penalty zero', { ...ok, repetition_penalty: 0 }, {}, 400, C],
  ['logprobs too many', { ...ok, logprobs: 50 }, {}, 400, C],
  ['seed a string', { ...ok, seed: 'abc' }, {}, 400, C],
  ['stop a number', { ...ok, stop: 5 }, {}, 400, C],
  ['stop list with a number', { ...ok, stop: ['a', 1] }, {}, 400, C],
  ['stop empty string', { ...ok, stop: '' }, {}, 400, C],
  ['stream a string', { ...ok, stream: 'yes' }, {}, 400, C],
  ['stream_options without stream', { ...ok, stream_options: { include_usage: true } }, {}, 400, C],
  ['ignore_eos a number', { ...ok, ignore_eos: 1 }, {}, 400, C],
  ['unknown model', { ...ok, model: 'gpt-4' }, {}, 404, C],
  ['model a number', { ...ok, model: 5 }, {}, 400, C],
  ['chat: missing messages', { max_tokens: 2 }, {}, 400, H],
  ['chat: messages empty', { messages: [] }, {}, 400, H],
  ['chat: message without role', { messages: [{ content: 'x' }] }, {}, 400, H],
  ['chat: content a number', { messages: [{ role: 'user', content: 7 }] }, {}, 400, H],
  ['chat: image part', { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, {}, 400, H],
  ['chat: top_logprobs without logprobs', { messages: [{ role: 'user', content: 'x' }], top_logprobs: 2 }, {}, 400, H],
  ['missing API key', ok, { Authorization: '' }, 401, C],
  ['wrong API key', ok, { Authorization: 'Bearer nope' }, 401, C],
  ['unknown route', ok, {}, 404, '/v1/nothing'],
  ['10 MB body', JSON.stringify({ prompt: 'x'.repeat(10 << 20) }), {}, 413, C],
  ['detokenize: bad ids', { tokens: [-1] }, {}, 400, '/detokenize'],
  ['tokenize: prompt a number', { prompt: 1 }, {}, 400, '/tokenize'],
];

test(`${hostile.length} malformed or hostile requests get the right status and do not disturb a running request`, async () => {
  const running = streamCompletion({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 200, temperature: 0, ignore_eos: true });
  for (const [what, body, headers, status, path] of hostile) {
    const auth = 'Authorization' in headers ? {} : { Authorization: `Bearer ${KEY}` };
    let r;
    try {
      r = await post(`${srv.url}${path}`, body, { ...auth, ...headers });
    } catch (e) {
      // The server may close the connection on a 413 before the whole body is sent.
      if (status === 413) {
        r = { status: 413, headers: new Headers(), body: { error: { code: 413 } } };
      } else throw e;
    }
    assert.equal(r.status, status, `${what}: ${r.text}`);
    if (status !== 413) {
      assert.equal(typeof r.body?.error?.message, 'string', `${what}: OpenAI error shape`);
      assert.ok('type' in r.body.error && 'param' in r.body.error && 'code' in r.body.error, what);
    }
    const health = await fetch(`${srv.url}/health`);
    assert.equal(health.status, 200, `still serving after: ${what}`);
  }
  const done = await running;
  assert.equal(done.finish[0], 'length');
  assert.equal(done.usage, null);
  const plain = await client.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 200, temperature: 0, ignore_eos: true });
  assert.equal(done.texts[0], plain.choices[0].text);
});

test('structured output: response_format json_object/json_schema and guided_regex/guided_choice/guided_grammar', async () => {
  const schema = {
    type: 'object',
    properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer' }, pet: { enum: ['cat', 'dog'] } },
    required: ['name', 'age', 'pet'],
  };
  for (let seed = 1; seed <= 3; seed++) {
    const r = await client.chat.completions.create({
      model: 'stories260K', messages: [{ role: 'user', content: 'Tell me about Lily' }], max_tokens: 120, temperature: 1, seed,
      response_format: { type: 'json_schema', json_schema: { name: 'person', schema } },
    });
    if (r.choices[0].finish_reason !== 'stop') continue;  // cut by max_tokens: the constraint holds per token
    const v = JSON.parse(r.choices[0].message.content);
    assert.equal(typeof v.name, 'string');
    assert.ok(Number.isInteger(v.age));
    assert.ok(['cat', 'dog'].includes(v.pet));
  }
  const o = await client.completions.create({ model: 'stories260K', prompt: 'Once', max_tokens: 150, temperature: 1, seed: 4,
    response_format: { type: 'json_object' } });
  if (o.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(o.choices[0].text), 'object');
  const date = await client.completions.create({ model: 'stories260K', prompt: 'Date:', max_tokens: 20, temperature: 1, seed: 5,
    guided_regex: '\\d{4}-\\d{2}-\\d{2}' });
  assert.match(date.choices[0].text, /^\d{4}-\d{2}-\d{2}$/);
  const choice = await client.completions.create({ model: 'stories260K', prompt: 'Pet:', max_tokens: 10, temperature: 1, seed: 6,
    guided_choice: ['cat', 'dog', 'bird'] });
  assert.ok(['cat', 'dog', 'bird'].includes(choice.choices[0].text));
  const streamed = await streamCompletion({ model: 'stories260K', prompt: 'Sum:', max_tokens: 30, temperature: 1, seed: 7,
    guided_grammar: 'root ::= num ("+" num)*\nnum ::= [1-9] [0-9]?' });
  if (streamed.finish[0] === 'stop') assert.match(streamed.texts[0], /^[1-9][0-9]?(\+[1-9][0-9]?)*$/);
  else assert.match(streamed.texts[0], /^[1-9][0-9]?(\+[1-9][0-9]?)*\+?$/);  // cut by max_tokens: a valid prefix
  // Bad specs are 400s naming the field; two at once are refused.
  const auth = { Authorization: `Bearer ${KEY}` };
  const bad = await post(`${srv.url}/v1/completions`, { model: 'stories260K', prompt: 'x', guided_regex: '(' }, auth);
  assert.equal(bad.status, 400);
  const two = await post(`${srv.url}/v1/completions`, { model: 'stories260K', prompt: 'x', guided_regex: 'a', guided_choice: ['b'] }, auth);
  assert.equal(two.status, 400);
});

test('logit_bias, stop_token_ids and min_tokens', async () => {
  const base = { model: 'stories260K', prompt: 'Once upon a time', max_tokens: 4, temperature: 0 };
  const plain = await client.completions.create(base);
  const biased = await client.completions.create({ ...base, logit_bias: { '432': -100 } });
  assert.notEqual(biased.choices[0].text, plain.choices[0].text);
  // Greedy ids here are 432 383 286 261 (", there was a"): stopping at 383 leaves one token.
  const stopped = await client.completions.create({ ...base, stop_token_ids: [383] });
  assert.equal(stopped.choices[0].finish_reason, 'stop');
  assert.equal(stopped.usage.completion_tokens, 1);
  const min = await client.completions.create({ ...base, min_tokens: 2 });
  assert.equal(min.usage.completion_tokens, 4);
  const auth = { Authorization: `Bearer ${KEY}` };
  for (const bad of [{ logit_bias: { x: 1 } }, { logit_bias: { '5': 500 } }, { stop_token_ids: 'a' }, { min_tokens: -1 }]) {
    const r = await post(`${srv.url}/v1/completions`, { ...base, ...bad }, auth);
    assert.equal(r.status, 400, JSON.stringify(bad));
  }
});
