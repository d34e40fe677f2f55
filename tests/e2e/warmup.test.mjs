// The background warm-up of the next turn (--cache-warmup; docs/prompt-cache.md "Warm-up"), for
// the tiny hybrid (qwen35) and tiny dense (qwen3) models:
//  - after a reply (streamed or not), once the warm-up ran (GET /v1/cache/stats warmup.runs
//    goes up), the next user turn prefills exactly its own tokens: prompt_tokens -
//    cached_tokens == the tokens of the new user message + the generation prompt, derived with
//    /apply-template + /tokenize (where its prompt leaves the same conversation with another
//    last message); it counts a warm-up hit; turn by turn over a conversation;
//  - with --cache-warmup=false the same turns prefill more (the reply again, as the template
//    re-renders it), and no warm-up runs;
//  - greedy outputs through warmed entries equal a cold run (cache_prompt: false);
//  - a request that arrives while a warm-up runs is served at once (the warm-up is preempted,
//    what it did is parked), counts a warm-up hit and answers as a cold run (dense: up to a near
//    tie); whether the request still finds the warm-up running is timing's choice, so the
//    outcome is asserted on every try and the scenario is tried again (3 tries, a fresh server
//    each) until one caught it;
//  - a regenerate (the same prompt again) after the warm-up ran restores all but one token,
//    three times in a row, answers as a cold run, and the next turn still prefills only its own;
//  - Messages and Responses replies are warmed the same way;
//  - /metrics carries the warm-up counters; GET /v1/cache/stats lists every skip cause;
//  - the decision trace (--cache-trace) names a warm-up's lines "warm-up N", as the INFO log;
//  - a reply served while another request runs is not rendered until the engine is idle, and a
//    newer reply of its conversation meanwhile drops it unrendered (`superseded`): the short
//    turns start once the long request is admitted (its lookup counted) and the drop is waited
//    for, not slept for;
//  - a warm-up job renders and tokenizes the conversation twice (two placeholder texts), counted
//    in GET /v1/cache/stats warmup.renders/tokenizations and its "prepared:" trace line, apart
//    from the requests: with warm-ups on, each user turn after the first renders and tokenizes
//    once.
//
//   cd tests/e2e && node --test warmup.test.mjs
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { echo, greedyChat, nearTieDiff, streamChat, usageOf, words } from './lib/chat.mjs';
import { resendCached } from './lib/agents.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const MAX_TOKENS = 12;
const SYSTEM = `You are a careful software engineer working in a C++ repository.\n\n${words(120, 71)}`;
const USERS = [words(30, 72), words(9, 73), words(41, 74), words(5, 75)];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const chat = greedyChat(MAX_TOKENS);

/** Tokens of the conversation rendered as a prompt (with the generation prompt). */
async function promptTokens(srv, messages) {
  const t = await srv.post('/apply-template', { messages });
  assert.equal(t.status, 200, `/apply-template: ${t.text}`);
  const k = await srv.post('/tokenize', { content: t.json.prompt, add_special: false, parse_special: true });
  assert.equal(k.status, 200, `/tokenize: ${k.text}`);
  return k.json.tokens;
}

/** The tokens of the last (user) message's own text onwards: where the prompt of `messages`
 *  leaves the same conversation whose last message says something else. */
async function ownTokens(srv, messages) {
  const p = await promptTokens(srv, messages);
  const other = structuredClone(messages);
  other.at(-1).content = `Zulu ${other.at(-1).content}`;
  const q = await promptTokens(srv, other);
  let i = 0;
  while (i < p.length && i < q.length && p[i] === q[i]) i++;
  return { total: p.length, own: p.length - i };
}

/** Polls until a warm-up job queued after `before` ran or was skipped as not needed. */
async function waitWarmupDone(srv, before, where) {
  const done = (w) => w.runs + w.skipped.not_needed;
  const t0 = Date.now();
  for (;;) {
    const s = await srv.cacheStats();
    if (done(s.warmup) > done(before.warmup)) return s;
    if (Date.now() - t0 > 30_000) assert.fail(`${where}: no warm-up within 30 s: ${JSON.stringify(s.warmup)}\n${srv.logTail(20)}`);
    await sleep(5);
  }
}

