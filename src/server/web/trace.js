// The trace page: POST /v1/engine/trace runs one prefill or decode step of the served model (between the engine's
// steps) and returns its table of shapes with this model's numbers; the arrow keys walk through it.
import { $, el, api, errorText, setupHeader, setStatus } from './common.js';

let current = -1;

const dims = (d) => (d.length ? `[${d.join(', ')}]` : '');

function stepRows(t) {
  const rows = [];
  let inLoop = false;
  for (const r of t.rows) {
    if (r.per_layer && !inLoop) rows.push(el('tr', { class: 'loop' }, el('td', { colspan: 4 }, `for l in range(L = ${t.config.L}):`)));
    inLoop = r.per_layer;
    let numbers = dims(r.dims);
    if (r.code === 'slot_mapping') numbers = `[${t.slot_mapping.slice(0, 16).join(', ')}${t.slot_mapping.length > 16 ? ', …' : ''}]`;
    if (r.shape.endsWith('x 2')) numbers += ' × 2';
    rows.push(el('tr', { class: `step${r.per_layer ? ' layer' : ''}` },
      el('td', {}, r.code), el('td', {}, r.shape), el('td', { class: 'num' }, numbers), el('td', { class: 'muted' }, r.note)));
  }
  return rows;
}

function rmsBars(rms) {
  const max = Math.max(...rms, 1e-9);
  return el('div', { class: 'rms-bars', 'aria-label': 'stream RMS per layer' }, ...rms.map((v, i) => {
    const bar = el('div', { title: `layer ${i}: ${v.toFixed(4)}` }, el('span', {}, v.toFixed(2)));
    bar.style.height = `${Math.max(2, (v / max) * 70)}px`;
    return bar;
  }));
}

function render(t) {
  const c = t.config;
  const out = $('#trace-out');
  current = -1;
  out.replaceChildren(
    el('h2', {}, `${t.step} step of ${t.model}: T = ${t.T}, ctx = ${t.ctx}`),
    el('p', { class: 'muted' },
      `d = ${c.d}, L = ${c.L}, n_h = ${c.n_h}, n_kv = ${c.n_kv}, d_h = ${c.d_h}, d_ff = ${c.d_ff}, V = ${c.V}, rope dims ${c.rope_dim}`),
    el('div', { class: 'tokens' }, ...t.token_ids.map((id, i) => el('span', { class: 'tok' }, JSON.stringify(t.tokens[i]), ' ', el('small', {}, String(id))))),
    el('table', { class: 'shapes', id: 'shape-table' },
      el('thead', {}, el('tr', {}, el('th', {}, 'step'), el('th', {}, 'shape'), el('th', {}, 'this model'), el('th', {}, ''))),
      el('tbody', {}, ...stepRows(t))),
    el('h3', {}, 'Residual stream RMS (last position): after the embedding, then after each layer'),
    rmsBars(t.stream_rms),
    el('p', { id: 'next-token' }, `next token: ${t.next_token.id} ${JSON.stringify(t.next_token.text)} (p = ${t.next_token.prob.toFixed(3)})`));
}

function move(delta) {
  const rows = [...document.querySelectorAll('#shape-table tr.step')];
  if (!rows.length) return;
  rows[current]?.classList.remove('current');
  current = Math.min(rows.length - 1, Math.max(0, current + delta));
  rows[current].classList.add('current');
  rows[current].scrollIntoView({ block: 'nearest' });
}

async function run(e) {
  e?.preventDefault();
  $('#trace-error').textContent = '';
  const decode = document.querySelector('input[name="step"]:checked').value === 'decode';
  setStatus('tracing…');
  const r = await api('/v1/engine/trace', { method: 'POST', json: { prompt: $('#trace-prompt').value, decode } });
  if (!r.ok) {
    $('#trace-error').textContent = await errorText(r);
    setStatus('');
    return;
  }
  render(await r.json());
  setStatus('');
}

setupHeader('/trace');
$('#trace-form').addEventListener('submit', run);
document.addEventListener('keydown', (e) => {
  if (e.target.closest?.('textarea, input')) return;
  if (e.key === 'ArrowDown' || e.key === 'j') { e.preventDefault(); move(1); }
  if (e.key === 'ArrowUp' || e.key === 'k') { e.preventDefault(); move(-1); }
});
run().catch((err) => { $('#trace-error').textContent = err.message; });
