// Prompt-cache reuse over HTTP, for the tiny hybrid (qwen35) and tiny dense (qwen3) models:
//  - turn 1 of a conversation on a fresh server has cached_tokens 0; turn k+1 (turn k's
//    messages + the reply exactly as returned + a new user message) has
//    cached_tokens >= turn k's prompt_tokens - GEN_PROMPT_MAX (see below why not all of it;
//    tools.test.mjs asserts all of it for an agent-loop turn, where the template allows it);
//  - a verbatim resend has cached_tokens == prompt_tokens - 1 (a restore leaves one token to
//    prefill; a hybrid, its history boundary, into which the prompt - 1 resend guard merged:
//    lib/agents.mjs resendCached), and its greedy output equals the first one;
//  - greedy (temperature 0) output through the cache equals the output with
//    cache_prompt:false, turn by turn, for a conversation of several turns;
//  - cache_prompt:false (at the root or inside extra_body) reports cached_tokens 0 even on
//    a resend, and leaves the cache as it was (entries, bytes, hits unchanged).
//
//   cd tests/e2e && node --test cache.test.mjs
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { echo, greedyChat, usageOf, words } from './lib/chat.mjs';
import { resendCached } from './lib/agents.mjs';
import { replyOf as scenarioReplyOf } from './lib/scenario.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const MAX_TOKENS = 12;
/** Why a user follow-up cannot reuse ALL of the previous prompt: the Qwen3.5 template (every
 *  tiny model carries it) ends a prompt with the generation prompt "<|im_start|>assistant\n
 *  <think>\n", but renders an earlier assistant turn as "<|im_start|>assistant\n" + content,
 *  without the <think> block, once a newer user message follows it. So turn k+1 shares turn
 *  k's prompt only up to inside the generation prompt (measured on the dense model: the
 *  common prefix is prompt_tokens - 3). A dense model restores exactly there; a hybrid needs a
 *  checkpoint at or before it, at best at the start of the generation prompt (the history
 *  boundary). This bounds the generation prompt's length in tokens. */
const GEN_PROMPT_MAX = 8;
const SERVER_ARGS = ['--parallel', '2', '--ctx-size', '4096'];

/** One greedy request; checks the shape and returns the response. */
const chat = greedyChat(MAX_TOKENS);

/** What two greedy replies must agree on (the prompt's token count too). */
const replyOf = (res) => ({ ...scenarioReplyOf(res), prompt_tokens: res.usage.prompt_tokens });

/** The parts of /v1/cache/stats that describe what the cache holds and what it served. */
function heldState(s) {
  return { entries: s.entries, anchors: s.anchors, checkpoints: s.checkpoints, bytes: s.bytes, hits: s.hits,
    tokens_reused: s.tokens_reused };
}

const SYSTEM = (seed) => `You are a careful software engineer working in a C++ repository.\n\n${words(160, seed)}`;
const USERS = [words(30, 101), words(8, 102), words(55, 103), words(4, 104), words(25, 105)];