/** Polls GET /v1/cache/stats until `pred(stats)` holds (30 s at most; then fails naming `what`);
 *  returns the stats. */
async function waitStats(srv, pred, what) {
  const t0 = Date.now();
  for (;;) {
    const s = await srv.cacheStats();
    if (pred(s)) return s;
    if (Date.now() - t0 > 30_000) assert.fail(`${what}: not within 30 s: ${JSON.stringify(s.warmup)}\n${srv.logTail(20)}`);
    await sleep(5);
  }
}

function replyOf(res) {
  const m = res.choices[0].message;
  return { content: m.content ?? null, reasoning_content: m.reasoning_content ?? null, tool_calls: m.tool_calls ?? null,
    finish_reason: res.choices[0].finish_reason, completion_tokens: res.usage.completion_tokens };
}

/** Runs the conversation's turns; returns per turn {prefilled, own, total, reply, stats}. Turn 1
 *  streams; with `warm`, waits for the warm-up after each reply. */
async function conversation(srv, { warm, session }) {
  const messages = [{ role: 'system', content: SYSTEM }];
  const turns = [];
  for (let k = 0; k < USERS.length; k++) {
    messages.push({ role: 'user', content: USERS[k] });
    const { own, total } = await ownTokens(srv, messages);
    const before = await srv.cacheStats();
    const extra = { prompt_cache_key: session };
    let res;
    if (k === 0) {
      const s = await streamChat(srv.openai, { model: 'tiny', messages, max_tokens: MAX_TOKENS, temperature: 0,
        stream_options: { include_usage: true }, ...extra });
      res = { choices: [{ message: { role: 'assistant', content: s.content, reasoning_content: s.reasoning || undefined },
        finish_reason: s.finish }], usage: s.usage };
    } else {
      res = await chat(srv, messages, extra, `turn ${k + 1}`);
    }
    const u = usageOf(res);
    assert.equal(u.prompt, total, `turn ${k + 1}: prompt_tokens vs /apply-template + /tokenize`);
    const stats = warm ? await srv.waitWarmup(before.warmup.runs, `after turn ${k + 1}`) : await srv.cacheStats();
    turns.push({ prefilled: u.prompt - u.cached, own, total, reply: replyOf(res), before, stats });
    messages.push(echo(res.choices[0].message));
  }
  return { turns, messages };
}

