// kvik's web pages in a real headless Chromium (Debian's `chromium`, driven by puppeteer-core): the chat page
// streams a reply, stops a long one (aborted in /metrics), gets parseable JSON in JSON mode; the dashboard shows a
// load's running requests and a changing KV block map; with --api-key the pages ask for the key once and the
// state endpoint refuses requests without it. No page logs a console error. Screenshots go to KVIK_SCREENSHOTS
// (build/web-screenshots by default), printed at the end.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';
import { BINARY, MODEL, startServer, metrics, sleep, post } from '../e2e/helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const CHROMIUM = process.env.KVIK_CHROMIUM ?? '/usr/bin/chromium';
const SHOTS = process.env.KVIK_SCREENSHOTS ?? path.join(here, '../../build/web-screenshots');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kvik-web-'));
let browser;

before(async () => {
  fs.mkdirSync(SHOTS, { recursive: true });
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
  });
});

after(async () => {
  await browser?.close();
  fs.rmSync(tmp, { recursive: true, force: true });
  console.log(`screenshots: ${SHOTS}`);
});

// A fresh page (its own storage) that records console errors and uncaught exceptions; `allowed` matches expected
// ones (the 401 a page gets before it has the key).
async function openPage(url, allowed = null) {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  await page.setViewport({ width: 1280, height: 860 });
  const errors = [];
  page.on('console', (m) => {
    if (m.type() === 'error' && !(allowed && allowed.test(m.text()))) errors.push(m.text());
  });
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(url, { waitUntil: 'networkidle0' });
  return { page, errors, close: () => context.close() };
}

const lastReply = (page) => page.evaluate(() => JSON.parse(localStorage.getItem('kvik.chat')).messages.at(-1));

async function setValue(page, sel, value) {
  await page.$eval(sel, (e, v) => { e.value = v; e.dispatchEvent(new Event('change')); }, String(value));
}

// A random-weight model big enough that a reply takes seconds (stories260K writes 480 tokens in 0.2 s, faster than a
// page paints); greedy on the prompt below it runs 764 tokens before its EOS.
function slowModel() {
  const model = path.join(tmp, 'slow.gguf');
  if (!fs.existsSync(model))
    execFileSync(BINARY, ['synth', model, '--dim', '1024', '--layers', '4', '--heads', '16', '--kv-heads', '4', '--ff',
      '2816', '--vocab', '512', '--type', 'f16', '--context', '4096', '--tokenizer-from', MODEL, '--seed', '3']);
  return model;
}
const LONG_PROMPT = 'Write a long story';

