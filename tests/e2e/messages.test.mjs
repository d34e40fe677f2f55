// POST /v1/messages (the Anthropic Messages API) through the official @anthropic-ai/sdk client,
// on the tiny hybrid (qwen35) and dense (qwen3) models. Random weights: the checks are on
// shapes, exact usage arithmetic, the thinking signature round trip and the cache:
//  - messages.create / messages.stream / countTokens (also client.beta: ?beta=true): shapes,
//    input + cache_creation + cache_read == countTokens of the same body;
//  - a second turn restores at least the first prompt's history boundary; an agent-loop turn
//    (tool_use + tool_result after the first reply, its thinking block echoed with its
//    signature) restores at least the whole first prompt;
//  - a bad signature, an edited thinking block or an image block is a 400 in Anthropic's shape;
//  - a conversation started on /v1/chat/completions and continued on /v1/messages restores
//    (the same rendered tokens: one cache for both dialects);
//  - a cache_control mark inside a user message makes a restore point: a new session sharing
//    the conversation up to the mark restores at least the mark's length minus the BPE slack;
//  - auth by x-api-key or Bearer, 401/404 in Anthropic's shape, HEAD/GET /, --model-alias.
//
//   cd tests/e2e && node --test messages.test.mjs
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { words } from './lib/chat.mjs';
import { anthropic, assertMessage, chatPromptTokens, commonPrefix } from './lib/anthropic.mjs';
import { ANCHOR_SLACK, GEN } from './lib/scenario.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const MAX_TOKENS = 12;
const SYSTEM = `You are a coding agent working in a C++ repository. ${words(120, 71)}`;
const TOOLS = [
  { name: 'read_file', description: 'Read a text file of the repository.',
    input_schema: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } },
  { name: 'run_shell', description: 'Run a shell command in the repository root.',
    input_schema: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] } },
];