for (const arch of ARCHS) {
  describe(`warm-up of the next turn [${arch}]`, { timeout: 300_000 }, () => {
    let srv;
    let cold;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `warmup-${arch}`,
        args: ['--parallel', '2', '--ctx-size', '4096', '--cache-warmup', '--metrics', '--cache-trace'] });
      cold = await startServer({ model: modelPath(arch), name: `warmup-off-${arch}`,
        args: ['--parallel', '2', '--ctx-size', '4096', '--cache-warmup=false'] });
    });
    after(async () => {
      await srv?.stopGracefully();
      await cold?.stopGracefully();
    });

    it('after a warmed reply the next user turn prefills exactly its own message', async () => {
      const { turns, messages } = await conversation(srv, { warm: true, session: 'warm-1' });
      for (let k = 1; k < turns.length; k++) {
        const t = turns[k];
        assert.equal(t.prefilled, t.own,
          `turn ${k + 1}: prefilled ${t.prefilled} of ${t.total} tokens; its own message + generation prompt are ` +
          `${t.own}\n${srv.logTail(30)}`);
        assert.equal(t.stats.warmup.hits, t.before.warmup.hits + 1, `turn ${k + 1}: a warm-up hit`);
      }
      const w = turns.at(-1).stats.warmup;
      assert.equal(w.runs, USERS.length, `one warm-up per reply: ${JSON.stringify(w)}`);
      assert.equal(w.preempted, 0);
      assert.equal(w.wasted, 0);
      assert.ok(w.tokens > 0);
      // The decision trace names a warm-up's lines as the INFO log does ("warm-up N"), never
      // "request N".
      const log = srv.log();
      const warmIds = [...log.matchAll(/\bwarm-up (\d+): stored \|/g)].map((m) => m[1]);
      assert.equal(warmIds.length, USERS.length, `one INFO line per warm-up:\n${srv.logTail(30)}`);
      for (const id of warmIds) {
        assert.match(log, new RegExp(`cache-trace: warm-up ${id}: lookup of \\d+ tokens`), `warm-up ${id}'s lookup in the trace`);
        assert.match(log, new RegExp(`cache-trace: warm-up ${id}: stored entry \\d+`), `warm-up ${id}'s entry in the trace`);
        assert.doesNotMatch(log, new RegExp(`cache-trace: request ${id}:`), `warm-up ${id} traced as a request`);
      }
      assert.match(log, /cache-trace: request \d+: lookup of \d+ tokens/, 'requests are still traced as requests');
      // What preparing them took: 2 renders and 2 tokenizations per warm-up job; the first turn
      // renders the new system prompt's anchor as well (3 and 2), each later user turn once.
      assert.deepEqual([w.renders, w.tokenizations], [2 * w.queued, 2 * w.queued], JSON.stringify(w));
      for (const id of warmIds) {
        assert.match(log, new RegExp(`cache-trace: warm-up ${id}: prepared: renders 2, tokenizations 2\n`), `warm-up ${id}`);
      }
      const prepared = [...log.matchAll(/cache-trace: request \d+: prepared: renders (\d+), tokenizations (\d+)\n/g)]
        .map((m) => `${m[1]}/${m[2]}`);
      assert.deepEqual(prepared, ['3/2', ...USERS.slice(1).map(() => '1/1')], 'renders/tokenizations per user turn');

      // Without warm-ups, the same turns re-prefill the reply as re-rendered.
      const off = await conversation(cold, { warm: false, session: 'warm-1' });
      for (let k = 1; k < off.turns.length; k++) {
        assert.equal(off.turns[k].own, turns[k].own, 'the same conversation');
        assert.ok(off.turns[k].prefilled > turns[k].prefilled,
          `turn ${k + 1} without warm-up: prefilled ${off.turns[k].prefilled}, with ${turns[k].prefilled}`);
      }
      assert.equal(off.turns.at(-1).stats.warmup.runs, 0);
      assert.equal(off.turns.at(-1).stats.warmup.queued, 0);

      // Greedy outputs through the warmed entries equal cold runs. Dense: a hit's prompt was
      // prefilled in other passes than the cold run's, so up to a near tie (docs/prompt-cache.md
      // "What a hit guarantees"; lib/chat.mjs nearTieDiff); turn 1 is a miss either way.
      const dense = (await srv.get('/v1/models')).json.data[0].meta.family === 'dense';
      for (let k = 0; k < turns.length; k++) {
        const upto = messages.slice(0, 2 + 2 * k);
        const c = await chat(cold, upto, { cache_prompt: false, logprobs: true, top_logprobs: 3 }, `cold turn ${k + 1}`);
        for (const [what, reply] of [['warmed', turns[k].reply], ['warm-up off', off.turns[k].reply]]) {
          if (dense && k > 0) {
            assert.equal(reply.finish_reason, replyOf(c).finish_reason, `turn ${k + 1}: ${what} vs cold`);
            assert.equal(nearTieDiff(`${reply.reasoning_content ?? ''}${reply.content ?? ''}`, c), '',
              `turn ${k + 1}: ${what} vs cold`);
          } else {
            assert.deepEqual(reply, replyOf(c), `turn ${k + 1}: ${what} vs cold`);
          }
        }
      }
    });

    it('a regenerate right after a warmed reply restores what a resend restores, every time', async () => {
      // The warm-up keeps the reply's entry as the resend twin (docs/prompt-cache.md "Warm-up of
      // the next turn"): the same prompt sent again after the warm-up ran restores what it does
      // without a warm-up (|P| - 1; a hybrid, the history boundary, into which the resend guard
      // merged); then the next user turn still prefills only its own message.
      const session = `regen-${arch}`;
      const messages = [{ role: 'system', content: SYSTEM }, { role: 'user', content: words(25, 80) }];
      let before = await srv.cacheStats();
      const first = await chat(srv, messages, { prompt_cache_key: session }, 'first reply');
      await srv.waitWarmup(before.warmup.runs, 'after the first reply');
      const cold = await chat(srv, messages, { cache_prompt: false }, 'cold');
      for (let r = 0; r < 3; r++) {
        before = await srv.cacheStats();
        const again = await chat(srv, messages, { prompt_cache_key: session }, `regenerate ${r + 1}`);
        const u = usageOf(again);
        assert.equal(u.cached, await resendCached(srv, { messages }, u.prompt),
          `regenerate ${r + 1}: restored ${u.cached} of ${u.prompt} tokens\n${srv.logTail(30)}`);
        assert.deepEqual(replyOf(again), replyOf(cold), `regenerate ${r + 1} vs cold`);
        // Its warm-up: the same greedy reply, so the warmed entry already holds the prefix.
        const s = await waitWarmupDone(srv, before, `after regenerate ${r + 1}`);
        assert.equal(s.warmup.skipped.not_needed, before.warmup.skipped.not_needed + 1, JSON.stringify(s.warmup));
      }

      assert.deepEqual(replyOf(first), replyOf(cold), 'first reply vs cold');
      // The next turn continues the warmed entry: only its own tokens are prefilled.
      messages.push(echo(first.choices[0].message), { role: 'user', content: words(7, 81) });
      const { own } = await ownTokens(srv, messages);
      before = await srv.cacheStats();
      const next = usageOf(await chat(srv, messages, { prompt_cache_key: session }, 'next turn'));
      assert.equal(next.prompt - next.cached, own, `next turn: prefilled ${next.prompt - next.cached}, own ${own}`);
      // ... and retires the last regenerate's entry, the turn's resend twin.
      const afterNext = await srv.cacheStats();
      assert.equal(afterNext.evictions.superseded, before.evictions.superseded + 1,
        `the resend twin retired: ${JSON.stringify(afterNext.evictions)}\n${srv.logTail(20)}`);
      assert.match(srv.log(), /stays as the resend twin/, 'the trace names the twin');
    });

    it('a request arriving during a warm-up is served at once and answers as a cold run', async () => {
      // A long reply as content (thinking off: a past turn's thinking is not re-rendered), which
      // the warm-up re-prefills in 16-token chunks (--batch-size 16): ~100 steps (160-440 ms on
      // 2 EPYC cores), long enough to be caught running; the next turn is sent as soon as it is
      // seen running (GET /v1/cache/stats warmup.active) and came 10-30 ms into it there. Whether
      // the request still finds it running is timing's choice all the same: a faster machine can
      // end the warm-up first. So the outcome is asserted on every try (the next turn restores
      // what the warm-up stored or parked: a warm-up hit; it answers as a cold run), and the
      // scenario runs again, on a fresh server, until a try caught the warm-up running and it was
      // preempted (3 tries; what a preempted warm-up parks, and that the next request continues
      // it, is unit-tested in tests/scheduler/test_warmup.cpp). Cold runs on the same server
      // (same chunking).
      const tries = [];
      for (let t = 0; t < 3 && !tries.some((x) => x.preempted); t++) {
        const small = await startServer({ model: modelPath(arch), name: `warmup-chunks-${arch}`,
          args: ['--parallel', '2', '--ctx-size', '4096', '--cache-warmup', '--batch-size', '16'] });
        try {
          tries.push(await nextTurnDuringWarmup(small));
        } finally {
          await small.stopGracefully();
        }
      }
      assert.ok(tries.some((x) => x.preempted),
        `in ${tries.length} tries the warm-up ended before the next turn came: ${JSON.stringify(tries)}`);
    });

    /** On a fresh server: a long reply, then its next turn once the reply's warm-up is seen
     *  running; asserts the outcome; returns {preempted, seen, warmup} (whether the request
     *  preempted the warm-up, whether the warm-up was seen running, the warm-up stats after). */
    async function nextTurnDuringWarmup(srv) {
      const kw = { chat_template_kwargs: { enable_thinking: false }, prompt_cache_key: 'long' };
      const messages = [{ role: 'system', content: SYSTEM }, { role: 'user', content: words(20, 90) }];
      const before = await srv.cacheStats();
      const first = await chat(srv, messages, { max_tokens: 1500, ...kw }, 'long reply');
      assert.ok(first.choices[0].message.content.length > 1000, 'a long content reply');
      messages.push(echo(first.choices[0].message), { role: 'user', content: words(12, 91) });
      let s = await srv.cacheStats();
      const t0 = Date.now();
      while (s.warmup.active !== 1 && s.warmup.runs === before.warmup.runs && Date.now() - t0 < 5_000) {
        s = await srv.cacheStats();
      }
      const seen = s.warmup.active === 1;
      const next = await chat(srv, messages, kw, 'next turn during the warm-up');
      const after = await srv.cacheStats();
      const preempted = after.warmup.preempted - before.warmup.preempted;
      // Preempted, or ended before the request came (stored): one or the other.
      assert.ok(preempted === 1 || (preempted === 0 && after.warmup.runs === before.warmup.runs + 1),
        `the warm-up neither yielded to the request nor ended before it: ${JSON.stringify(after.warmup)}\n${srv.logTail(20)}`);
      assert.equal(after.warmup.hits, before.warmup.hits + 1,
        `the request continues what the warm-up parked or stored: ${JSON.stringify(after.warmup)}\n${srv.logTail(20)}`);
      // Dense: the request's prompt was prefilled in other passes than the cold run's (where the
      // warm-up was preempted decides them), so up to a near tie, as in the first test.
      const dense = (await srv.cacheStats()).family === 'dense';
      const c = await chat(srv, messages, { cache_prompt: false, ...kw, logprobs: true, top_logprobs: 3 }, 'cold');
      if (dense) {
        assert.equal(replyOf(next).finish_reason, replyOf(c).finish_reason, 'a request during a warm-up vs cold');
        const r = replyOf(next);
        assert.equal(nearTieDiff(`${r.reasoning_content ?? ''}${r.content ?? ''}`, c), '', 'a request during a warm-up vs cold');
      } else {
        assert.deepEqual(replyOf(next), replyOf(c), 'a request during a warm-up vs cold');
      }
      return { preempted: preempted === 1, seen, warmup: after.warmup };
    }

    it('Messages and Responses replies are warmed too', async () => {
      const sys = `You are a careful engineer. ${words(150, 80)}`;
      // Messages: the second turn's uncached input is exactly its own message + generation prompt.
      const tokens = async (body) => {
        const t = await srv.post('/apply-template?api=messages', body);
        assert.equal(t.status, 200, t.text);
        const k = await srv.post('/tokenize', { content: t.json.prompt, add_special: false, parse_special: true });
        return k.json.tokens;
      };
      const base = { model: 'tiny', system: sys, temperature: 0, thinking: { type: 'disabled' } };
      let msgs = [{ role: 'user', content: words(30, 81) }];
      let before = await srv.cacheStats();
      const m1 = await srv.post('/v1/messages', { ...base, messages: msgs, max_tokens: 40 });
      assert.equal(m1.status, 200, m1.text);
      await srv.waitWarmup(before.warmup.runs, 'after a Messages reply');
      msgs = [...msgs, { role: 'assistant', content: m1.json.content }, { role: 'user', content: words(10, 82) }];
      const p2 = await tokens({ ...base, messages: msgs, max_tokens: 8 });
      const other = structuredClone(msgs);
      other.at(-1).content = `Zulu ${other.at(-1).content}`;
      const q2 = await tokens({ ...base, messages: other, max_tokens: 8 });
      let i = 0;
      while (i < p2.length && p2[i] === q2[i]) i++;
      before = await srv.cacheStats();
      const m2 = await srv.post('/v1/messages', { ...base, messages: msgs, max_tokens: 8 });
      assert.equal(m2.status, 200, m2.text);
      assert.equal(m2.json.usage.input_tokens + m2.json.usage.cache_read_input_tokens, p2.length, 'prompt tokens');
      assert.equal(m2.json.usage.input_tokens, p2.length - i, `Messages turn 2: ${JSON.stringify(m2.json.usage)}`);
      assert.equal((await srv.cacheStats()).warmup.hits, before.warmup.hits + 1);
      // Messages turn 2's own warm-up runs next: wait until it is done (30 s at most, then fail),
      // or the wait below could count it as the Responses reply's (and turn 2 of Responses would
      // race its warm-up).
      await waitWarmupDone(srv, before, 'after Messages turn 2');

      // Responses, chained by previous_response_id: the second turn restores past the first
      // prompt (the reply as re-rendered), where without a warm-up it restores the turn boundary.
      before = await srv.cacheStats();
      const r1 = await srv.post('/v1/responses', { model: 'tiny', instructions: sys, input: [{ role: 'user',
        content: words(30, 83) }], max_output_tokens: 40, temperature: 0 });
      assert.equal(r1.status, 200, r1.text);
      await srv.waitWarmup(before.warmup.runs, 'after a Responses reply');
      before = await srv.cacheStats();
      const r2 = await srv.post('/v1/responses', { model: 'tiny', instructions: sys, previous_response_id: r1.json.id,
        input: [{ role: 'user', content: words(10, 84) }], max_output_tokens: 8, temperature: 0 });
      assert.equal(r2.status, 200, r2.text);
      assert.ok(r2.json.usage.input_tokens_details.cached_tokens > r1.json.usage.input_tokens,
        `Responses turn 2 restores past turn 1's prompt: ${JSON.stringify(r2.json.usage)} after ` +
        JSON.stringify(r1.json.usage));
      assert.equal((await srv.cacheStats()).warmup.hits, before.warmup.hits + 1);
    });

    it('/metrics carries the warm-up counters', async () => {
      // Read while no warm-up runs (the last reply's may still be on its way): stats, metrics and
      // stats again, the same.
      let r;
      let s;
      for (let i = 0; i < 100; i++) {
        const s1 = await srv.cacheStats();
        r = await srv.get('/metrics');
        s = await srv.cacheStats();
        if (JSON.stringify(s1.warmup) === JSON.stringify(s.warmup) && s.warmup.active === 0) break;
        await sleep(20);
      }
      assert.equal(r.status, 200);
      const value = (name) => {
        const m = r.text.match(new RegExp(`^${name} (\\S+)$`, 'm'));
        assert.ok(m, `${name} missing in /metrics`);
        return Number(m[1]);
      };
      assert.equal(value('lineage_prompt_cache_warmups_total{outcome="stored"}'), s.warmup.runs);
      assert.equal(value('lineage_prompt_cache_warmup_tokens_total'), s.warmup.tokens);
      assert.equal(value('lineage_prompt_cache_warmup_hits_total'), s.warmup.hits);
      // Every skip cause is listed, 0 included, with the /metrics count.
      assert.deepEqual(Object.keys(s.warmup.skipped), ['not_needed', 'replaced', 'queue_full', 'preempted_too_often', 'superseded', 'reset']);
      for (const [cause, n] of Object.entries(s.warmup.skipped)) {
        assert.equal(value(`lineage_prompt_cache_warmup_skipped_total{cause="${cause}"}`), n, cause);
      }
      assert.ok(s.warmup.runs >= USERS.length);
    });
  });
}

