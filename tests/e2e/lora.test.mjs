// kvik serve --enable-lora with the openai client: adapters (GGUF and PEFT, from `kvik synth-lora`) selected by
// "model", listed by /v1/models with their parent; a batch of the base model and four adapters equals each request
// alone; hostile adapters at /v1/load_lora_adapter get a 400 naming what is wrong while the server keeps serving;
// an adapter unloaded mid-request finishes that request; kvik:lora_requests_info.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, metrics, post, BINARY, MODEL } from './helpers.mjs';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvik-lora-e2e-'));
// Asynchronous, so node keeps serving its sockets while kvik runs: a synchronous child that outlasts the server's
// keep-alive timeout (5 s; slow binaries under ASan) would leave fetch a pooled connection the server has closed.
const kvik = async (...args) => (await promisify(execFile)(BINARY, args, { maxBuffer: 1 << 26 })).stdout;
const synth = async (name, ...args) => {
  const out = path.join(dir, name);
  await kvik('synth-lora', MODEL, out, '--b-std', '0.02', ...args);
  return out;
};
let srv, client;
const adapters = {};

before(async () => {
  adapters.a = await synth('a.gguf', '--seed', '1');
  adapters.b = await synth('b', '--peft', '--seed', '2', '--type', 'bf16');
  adapters.c = await synth('c.gguf', '--seed', '3', '--type', 'f16', '--rank', '16');
  adapters.d = await synth('d', '--peft', '--seed', '4', '--targets', 'q,v', '--rank', '4');
  srv = await startServer([
    '--threads', '1', '--enable-lora', '--max-loras', '4', '--max-lora-rank', '16',
    '--lora-modules', `a=${adapters.a}`, `b=${adapters.b}`, `c=${adapters.c}`, `d=${adapters.d}`,
  ]);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 60000 });
});

after(async () => {
  await srv?.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

const PROMPT = 'Once upon a time, there was a little girl named Lily.';
const complete = async (model, prompt = PROMPT, max_tokens = 24) => {
  const r = await client.completions.create({ model, prompt, max_tokens, temperature: 0, ignore_eos: true });
  assert.equal(r.model, model);
  return r.choices[0].text;
};

test('/v1/models lists each adapter with the base model as parent', async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  const base = list.data[0];
  assert.deepEqual(ids, [base.id, 'a', 'b', 'c', 'd']);
  for (const m of list.data.slice(1)) {
    assert.equal(m.parent, base.id);
    assert.equal(m.root, adapters[m.id]);
  }
});

test('a batch mixing the base model and four adapters: each equals that request alone and kvik generate --lora', async () => {
  const base = (await client.models.list()).data[0].id;
  const models = [base, 'a', 'b', 'c', 'd'];
  const alone = {};
  for (const m of models) alone[m] = await complete(m);
  assert.equal(new Set(Object.values(alone)).size, 5, `every adapter changes the output: ${JSON.stringify(alone)}`);
  const jobs = Array.from({ length: 15 }, (_, i) => models[i % 5]);
  const got = await Promise.all(jobs.map((m) => complete(m)));
  got.forEach((t, i) => assert.equal(t, alone[jobs[i]], `request ${i} (${jobs[i]})`));
  // The CLI under the same adapter prints the same continuation.
  const cli = JSON.parse(
    await kvik('generate', '-m', MODEL, '-p', PROMPT, '-n', '24', '--temperature', '0', '--ignore-eos', '--json', '--lora',
      adapters.c, '--threads', '1'));
  assert.equal(cli.text, alone.c);
  const { text } = await metrics(srv.url);
  assert.match(text, /kvik:lora_requests_info\{[^}]*max_lora="4",running_lora_adapters="[^"]*",waiting_lora_adapters="[^"]*"\} \d/);
});

