// Shared by kvik's pages: the header, light/dark, and API calls that carry the key (--api-key), asked for once
// and kept in this tab's session storage.
const KEY = 'kvik.apiKey';
let keyPrompt = null;  // one dialog for every request that got a 401 at the same time

export function $(sel, root = document) { return root.querySelector(sel); }

export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v !== false && v !== null && v !== undefined) e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

function askKey(message) {
  if (keyPrompt) return keyPrompt;
  keyPrompt = new Promise((resolve) => {
    const input = el('input', { type: 'password', id: 'api-key-input', autocomplete: 'off', 'aria-label': 'API key' });
    const dialog = el('dialog', { id: 'key-dialog' },
      el('form', { method: 'dialog' },
        el('strong', {}, 'API key'),
        el('span', { class: 'muted' }, message),
        input,
        el('button', { class: 'primary', type: 'submit', id: 'api-key-save' }, 'Use key')));
    document.body.append(dialog);
    dialog.addEventListener('close', () => {
      sessionStorage.setItem(KEY, input.value.trim());
      dialog.remove();
      keyPrompt = null;
      resolve();
    });
    dialog.showModal();
    input.focus();
  });
  return keyPrompt;
}

// fetch() with the key; a 401 asks for it (again) and retries. `json`: a body to send as JSON.
export async function api(path, { json, ...opts } = {}) {
  for (;;) {
    const headers = { ...(opts.headers ?? {}) };
    const key = sessionStorage.getItem(KEY);
    if (key) headers.Authorization = `Bearer ${key}`;
    const init = { ...opts, headers };
    if (json !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(json);
    }
    const r = await fetch(path, init);
    if (r.status !== 401) return r;
    await askKey(key ? 'That key was refused; enter the server\'s --api-key.' : 'This server needs its --api-key.');
  }
}

// The error message of an OpenAI-shaped error response.
export async function errorText(r) {
  const text = await r.text();
  try { return JSON.parse(text).error?.message ?? text; } catch { return text || `HTTP ${r.status}`; }
}

function applyTheme(theme) {
  document.documentElement.dataset.theme = theme;
  const b = $('#theme-toggle');
  if (b) b.textContent = theme === 'dark' ? 'Light' : 'Dark';
}

// The page header: the three pages, the theme toggle and a way to change the key.
export function setupHeader(current) {
  const saved = localStorage.getItem('kvik.theme');
  const dark = window.matchMedia?.('(prefers-color-scheme: dark)').matches;
  const pages = [['/', 'Chat'], ['/dashboard', 'Dashboard'], ['/trace', 'Trace']];
  const header = el('header', { class: 'top' },
    el('span', { class: 'brand' }, 'kvik'),
    el('nav', {}, ...pages.map(([href, name]) =>
      el('a', { href, 'aria-current': href === current ? 'page' : false }, name))),
    el('span', { class: 'spacer' }),
    el('span', { class: 'status', id: 'status' }),
    el('button', { id: 'key-button', title: 'Enter or change the API key', onclick: () => askKey('Enter the server\'s --api-key.') }, 'Key'),
    el('button', { id: 'theme-toggle', title: 'Light or dark', onclick: () => {
      const next = document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark';
      localStorage.setItem('kvik.theme', next);
      applyTheme(next);
    } }));
  document.body.prepend(header);
  applyTheme(saved ?? (dark ? 'dark' : 'light'));
}

export function setStatus(text, isError = false) {
  const s = $('#status');
  if (!s) return;
  s.textContent = text;
  s.classList.toggle('error', isError);
}
