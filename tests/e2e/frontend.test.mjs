// The HTTP front end's own behaviour: keep-alive, deadlines (408), connection cap (503), size caps (413/431),
// Expect: 100-continue, CORS, TLS, --chat-template, --generation-config, --max-logprobs and the access log.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { startServer, post, curl, sleep, listeningPort, BINARY, MODEL } from './helpers.mjs';

// Sends raw bytes on a fresh connection and resolves with everything the server sent until it closed.
function raw(port, text, { waitMs = 0 } = {}) {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1', async () => {
      if (waitMs) {
        s.write(text.slice(0, 10));
        await sleep(waitMs);
      } else s.write(text);
    });
    let got = '';
    s.on('data', (d) => (got += d));
    s.on('end', () => resolve(got));
    s.on('error', reject);
  });
}

test('keep-alive: requests reuse one connection; the access log has one line per request', async () => {
  const srv = await startServer(['--threads', '1']);
  try {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const ports = [];
    for (let i = 0; i < 3; i++) {
      const r = await new Promise((resolve, reject) => {
        const req = http.request(`${srv.url}/v1/completions`, { method: 'POST', agent, headers: { 'Content-Type': 'application/json' } }, (res) => {
          let body = '';
          res.on('data', (d) => (body += d));
          res.on('end', () => resolve({ res, body, port: req.socket.localPort }));
        });
        req.on('error', reject);
        req.end(JSON.stringify({ prompt: 'Once', max_tokens: 4, temperature: 0 }));
      });
      assert.equal(r.res.statusCode, 200);
      assert.match(r.res.headers['keep-alive'], /timeout=5/);
      ports.push(r.port);
    }
    agent.destroy();
    assert.equal(new Set(ports).size, 1, `one connection: ${ports}`);
    await sleep(100);
    const lines = srv.log().split('\n').filter((l) => l.includes('"POST /v1/completions" 200'));
    assert.equal(lines.length, 3, srv.log());
    assert.match(lines[0], /id=cmpl-\S+ prompt_tokens=\d+ output_tokens=4 ttft=\d+\.\d+s total=\d+\.\d+s/);
  } finally {
    await srv.stop();
  }
});

