// The engine dashboard: /metrics and /v1/engine/state polled every second. Small time series of the serving
// metrics (rates and histogram quantiles over a sliding window, as Grafana computes them from Prometheus), and
// the KV block map: every block of the pool coloured by the request that owns it.
import { $, el, api, errorText, setupHeader, setStatus } from './common.js';

const HISTORY = 120;     // points kept (seconds)
const WINDOW = 10;       // seconds over which rates and quantiles are taken
const samples = [];      // {t, m: metric values} per poll
const series = {};       // name → [{t, v}]
let state = null;        // the latest /v1/engine/state
let hoverId = null;      // the request whose block table is highlighted (its id: indices change each refresh)
let rendering = false;   // the request table is being replaced: its rows' blur events are not the user's

// Prometheus text → { 'name{labels}': value } (the model_name label dropped).
function parseMetrics(text) {
  const values = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = line.match(/^([^{\s]+)(\{[^}]*\})?\s+(\S+)$/);
    if (!m) continue;
    const labels = (m[2] ?? '').replace(/model_name="(?:[^"\\]|\\.)*",?/, '').replace(/^\{\}$/, '').replace(/,\}$/, '}');
    values[m[1] + labels] = Number(m[3]);
  }
  return values;
}

// The q-quantile of a histogram's increase between two samples (histogram_quantile: linear inside the bucket).
function quantile(q, name, a, b) {
  const buckets = [];
  for (const key of Object.keys(b)) {
    const m = key.match(new RegExp(`^${name.replace(/[:]/g, '\\$&')}_bucket\\{le="([^"]+)"\\}$`));
    if (m) buckets.push({ le: m[1] === '+Inf' ? Infinity : Number(m[1]), n: b[key] - (a[key] ?? 0) });
  }
  buckets.sort((x, y) => x.le - y.le);
  const total = buckets.length ? buckets[buckets.length - 1].n : 0;
  if (!(total > 0)) return null;
  const rank = q * total;
  let prevLe = 0, prevN = 0;
  for (const { le, n } of buckets) {
    if (n >= rank) {
      if (le === Infinity) return prevLe;
      return prevLe + (le - prevLe) * ((rank - prevN) / Math.max(n - prevN, 1e-9));
    }
    prevLe = le; prevN = n;
  }
  return prevLe;
}

const CARDS = [
  ['kv', 'KV cache usage', (v) => `${(v * 100).toFixed(1)} %`],
  ['running', 'Running requests', (v) => v.toFixed(0)],
  ['waiting', 'Waiting requests', (v) => v.toFixed(0)],
  ['tok_s', 'Output tokens/s', (v) => v.toFixed(1)],
  ['ttft', 'TTFT p50 / p99', (v, w) => `${fmtMs(v)} / ${fmtMs(w)}`, 'ttft99'],
  ['itl', 'ITL p50 / p99', (v, w) => `${fmtMs(v)} / ${fmtMs(w)}`, 'itl99'],
  ['hit', 'Prefix-cache hit rate', (v) => `${(v * 100).toFixed(1)} %`],
  ['preempt', 'Preemptions / s', (v) => v.toFixed(2)],
  ['spec', 'Speculative acceptance', (v) => `${(v * 100).toFixed(1)} %`],
];
const fmtMs = (s) => (s === null || s === undefined ? '–' : s < 1 ? `${(s * 1000).toFixed(1)} ms` : `${s.toFixed(2)} s`);

function push(name, t, v) {
  const s = (series[name] ??= []);
  s.push({ t, v });
  while (s.length > HISTORY) s.shift();
}

