// Dashboard-like pollers of GET /v1/engine/state for bench/web_state_overhead.sh: N clients, each asking every
// INTERVAL_MS (0 = back to back) until SIGTERM; then prints one JSON line: requests, bytes, the distinct snapshots
// seen, and the median snapshot_us (what taking a snapshot cost the engine thread). node:http with keep-alive and
// no parsing of the block arrays, so the pollers themselves take little of the machine the server runs on.
// Usage: node bench/web_state_poll.mjs URL N INTERVAL_MS [API_KEY]
import http from 'node:http';

const [url, n, interval, key] = process.argv.slice(2);
const agent = new http.Agent({ keepAlive: true, maxSockets: Number(n) });
const headers = key ? { Authorization: `Bearer ${key}` } : {};
let running = true, requests = 0, errors = 0, bytes = 0;
const sequences = new Set(), snapshotUs = [];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function poll() {
  return new Promise((resolve) => {
    http.get(`${url}/v1/engine/state`, { agent, headers }, (res) => {
      let head = '';
      res.on('data', (chunk) => {
        bytes += chunk.length;
        if (head.length < 400) head += chunk.toString('latin1', 0, Math.min(chunk.length, 400));
      });
      res.on('end', () => {
        if (res.statusCode !== 200) { errors++; return resolve(); }
        requests++;
        const seq = head.match(/"sequence":(\d+)/)?.[1];
        if (seq && !sequences.has(seq)) {
          sequences.add(seq);
          snapshotUs.push(Number(head.match(/"snapshot_us":([\d.]+)/)?.[1]));
        }
        resolve();
      });
    }).on('error', () => { errors++; resolve(); });
  });
}

async function client() {
  while (running) {
    const start = Date.now();
    await poll();
    const wait = Number(interval) - (Date.now() - start);
    if (wait > 0) await sleep(wait);
  }
}

const all = Promise.all(Array.from({ length: Number(n) }, client));
process.on('SIGTERM', async () => {
  running = false;
  await all;
  snapshotUs.sort((a, b) => a - b);
  console.log(JSON.stringify({ requests, errors, bytes, snapshots: sequences.size,
    snapshot_us_p50: snapshotUs[snapshotUs.length >> 1] ?? null, snapshot_us_max: snapshotUs.at(-1) ?? null }));
  process.exit(0);
});