for (const arch of ARCHS) {
  describe(`cache reuse [${arch}]`, { timeout: 300_000 }, () => {
    let srv;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `cache-${arch}`, args: SERVER_ARGS });
    });
    after(async () => { await srv?.stopGracefully(); });

    // Must stay the first test of this suite: turn 1 is the server's first request.
    it('turn 1 is cold; each next turn reuses the previous prompt up to its generation prompt', async () => {
      const messages = [{ role: 'system', content: SYSTEM(1) }];
      let prev = null;
      for (let k = 0; k < 4; k++) {
        messages.push({ role: 'user', content: USERS[k] });
        const req = structuredClone(messages);
        const res = await chat(srv, messages, {}, `turn ${k + 1}`);
        const u = usageOf(res);
        if (k === 0) {
          assert.equal(u.cached, 0, 'turn 1 on a fresh server');
        } else {
          assert.ok(u.cached >= prev.prompt - GEN_PROMPT_MAX,
            `turn ${k + 1}: cached_tokens ${u.cached} < turn ${k}'s prompt_tokens ${prev.prompt} - ${GEN_PROMPT_MAX} ` +
            `(prompt_tokens ${u.prompt}); request: ${JSON.stringify(req)}; response: ${JSON.stringify(res)}`);
        }
        messages.push(echo(res.choices[0].message));
        prev = u;
      }
    });

    it('a verbatim resend restores all but the last tokens, with the same greedy output', async () => {
      const messages = [{ role: 'system', content: SYSTEM(2) }, { role: 'user', content: USERS[4] }];
      const first = await chat(srv, messages, { max_tokens: 1 }, 'first');
      // max_tokens 1 first, then the same prompt with a normal budget.
      const a = await chat(srv, messages, {}, 'resend 1');
      const b = await chat(srv, messages, {}, 'resend 2');
      const cold = await chat(srv, messages, { cache_prompt: false }, 'cold');
      const p = first.usage.prompt_tokens;
      const req = JSON.stringify({ messages, max_tokens: MAX_TOKENS, temperature: 0 });
      assert.equal(usageOf(a).prompt, p);
      const want = await resendCached(srv, { messages }, p);
      assert.equal(usageOf(a).cached, want,
        `resend after max_tokens 1: cached ${usageOf(a).cached} of ${p}; request ${req}; response ${JSON.stringify(a)}`);
      assert.equal(usageOf(b).cached, want,
        `second resend: cached ${usageOf(b).cached} of ${p}; request ${req}; response ${JSON.stringify(b)}`);
      assert.equal(usageOf(cold).cached, 0);
      assert.deepEqual(replyOf(a), replyOf(cold), 'resend through the cache vs cold');
      assert.deepEqual(replyOf(b), replyOf(cold), 'second resend vs cold');
    });

    it('greedy output through the cache equals cache_prompt:false, turn by turn', async () => {
      const messages = [{ role: 'system', content: SYSTEM(3) }];
      let hits = 0;
      for (let k = 0; k < 5; k++) {
        messages.push({ role: 'user', content: USERS[(k + 2) % USERS.length] + ` (step ${k + 1})` });
        const warm = await chat(srv, messages, {}, `cached turn ${k + 1}`);
        const cold = await chat(srv, messages, { cache_prompt: false }, `cold turn ${k + 1}`);
        assert.equal(usageOf(cold).cached, 0, `cache_prompt:false turn ${k + 1}`);
        assert.deepEqual(replyOf(warm), replyOf(cold),
          `turn ${k + 1} (cached_tokens ${usageOf(warm).cached}): cached and cold replies differ; ` +
          `request: ${JSON.stringify(messages)}`);
        if (usageOf(warm).cached > 0) hits++;
        messages.push(echo(warm.choices[0].message));
      }
      // So that this cannot pass with the cache off: turns 2..5 were served from the cache.
      assert.ok(hits >= 4, `only ${hits} of 5 turns had cached tokens`);
    });
  });

  describe(`cache_prompt:false [${arch}]`, { timeout: 180_000 }, () => {
    let srv;
    before(async () => {
      // No write-behind while the suite compares what the cache holds: on a loaded machine an entry
      // idle for --cache-disk-max-unwritten-s (10 s) was written to disk between two snapshots, and
      // the RAM release after it would move its bytes too.
      srv = await startServer({ model: modelPath(arch), name: `nocache-${arch}`,
        args: [...SERVER_ARGS, '--cache-disk-idle-s', '3600', '--cache-disk-max-unwritten-s', '0'] });
    });
    after(async () => { await srv?.stopGracefully(); });

    // Order matters: the suite starts on a fresh server and builds on what came before.
    const P = [{ role: 'system', content: SYSTEM(4) }, { role: 'user', content: USERS[0] }];

    it('reports cached_tokens 0 on a resend and stores nothing', async () => {
      const before0 = await srv.cacheStats();
      for (let i = 0; i < 2; i++) {
        const r = await chat(srv, P, { cache_prompt: false }, `no-cache ${i + 1}`);
        assert.equal(usageOf(r).cached, 0, `cache_prompt:false request ${i + 1}`);
      }
      const after0 = await srv.cacheStats();
      assert.deepEqual(heldState(after0), heldState(before0), 'cache_prompt:false changed what the cache holds');
      assert.equal(after0.entries, 0);
      // Nothing was stored, so the first cached request is cold too.
      const r = await chat(srv, P, {}, 'first with cache');
      assert.equal(usageOf(r).cached, 0, 'cache_prompt:false requests must not have created entries');
      assert.ok((await srv.cacheStats()).entries >= 1, 'a request with the cache on stores an entry');
    });

    it('does not read a cached prompt, at the root or inside extra_body', async () => {
      const s0 = await srv.cacheStats();
      const root = await chat(srv, P, { cache_prompt: false }, 'root cache_prompt:false');
      const nested = await chat(srv, P, { extra_body: { cache_prompt: false } }, 'extra_body.cache_prompt:false');
      assert.equal(usageOf(root).cached, 0, 'root cache_prompt:false with P cached');
      assert.equal(usageOf(nested).cached, 0, 'extra_body.cache_prompt:false with P cached');
      assert.deepEqual(heldState(await srv.cacheStats()), heldState(s0), 'cache_prompt:false changed the cache');
      // And the cache still serves P.
      const warm = await chat(srv, P, {}, 'cached again');
      assert.equal(usageOf(warm).cached, await resendCached(srv, { messages: P }, usageOf(warm).prompt),
        `a resend of P: request ${JSON.stringify({ messages: P, max_tokens: MAX_TOKENS, temperature: 0 })}; ` +
        `response ${JSON.stringify(warm)}`);
      assert.deepEqual(replyOf(warm), replyOf(root), 'cached vs cache_prompt:false reply');
    });
  });
}