for (const arch of ARCHS) {
  describe(`messages [${arch}]`, { timeout: 300_000 }, () => {
    let srv;
    let client;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `messages-${arch}`,
        args: ['--parallel', '2', '--ctx-size', '8192', '--log-level', 'debug'] });
      client = anthropic(srv);
    });
    after(async () => { await srv?.stopGracefully(); });

    const create = async (body, where) => {
      const m = await client.messages.create({ model: 'claude-lineage-test', max_tokens: MAX_TOKENS, temperature: 0, ...body });
      return { m, u: assertMessage(m, { maxTokens: body.max_tokens ?? MAX_TOKENS, model: 'claude-lineage-test' }, where) };
    };

    it('messages.create, messages.stream and countTokens agree on the prompt and the reply', async () => {
      const body = { system: SYSTEM, messages: [{ role: 'user', content: 'Where is the cache key computed?' }],
        metadata: { user_id: `create-${arch}` } };
      const { m, u } = await create(body, 'create');
      const count = await client.messages.countTokens({ model: 'any-model', system: SYSTEM, messages: body.messages });
      assert.equal(u.prompt, count.input_tokens, 'input + cache creation + cache read == countTokens');
      assert.equal(u.cache_read_input_tokens, 0, 'first request: nothing to restore');
      assert.equal(u.cache_creation_input_tokens, 0, 'no cache_control mark: nothing created by request');
      assert.ok(u.output_tokens >= 1, 'no output');

      // The same body streamed (temperature 0: the same tokens), through client.beta (?beta=true).
      const stream = client.beta.messages.stream({ model: 'claude-lineage-test', max_tokens: MAX_TOKENS, temperature: 0, ...body });
      const types = [];
      for await (const ev of stream) types.push(ev.type);
      const fin = await stream.finalMessage();
      const su = assertMessage(fin, { maxTokens: MAX_TOKENS }, 'stream');
      assert.equal(types[0], 'message_start');
      assert.equal(types.at(-1), 'message_stop');
      assert.equal(types.at(-2), 'message_delta');
      assert.equal(types.filter((t) => t === 'content_block_start').length, fin.content.length, `events ${types}`);
      assert.equal(types.filter((t) => t === 'content_block_stop').length, fin.content.length, `events ${types}`);
      assert.deepEqual(fin.content.map((b) => ({ ...b, signature: undefined })), m.content.map((b) => ({ ...b, signature: undefined })),
        'streamed and non-streamed replies differ');
      assert.equal(fin.stop_reason, m.stop_reason);
      assert.equal(su.prompt, u.prompt);
      assert.equal(su.output_tokens, u.output_tokens);
      assert.ok(su.cache_read_input_tokens >= u.prompt - GEN, `resend restores: ${su.cache_read_input_tokens} of ${u.prompt}`);
    });

    it('a second turn restores at least the first prompt\'s history boundary', async () => {
      const system = `${SYSTEM} ${words(30, 72)}`;
      const session = { user_id: `turns-${arch}` };
      const turn1 = [{ role: 'user', content: 'Read src/cache/store.cpp and explain the plan.' }];
      const r1 = await create({ system, tools: TOOLS, messages: turn1, metadata: session }, 'turn 1');
      // The reply echoed as returned (thinking blocks with their signatures), then a new question.
      const turn2 = [...turn1, { role: 'assistant', content: r1.m.content }, { role: 'user', content: 'And the commit?' }];
      const r2 = await create({ system, tools: TOOLS, messages: turn2, metadata: session }, 'turn 2');
      assert.ok(r2.u.cache_read_input_tokens >= r1.u.prompt - GEN,
        `turn 2 restored ${r2.u.cache_read_input_tokens} < turn 1 history ${r1.u.prompt - GEN}`);
    });

    it('an agent-loop turn (the echoed thinking, tool_use, tool_result) restores the whole first prompt', async () => {
      const system = `${SYSTEM} ${words(30, 73)}`;
      const session = { user_id: `loop-${arch}` };
      const turn1 = [{ role: 'user', content: 'Read src/cache/store.cpp and explain the plan.' }];
      const r1 = await create({ system, tools: TOOLS, messages: turn1, metadata: session }, 'turn 1');
      const thinking = r1.m.content.filter((b) => b.type === 'thinking');
      const loop = [...turn1,
        { role: 'assistant', content: [...thinking, { type: 'tool_use', id: 'toolu_01', name: 'read_file', input: { path: 'src/cache/store.cpp' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: [{ type: 'text', text: words(60, 5) }] }] }];
      const r3 = await create({ system, tools: TOOLS, messages: loop, metadata: session }, 'agent loop');
      assert.ok(r3.u.cache_read_input_tokens >= r1.u.prompt,
        `agent loop restored ${r3.u.cache_read_input_tokens} < turn 1 prompt ${r1.u.prompt}`);
      // An is_error result renders with an "Error: " prefix (a longer prompt, still 200).
      const errLoop = structuredClone(loop);
      errLoop[2].content[0].is_error = true;
      const r4 = await create({ system, tools: TOOLS, messages: errLoop, metadata: session }, 'is_error result');
      assert.ok(r4.u.prompt > r3.u.prompt, `is_error not rendered: ${r4.u.prompt} vs ${r3.u.prompt}`);
    });

    it('thinking blocks come back with a signature; a bad one, an edited one or an image is a 400 in Anthropic shape', async () => {
      const turn1 = [{ role: 'user', content: 'Think about the eviction order.' }];
      const r1 = await create({ messages: turn1, thinking: { type: 'enabled', budget_tokens: 1024 } }, 'thinking');
      const th = r1.m.content.find((b) => b.type === 'thinking');
      assert.ok(th, `no thinking block (the template opens <think>): ${JSON.stringify(r1.m.content)}`);
      const next = (block) => [...turn1, { role: 'assistant', content: [block, { type: 'text', text: 'ok' }] },
        { role: 'user', content: 'Go on.' }];
      await create({ messages: next(th), thinking: { type: 'enabled', budget_tokens: 1024 } }, 'echo');
      // display "omitted": the text comes back empty and the signature carries it.
      const om = await create({ messages: turn1, thinking: { type: 'adaptive', display: 'omitted' } }, 'omitted');
      const omBlock = om.m.content.find((b) => b.type === 'thinking');
      assert.equal(omBlock?.thinking, '', 'display omitted returns an empty thinking text');
      await create({ messages: next(omBlock) }, 'echo omitted');

      const refused = async (messages, param) => {
        await assert.rejects(client.messages.create({ model: 'm', max_tokens: 4, messages }), (e) => {
          assert.equal(e.status, 400, `${param}: status ${e.status}`);
          assert.equal(e.error?.type, 'error', `${param}: body ${JSON.stringify(e.error)}`);
          assert.equal(e.error.error.type, 'invalid_request_error');
          assert.match(e.error.error.message, new RegExp(param.replace(/[[\].]/g, '\\$&')));
          return true;
        });
      };
      const sig = th.signature;
      const flipped = sig.slice(0, 8) + (sig[8] === 'A' ? 'B' : 'A') + sig.slice(9);
      await refused(next({ ...th, signature: flipped }), 'messages[1].content[0].signature');
      await refused(next({ ...th, thinking: `${th.thinking} (edited)` }), 'messages[1].content[0].thinking');
      await refused([{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }] }],
        'messages[0].content[0]');
    });

    it('a conversation started on /v1/chat/completions continues on /v1/messages from the cache', async () => {
      const user1 = 'Summarise the disk tier in two sentences.';
      const c1 = await srv.openai.chat.completions.create({ model: 'tiny', max_tokens: MAX_TOKENS, temperature: 0,
        user: `cross-${arch}`, messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: user1 }] });
      const p1 = c1.usage.prompt_tokens;
      const reply = c1.choices[0].message.content ?? '';
      const chatTurn2 = [{ role: 'system', content: SYSTEM }, { role: 'user', content: user1 },
        { role: 'assistant', content: reply }, { role: 'user', content: 'Now the RAM tier.' }];
      const want = await chatPromptTokens(srv, { messages: chatTurn2 });
      const { u } = await create({ system: SYSTEM, metadata: { user_id: `cross-${arch}` },
        messages: [{ role: 'user', content: user1 }, { role: 'assistant', content: reply }, { role: 'user', content: 'Now the RAM tier.' }] },
      'messages turn 2');
      assert.equal(u.prompt, want.length, 'the messages body renders the same tokens as its chat-completions twin');
      assert.ok(u.cache_read_input_tokens >= p1 - GEN,
        `messages turn 2 restored ${u.cache_read_input_tokens} < chat turn 1 history ${p1 - GEN}`);
    });

    it('a cache_control mark is a restore point for a new session sharing the conversation up to it', async () => {
      const shared = `${words(220, 91)}\n\n`;
      const session = (n, question) => ({
        metadata: { user_id: `bp-${arch}-${n}` },
        messages: [{ role: 'user', content: [{ type: 'text', text: shared, cache_control: { type: 'ephemeral' } },
          { type: 'text', text: question }] }],
      });
      const r1 = await create(session(1, 'First: what does the trie store?'), 'session 1');
      const mark = srv.log().match(/cache_control breakpoints at (\d+) tokens/g)?.at(-1);
      assert.ok(mark, 'the server logged no breakpoint');
      const bp = Number(mark.match(/(\d+) tokens/)[1]);
      // The mark's length is where the two sessions' prompts part (they differ from the first
      // token after the marked block), computed independently with /apply-template + /tokenize.
      const asChat = (q) => ({ messages: [{ role: 'user', content: [{ type: 'text', text: shared }, { type: 'text', text: q }] }] });
      const t1 = await chatPromptTokens(srv, asChat('First: what does the trie store?'));
      const t2 = await chatPromptTokens(srv, asChat('Second: why two tiers?'));
      const common = commonPrefix(t1, t2);
      assert.ok(bp <= common && bp >= common - ANCHOR_SLACK, `breakpoint ${bp} vs the shared prefix ${common} (BPE seam)`);
      assert.equal(r1.u.prompt, t1.length);
      assert.equal(r1.u.cache_creation_input_tokens, bp, 'cache_creation_input_tokens: prefilled up to the mark');
      assert.equal(r1.u.input_tokens, r1.u.prompt - bp);
      const r2 = await create(session(2, 'Second: why two tiers?'), 'session 2');
      assert.ok(r2.u.cache_read_input_tokens >= bp - ANCHOR_SLACK,
        `session 2 restored ${r2.u.cache_read_input_tokens} < breakpoint ${bp} - ${ANCHOR_SLACK}`);
      assert.equal(r2.u.cache_creation_input_tokens, Math.max(0, bp - r2.u.cache_read_input_tokens));
    });

    it('stop_sequences, top_k and tool_choice are accepted; a stop sequence is reported as such', async () => {
      const r = await create({ messages: [{ role: 'user', content: 'Count.' }], tools: TOOLS,
        tool_choice: { type: 'auto' }, top_k: 5, top_p: 0.9, stop_sequences: ['\n'], max_tokens: 24 }, 'sampling');
      if (r.m.stop_reason === 'stop_sequence') assert.equal(r.m.stop_sequence, '\n');
      else assert.equal(r.m.stop_sequence, null);
      const none = await create({ messages: [{ role: 'user', content: 'Count.' }], tools: TOOLS, tool_choice: { type: 'none' } }, 'none');
      assert.ok(!none.m.content.some((b) => b.type === 'tool_use'), 'tool_choice none returned tool_use');
    });
  });
}

