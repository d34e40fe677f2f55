// Basic serving contract, for the tiny hybrid (qwen35) and tiny dense (qwen3) models:
// GET /health, GET /v1/models, the shape of a chat completion (usage, timings, finish_reason
// against max_tokens), sampling parameters and stop strings accepted, GET /v1/cache/stats,
// and a graceful exit (code 0) on SIGTERM.
//
//   cd tests/e2e && node --test basic.test.mjs
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { assertCompletion, words } from './lib/chat.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

for (const arch of ARCHS) {
  describe(`basic [${arch}]`, { timeout: 180_000 }, () => {
    let srv;
    let model;
    before(async () => {
      model = modelPath(arch);
      srv = await startServer({ model, name: `basic-${arch}`, args: ['--parallel', '2', '--ctx-size', '4096'] });
    });
    after(async () => { await srv?.stopGracefully(); });

    it('GET /health is 200 {"status":"ok"}', async () => {
      const r = await srv.get('/health');
      assert.equal(r.status, 200);
      assert.deepEqual(r.json, { status: 'ok' });
    });

    it('GET /v1/models lists the loaded model', async () => {
      const r = await srv.get('/v1/models');
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.object, 'list');
      assert.equal(r.json.data.length, 1, r.text);
      const m = r.json.data[0];
      assert.equal(m.object, 'model');
      assert.equal(typeof m.id, 'string');
      assert.ok(m.id.includes(path.basename(model, '.gguf')), `model id ${m.id} does not name ${model}`);
      // The same list through the official client.
      const list = [];
      for await (const x of srv.openai.models.list()) list.push(x.id);
      assert.deepEqual(list, [m.id]);
    });

    it('a chat completion has the OpenAI shape, usage and timings', async () => {
      const res = await srv.openai.chat.completions.create({
        model: 'tiny',
        messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hello.' }],
        max_tokens: 8,
        temperature: 0,
      });
      assertCompletion(res, { maxTokens: 8 }, 'basic');
      assert.equal(res.usage.prompt_tokens_details.cached_tokens, 0, 'first request on a fresh server');
    });

    it('max_completion_tokens limits the reply like max_tokens', async () => {
      const res = await srv.openai.chat.completions.create({
        model: 'tiny', messages: [{ role: 'user', content: words(20, 11) }], max_completion_tokens: 5, temperature: 0,
      });
      assertCompletion(res, { maxTokens: 5 }, 'max_completion_tokens');
    });

    it('max_tokens 1 gives exactly one token', async () => {
      const res = await srv.openai.chat.completions.create({
        model: 'tiny', messages: [{ role: 'user', content: words(12, 12) }], max_tokens: 1, temperature: 0,
      });
      assertCompletion(res, { maxTokens: 1 }, 'max_tokens 1');
      assert.equal(res.usage.completion_tokens, 1);
    });

    it('temperature, top_p and seed: the same seed gives the same sample', async () => {
      const body = {
        model: 'tiny', messages: [{ role: 'user', content: words(16, 13) }], max_tokens: 12,
        temperature: 0.9, top_p: 0.95, seed: 1234, cache_prompt: false,
      };
      const a = await srv.openai.chat.completions.create(body);
      const b = await srv.openai.chat.completions.create(body);
      assertCompletion(a, { maxTokens: 12 }, 'seeded a');
      assertCompletion(b, { maxTokens: 12 }, 'seeded b');
      assert.equal(b.choices[0].message.content, a.choices[0].message.content);
      assert.equal(b.usage.completion_tokens, a.usage.completion_tokens);
    });

    it('a stop string ends the reply before it', async () => {
      // Greedy reply first, then stop on a piece of it: the reply must end before that piece.
      const body = { model: 'tiny', messages: [{ role: 'user', content: words(10, 14) }], max_tokens: 16, temperature: 0 };
      const full = await srv.openai.chat.completions.create(body);
      // The generated text is in content, or in reasoning_content when the server splits a
      // <think> block off (the Qwen3.5 template opens one in the generation prompt).
      const field = full.choices[0].message.content ? 'content' : 'reasoning_content';
      const text = full.choices[0].message[field] ?? '';
      const stop = text.slice(Math.floor(text.length / 2)).match(/[A-Za-z]{3,}/)?.[0];
      if (!stop) return; // nothing usable to stop on
      const cut = await srv.openai.chat.completions.create({ ...body, stop: [stop] });
      assertCompletion(cut, { maxTokens: 16 }, 'stop');
      assert.equal(cut.choices[0].finish_reason, 'stop');
      const got = cut.choices[0].message[field] ?? '';
      assert.ok(!got.includes(stop), `reply ${JSON.stringify(got)} contains the stop string ${JSON.stringify(stop)}`);
      assert.ok(text.startsWith(got.trimEnd()), `reply ${JSON.stringify(got)} is not a prefix of ${JSON.stringify(text)}`);
      assert.ok(cut.usage.completion_tokens < full.usage.completion_tokens, 'stopped reply is not shorter');
    });

    it('a stop string the first token completes: completion_tokens is 1, every time (streamed and not)', async () => {
      // Tokens the scheduler decoded before it saw the stop are not the client's: the count must
      // not depend on timing.
      const body = { model: 'tiny', messages: [{ role: 'user', content: words(10, 15) }], max_tokens: 8, temperature: 0,
        logprobs: true, cache_prompt: false };
      const full = await srv.openai.chat.completions.create(body);
      const first = full.choices[0].logprobs.content[0].token;
      assert.ok(first.trim().length > 0, `the first token ${JSON.stringify(first)} is a usable stop string`);
      for (let i = 0; i < 4; i++) {
        const cut = await srv.openai.chat.completions.create({ ...body, stop: [first] });
        assert.equal(cut.choices[0].finish_reason, 'stop', `run ${i}`);
        assert.equal(cut.usage.completion_tokens, 1, `run ${i}: completion_tokens`);
      }
      for (let i = 0; i < 2; i++) {
        const stream = await srv.openai.chat.completions.create({ ...body, stop: [first], stream: true,
          stream_options: { include_usage: true } });
        let usage = null;
        for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
        assert.equal(usage?.completion_tokens, 1, `stream ${i}: completion_tokens`);
      }
    });

    it('GET /v1/cache/stats returns counters', async () => {
      const r = await srv.get('/v1/cache/stats');
      assert.equal(r.status, 200, r.text);
      const s = r.json;
      for (const k of ['entries', 'misses']) assert.ok(Number.isInteger(s[k]) && s[k] >= 0, `stats.${k} = ${s[k]}`);
      assert.ok(s.hits && typeof s.hits === 'object', `stats.hits by kind: ${r.text}`);
      assert.ok(s.bytes !== undefined, `stats.bytes: ${r.text}`);
      assert.ok(s.entries >= 1, `requests with cache_prompt on were made, entries = ${s.entries}`);
    });

    it('SIGTERM stops the server gracefully (exit code 0)', async () => {
      const exit = await srv.stop();
      assert.equal(exit.killed, false, 'needed SIGKILL');
      assert.equal(exit.signal, null, `exited by signal ${exit.signal}`);
      assert.equal(exit.code, 0);
    });
  });
}