test('chat: a streamed reply grows and finishes; Stop aborts a long one midway and the server counts the abort', async () => {
  const srv = await startServer([], {}, slowModel());
  const { page, errors, close } = await openPage(`${srv.url}/`);
  try {
    await page.waitForSelector('#model option[value="slow"]');
    await setValue(page, '#max-tokens', 120);
    await setValue(page, '#temperature', 0);
    // Every text the reply shows while it streams.
    await page.evaluate(() => {
      window.shown = [];
      new MutationObserver(() => {
        const body = document.querySelector('.msg.assistant:last-child .body');
        if (body) window.shown.push(body.textContent);
      }).observe(document.querySelector('#messages'), { subtree: true, childList: true, characterData: true });
    });
    await page.type('#prompt', LONG_PROMPT);
    await page.keyboard.press('Enter');  // Enter sends
    await page.waitForSelector('.msg.assistant.done', { timeout: 60000 });
    const reply = await lastReply(page);
    // Each text shown is the page's Markdown rendering of a prefix of the reply, the prefixes only grow, and there
    // were at least 5 of them. (Not "the text only grew": with random tokens a closing `*` turns `*a b` into an
    // emphasised "a b", one character shorter, whenever a paint falls between the two.)
    const prefixes = await page.evaluate(async (content) => {
      const { renderMarkdown } = await import('/web/markdown.js');
      const box = document.createElement('div');
      const rendered = (k) => { box.innerHTML = renderMarkdown(content.slice(0, k)); return box.textContent; };
      const out = [];
      let k = 0;
      for (const text of window.shown.filter((t) => t.length > 0)) {
        while (k <= content.length && rendered(k) !== text) k++;
        if (k > content.length) return { unmatched: text, after: out };
        out.push(k);
      }
      return { lengths: [...new Set(out)] };
    }, reply.content);
    assert.ok(prefixes.lengths, `a text shown that is no prefix's rendering after ${JSON.stringify(prefixes.after)}: ` +
      `${JSON.stringify(prefixes.unmatched)} (the reply: ${JSON.stringify(reply.content)})`);
    assert.ok(prefixes.lengths.length >= 5, `the reply grew in steps: ${JSON.stringify(prefixes.lengths)}`);
    assert.equal(prefixes.lengths.at(-1), reply.content.length, 'the last text shown is the whole reply');
    assert.equal(reply.stats.completion_tokens, 120);
    assert.equal(reply.stats.finish_reason, 'length');
    assert.ok(reply.stats.tok_s > 0);
    assert.match(await page.$eval('.msg.assistant .stats', (e) => e.textContent), /^120 tokens · [\d.]+ tok\/s · first token \d+ ms/);
    // The same text the API gives for the same request (greedy), so nothing was lost or doubled on the way.
    const api = await post(`${srv.url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: LONG_PROMPT }], max_tokens: 120, temperature: 0, top_p: 1,
    });
    assert.equal(reply.content, api.body.choices[0].message.content);

    // A long reply, stopped once it has begun: the request is aborted on the server.
    await page.click('#new-chat');
    await setValue(page, '#max-tokens', 3000);
    const before = (await metrics(srv.url)).values;
    const abortsBefore = before['kvik:request_success_total{finished_reason="abort"}'];
    await page.type('#prompt', LONG_PROMPT);
    await page.keyboard.press('Enter');
    await page.waitForSelector('#stop:not([hidden])');
    await page.waitForFunction(() => document.querySelector('.msg.assistant:last-child .body').textContent.length > 20,
      { timeout: 30000 });
    await page.click('#stop');
    await page.waitForSelector('.msg.assistant.done');
    const stopped = await lastReply(page);
    assert.equal(stopped.stats.finish_reason, 'abort');
    assert.ok(stopped.stats.completion_tokens > 0 && stopped.stats.completion_tokens < 764, JSON.stringify(stopped.stats));
    assert.match(await page.$eval('.msg.assistant .stats', (e) => e.textContent), /stopped/);
    assert.equal(await page.$eval('#send', (e) => e.hidden), false);
    let m;
    for (let i = 0; i < 60; i++) {  // the server notices the closed connection within a second
      m = (await metrics(srv.url)).values;
      if (m['kvik:request_success_total{finished_reason="abort"}'] > abortsBefore) break;
      await sleep(100);
    }
    assert.equal(m['kvik:request_success_total{finished_reason="abort"}'], abortsBefore + 1);
    assert.equal(m['kvik:num_requests_running'], 0);
    const generated = m['kvik:generation_tokens_total'] - before['kvik:generation_tokens_total'];
    assert.ok(generated < 764, `stopped midway: ${generated} tokens`);
    assert.deepEqual(errors, []);
  } finally {
    await close();
    await srv.stop();
  }
});

test('chat: JSON mode gives JSON that follows the schema; adapters in the picker; Markdown, Shift+Enter, the kept conversation, themes', async () => {
  const adapter = path.join(tmp, 'story-lora.gguf');
  execFileSync(BINARY, ['synth-lora', MODEL, adapter, '--seed', '1']);
  const srv = await startServer(['--enable-lora', '--lora-modules', `story-lora=${adapter}`]);
  const { page, errors, close } = await openPage(`${srv.url}/`);
  const sentModels = [];
  page.on('request', (r) => { if (r.url().endsWith('/v1/chat/completions')) sentModels.push(JSON.parse(r.postData()).model); });
  try {
    await page.waitForSelector('#model option[value="stories260K"]');
    assert.deepEqual(await page.$$eval('#model option', (o) => o.map((e) => e.textContent)),
      ['stories260K', 'story-lora (LoRA on stories260K)']);
    await page.select('#model', 'story-lora');
    // Shift+Enter is a newline, not a send.
    await page.type('#prompt', 'line one');
    await page.keyboard.down('Shift');
    await page.keyboard.press('Enter');
    await page.keyboard.up('Shift');
    assert.equal(await page.$eval('#prompt', (e) => e.value), 'line one\n');
    assert.equal(await page.$$eval('.msg', (n) => n.length), 0);
    await page.$eval('#prompt', (e) => { e.value = ''; });

    // JSON mode with a schema: the reply parses and follows it.
    await page.click('#json-mode');
    await page.waitForSelector('#schema-label:not([hidden])');
    const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 12 } }, required: ['name'],
      additionalProperties: false };
    await page.type('#schema', JSON.stringify(schema));
    await setValue(page, '#max-tokens', 256);
    await setValue(page, '#temperature', 0);  // greedy: the same reply every run
    await page.type('#prompt', 'Give me a name');
    await page.keyboard.press('Enter');
    await page.waitForSelector('.msg.assistant.done', { timeout: 30000 });
    const json = await lastReply(page);
    assert.deepEqual(sentModels, ['story-lora']);
    assert.equal(json.stats.finish_reason, 'stop', JSON.stringify(json));
    const parsed = JSON.parse(json.content);
    assert.deepEqual(Object.keys(parsed), ['name']);
    assert.equal(typeof parsed.name, 'string');
    // A bad schema is named beside the box, and nothing is sent.
    await page.$eval('#schema', (e) => { e.value = '{"type": '; });
    await page.type('#prompt', 'again');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.querySelector('#schema-error').textContent.startsWith('Schema:'));
    assert.equal(await page.$$eval('.msg.user', (n) => n.length), 1);

    // Markdown in a reply (a conversation kept in localStorage, shown after a reload): a code block, inline code,
    // bold, a list; the model's HTML is text, never markup.
    await page.evaluate(() => {
      const saved = JSON.parse(localStorage.getItem('kvik.chat'));
      saved.messages.push({ role: 'user', content: 'Show me some code' },
        { role: 'assistant', content: 'Here is **Python** with `print`:\n\n```python\nfor i in range(3):\n    print(i)\n```\n\n- one\n- two <img src=x onerror=alert(1)>',
          stats: { completion_tokens: 31, tok_s: 123.4, ttft_ms: 12, prompt_tokens: 20, finish_reason: 'stop' } });
      localStorage.setItem('kvik.chat', JSON.stringify(saved));
    });
    await page.reload({ waitUntil: 'networkidle0' });
    assert.equal(await page.$$eval('.msg', (n) => n.length), 4);
    assert.equal(await page.$eval('.msg.assistant:last-child pre code.language-python', (e) => e.textContent),
      'for i in range(3):\n    print(i)');
    assert.equal(await page.$eval('.msg.assistant:last-child strong', (e) => e.textContent), 'Python');
    assert.equal(await page.$$eval('.msg.assistant:last-child li', (n) => n.length), 2);
    assert.equal(await page.$('.msg img'), null);
    await page.screenshot({ path: path.join(SHOTS, 'chat.png') });
    await page.click('#theme-toggle');
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'dark');
    await page.screenshot({ path: path.join(SHOTS, 'chat-dark.png') });
    assert.deepEqual(errors, []);
  } finally {
    await close();
    await srv.stop();
  }
});

// Keeps `n` streamed completions running on the server until stop() (each ignores EOS).
function load(url, n, headers = {}) {
  let running = true;
  const one = async (i) => {
    while (running) {
      const r = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', ...headers },
        body: JSON.stringify({ prompt: `Once upon a time ${i}`, max_tokens: 300, ignore_eos: true, stream: true }),
      });
      await r.text();
    }
  };
  const all = Promise.all(Array.from({ length: n }, (_, i) => one(i)));
  return async () => { running = false; await all; };
}

test('dashboard: running requests and the KV block map follow a load; hover shows a block table', async () => {
  const srv = await startServer(['--max-num-seqs', '16', '--speculative-config',
    '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}']);
  const { page, errors, close } = await openPage(`${srv.url}/dashboard`);
  await page.setViewport({ width: 1280, height: 1100 });
  const stop = load(srv.url, 24);
  try {
    const seen = { running: new Set(), used: new Set(), sequences: new Set() };
    for (let i = 0; i < 12; i++) {
      await sleep(500);
      const v = await page.evaluate(() => ({
        running: document.querySelector('[data-metric="running"]')?.dataset.value,
        used: document.querySelector('#blockmap').dataset.used,
        sequence: document.querySelector('#blockmap').dataset.sequence,
      }));
      seen.running.add(Number(v.running));
      seen.used.add(Number(v.used));
      seen.sequences.add(v.sequence);
    }
    assert.ok(Math.max(...seen.running) > 0, `running: ${[...seen.running]}`);
    assert.ok(Math.max(...seen.used) > 0, `used blocks: ${[...seen.used]}`);
    assert.ok(seen.used.size >= 2, `the block map changed: ${[...seen.used]}`);
    assert.ok(seen.sequences.size >= 4, `fresh snapshots each second: ${[...seen.sequences]}`);
    const rows = await page.$$eval('#request-rows tr', (r) => r.length);
    assert.ok(rows > 0);
    // Hover a used block: its request's block table is shown.
    const box = await page.$eval('#blockmap', (c) => {
      const r = c.getBoundingClientRect();
      return { x: r.left, y: r.top, first: Number(c.dataset.firstUsed), cols: Number(c.dataset.cols),
        pitch: Number(c.dataset.pitch) };
    });
    assert.ok(box.first >= 0);
    await page.mouse.move(box.x + (box.first % box.cols) * box.pitch + 3, box.y + Math.floor(box.first / box.cols) * box.pitch + 3);
    await page.waitForSelector('#block-tip:not([hidden])');
    assert.match(await page.$eval('#block-tip', (e) => e.textContent), /block table of .*\[/);
    await page.screenshot({ path: path.join(SHOTS, 'dashboard.png') });
    // Keyboard: a request row takes the focus and highlights its blocks.
    await page.mouse.move(0, 0);
    // One long request (its prompt longer than the load's, to find its row) outlives the refreshes below.
    const long = fetch(`${srv.url}/v1/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: 'Once upon a time, in a small town by the sea, there lived a girl who loved boats',
        max_tokens: 1500, ignore_eos: true }),
    }).then((r) => r.text());
    const row = await page.waitForFunction(() => [...document.querySelectorAll('#request-rows tr')]
      .find((r) => Number(r.cells[3].textContent) > 15 && r.cells[2].textContent === 'running'), { timeout: 20000 });
    const focused = await row.evaluate((r) => { r.focus(); return r.dataset.id; });
    const seq = await page.$eval('#blockmap', (c) => c.dataset.sequence);
    await page.waitForFunction((s) => document.querySelector('#blockmap').dataset.sequence !== s, {}, seq);
    // The refresh replaced the rows; the focus stays on that request's row, its blocks highlighted.
    assert.equal(await page.evaluate(() => document.activeElement.dataset?.id), focused);
    assert.equal(await page.$eval('#request-rows tr.hover', (r) => r.dataset.id), focused);
    await long;
    await stop();
    // Idle: no block in use, the prompts' full blocks cached and free.
    await page.waitForFunction(() => document.querySelector('#blockmap').dataset.used === '0' &&
      Number(document.querySelector('#blockmap').dataset.cached) > 0, { timeout: 15000 });
    for (const key of ['tok_s', 'ttft', 'itl', 'hit', 'kv', 'spec'])
      assert.ok(await page.$(`[data-metric="${key}"] svg polyline`), `${key} has a chart`);
    assert.deepEqual(errors, []);
  } finally {
    await stop();
    await close();
    await srv.stop();
  }
});

