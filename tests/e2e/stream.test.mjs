// Streaming, for the tiny hybrid (qwen35) and tiny dense (qwen3) models:
//  - streamed and non-streamed greedy replies agree (same text, same finish_reason, same
//    prompt/completion token counts), with the cache on and with cache_prompt:false;
//  - with stream_options.include_usage the stream's last chunk carries usage (and
//    choices: []), no other chunk does; every chunk has the same id and object
//    "chat.completion.chunk"; the first delta has role "assistant";
//  - on the wire (raw fetch) the SSE stream ends with `data: [DONE]`;
//  - a client that drops a stream after a few chunks leaves the server serving;
//  - a streamed request queued behind a long one (--parallel 1, --stream-keepalive 0.2) gets its
//    headers before its output starts, SSE comment lines while it waits, and the official
//    openai and Anthropic clients read its stream whole.
//
//   cd tests/e2e && node --test stream.test.mjs
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';

import { assertCompletion, assertUsage, readSSE, streamChat, words } from './lib/chat.mjs';
import { resendCached } from './lib/agents.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const MAX_TOKENS = 16;

function messages(seed) {
  return [
    { role: 'system', content: `You are a helpful assistant. ${words(60, seed)}` },
    { role: 'user', content: words(20, seed + 1) },
  ];
}

for (const arch of ARCHS) {
  describe(`streaming [${arch}]`, { timeout: 180_000 }, () => {
    let srv;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `stream-${arch}`, args: ['--parallel', '2', '--ctx-size', '4096'] });
    });
    after(async () => { await srv?.stopGracefully(); });

    for (const cachePrompt of [true, false]) {
      it(`streamed == non-streamed for greedy decoding (cache_prompt ${cachePrompt})`, async () => {
        const body = { model: 'tiny', messages: messages(cachePrompt ? 7 : 8), max_tokens: MAX_TOKENS, temperature: 0,
          cache_prompt: cachePrompt };
        const plain = await srv.openai.chat.completions.create(body);
        const msg = assertCompletion(plain, { maxTokens: MAX_TOKENS }, 'non-streamed');
        const s = await streamChat(srv.openai, { ...body, stream_options: { include_usage: true } });

        const detail = `request ${JSON.stringify(body)}; non-streamed message ${JSON.stringify(msg)}; ` +
          `streamed content ${JSON.stringify(s.content)}, reasoning_content ${JSON.stringify(s.reasoning)}`;
        assert.equal(s.role, 'assistant', 'first delta role');
        assert.equal(s.content, msg.content ?? '', `streamed content differs: ${detail}`);
        assert.equal(s.reasoning, msg.reasoning_content ?? '', `streamed reasoning_content differs: ${detail}`);
        assert.equal(s.finish, plain.choices[0].finish_reason, 'finish_reason');
        assertUsage(s.usage, 'stream usage');
        assert.equal(s.usage.prompt_tokens, plain.usage.prompt_tokens, 'prompt_tokens');
        assert.equal(s.usage.completion_tokens, plain.usage.completion_tokens, 'completion_tokens');
        // The same prompt a second time: a verbatim resend when the cache is on.
        const cached = s.usage.prompt_tokens_details.cached_tokens;
        assert.equal(cached, cachePrompt ? await resendCached(srv, body, plain.usage.prompt_tokens) : 0,
          'cached_tokens of the resend');

        // Chunk shapes.
        const ids = new Set(s.chunks.map((c) => c.id));
        assert.equal(ids.size, 1, `chunk ids ${[...ids]}`);
        for (const c of s.chunks) assert.equal(c.object, 'chat.completion.chunk');
        const last = s.chunks.at(-1);
        assert.equal(last, s.usageChunk, 'usage must come in the last chunk');
        assert.deepEqual(last.choices, [], 'the usage chunk has choices: []');
        const withUsage = s.chunks.filter((c) => c.usage);
        assert.equal(withUsage.length, 1, 'exactly one chunk carries usage');
        assert.equal(s.chunks.filter((c) => c.choices?.[0]?.finish_reason).length, 1, 'exactly one finish_reason');
      });
    }

    it('the SSE stream ends with data: [DONE], with and without include_usage', async () => {
      for (const includeUsage of [true, false]) {
        const body = { model: 'tiny', messages: messages(9), max_tokens: 8, temperature: 0, stream: true };
        if (includeUsage) body.stream_options = { include_usage: true };
        const res = await fetch(`${srv.url}/v1/chat/completions`, {
          method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
        });
        assert.equal(res.status, 200);
        assert.match(res.headers.get('content-type') || '', /text\/event-stream/);
        const { data, text } = await readSSE(res);
        assert.equal(data.at(-1), '[DONE]', `stream does not end with [DONE]:\n${text.slice(-500)}`);
        assert.equal(data.filter((d) => d === '[DONE]').length, 1);
        const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
        assert.ok(chunks.length >= 2, 'at least a content chunk and a finish chunk');
        const usageChunks = chunks.filter((c) => c.usage);
        if (includeUsage) {
          assert.equal(usageChunks.length, 1);
          assert.equal(usageChunks[0], chunks.at(-1));
        }
      }
    });

    it('a stream dropped by the client after a few chunks leaves the server serving', async () => {
      const ac = new AbortController();
      const stream = await srv.openai.chat.completions.create(
        { model: 'tiny', messages: messages(10), max_tokens: 200, temperature: 0, stream: true }, { signal: ac.signal });
      let n = 0;
      try {
        for await (const _chunk of stream) { if (++n === 3) ac.abort(); }
      } catch (e) {
        assert.ok(ac.signal.aborted, `stream failed before the client dropped it: ${e}`);
      }
      srv.assertAlive();
      const res = await srv.openai.chat.completions.create({ model: 'tiny', messages: messages(10), max_tokens: 8, temperature: 0 });
      assertCompletion(res, { maxTokens: 8 }, 'after a dropped stream');
    });
  });
}