// A warm-up runs only on an idle engine, so its render waits for one too: while another request
// is served, a reply's job stays unrendered (warmup.queued does not move), and a newer reply of
// the same conversation drops it (`superseded`); once the engine is idle the newest one renders
// and runs.
for (const arch of ARCHS) {
  describe(`warm-up renders wait for an idle engine [${arch}]`, { timeout: 300_000 }, () => {
    let srv;
    before(async () => {
      // --batch-size 16: the background request's ~5k-token prefill takes ~300 steps, long
      // enough for two short turns of another conversation to finish beside it.
      srv = await startServer({ model: modelPath(arch), name: `warmup-busy-${arch}`,
        args: ['--parallel', '2', '--ctx-size', '8192', '--batch-size', '16', '--cache-warmup'] });
    });
    after(async () => {
      await srv?.stopGracefully();
    });

    it('a reply served beside another request is not rendered until the engine is idle', async () => {
      const s0 = await srv.cacheStats();
      let bgDone = false;
      const bg = chat(srv, [{ role: 'system', content: SYSTEM }, { role: 'user', content: words(4000, 80) }],
        { prompt_cache_key: 'background', max_tokens: 4 }, 'background').then((r) => { bgDone = true; return r; });
      // The background request is prefilling once its lookup is counted (the plan, at admission):
      // waited for, not slept for (a fixed sleep is too short on a loaded machine, where the short
      // turn would then come first to an idle engine, and spends the prefill's time on a fast one).
      await waitStats(srv, (s) => s.lookups > s0.lookups, 'the background request admitted');
      const messages = [{ role: 'system', content: `Short. ${words(20, 81)}` }, { role: 'user', content: words(8, 82) }];
      const t1 = await chat(srv, messages, { prompt_cache_key: 'short' }, 'short turn 1');
      messages.push(echo(t1.choices[0].message), { role: 'user', content: words(8, 83) });
      await chat(srv, messages, { prompt_cache_key: 'short' }, 'short turn 2');
      // The renderer has seen both jobs once it dropped the first (it looks again every 10 ms, and
      // when a job comes): wait for that, while the background request still runs.
      let s1 = await srv.cacheStats();
      for (const t0 = Date.now(); s1.warmup.skipped.superseded === s0.warmup.skipped.superseded && !bgDone &&
        Date.now() - t0 < 10_000;) {
        await sleep(5);
        s1 = await srv.cacheStats();
      }
      assert.ok(!bgDone, `the background request ended before the two short turns did: nothing was tested: ${JSON.stringify(s1.warmup)}`);
      assert.equal(s1.warmup.queued, s0.warmup.queued, `rendered while serving: ${JSON.stringify(s1.warmup)}`);
      assert.equal(s1.warmup.skipped.superseded, s0.warmup.skipped.superseded + 1, JSON.stringify(s1.warmup));
      await bg;
      const s2 = await srv.waitWarmup(s1.warmup.runs, 'after the background request');
      assert.ok(s2.warmup.queued > s1.warmup.queued, JSON.stringify(s2.warmup));
      assert.ok(s2.warmup.runs > s1.warmup.runs);
    });
  });
}