function derive(now, m) {
  samples.push({ t: now, m });
  while (samples.length > HISTORY) samples.shift();
  const prev = samples.length > 1 ? samples[samples.length - 2] : null;
  const old = samples.find((s) => s.t >= now - WINDOW * 1000 - 500) ?? samples[0];
  const rate = (key, from) => from && now > from.t ? ((m[key] ?? 0) - (from.m[key] ?? 0)) / ((now - from.t) / 1000) : 0;
  push('kv', now, m['kvik:kv_cache_usage_perc'] ?? 0);
  push('running', now, m['kvik:num_requests_running'] ?? 0);
  push('waiting', now, m['kvik:num_requests_waiting'] ?? 0);
  push('tok_s', now, rate('kvik:generation_tokens_total', prev));
  push('ttft', now, quantile(0.5, 'kvik:time_to_first_token_seconds', old.m, m));
  push('ttft99', now, quantile(0.99, 'kvik:time_to_first_token_seconds', old.m, m));
  push('itl', now, quantile(0.5, 'kvik:inter_token_latency_seconds', old.m, m));
  push('itl99', now, quantile(0.99, 'kvik:inter_token_latency_seconds', old.m, m));
  const q = (m['kvik:prefix_cache_queries_total'] ?? 0) - (old.m['kvik:prefix_cache_queries_total'] ?? 0);
  const h = (m['kvik:prefix_cache_hits_total'] ?? 0) - (old.m['kvik:prefix_cache_hits_total'] ?? 0);
  push('hit', now, q > 0 ? h / q : (series.hit?.at(-1)?.v ?? 0));
  push('preempt', now, rate('kvik:num_preemptions_total', old));
  if ('kvik:spec_decode_num_draft_tokens_total' in m) {
    const d = m['kvik:spec_decode_num_draft_tokens_total'] - (old.m['kvik:spec_decode_num_draft_tokens_total'] ?? 0);
    const a = m['kvik:spec_decode_num_accepted_tokens_total'] - (old.m['kvik:spec_decode_num_accepted_tokens_total'] ?? 0);
    push('spec', now, d > 0 ? a / d : (series.spec?.at(-1)?.v ?? 0));
  }
}

function sparkline(points, cls) {
  const vals = points.filter((p) => p.v !== null);
  if (vals.length < 2) return null;
  const t0 = points[0].t, t1 = points[points.length - 1].t;
  const max = Math.max(...vals.map((p) => p.v), 1e-9);
  const pts = vals.map((p) => `${((p.t - t0) / Math.max(t1 - t0, 1)) * 100},${38 - (p.v / max) * 34}`).join(' ');
  const ns = 'http://www.w3.org/2000/svg';
  const line = document.createElementNS(ns, 'polyline');
  line.setAttribute('points', pts);
  if (cls) line.setAttribute('class', cls);
  return line;
}

function renderCards() {
  const box = $('#cards');
  for (const [key, title, fmt, second] of CARDS) {
    if (!series[key]) continue;
    let card = box.querySelector(`[data-metric="${key}"]`);
    if (!card) {
      const ns = 'http://www.w3.org/2000/svg';
      const svg = document.createElementNS(ns, 'svg');
      svg.setAttribute('viewBox', '0 0 100 40');
      svg.setAttribute('preserveAspectRatio', 'none');
      card = el('div', { class: 'card', 'data-metric': key }, el('h3', {}, title), el('div', { class: 'value' }), svg);
      box.append(card);
    }
    const last = series[key].at(-1)?.v;
    const last2 = second ? series[second].at(-1)?.v : undefined;
    card.querySelector('.value').textContent = last === null || last === undefined ? '–' : fmt(last, last2);
    card.dataset.value = last ?? '';
    const svg = card.querySelector('svg');
    svg.replaceChildren(...[sparkline(series[key]), second ? sparkline(series[second], 'second') : null].filter(Boolean));
  }
}

// A stable colour per request id.
function colourOf(id) {
  let h = 2166136261;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 16777619);
  const hue = ((h >>> 0) % 360);
  const dark = document.documentElement.dataset.theme === 'dark';
  return `hsl(${hue} 65% ${dark ? 55 : 50}%)`;
}

const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

