// The chat page: /v1/chat/completions streamed into Markdown, with a stop button that aborts the request, the
// model's LoRA adapters in the picker, a JSON mode (response_format), and the conversation kept in localStorage.
import { $, el, api, errorText, setupHeader, setStatus } from './common.js';
import { renderMarkdown } from './markdown.js';

const STORE = 'kvik.chat';
const state = { messages: [], controller: null };
const settingIds = ['model', 'system', 'temperature', 'top-p', 'max-tokens', 'json-mode', 'schema'];

function save() {
  const settings = {};
  for (const id of settingIds) {
    const e = $(`#${id}`);
    settings[id] = e.type === 'checkbox' ? e.checked : e.value;
  }
  localStorage.setItem(STORE, JSON.stringify({ messages: state.messages, settings }));
}

function load() {
  try {
    const saved = JSON.parse(localStorage.getItem(STORE) ?? '{}');
    state.messages = saved.messages ?? [];
    for (const [id, v] of Object.entries(saved.settings ?? {})) {
      const e = $(`#${id}`);
      if (!e || id === 'model') continue;
      if (e.type === 'checkbox') e.checked = v; else e.value = v;
    }
    return saved.settings?.model;
  } catch { return undefined; }
}

function statsText(s) {
  if (!s) return '';
  const parts = [`${s.completion_tokens} tokens`];
  if (s.tok_s) parts.push(`${s.tok_s.toFixed(1)} tok/s`);
  if (s.ttft_ms !== undefined) parts.push(`first token ${Math.round(s.ttft_ms)} ms`);
  if (s.prompt_tokens !== undefined) parts.push(`prompt ${s.prompt_tokens} tokens`);
  if (s.finish_reason) parts.push(s.finish_reason === 'abort' ? 'stopped' : `finish: ${s.finish_reason}`);
  return parts.join(' · ');
}

// A JSON-mode reply is shown as a JSON code block (pretty-printed once it parses), any other as Markdown.
function renderReply(m) {
  if (!m.json) return renderMarkdown(m.content);
  let text = m.content;
  try { text = JSON.stringify(JSON.parse(text), null, 2); } catch {}
  return renderMarkdown(`\`\`\`json\n${text.replaceAll('```', '` ` `')}\n\`\`\``);
}

function messageNode(m) {
  const body = el('div', { class: 'body' });
  if (m.role === 'assistant') body.innerHTML = renderReply(m); else body.textContent = m.content;
  const node = el('div', { class: `msg ${m.role}` }, body);
  if (m.role === 'assistant') node.append(el('div', { class: 'stats' }, statsText(m.stats)));
  if (m.error) node.append(el('div', { class: 'error' }, m.error));
  return node;
}

function render() {
  const box = $('#messages');
  box.replaceChildren(...state.messages.map(messageNode));
  if (!state.messages.length) box.append(el('p', { class: 'empty' }, 'Say something to the model.'));
  box.scrollTop = box.scrollHeight;
}

async function loadModels(preferred) {
  const select = $('#model');
  const r = await api('/v1/models');
  if (!r.ok) { setStatus(await errorText(r), true); return; }
  const { data } = await r.json();
  select.replaceChildren(...data.map((m) =>
    el('option', { value: m.id }, m.parent ? `${m.id} (LoRA on ${m.parent})` : m.id)));
  if (preferred && data.some((m) => m.id === preferred)) select.value = preferred;
  setStatus(`${data.length} model${data.length > 1 ? 's' : ''}`);
}

function responseFormat() {
  if (!$('#json-mode').checked) return undefined;
  const text = $('#schema').value.trim();
  if (!text) return { type: 'json_object' };
  const schema = JSON.parse(text);  // a bad schema throws: shown beside the box
  return { type: 'json_schema', json_schema: { name: 'schema', schema } };
}

