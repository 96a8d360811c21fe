// kvik serve --speculative-config: greedy completions (alone and 16 at once) equal a plain server's, the
// spec_decode counters appear in /metrics (promtool-clean but for the colon rule) and add up, and a bad config
// stops the server at start-up with a message naming the key.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { startServer, metrics, post, promtool, BINARY, MODEL } from './helpers.mjs';

const SPEC = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}';
const TEXT = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park.';
let plain, spec;

before(async () => {
  plain = await startServer(['--threads', '1']);
  spec = await startServer(['--threads', '1', '--speculative-config', SPEC]);
});

after(async () => {
  await plain?.stop();
  await spec?.stop();
});

const complete = async (srv, prompt) => {
  const r = await post(`${srv.url}/v1/completions`, { prompt, max_tokens: 48, temperature: 0, ignore_eos: true });
  assert.equal(r.status, 200, r.text);
  return r.body.choices[0].text;
};

test('greedy completions with speculation equal the plain server, alone and 16 at once', async () => {
  const prompts = Array.from({ length: 16 }, (_, i) => `${TEXT} ${TEXT.slice(0, 20 + 3 * i)}`);
  const want = [];
  for (const p of prompts) want.push(await complete(plain, p));
  assert.equal(await complete(spec, prompts[0]), want[0]);
  const got = await Promise.all(prompts.map((p) => complete(spec, p)));
  got.forEach((t, i) => assert.equal(t, want[i], `prompt ${i}`));

  const { text, values } = await metrics(spec.url);
  const check = promtool(text);
  const problems = check.output.split('\n').filter((l) => l.trim() && !l.includes("metric names should not contain ':'"));
  assert.ok(check.code === 0 || check.code === 3, check.output);
  assert.deepEqual(problems, []);
  for (const name of ['num_drafts_total', 'num_draft_tokens_total', 'num_accepted_tokens_total', 'num_accepted_tokens_per_pos_total'])
    assert.match(text, new RegExp(`# TYPE kvik:spec_decode_${name} counter`));
  const accepted = values['kvik:spec_decode_num_accepted_tokens_total'];
  assert.ok(accepted > 0, text);
  assert.ok(accepted <= values['kvik:spec_decode_num_draft_tokens_total']);
  let perPos = 0;
  for (let i = 0; i < 4; i++) perPos += values[`kvik:spec_decode_num_accepted_tokens_per_pos_total{position="${i}"}`];
  assert.equal(perPos, accepted);
  assert.doesNotMatch((await metrics(plain.url)).text, /spec_decode/);
});

test('a bad --speculative-config stops serve at start-up, naming the key', async () => {
  const port = '0';
  const r = spawnSync(BINARY, ['serve', MODEL, '--host', '127.0.0.1', '--port', port, '--speculative-config', '{"method": "ngram", "k": 4}'], {
    encoding: 'utf8',
    timeout: 30000,
  });
  assert.notEqual(r.status, 0);
  assert.match(r.stdout + r.stderr, /unknown key "k"/);
});
