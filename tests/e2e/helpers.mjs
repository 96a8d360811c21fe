// Starting and stopping `kvik serve` for the end-to-end tests, and small HTTP helpers.
import { spawn, execFileSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const BINARY = process.env.KVIK_BINARY ?? path.join(here, '../../build/kvik');
export const MODEL = process.env.KVIK_MODEL ?? path.join(here, '../../models/stories260K.gguf');

// The port a `kvik serve --port 0` listens on, from its start-up line "Listening on http://HOST:PORT ..." (the
// kernel picks a free port at bind time, so no other test can take it between a choice and the bind, as it could
// with a port picked in advance). Rejects, with what the process printed, if it exits or prints no such line in
// `timeoutMs`. `line` picks the line and its port (a data-parallel front's replicas print lines of their own).
export function listeningPort(proc, line = /Listening on \S*:(\d+)/, timeoutMs = 30000) {
  return new Promise((resolve, reject) => {
    let text = '';
    const done = (f) => {
      clearTimeout(timer);
      proc.stdout?.off('data', onData);
      proc.stderr?.off('data', onData);
      proc.off('exit', onExit);
      f();
    };
    const onData = (d) => {
      text += d;
      const m = line.exec(text);
      if (m) done(() => resolve(Number(m[1])));
    };
    const onExit = (code) => done(() => reject(new Error(`kvik serve exited (${code}) before listening:\n${text}`)));
    const timer = setTimeout(() => done(() => reject(new Error(`kvik serve printed no "Listening on" line:\n${text}`))),
      timeoutMs);
    proc.stdout?.on('data', onData);
    proc.stderr?.on('data', onData);
    proc.on('exit', onExit);
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts a server (on `model`, stories260K by default; null names none, so kvik picks its default) and waits for
// /health 200. Returns { url, proc, log(), stop() }.
export async function startServer(args = [], env = {}, model = MODEL) {
  const modelArgs = model === null ? [] : [model];
  const proc = spawn(BINARY, ['serve', ...modelArgs, '--host', '127.0.0.1', '--port', '0', ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  proc.stdout.on('data', (d) => (log += d));
  proc.stderr.on('data', (d) => (log += d));
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  // With --data-parallel-size the front's own line, not one of its replicas' (they share its stderr).
  const port = await listeningPort(proc, args.includes('--data-parallel-size') ? /Listening on \S*:(\d+) with / : undefined);
  const url = `http://127.0.0.1:${port}`;
  const server = {
    url,
    port,
    proc,
    exited,
    log: () => log,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      return exited;
    },
  };
  const deadline = Date.now() + 30000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`kvik serve exited early (${proc.exitCode}):\n${log}`);
    try {
      const r = await fetch(`${url}/health`);
      if (r.status === 200) return server;
    } catch {}
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`kvik serve did not become healthy:\n${log}`);
    }
    await sleep(50);
  }
}

export async function metrics(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const values = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = line.match(/^([^{\s]+)(\{[^}]*\})?\s+(\S+)$/);
    if (!m) continue;
    const labels = (m[2] ?? '').replace(/model_name="[^"]*",?/, '').replace(/^\{\}$/, '').replace(/,\}$/, '}');
    values[m[1] + labels] = Number(m[3]);
  }
  return { text, values };
}

// POST JSON (or a raw string body) and return { status, headers, body (parsed when JSON) }.
// Polls /metrics until no request runs and the KV cache is empty (or ~5 s pass); returns the last values.
export async function waitIdle(url) {
  let m;
  for (let t = 0; t < 100; t++) {
    m = (await metrics(url)).values;
    if (m['kvik:num_requests_running'] === 0 && m['kvik:kv_cache_usage_perc'] === 0) break;
    await sleep(50);
  }
  return m;
}

export async function post(url, body, headers = {}) {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: r.status, headers: r.headers, text, body: json };
}

export function curl(args) {
  return execFileSync('curl', ['-sS', ...args], { encoding: 'utf8', maxBuffer: 64 << 20 });
}

export function promtool(text) {
  try {
    execFileSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
    return { code: 0, output: '' };
  } catch (e) {
    return { code: e.status, output: `${e.stdout ?? ''}${e.stderr ?? ''}` };
  }
}