test('deadlines, caps and Expect: 100-continue each get their own status and message', async () => {
  const srv = await startServer(['--threads', '1', '--header-timeout', '1', '--max-connections', '4', '--max-request-bytes', '1000', '--disable-log-requests']);
  try {
    // Slow-loris: headers not in within --header-timeout → 408, closed.
    const slow = await raw(srv.port, 'POST /v1/completions HTTP/1.1\r\nHost: x\r\n', { waitMs: 1500 });
    assert.match(slow, /^HTTP\/1\.1 408 /);
    assert.match(slow, /did not arrive within 1 s/);
    // Body over --max-request-bytes → 413; headers over 64 KiB → 431.
    const big = await post(`${srv.url}/v1/completions`, JSON.stringify({ prompt: 'x'.repeat(2000) }));
    assert.equal(big.status, 413);
    assert.match(big.body.error.message, /at most 1000 bytes/);
    const huge = await raw(srv.port, `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(70000)}\r\n\r\n`);
    assert.match(huge, /^HTTP\/1\.1 431 /);
    // Expect: 100-continue (curl sends it for large bodies; forced here).
    const out = curl(['-i', '-H', 'Expect: 100-continue', '-H', 'Content-Type: application/json', '-d', '{"prompt":"Hi","max_tokens":2}', `${srv.url}/v1/completions`]);
    assert.match(out, /HTTP\/1\.1 100 Continue/);
    assert.match(out, /HTTP\/1\.1 200 OK/);
    // Connections beyond --max-connections → 503 + Retry-After.
    const idle = await Promise.all(Array.from({ length: 4 }, () => new Promise((r) => { const s = net.connect(srv.port, '127.0.0.1', () => r(s)); })));
    await sleep(200);
    const over = await raw(srv.port, 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
    assert.match(over, /^HTTP\/1\.1 503 /);
    assert.match(over, /Retry-After: 1/);
    assert.match(over, /--max-connections 4/);
    idle.forEach((s) => s.destroy());
    await sleep(200);
    assert.match(await raw(srv.port, 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'), /^HTTP\/1\.1 200 /);
    assert.doesNotMatch(srv.log(), /"POST \/v1\/completions"/, '--disable-log-requests');
  } finally {
    assert.equal((await srv.stop()).code, 0);
  }
});

test('--chat-template, --generation-config and --max-logprobs', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvik-front-'));
  fs.writeFileSync(path.join(dir, 'tmpl.jinja'), '{% for m in messages %}<<{{ m.role }}>> {{ m.content }}\n{% endfor %}ANSWER:');
  fs.writeFileSync(path.join(dir, 'generation_config.json'), JSON.stringify({ max_new_tokens: 3, temperature: 0 }));
  const srv = await startServer(['--threads', '1', '--chat-template', path.join(dir, 'tmpl.jinja'), '--generation-config', dir, '--max-logprobs', '2']);
  try {
    const tok = await post(`${srv.url}/tokenize`, { messages: [{ role: 'user', content: 'Hi' }] });
    const text = await post(`${srv.url}/tokenize`, { prompt: '<<user>> Hi\nANSWER:', add_special_tokens: false });
    assert.deepEqual(tok.body.tokens, text.body.tokens, 'the template file renders the chat');
    assert.match(srv.log(), /Default sampling parameters from generation_config.json: .*max_tokens=3/);
    const r = await post(`${srv.url}/v1/completions`, { prompt: 'Once upon a time' });
    assert.equal(r.body.usage.completion_tokens, 3, 'max_new_tokens is the default max_tokens');
    const explicit = await post(`${srv.url}/v1/completions`, { prompt: 'Once upon a time', max_tokens: 5 });
    assert.equal(explicit.body.usage.completion_tokens, 5, 'a request field wins over the default');
    const lp = await post(`${srv.url}/v1/completions`, { prompt: 'Once', max_tokens: 2, logprobs: 3 });
    assert.equal(lp.status, 400);
    assert.equal(lp.body.error.param, 'logprobs');
    assert.match(lp.body.error.message, /--max-logprobs/);
    assert.equal((await post(`${srv.url}/v1/completions`, { prompt: 'Once', max_tokens: 2, logprobs: 2 })).status, 200);
  } finally {
    await srv.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('CORS: allowed origins get the headers and preflights are answered; others get none', async () => {
  const srv = await startServer(['--threads', '1', '--allowed-origins', 'https://ok.example,https://also.example']);
  try {
    const pre = await fetch(`${srv.url}/v1/chat/completions`, {
      method: 'OPTIONS',
      headers: { Origin: 'https://ok.example', 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization,content-type' },
    });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers.get('access-control-allow-origin'), 'https://ok.example');
    assert.equal(pre.headers.get('access-control-allow-headers'), 'authorization,content-type');
    const ok = await fetch(`${srv.url}/v1/models`, { headers: { Origin: 'https://also.example' } });
    assert.equal(ok.headers.get('access-control-allow-origin'), 'https://also.example');
    const no = await fetch(`${srv.url}/v1/models`, { headers: { Origin: 'https://evil.example' } });
    assert.equal(no.headers.get('access-control-allow-origin'), null);
  } finally {
    await srv.stop();
  }
});

test('TLS: --ssl-keyfile/--ssl-certfile serve HTTPS, streaming included', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvik-tls-'));
  const key = path.join(dir, 'key.pem');
  const cert = path.join(dir, 'cert.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=127.0.0.1'], { stdio: 'ignore' });
  const proc = spawn(BINARY, ['serve', MODEL, '--port', '0', '--threads', '1', '--ssl-keyfile', key, '--ssl-certfile', cert], { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (d) => (log += d));
  const port = await listeningPort(proc);
  const exited = new Promise((resolve) => proc.on('exit', (code) => resolve(code)));
  const request = (p, body) =>
    new Promise((resolve, reject) => {
      const req = https.request({ host: '127.0.0.1', port, path: p, method: body ? 'POST' : 'GET', rejectUnauthorized: false, headers: { 'Content-Type': 'application/json' } }, (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode, text }));
      });
      req.on('error', reject);
      req.end(body ? JSON.stringify(body) : undefined);
    });
  try {
    let health;
    for (let i = 0; i < 200 && health?.status !== 200; i++) {
      health = await request('/health').catch(() => null);
      if (health?.status !== 200) await sleep(50);
    }
    assert.equal(health.status, 200, log);
    assert.match(log, new RegExp(`Listening on https://127\\.0\\.0\\.1:${port}`));
    const r = await request('/v1/completions', { prompt: 'Once upon a time', max_tokens: 8, temperature: 0, stream: true });
    assert.equal(r.status, 200);
    assert.match(r.text, /data: \[DONE\]\n\n$/);
    const plain = await fetch(`http://127.0.0.1:${port}/health`).then((x) => x.status, () => 'refused');
    assert.notEqual(plain, 200, 'plain HTTP is not served on the TLS port');
  } finally {
    proc.kill('SIGTERM');
    assert.equal(await exited, 0);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('kvik bench-serve drives kvik serve: every stream completes, events are timed as they arrive, errors are named', async () => {
  const srv = await startServer(['--threads', '1', '--max-model-len', '96', '--max-num-seqs', '16']);
  const bench = (...args) => {
    const r = spawnSync(BINARY, ['bench-serve', '--base-url', `${srv.url}/v1`, '--json', ...args], { encoding: 'utf8' });
    return { ...JSON.parse(r.stdout), status: r.status };
  };
  try {
    const ok = bench('--num-prompts', '24', '--max-concurrency', '16', '--input-len', '4', '--output-len', '48');
    assert.equal(ok.completed, 24, JSON.stringify(ok.errors));
    assert.equal(ok.status, 0);
    assert.equal(ok.failed, 0);
    assert.equal(ok.total_output_tokens, 24 * 48);
    // Read as the events come, not after the stream has ended: the first token arrives well before the last.
    assert.ok(ok.e2el.median_ms - ok.ttft.median_ms > 0.2 * ok.e2el.median_ms, JSON.stringify([ok.ttft, ok.e2el]));
    assert.ok(ok.itl.mean_ms > 0);
    // Prompts longer than the context: each is a 400 with a JSON body (Content-Length), reported as such.
    const refused = bench('--num-prompts', '4', '--max-concurrency', '4', '--input-len', '200', '--output-len', '8');
    assert.equal(refused.completed, 0);
    assert.equal(refused.status, 1, 'bench-serve fails when no request completed');
    assert.deepEqual(refused.errors, { 'HTTP 400': 4 });
  } finally {
    await srv.stop();
  }
});