function layout(canvas, n) {
  const width = Math.min(canvas.parentElement.clientWidth, 1400);
  // Cells shrink with the pool so that a large one (say 131072 blocks of a q8_0 cache) still fits a few screens.
  const cell = n > 32768 ? 3 : n > 8192 ? 5 : n > 2048 ? 9 : 14, gap = cell > 3 ? 1 : 0;
  const cols = Math.max(1, Math.floor(width / (cell + gap)));
  return { cell, gap, cols, rows: Math.ceil(n / cols) };
}

function drawMap() {
  const canvas = $('#blockmap');
  if (!state) return;
  const n = state.num_blocks, b = state.blocks;
  const L = layout(canvas, n);
  const dpr = window.devicePixelRatio || 1;
  const w = L.cols * (L.cell + L.gap), h = L.rows * (L.cell + L.gap);
  if (canvas.width !== w * dpr || canvas.height !== h * dpr) {
    canvas.width = w * dpr; canvas.height = h * dpr;
    canvas.style.width = `${w}px`; canvas.style.height = `${h}px`;
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  const free = css('--free'), cached = css('--cached'), fg = css('--fg');
  const colours = state.requests.map((r) => colourOf(r.id));
  const highlighted = new Set(state.requests.find((r) => r.id === hoverId)?.block_table ?? []);
  let used = 0, cachedFree = 0;
  for (let i = 0; i < n; i++) {
    const x = (i % L.cols) * (L.cell + L.gap), y = Math.floor(i / L.cols) * (L.cell + L.gap);
    const owner = b.owner[i];
    if (owner >= 0) used++; else if (b.hash[i] !== null) cachedFree++;
    ctx.globalAlpha = highlighted.size && !highlighted.has(i) ? 0.25 : 1;
    ctx.fillStyle = owner >= 0 ? colours[owner] : b.hash[i] !== null ? cached : free;
    ctx.fillRect(x, y, L.cell, L.cell);
    if (b.ref_cnt[i] > 1) {
      ctx.fillStyle = fg;
      const r = Math.max(1.5, L.cell / 6);
      ctx.beginPath(); ctx.arc(x + L.cell / 2, y + L.cell / 2, r, 0, 2 * Math.PI); ctx.fill();
    }
    if (highlighted.has(i)) {
      ctx.globalAlpha = 1; ctx.strokeStyle = fg; ctx.lineWidth = 1.5;
      ctx.strokeRect(x + 0.75, y + 0.75, L.cell - 1.5, L.cell - 1.5);
    }
  }
  ctx.globalAlpha = 1;
  canvas.dataset.used = used;
  canvas.dataset.cached = cachedFree;
  canvas.dataset.free = n - used - cachedFree;
  canvas.dataset.sequence = state.sequence;
  canvas.dataset.firstUsed = b.owner.findIndex((o) => o >= 0);  // where a test (or a person) can hover
  canvas.dataset.cols = L.cols;
  canvas.dataset.pitch = L.cell + L.gap;
  $('#map-summary').textContent =
    `${n} blocks of ${state.block_size} tokens: ${used} in use, ${cachedFree} cached, ${n - used - cachedFree} free`;
}

function renderRequests() {
  const focusedId = document.activeElement?.closest?.('#request-rows tr')?.dataset.id;
  const rows = state.requests.map((r) => {
    const held = r.block_table.filter((id) => id >= 0).length;
    const swatch = el('i', { class: 'swatch' });
    swatch.style.background = colourOf(r.id);
    const tr = el('tr', { 'data-id': r.id, class: hoverId === r.id ? 'hover' : '' },
      el('td', {}, swatch), el('td', {}, r.id), el('td', {}, r.status), el('td', {}, String(r.num_prompt_tokens)),
      el('td', {}, String(r.num_tokens)), el('td', {}, String(r.num_computed_tokens)), el('td', {}, String(held)),
      el('td', {}, r.lora ?? ''));
    const on = () => { hoverId = r.id; drawMap(); };
    const off = () => { if (!rendering) { hoverId = null; drawMap(); } };
    tr.tabIndex = 0;  // keyboard: Tab through the requests to highlight each one's blocks
    tr.addEventListener('mouseenter', on);
    tr.addEventListener('mouseleave', off);
    tr.addEventListener('focus', on);
    tr.addEventListener('blur', off);
    return tr;
  });
  rendering = true;
  $('#request-rows').replaceChildren(...rows);
  // The refreshed row of the request that had the keyboard focus takes it back.
  if (focusedId !== undefined) rows.find((tr) => tr.dataset.id === focusedId)?.focus();
  rendering = false;
}

function blockAt(e) {
  const canvas = $('#blockmap');
  const L = layout(canvas, state.num_blocks);
  const rect = canvas.getBoundingClientRect();
  const col = Math.floor((e.clientX - rect.left) / (L.cell + L.gap)), row = Math.floor((e.clientY - rect.top) / (L.cell + L.gap));
  const i = row * L.cols + col;
  return col < L.cols && i >= 0 && i < state.num_blocks ? i : -1;
}

function onHover(e) {
  if (!state) return;
  const i = blockAt(e), tip = $('#block-tip');
  if (i < 0) { tip.hidden = true; if (hoverId !== null) { hoverId = null; drawMap(); } return; }
  const b = state.blocks, owner = b.owner[i];
  const holders = state.requests.filter((r) => r.block_table.includes(i)).map((r) => r.id);
  const lines = [`block ${i} · ref count ${b.ref_cnt[i]}`, `hash ${b.hash[i] ?? '— (not full, or not cached)'}`];
  if (owner >= 0) {
    const r = state.requests[owner];
    lines.push(`held by ${holders.join(', ')}`, `block table of ${r.id}: [${r.block_table.join(', ')}]`);
  } else lines.push(b.hash[i] !== null ? 'cached and free: evictable' : 'free');
  tip.textContent = '';
  for (const l of lines) tip.append(el('div', {}, l));
  tip.hidden = false;
  const wrap = tip.parentElement.getBoundingClientRect();
  tip.style.left = `${Math.min(e.clientX - wrap.left + 12, wrap.width - 300)}px`;
  tip.style.top = `${e.clientY - wrap.top + 12}px`;
  const next = owner >= 0 ? state.requests[owner].id : null;
  if (next !== hoverId) { hoverId = next; drawMap(); renderRequests(); }
}

async function poll() {
  const now = Date.now();
  try {
    const [mr, sr] = await Promise.all([fetch('/metrics'), api('/v1/engine/state')]);
    if (!mr.ok) throw new Error(`/metrics: ${await errorText(mr)}`);
    if (!sr.ok) throw new Error(`/v1/engine/state: ${await errorText(sr)}`);
    derive(now, parseMetrics(await mr.text()));
    state = await sr.json();
    renderCards();
    drawMap();
    renderRequests();
    setStatus(`engine step ${state.num_steps} · snapshot ${state.snapshot_us.toFixed(0)} µs`);
  } catch (e) {
    setStatus(e.message, true);
  }
}

function init() {
  setupHeader('/dashboard');
  $('#swatch-free').style.background = css('--free');
  $('#swatch-cached').style.background = css('--cached');
  $('#swatch-shared').style.background = css('--fg');
  const canvas = $('#blockmap');
  canvas.addEventListener('mousemove', onHover);
  canvas.addEventListener('mouseleave', () => { $('#block-tip').hidden = true; hoverId = null; drawMap(); renderRequests(); });
  window.addEventListener('resize', drawMap);
  const loop = async () => {  // one poll at a time, each second (a slow answer delays the next, never piles up)
    const start = Date.now();
    await poll();
    setTimeout(loop, Math.max(0, 1000 - (Date.now() - start)));
  };
  loop();
}

init();
