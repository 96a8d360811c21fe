// `kvik serve` with no model serves the bundled models/stories260K.gguf; --model names one as the positional does.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, post } from './helpers.mjs';

async function servedModelAndCompletion(args, model) {
  const srv = await startServer(['--threads', '1', ...args], {}, model);
  try {
    const models = await (await fetch(`${srv.url}/v1/models`)).json();
    const r = await post(`${srv.url}/v1/completions`, { prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
    assert.equal(r.status, 200, r.text);
    return { ids: models.data.map((m) => m.id), text: r.body.choices[0].text };
  } finally {
    const { code } = await srv.stop();
    assert.equal(code, 0, srv.log());
  }
}

test('kvik serve with no model serves the bundled stories260K', async () => {
  const bundled = await servedModelAndCompletion([], null);
  assert.deepEqual(bundled.ids, ['stories260K']);
  assert.ok(bundled.text.length > 0);
  const named = await servedModelAndCompletion(['--model', new URL('../../models/stories260K.gguf', import.meta.url).pathname], null);
  assert.deepEqual(named, bundled, 'the same model, named by --model, writes the same greedy text');
});