function requestBody() {
  const messages = [];
  const system = $('#system').value.trim();
  if (system) messages.push({ role: 'system', content: system });
  for (const m of state.messages) if (!m.error || m.content) messages.push({ role: m.role, content: m.content });
  const body = {
    model: $('#model').value || undefined,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    temperature: Number($('#temperature').value),
    top_p: Number($('#top-p').value),
    max_tokens: Number($('#max-tokens').value),
  };
  const format = responseFormat();
  if (format) body.response_format = format;
  return body;
}

// Reads the SSE stream, calling onChunk with each parsed event until [DONE].
async function readEvents(response, onChunk) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6);
        if (data === '[DONE]') return;
        onChunk(JSON.parse(data));
      }
    }
  }
}

function setBusy(busy) {
  $('#send').hidden = busy;
  $('#stop').hidden = !busy;
}

async function send() {
  const input = $('#prompt');
  const text = input.value.trim();
  if (!text || state.controller) return;
  $('#schema-error').textContent = '';
  let body;
  state.messages.push({ role: 'user', content: text });
  try {
    body = requestBody();
  } catch (e) {
    state.messages.pop();
    $('#schema-error').textContent = `Schema: ${e.message}`;
    return;
  }
  input.value = '';
  const reply = { role: 'assistant', content: '', stats: { completion_tokens: 0 }, json: !!body.response_format };
  state.messages.push(reply);
  render();
  const node = $('#messages').lastElementChild;
  node.classList.add('streaming');
  const bodyNode = node.querySelector('.body'), statsNode = node.querySelector('.stats');
  state.controller = new AbortController();
  setBusy(true);
  const start = performance.now();
  let first = null, last = null, pending = false;
  const paint = () => {
    pending = false;
    bodyNode.innerHTML = renderReply(reply);
    statsNode.textContent = statsText(reply.stats);
    const box = $('#messages');
    box.scrollTop = box.scrollHeight;
  };
  try {
    const r = await api('/v1/chat/completions', { method: 'POST', json: body, signal: state.controller.signal });
    if (!r.ok) throw new Error(await errorText(r));
    await readEvents(r, (chunk) => {
      const choice = chunk.choices?.[0];
      const delta = choice?.delta?.content;
      if (delta) {
        const now = performance.now();
        first ??= now;
        last = now;
        reply.content += delta;
        reply.stats.completion_tokens += 1;  // one chunk per engine step per token, until usage says otherwise
        reply.stats.ttft_ms = first - start;
      }
      if (choice?.finish_reason) reply.stats.finish_reason = choice.finish_reason;
      if (chunk.usage) {
        reply.stats.completion_tokens = chunk.usage.completion_tokens;
        reply.stats.prompt_tokens = chunk.usage.prompt_tokens;
      }
      // Tokens per second of the whole reply as the reader saw it (from the request to the latest token).
      if (last !== null && last > start) reply.stats.tok_s = reply.stats.completion_tokens / ((last - start) / 1000);
      if (!pending) { pending = true; requestAnimationFrame(paint); }
    });
  } catch (e) {
    if (e.name === 'AbortError') reply.stats.finish_reason = 'abort';
    else reply.error = e.message;
  } finally {
    state.controller = null;
    setBusy(false);
    save();
    paint();
    node.classList.remove('streaming');
    node.classList.add('done');
    if (reply.error) node.append(el('div', { class: 'error' }, reply.error));
    input.focus();
  }
}

function stop() {
  state.controller?.abort();
}

function init() {
  setupHeader('/');
  const preferred = load();
  $('#schema-label').hidden = !$('#json-mode').checked;
  $('#json-mode').addEventListener('change', () => { $('#schema-label').hidden = !$('#json-mode').checked; save(); });
  for (const id of settingIds) $(`#${id}`).addEventListener('change', save);
  $('#composer').addEventListener('submit', (e) => { e.preventDefault(); send(); });
  $('#stop').addEventListener('click', stop);
  $('#prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && state.controller) stop(); });
  $('#new-chat').addEventListener('click', () => { stop(); state.messages = []; save(); render(); $('#prompt').focus(); });
  render();
  loadModels(preferred).catch((e) => setStatus(e.message, true));
  $('#prompt').focus();
}

init();