describe('messages: auth, errors, base URL, model aliases', { timeout: 120_000 }, () => {
  let srv;
  before(async () => {
    srv = await startServer({ model: modelPath(ARCHS[0]), name: 'messages-auth',
      args: ['--api-key', 'sk-secret', '--model-alias', 'claude-lineage-test', '--model-alias', 'claude-haiku-4-5,claude-opus-4-1',
        '--max-body-bytes', '4096'] });
  });
  after(async () => { await srv?.stopGracefully(); });

  it('x-api-key and Bearer both authenticate; a wrong key is a 401 authentication_error', async () => {
    const body = { model: 'claude-haiku-4-5', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] };
    const m = await anthropic(srv, { apiKey: 'sk-secret' }).messages.create(body);
    assert.equal(m.type, 'message');
    const bearer = await srv.post('/v1/messages', body, { authorization: 'Bearer sk-secret' });
    assert.equal(bearer.status, 200, bearer.text);
    await assert.rejects(anthropic(srv, { apiKey: 'sk-wrong' }).messages.create(body), (e) => {
      assert.equal(e.status, 401);
      assert.equal(e.error?.error?.type, 'authentication_error', JSON.stringify(e.error));
      return true;
    });
  });

  it('unknown /v1/messages paths are 404 not_found_error; a missing max_tokens is a 400 naming it; 413 request_too_large', async () => {
    const r = await srv.post('/v1/messages/batches', {}, { 'x-api-key': 'sk-secret' });
    assert.equal(r.status, 404);
    assert.deepEqual(Object.keys(r.json), ['type', 'error']);
    assert.equal(r.json.error.type, 'not_found_error');
    const b = await srv.post('/v1/messages', { model: 'x', messages: [{ role: 'user', content: 'hi' }] }, { 'x-api-key': 'sk-secret' });
    assert.equal(b.status, 400);
    assert.equal(b.json.type, 'error');
    assert.equal(b.json.error.type, 'invalid_request_error');
    assert.match(b.json.error.message, /'max_tokens' is required/);
    const big = await srv.post('/v1/messages', { model: 'x', max_tokens: 2, messages: [{ role: 'user', content: 'x'.repeat(8192) }] },
      { 'x-api-key': 'sk-secret' });
    assert.equal(big.status, 413);
    assert.equal(big.json?.error?.type, 'request_too_large', big.text);
  });

  it('HEAD / and GET / answer 200 without a key; GET /v1/models lists the aliases', async () => {
    assert.equal((await fetch(`${srv.url}/`, { method: 'HEAD' })).status, 200);
    assert.equal((await srv.get('/')).status, 200);
    const r = await fetch(`${srv.url}/v1/models`, { headers: { 'x-api-key': 'sk-secret' } });
    const ids = (await r.json()).data.map((d) => d.id);
    assert.deepEqual(ids.slice(1), ['claude-lineage-test', 'claude-haiku-4-5', 'claude-opus-4-1']);
    assert.match(ids[0], /tiny/);
  });
});