// POST /v1/cache/reset is a barrier (docs/prompt-cache.md "GET /v1/cache/stats"): nothing that
// arrived before it is stored after it. A warm-up of a reply that came before the reset (queued,
// rendering or running when it ran) is dropped; a request in flight is served but stores nothing.
// Which of those paths a trial takes is timing's choice (the warm-up may also have run before
// the reset, which then deletes it): every trial asserts the outcome, a resend that restores 0,
// and the paths taken are reported; the positive case (no reset) restores the conversation.
for (const arch of ARCHS) {
  describe(`a cache reset is a barrier [${arch}]`, { timeout: 300_000 }, () => {
    let srv;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `reset-barrier-${arch}`,
        args: ['--parallel', '2', '--ctx-size', '4096', '--cache-warmup', '--cache-trace'] });
    });
    after(async () => { await srv?.stopGracefully(); });

    const reset = async () => {
      const r = await srv.post('/v1/cache/reset', {});
      assert.equal(r.status, 200, r.text);
    };
    /** Warm-up jobs that ended, by any way. */
    const ended = (w) => w.runs + w.skipped.not_needed + w.skipped.reset + w.skipped.superseded + w.skipped.replaced +
      w.skipped.queue_full;
    const settle = (n, what) => waitStats(srv, (s) => ended(s.warmup) >= n, what);
    const conv = (seed) => [{ role: 'system', content: `${SYSTEM} ${words(20, 900 + seed)}` },
      { role: 'user', content: words(12, 950 + seed) }];
    const next = (m, r) => [...m, echo(r.choices[0].message), { role: 'user', content: 'And then?' }];

    it('a warm-up queued before the reset stores nothing after it: the next turn restores 0 (20 trials)', async (t) => {
      let base = ended((await srv.cacheStats()).warmup);
      // The positive case: with no reset, the warmed next turn restores the conversation.
      const m0 = conv(0);
      const r0 = await chat(srv, m0, { prompt_cache_key: 'barrier-0' }, 'positive case');
      await settle(++base, 'the positive case\'s warm-up');
      const h0 = usageOf(await chat(srv, next(m0, r0), { prompt_cache_key: 'barrier-0' }, 'positive case, next turn'));
      assert.ok(h0.cached > h0.prompt / 2, `no reset: the next turn restores the conversation: ${JSON.stringify(h0)}`);
      await settle(++base, 'the positive case\'s next warm-up');
      const d0 = (await srv.cacheStats()).warmup.skipped.reset;
      for (let i = 1; i <= 20; i++) {
        const m = conv(i);
        const r = await chat(srv, m, { prompt_cache_key: `barrier-${i}` }, `trial ${i}`);
        await reset();
        await settle(++base, `trial ${i}: the warm-up ran or was dropped`);
        const u = usageOf(await chat(srv, next(m, r), { prompt_cache_key: `barrier-${i}` }, `trial ${i}, next turn`));
        assert.equal(u.cached, 0, `trial ${i}: the next turn after the reset restores nothing: ${JSON.stringify(u)}`);
        await settle(++base, `trial ${i}: the next turn's warm-up`);
      }
      const s = await srv.cacheStats();
      t.diagnostic(`warm-ups dropped by the reset: ${s.warmup.skipped.reset - d0} of 20 (the others ran before it)`);
    });

    it('a request in flight during the reset stores nothing: its resend restores 0, the one after hits', async (t) => {
      const long = [{ role: 'system', content: SYSTEM }, { role: 'user', content: words(2500, 960) }];
      const s0 = await srv.cacheStats();
      let base = ended(s0.warmup);
      const mark = srv.log().length;
      const pending = chat(srv, long, { prompt_cache_key: 'inflight', max_tokens: 4 }, 'the long request');
      await waitStats(srv, (s) => s.lookups > s0.lookups, 'the long request admitted');
      await reset();
      await pending;
      await settle(++base, 'the long request\'s warm-up');
      const again = usageOf(await chat(srv, long, { prompt_cache_key: 'inflight', max_tokens: 4 }, 'resend'));
      assert.equal(again.cached, 0, `the resend after the reset restores nothing: ${JSON.stringify(again)}`);
      await settle(++base, 'the resend\'s warm-up');
      const third = usageOf(await chat(srv, long, { prompt_cache_key: 'inflight', max_tokens: 4 }, 'second resend'));
      assert.ok(third.cached >= third.prompt - 8, `the positive case: the second resend restores the first's: ${JSON.stringify(third)}`);
      const barrier = srv.log().slice(mark).includes('this request stores nothing');
      t.diagnostic(barrier ? 'the reset came during the long request' : 'the long request ended before the reset reached the engine');
    });
  });
}