test('hostile adapters get a 400 naming the problem; the server keeps serving', async () => {
  const good = fs.readFileSync(adapters.a);
  const truncated = path.join(dir, 'truncated.gguf');
  fs.writeFileSync(truncated, good.subarray(0, good.length >> 1));
  const otherModel = path.join(dir, 'other.gguf');
  await kvik('synth', otherModel, '--dim', '32', '--layers', '2', '--heads', '4', '--kv-heads', '2', '--ff', '64');
  const foreign = path.join(dir, 'foreign.gguf');
  await kvik('synth-lora', otherModel, foreign);
  const r32 = await synth('r32.gguf', '--rank', '32');
  const peftWith = (name, edit) => {
    const d = path.join(dir, name);
    fs.cpSync(adapters.b, d, { recursive: true });
    const cfg = JSON.parse(fs.readFileSync(path.join(d, 'adapter_config.json')));
    edit(cfg);
    fs.writeFileSync(path.join(d, 'adapter_config.json'), JSON.stringify(cfg));
    return d;
  };
  const cases = [
    [{ lora_name: 'x', lora_path: path.join(dir, 'nope') }, /no such file/],
    [{ lora_name: 'x', lora_path: truncated }, /truncated\.gguf/],
    [{ lora_name: 'x', lora_path: MODEL }, /general\.type/],
    [{ lora_name: 'x', lora_path: foreign }, /shape mismatch/],
    [{ lora_name: 'x', lora_path: r32 }, /--max-lora-rank 16/],
    [{ lora_name: 'x', lora_path: peftWith('dora', (c) => (c.use_dora = true)) }, /DoRA/],
    [{ lora_name: 'x', lora_path: peftWith('rank', (c) => (c.r = 4)) }, /r = 4/],
    [{ lora_name: 'x', lora_path: peftWith('alpha', (c) => (c.lora_alpha = 'NaN')) }, /lora_alpha/],
    [{ lora_name: 'x', lora_path: peftWith('embed', (c) => c.target_modules.push('embed_tokens')) }, /embed_tokens/],
    [{ lora_name: 'a', lora_path: adapters.a }, /already been loaded/],
    [{ lora_path: adapters.a }, /lora_name/],
    ['{"lora_name": ', /JSON/i],
  ];
  for (const [body, want] of cases) {
    const r = await post(`${srv.url}/v1/load_lora_adapter`, body);
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
    assert.match(r.body.error.message, want, JSON.stringify(body));
    assert.equal(await complete('a', 'Once', 4), await complete('a', 'Once', 4));  // still serving
  }
  const missing = await post(`${srv.url}/v1/unload_lora_adapter`, { lora_name: 'nobody' });
  assert.equal(missing.status, 404, missing.text);
  const unknown = await post(`${srv.url}/v1/completions`, { model: 'nobody', prompt: 'Once', max_tokens: 2 });
  assert.equal(unknown.status, 404);
  assert.equal(unknown.body.error.param, 'model');
});

test('load at run time; an adapter unloaded while in use finishes its request, then is gone', async () => {
  const e = await synth('e.gguf', '--seed', '5');
  const r = await post(`${srv.url}/v1/load_lora_adapter`, { lora_name: 'e', lora_path: e });
  assert.equal(r.status, 200, r.text);
  const want = await complete('e', PROMPT, 200);
  const stream = await client.completions.create({ model: 'e', prompt: PROMPT, max_tokens: 200, temperature: 0,
    ignore_eos: true, stream: true });
  let text = '';
  let unloaded = false;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? '';
    if (!unloaded) {
      const u = await post(`${srv.url}/v1/unload_lora_adapter`, { lora_name: 'e' });
      assert.equal(u.status, 200, u.text);
      unloaded = true;
    }
  }
  assert.equal(text, want);
  const after = await post(`${srv.url}/v1/completions`, { model: 'e', prompt: 'Once', max_tokens: 2 });
  assert.equal(after.status, 404);
  assert.ok(!(await client.models.list()).data.some((m) => m.id === 'e'));
});
