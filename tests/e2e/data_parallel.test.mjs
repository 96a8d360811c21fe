// End to end: `kvik serve --data-parallel-size 2` (two engine replicas behind one endpoint) on stories260K, with the
// openai client: prefix-aware routing, 64 concurrent streams over both replicas, the same greedy output as one plain
// server, streaming that still streams, promtool on the merged metrics, and a replica killed with SIGKILL.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import OpenAI from 'openai';
import { startServer, metrics, post, promtool, sleep } from './helpers.mjs';

const KEY = 'sk-kvik-dp';
let dp;
let plain;
let client;

before(async () => {
  [dp, plain] = await Promise.all([
    startServer(['--data-parallel-size', '2', '--threads', '2', '--api-key', KEY, '--max-num-seqs', '64']),
    startServer(['--threads', '1', '--api-key', KEY]),
  ]);
  client = new OpenAI({ baseURL: `${dp.url}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60000 });
});

after(async () => {
  const [d] = await Promise.all([dp.stop(), plain.stop()]);
  assert.equal(d.code, 0, `the front shuts down cleanly with a replica gone\n${dp.log()}`);
});

const auth = { Authorization: `Bearer ${KEY}` };
// Whether 127.0.0.1:port refuses a connection (nothing listens there).
const refuses = (port) =>
  new Promise((resolve) => {
    const c = net.connect(port, '127.0.0.1');
    c.on('connect', () => (c.destroy(), resolve(false)));
    c.on('error', (e) => resolve(e.code === 'ECONNREFUSED'));
  });
const replicas = async () => (await (await fetch(`${dp.url}/v1/dp/replicas`, { headers: auth })).json()).data;

// A story prompt of ~90 tokens (5 full blocks of 16) whose first words make its first block its own.
const story = (opening) =>
  `${opening} there was a little girl named Lily. She loved to play outside in the park with her friends. One day, ` +
  'she saw a big red ball under a tree. She ran to get it, but a dog took it first. Lily was sad, but then';

async function complete(prompt, extra = {}) {
  const r = await post(`${dp.url}/v1/completions`, { model: 'stories260K', prompt, max_tokens: 8, temperature: 0, ...extra }, auth);
  assert.equal(r.status, 200, r.text);
  return { replica: Number(r.headers.get('x-kvik-replica')), usage: r.body.usage, text: r.body.choices[0].text };
}

test('a repeated long prompt goes to the replica that cached it and hits its prefix cache', async () => {
  const routed = (m) => m[`kvik_dp_requests_routed_total{replica="0",reason="prefix"}`] + m[`kvik_dp_requests_routed_total{replica="1",reason="prefix"}`];
  const before = (await metrics(dp.url)).values;
  // A, B, C, then A again: routed by load, A's second time would go to the replica that got fewer requests (not A's).
  const a = await complete(story('Once upon a time,'));
  const b = await complete(story('Long ago, in a small town,'));
  const c = await complete(story('In a big green forest,'));
  assert.equal(a.usage.prompt_tokens_details.cached_tokens, 0);
  assert.notEqual(a.replica, b.replica, 'equal loads alternate');
  assert.equal(c.replica, a.replica);
  const again = await complete(story('Once upon a time,'));
  assert.equal(again.replica, a.replica, 'routed to the replica holding the prefix');
  assert.ok(again.usage.prompt_tokens_details.cached_tokens >= 64, JSON.stringify(again.usage));
  assert.equal(again.text, a.text);
  assert.equal(routed((await metrics(dp.url)).values) - routed(before), 1);
});

test("the front's block hashes of a prompt are those in its replica's prefix-cache summary (one shared seed)", async () => {
  const messages = [{ role: 'user', content: story('On a cold winter night,') }];
  const r = await post(`${dp.url}/v1/chat/completions`, { model: 'stories260K', messages, max_tokens: 4, temperature: 0 }, auth);
  assert.equal(r.status, 200, r.text);
  const replica = Number(r.headers.get('x-kvik-replica'));
  let route;
  for (let t = 0; t < 100; t++) {
    route = (await post(`${dp.url}/v1/dp/route`, { model: 'stories260K', messages }, auth)).body;
    if (route.replicas[replica].matched_summary_blocks === route.prompt_blocks) break;
    await sleep(20);
  }
  assert.ok(route.prompt_blocks >= 5, JSON.stringify(route));
  assert.equal(route.replicas[replica].matched_summary_blocks, route.prompt_blocks, JSON.stringify(route));
  assert.equal(route.replicas[1 - replica].matched_summary_blocks, 0);
  assert.deepEqual([route.replica, route.by_prefix], [replica, true]);
  assert.equal((await post(`${dp.url}/v1/dp/route`, '{"messages": [', auth)).status, 400);
  assert.equal((await post(`${dp.url}/v1/dp/route`, { messages }, {})).status, 401);
});

test('64 concurrent streams spread over both replicas and all complete', async () => {
  const before = await replicas();
  const streams = await Promise.all(
    Array.from({ length: 64 }, async (_, i) => {
      const { data: stream, response } = await client.completions
        .create({ model: 'stories260K', prompt: `Tom had ${i} red apples and`, max_tokens: 24, ignore_eos: true, stream: true })
        .withResponse();
      let chunks = 0;
      let finish = null;
      for await (const c of stream) {
        if (c.choices.length) chunks++;
        finish = c.choices[0]?.finish_reason ?? finish;
      }
      return { replica: Number(response.headers.get('x-kvik-replica')), type: response.headers.get('content-type'), chunks, finish };
    }),
  );
  for (const s of streams) {
    assert.ok(s.replica === 0 || s.replica === 1, JSON.stringify(s));
    assert.match(s.type, /^text\/event-stream/);
    assert.equal(s.finish, 'length');
    assert.equal(s.chunks, 24);
  }
  const per = [0, 1].map((i) => streams.filter((s) => s.replica === i).length);
  assert.ok(per[0] >= 16 && per[1] >= 16, `streams per replica: ${per}`);
  const after = await replicas();
  for (const i of [0, 1]) {
    assert.equal(after[i].routed_load + after[i].routed_prefix - before[i].routed_load - before[i].routed_prefix, per[i]);
    assert.equal(after[i].in_flight, 0);
  }
});

test('greedy output through the data-parallel endpoint equals one plain server', async () => {
  const plainClient = new OpenAI({ baseURL: `${plain.url}/v1`, apiKey: KEY, maxRetries: 0 });
  for (const prompt of ['Once upon a time', 'The cat sat on the mat and', story('One sunny morning,')]) {
    const params = { model: 'stories260K', prompt, max_tokens: 40, temperature: 0 };
    const [x, y] = await Promise.all([client.completions.create(params), plainClient.completions.create(params)]);
    assert.equal(x.choices[0].text, y.choices[0].text);
    assert.deepEqual(x.usage.completion_tokens, y.usage.completion_tokens);
  }
  const chat = { model: 'stories260K', messages: [{ role: 'user', content: 'Tell me a story about a dog.' }], max_tokens: 30, temperature: 0 };
  const [x, y] = await Promise.all([client.chat.completions.create(chat), plainClient.chat.completions.create(chat)]);
  assert.equal(x.choices[0].message.content, y.choices[0].message.content);
  // Streamed through the front: the same text, chunk by chunk.
  const stream = await client.chat.completions.create({ ...chat, stream: true });
  let text = '';
  for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
  assert.equal(text, y.choices[0].message.content);
});

test('a stream through the front arrives as it is generated, not at the end', async () => {
  const start = performance.now();
  const stream = await client.completions.create({ model: 'stories260K', prompt: 'Hello', max_tokens: 1500, ignore_eos: true, stream: true });
  let first = 0;
  let n = 0;
  for await (const c of stream) {
    if (!c.choices.length) continue;
    if (n++ === 0) first = performance.now() - start;
  }
  const total = performance.now() - start;
  assert.equal(n, 1500);
  assert.ok(first < total / 3, `first chunk after ${first.toFixed(0)} ms of ${total.toFixed(0)} ms`);
});

test('the merged metrics pass promtool (but for its colon naming rule) and carry replica labels and totals', async () => {
  const { text, values } = await metrics(dp.url);
  const check = promtool(text);
  const problems = check.output.split('\n').filter((l) => l.trim() && !l.includes("metric names should not contain ':'"));
  assert.ok(check.code === 0 || check.code === 3, check.output);
  assert.deepEqual(problems, []);
  assert.equal((text.match(/^# TYPE kvik:num_requests_running gauge$/gm) ?? []).length, 1);
  assert.match(text, /^kvik:num_requests_running\{replica="0",model_name="stories260K"\} 0$/m);
  assert.match(text, /^kvik:num_requests_running\{replica="1",model_name="stories260K"\} 0$/m);
  // The totals over the replicas: a counter summed, a fraction gauge averaged.
  const total = (name) => Number(text.match(new RegExp(`^${name}\\{replica="all",model_name="stories260K"\\} (\\S+)$`, 'm'))?.[1]);
  const each = (name) => [0, 1].map((i) => Number(text.match(new RegExp(`^${name}\\{replica="${i}",model_name="stories260K"\\} (\\S+)$`, 'm'))?.[1]));
  const [g0, g1] = each('kvik:generation_tokens_total');
  assert.ok(g0 + g1 > 0);
  assert.equal(total('kvik:generation_tokens_total'), g0 + g1);
  const [u0, u1] = each('kvik:kv_cache_usage_perc');
  assert.ok(Math.abs(total('kvik:kv_cache_usage_perc') - (u0 + u1) / 2) < 1e-9);
  assert.equal(values['kvik_dp_replica_up{replica="0"}'], 1);
  assert.equal(values['kvik_dp_replica_up{replica="1"}'], 1);
});

test('other routes pass through the front unchanged: errors, tokenize, models, web pages', async () => {
  const bad = await post(`${dp.url}/v1/completions`, '{"prompt": ', auth);
  assert.equal(bad.status, 400);
  assert.equal(bad.headers.get('content-type'), 'application/json');
  assert.match(bad.body.error.message, /not valid JSON/);
  const field = await post(`${dp.url}/v1/chat/completions`, { model: 'stories260K', messages: 'hi' }, auth);
  assert.equal(field.status, 400);
  assert.equal(field.body.error.param, 'messages');
  assert.equal((await post(`${dp.url}/v1/completions`, { prompt: 'x' }, { Authorization: 'Bearer wrong' })).status, 401);
  assert.equal((await post(`${dp.url}/v1/nothing`, {}, auth)).status, 404);
  const tok = await post(`${dp.url}/tokenize`, { prompt: 'Hello world' }, auth);
  const direct = await post(`${plain.url}/tokenize`, { prompt: 'Hello world' }, auth);
  assert.deepEqual(tok.body.tokens, direct.body.tokens);
  const models = await (await fetch(`${dp.url}/v1/models`, { headers: auth })).json();
  assert.equal(models.data[0].id, 'stories260K');
  const page = await fetch(`${dp.url}/`);
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-type'), /text\/html/);
  assert.equal((await fetch(`${dp.url}/v1/models`, { method: 'HEAD', headers: auth })).status, 200);
  const lora = await post(`${dp.url}/v1/load_lora_adapter`, { lora_name: 'a', lora_path: '/x' }, auth);
  assert.equal(lora.status, 400);
  assert.match(lora.body.error.message, /--lora-modules/);
});

test('killing one replica fails its requests in flight; the endpoint serves on with the other', async () => {
  const victim = (await replicas())[1];
  const started = [];
  const runs = Array.from({ length: 12 }, async (_, i) => {
    const { data: stream, response } = await client.completions
      .create({ model: 'stories260K', prompt: `Sam found ${i} shells and`, max_tokens: 1500, ignore_eos: true, stream: true })
      .withResponse();
    const replica = Number(response.headers.get('x-kvik-replica'));
    let n = 0;
    try {
      for await (const c of stream) if (c.choices.length && n++ === 0) started.push(i);
      return { replica, ok: true, n };
    } catch (e) {
      return { replica, ok: false, n, error: String(e.message) };
    }
  });
  while (started.length < 12) await sleep(5);
  process.kill(victim.pid, 'SIGKILL');
  // Right after its listener is gone (the process dead, most likely not yet reaped by the front): requests routed
  // to it (it has the fewest in flight now) are refused a connection and move to replica 0, so none fails.
  while (!(await refuses(victim.port))) await sleep(1);
  const rightAfter = await Promise.all(Array.from({ length: 8 }, (_, i) => complete(`Right after ${i}`)));
  for (const r of rightAfter) assert.equal(r.replica, 0);
  const results = await Promise.all(runs);
  const onVictim = results.filter((r) => r.replica === 1);
  assert.ok(onVictim.length >= 4, JSON.stringify(results));
  assert.ok(onVictim.some((r) => !r.ok), 'a request in flight on the killed replica ends in an error');
  for (const r of onVictim.filter((r) => !r.ok)) assert.match(r.error, /replica 1 \(pid \d+, port \d+\)/);
  for (const r of results.filter((r) => r.replica === 0)) assert.ok(r.ok && r.n === 1500, JSON.stringify(r));

  for (let t = 0; t < 100 && (await replicas())[1].up; t++) await sleep(20);
  assert.equal((await replicas())[1].up, false);
  assert.match(dp.log(), new RegExp(`replica 1 \\(pid ${victim.pid}, port \\d+\\) was killed by signal 9`));
  assert.equal((await fetch(`${dp.url}/health`)).status, 200);
  const later = await Promise.all(Array.from({ length: 8 }, (_, i) => complete(`After the storm ${i}`)));
  for (const r of later) assert.equal(r.replica, 0);
  assert.equal((await metrics(dp.url)).values['kvik_dp_replica_up{replica="1"}'], 0);
});
