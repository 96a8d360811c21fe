// Overload and lifecycle: --max-waiting answers 429 with Retry-After while admitted requests finish; /health
// is 503 while the model loads; SIGTERM lets in-flight requests finish and exits 0.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { startServer, post, sleep, listeningPort, BINARY, MODEL } from './helpers.mjs';

test('a burst beyond --max-waiting gets 429 with Retry-After and nothing else fails', async () => {
  const srv = await startServer(['--max-waiting', '4', '--max-num-seqs', '2', '--threads', '1']);
  try {
    const results = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        post(`${srv.url}/v1/completions`, { prompt: `Burst ${i}`, max_tokens: 128, temperature: 0, ignore_eos: true }),
      ),
    );
    const statuses = results.map((r) => r.status);
    const rejected = results.filter((r) => r.status === 429);
    const served = results.filter((r) => r.status === 200);
    assert.equal(rejected.length + served.length, 30, `only 200 and 429: ${statuses}`);
    assert.ok(rejected.length > 0, 'some requests were rejected');
    assert.ok(served.length >= 6, `running + waiting requests were served: ${statuses}`);
    for (const r of rejected) {
      assert.equal(r.headers.get('retry-after'), '1');
      assert.equal(r.body.error.code, 429);
      assert.match(r.body.error.message, /--max-waiting 4/);
    }
    for (const r of served) {
      assert.equal(r.body.choices[0].finish_reason, 'length');
      assert.equal(r.body.usage.completion_tokens, 128);
    }
  } finally {
    assert.equal((await srv.stop()).code, 0);
  }
});

test('/health answers 503 while the model loads, then 200', async () => {
  const proc = spawn(BINARY, ['serve', MODEL, '--port', '0', '--threads', '1'], {
    env: { ...process.env, KVIK_SERVE_TEST_LOAD_DELAY_MS: '1500' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const port = await listeningPort(proc);
  const exited = new Promise((resolve) => proc.on('exit', (code) => resolve(code)));
  const seen = [];
  try {
    for (let t = 0; t < 200 && seen.at(-1) !== 200; t++) {
      try {
        const r = await fetch(`http://127.0.0.1:${port}/health`);
        seen.push(r.status);
        if (r.status === 503) {
          const c = await post(`http://127.0.0.1:${port}/v1/completions`, { prompt: 'x' });
          assert.equal(c.status, 503);
          assert.equal(c.body.error.code, 503);
        }
      } catch {}
      await sleep(50);
    }
  } finally {
    proc.kill('SIGINT');
  }
  assert.ok(seen.includes(503), `saw ${seen}`);
  assert.equal(seen.at(-1), 200);
  assert.equal(await exited, 0, 'SIGINT exits 0');
});

test('SIGTERM lets an in-flight streaming request finish and exits 0', async () => {
  const srv = await startServer(['--threads', '1']);
  const r = await fetch(`${srv.url}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: 'Once', max_tokens: 300, temperature: 0, ignore_eos: true, stream: true }),
  });
  const reader = r.body.getReader();
  const first = await reader.read(); // the stream has started (on a quiet machine this may already be all of it)
  srv.proc.kill('SIGTERM');
  let text = first.value ? Buffer.from(first.value).toString() : '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += Buffer.from(value).toString();
  }
  assert.match(text, /"finish_reason":"length"/);
  assert.match(text, /data: \[DONE\]\n\n$/);
  assert.equal((await srv.exited).code, 0);
});