describe('a streamed request that waits: headers and keep-alive comments before its output [qwen35]', { timeout: 180_000 }, () => {
  let srv;
  before(async () => {
    srv = await startServer({ model: modelPath('qwen35'), name: 'stream-keepalive',
      args: ['--parallel', '1', '--ctx-size', '4096', '--stream-keepalive', '0.2'] });
  });
  after(async () => { await srv?.stopGracefully(); });

  // Holds the one slot: a stream of 1,500 tokens that cannot end early (end-of-generation
  // banned), running once its first chunk came; `done` resolves to its status when it ends.
  const blocker = async () => {
    const r = await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', max_tokens: 1500, temperature: 0, ignore_eos: true, stream: true,
        messages: [{ role: 'user', content: 'count' }] }) });
    const it = r.body[Symbol.asyncIterator]();
    await it.next();  // its first chunk: it holds the slot
    return { done: (async () => { while (!(await it.next()).done); return r.status; })() };
  };

  it('raw: status 200 and a comment line before the first chunk; the stream ends with [DONE]', async () => {
    const long = await blocker();
    const t0 = performance.now();
    const r = await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', max_tokens: 4, temperature: 0, stream: true, messages: [{ role: 'user', content: 'hi' }] }) });
    const headersMs = performance.now() - t0;
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('content-type'), 'text/event-stream');
    let text = '';
    let firstChunkMs = null;
    for await (const c of r.body) {
      text += new TextDecoder().decode(c);
      if (firstChunkMs === null && text.includes('data: {')) firstChunkMs = performance.now() - t0;
    }
    assert.equal(await long.done, 200);
    assert.ok(firstChunkMs !== null, text.slice(0, 300));
    assert.ok(headersMs < firstChunkMs, `headers at ${headersMs} ms, first chunk at ${firstChunkMs} ms`);
    assert.match(text, /^: waiting for the first token\n\n/, 'the stream opens with a comment line');
    assert.ok(text.indexOf(': waiting') < text.indexOf('data: {'), 'comments come before the output');
    assert.match(text, /data: \[DONE\]\n\n$/);
  });

  it('the openai and Anthropic clients read such a stream whole', async () => {
    const long = await blocker();
    const { content, finish, chunks } = await streamChat(srv.openai, { model: 'tiny', max_tokens: 4, temperature: 0,
      messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(typeof content, 'string');
    assert.ok(chunks.length >= 2, `${chunks.length} chunks`);
    assert.ok(['stop', 'length'].includes(finish), `finish_reason ${finish}`);
    assert.equal(await long.done, 200);

    const long2 = await blocker();
    const anthropic = new Anthropic({ baseURL: srv.url, apiKey: 'sk-none', maxRetries: 0 });
    const events = [];
    const stream = await anthropic.messages.create({ model: 'tiny', max_tokens: 4, stream: true,
      messages: [{ role: 'user', content: 'hi' }] });
    for await (const ev of stream) events.push(ev.type);
    assert.equal(events[0], 'message_start');
    assert.equal(events.at(-1), 'message_stop');
    assert.equal(await long2.done, 200);
  });
});