test('trace: one prefill and one decode step as the shape table, with this model\'s numbers', async () => {
  const srv = await startServer();
  const { page, errors, close } = await openPage(`${srv.url}/trace`);
  try {
    await page.waitForSelector('#shape-table');
    const api = (await post(`${srv.url}/v1/engine/trace`, { prompt: 'Once upon a time, there was a little girl' })).body;
    const cells = await page.$$eval('#shape-table tr.step', (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
    assert.equal(cells.length, api.rows.length);
    const q = cells.find((c) => c[0].startsWith('q = h @ W_q'));
    assert.equal(q[2], `[${api.config.n_h}, ${api.T}, ${api.config.d_h}]`);
    assert.match(await page.$eval('h2', (e) => e.textContent), new RegExp(`prefill step of stories260K: T = ${api.T}, ctx = ${api.T}`));
    await page.keyboard.press('ArrowDown');
    await page.keyboard.press('ArrowDown');
    assert.equal(await page.$eval('#shape-table tr.current', (r) => r.cells[0].textContent), 'x = E[ids]');
    await page.click('input[value="decode"]');
    await page.click('#trace-run');
    await page.waitForFunction(() => document.querySelector('h2').textContent.startsWith('decode step'));
    assert.match(await page.$eval('h2', (e) => e.textContent), new RegExp(`T = 1, ctx = ${api.T}`));
    assert.equal(await page.$eval('#next-token', (e) => e.textContent), `next token: ${api.next_token.id} ${JSON.stringify(api.next_token.text)} (p = ${api.next_token.prob.toFixed(3)})`);
    await page.setViewport({ width: 1280, height: 1250 });  // the whole table, the RMS bars and the next token
    await page.screenshot({ path: path.join(SHOTS, 'trace.png') });
    // A bad request is a 400 naming the field, shown on the page.
    await page.$eval('#trace-prompt', (e) => { e.value = ''; });
    await page.click('#trace-run');
    await page.waitForFunction(() => document.querySelector('#trace-error').textContent.includes('prompt'));
    assert.deepEqual(errors.filter((e) => !/status of 400/.test(e)), []);
  } finally {
    await close();
    await srv.stop();
  }
});

test('--api-key: the pages ask once and keep the key for the tab; the state endpoint refuses requests without it', async () => {
  const key = 'sekrit-42';
  const srv = await startServer(['--api-key', key]);
  // The page itself needs no key; the 401 before the key is entered is expected in the console.
  const { page, errors, close } = await openPage(`${srv.url}/dashboard`, /status of 401/);
  try {
    assert.equal((await fetch(`${srv.url}/v1/engine/state`)).status, 401);
    assert.equal((await fetch(`${srv.url}/v1/engine/state`, { headers: { Authorization: 'Bearer nope' } })).status, 401);
    assert.equal((await post(`${srv.url}/v1/engine/trace`, { prompt: 'Hi' })).status, 401);
    const ok = await fetch(`${srv.url}/v1/engine/state`, { headers: { Authorization: `Bearer ${key}` } });
    assert.equal(ok.status, 200);
    assert.equal((await ok.json()).object, 'engine.state');

    await page.waitForSelector('#key-dialog[open]');
    await page.type('#api-key-input', key);
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.querySelector('#map-summary').textContent.includes('blocks of'));
    // The chat page in the same tab has the key already: no dialog, the reply streams.
    await page.goto(`${srv.url}/`, { waitUntil: 'networkidle0' });
    await page.waitForSelector('#model option[value="stories260K"]');
    assert.equal(await page.$('#key-dialog'), null);
    await setValue(page, '#max-tokens', 16);
    await page.type('#prompt', 'Hello');
    await page.keyboard.press('Enter');
    await page.waitForSelector('.msg.assistant.done');
    const reply = await lastReply(page);
    assert.equal(reply.stats.completion_tokens, 16, JSON.stringify(reply));
    assert.deepEqual(errors, []);
  } finally {
    await close();
    await srv.stop();
  }
});

test('engine endpoints: malformed requests are 400s naming the field; the pages\' routes', async () => {
  const srv = await startServer();
  try {
    const trace = (body) => post(`${srv.url}/v1/engine/trace`, body);
    const cases = [
      ['not JSON', '{"prompt": ', null],
      ['an array', '[1, 2]', null],
      ['too deep', '['.repeat(100) + ']'.repeat(100), null],
      ['no prompt', {}, 'prompt'],
      ['prompt a number', { prompt: 5 }, 'prompt'],
      ['empty prompt', { prompt: '' }, 'prompt'],
      ['decode a string', { prompt: 'Hi there', decode: 'yes' }, 'decode'],
      ['decode of one token', { prompt: '', decode: true }, 'prompt'],
      ['longer than max_model_len', { prompt: 'Once upon a time '.repeat(700) }, 'prompt'],
    ];
    for (const [name, body, param] of cases) {
      const r = await trace(body);
      assert.equal(r.status, 400, `${name}: ${r.text.slice(0, 200)}`);
      assert.equal(r.body.error.param ?? null, param, name);
      assert.ok(r.body.error.message.length > 0, name);
    }
    const ok = await trace({ prompt: 'Once upon a time', decode: true });
    assert.equal(ok.status, 200);
    assert.equal(ok.body.step, 'decode');
    assert.equal(ok.body.T, 1);

    const state = await (await fetch(`${srv.url}/v1/engine/state`)).json();
    assert.equal(state.blocks.owner.length, state.num_blocks);
    assert.equal(state.blocks.ref_cnt.length, state.num_blocks);
    assert.equal(state.blocks.hash.length, state.num_blocks);
    assert.equal((await fetch(`${srv.url}/v1/engine/state`, { method: 'POST' })).status, 404);

    for (const [p, type] of [['/', 'text/html'], ['/dashboard', 'text/html'], ['/trace', 'text/html'],
      ['/web/kvik.css', 'text/css'], ['/web/chat.js', 'text/javascript']]) {
      const r = await fetch(`${srv.url}${p}`);
      assert.equal(r.status, 200, p);
      assert.ok(r.headers.get('content-type').startsWith(type), p);
      assert.match(r.headers.get('content-security-policy'), /default-src 'self'/);
    }
    assert.equal((await fetch(`${srv.url}/`, { method: 'HEAD' })).status, 200);
    for (const p of ['/web/nothing.js', '/web/../CMakeLists.txt', '/index', '/dashboard/x'])
      assert.equal((await fetch(`${srv.url}${p}`)).status, 404, p);
    assert.match(srv.log(), new RegExp(`web page: http://127\\.0\\.0\\.1:${srv.port}/`));
  } finally {
    await srv.stop();
  }
});
