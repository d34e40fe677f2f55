// The restore points beyond the base capture set, with the server's defaults, over real HTTP
// with the openai client, on every tiny model (three hybrid families and the dense one):
//  - the anchor ladder: a new session whose system text parts from a known one in its last lines
//    (another working folder and date, as agents write them) restores the last rung before the
//    parting point (>= the shared prefix minus 64 tokens) on hybrids; a server with the ladder
//    off restores nothing there (the positive case: this fails with the ladder off); dense
//    models restore the whole shared prefix and capture no rungs;
//  - divergence slack: the divergence checkpoint goes back to the start of its line, so a third
//    prompt that parts a few tokens earlier in that line still restores it;
//  - the last user message: its start (computed here from the server's own /apply-template +
//    /tokenize) is the server's last_user hint, and message rungs inside it
//    (--cache-message-rungs 8; off by default), so an edit of that message restores up to the
//    last rung before the edit, or, for an edit before the first, the restore point a few
//    tokens before the message (no checkpoint at its start that close: --cache-last-user-min-gain);
//  - the reply kept (--cache-keep-reply): an agent-loop step that sends the reply back verbatim
//    restores the prompt and the reply, where with --cache-keep-reply false the entry ends at
//    the prompt end.
// Every restored reply equals the reply of a server that never cached anything.
// The base capture set (these additions off) is pinned by scenarios.test.mjs.
//
//   cd tests/e2e && node --test scenarios-ladder.test.mjs
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { chatTokens, lcp } from './lib/agents.mjs';
import { echo, words } from './lib/chat.mjs';
import { BASE_ARGS, BASE_CAPTURE_ARGS, GEN, SCENARIO_ARCHS, Scenario, detail, expectSame, sys, user } from './lib/scenario.mjs';
import { modelPath, startServer } from './lib/server.mjs';

/** A system text of 10 lines of prose, then the per-session lines agents end theirs with. */
function systemText(folder, date) {
  const lines = [];
  for (let i = 0; i < 10; i++) lines.push(words(22, 100 + i));
  return `You are a coding agent working in a repository.\n\n${lines.join('\n')}\n` +
    `Working directory: /home/dev/src/${folder}\nToday's date: ${date}`;
}

/** A user message of `n` lines of 40 words; line `changed` (when given) gets new words from
 *  word `at` on. */
function longMessage(n, changed = -1, at = 0, salt = 0) {
  const lines = [];
  for (let i = 0; i < n; i++) {
    let w = words(40, 300 + i).split(' ');
    if (i === changed) w = [...w.slice(0, at), ...words(40 - at, 900 + salt).split(' ')];
    lines.push(w.join(' '));
  }
  return lines.join('\n');
}

const tokensOf = (srv, messages, addGenerationPrompt = true) => chatTokens(srv, { messages }, addGenerationPrompt);

/** An agent-loop step after `turn1`: the reply echoed back, a tool call, and its result. */
const CALL = { id: 'call_1', type: 'function', function: { name: 'run_shell', arguments: '{"command":"make test"}' } };
const stepOf = (turn1, reply) => [...turn1, echo(reply), { role: 'assistant', content: '', tool_calls: [CALL] },
  { role: 'tool', tool_call_id: 'call_1', content: words(40, 8) }];

for (const arch of SCENARIO_ARCHS) {
  describe(`scenarios, restore points beyond the base set [${arch}]`, { timeout: 300_000 }, () => {
    let srv;
    let off;
    let ref;
    let sc;
    let scOff;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `ladder-${arch}`, args: [...BASE_ARGS, '--cache-message-rungs', '8'] });
      off = await startServer({ model: modelPath(arch), name: `ladder-off-${arch}`, args: [...BASE_ARGS, ...BASE_CAPTURE_ARGS] });
      ref = await startServer({ model: modelPath(arch), name: `ladder-ref-${arch}`, args: [...BASE_ARGS, '--no-cache-prompt'] });
      sc = new Scenario(srv, arch, ref);
      scOff = new Scenario(off, arch);
    });
    after(async () => {
      await srv?.stopGracefully();
      await off?.stopGracefully();
      await ref?.stopGracefully();
    });

    it('a new session in another folder restores the rung before where its system text parts', async () => {
      await sc.reset();
      await scOff.reset();
      const first = [sys(systemText('alpha', '2026-06-01')), user(words(20, 1))];
      const moved = [sys(systemText('beta-project', '2026-06-04')), user(words(20, 2))];
      const r1 = await sc.ask('session 1, folder alpha', first);
      assert.equal(r1.u.cached, 0);
      // The near rungs are made off the request's path (--cache-ladder-defer, the default):
      // request 1, alone on the engine, splits at none of them; a ladder job makes them on the idle
      // engine afterwards, before session 2 comes (an agent's user starts the next session seconds
      // later at the soonest).
      const onPath = r1.trace.captures.filter((c) => c.kind === 'ladder').map((c) => c.n);
      const shared = lcp(await tokensOf(srv, first), await tokensOf(srv, moved));
      const settled = await srv.waitLadder('session 1');
      const r2 = await sc.ask('session 2, folder beta-project', moved);
      const pinned = (await srv.anchorRungs()).find((a) => a.tokens === r1.trace.anchors[0]);
      const rungs = sc.hybrid ? pinned?.rungs ?? [] : onPath;
      if (sc.hybrid) {
        assert.ok(settled.ladder_deferred_rungs.deferred >= 2 && settled.ladder_deferred_rungs.made >= 2,
          `rungs deferred and made: ${JSON.stringify(settled.ladder_deferred_rungs)}${detail(r1)}`);
        assert.deepEqual(onPath, [], `a ladder rung split request 1's prefill${detail(r1)}`);
      }
      assert.ok(shared > 0.5 * r2.u.prompt && shared < r2.u.prompt - 16, `the folders share ${shared} of ${r2.u.prompt}`);
      if (sc.hybrid) {
        // Rungs inside the system region, ascending, kept with the anchor pinned by request 1.
        assert.ok(rungs.length >= 2, `no ladder rungs captured${detail(r1)}`);
        assert.deepEqual(r1.trace.anchors.length, 1, `one anchor pinned${detail(r1)}`);
        for (const n of rungs) assert.ok(n < r1.trace.anchors[0], `rung ${n} past the anchor${detail(r1)}`);
        const want = Math.max(...rungs.filter((n) => n <= shared));
        assert.equal(r2.u.cached, want, `want the last rung at or before ${shared}${detail(r2)}`);
        assert.equal(r2.hit, 'ladder', detail(r2));
        assert.ok(r2.u.cached >= shared - 64, `restored ${r2.u.cached} < shared ${shared} - 64${detail(r2)}`);
        // With the ladder off, the same two sessions restore nothing there.
        await scOff.ask('session 1 (ladder off)', first);
        const o2 = await scOff.ask('session 2 (ladder off)', moved);
        assert.ok(o2.u.cached < shared - 64, `ladder off restored ${o2.u.cached} of ${shared}${detail(o2)}`);
      } else {
        assert.deepEqual(rungs, [], 'a dense model captures no rungs');
        assert.equal(r2.u.cached, shared, detail(r2));
      }
      expectSame(r2, await sc.cold('session 2', moved), 'a restored rung');
      const s = await sc.stats();
      if (sc.hybrid) assert.equal(s.hits.ladder, 1, JSON.stringify(s.hits));
    });

    it('a divergence checkpoint goes back to its line start, so an earlier parting still restores it', async (t) => {
      if (!sc.hybrid) return t.skip('dense: any prefix restores');
      await sc.reset();
      // Line 7 of a 12-line first message changes from word 20 on, then from word 17 on.
      const p1 = [user(longMessage(12))];
      const p2 = [user(longMessage(12, 7, 20, 1))];
      const p3 = [user(longMessage(12, 7, 17, 2))];
      await sc.ask('original', p1);
      const t1 = await tokensOf(srv, p1);
      const t2 = await tokensOf(srv, p2);
      const t3 = await tokensOf(srv, p3);
      const parts12 = lcp(t1, t2);
      const r2 = await sc.ask('variant parting at word 20 of line 7', p2);
      const div = r2.trace.captures.filter((c) => c.kind === 'divergence').map((c) => c.n);
      assert.equal(div.length, 1, `one divergence checkpoint${detail(r2)}`);
      assert.ok(div[0] < parts12 && div[0] >= parts12 - 64, `divergence at ${div[0]}, parting at ${parts12}${detail(r2)}`);
      const parts3 = Math.max(lcp(t3, t1), lcp(t3, t2));
      assert.ok(parts3 < parts12 && parts3 >= div[0], `p3 parts at ${parts3}: not between ${div[0]} and ${parts12}`);
      const r3 = await sc.ask('variant parting at word 17 of line 7', p3);
      assert.equal(r3.u.cached, div[0], detail(r3));
      assert.equal(r3.hit, 'divergence', detail(r3));
      expectSame(r3, await sc.cold('variant 3', p3), 'a restored divergence checkpoint');
    });

    it('an edit of the last user message restores up to the message rung before the edit', async (t) => {
      if (!sc.hybrid) return t.skip('dense: any prefix restores');
      for (const s of [sc, scOff]) await s.reset();
      const system = sys(systemText('alpha', '2026-06-01'));
      const turn1 = [system, user(words(30, 3))];
      const r1 = await sc.ask('turn 1', turn1);
      const before = [...turn1, echo(r1.res.choices[0].message)];
      const turn2 = [...before, user(words(60, 4))];
      const r2 = await sc.ask('turn 2', turn2);
      // Where the last user message's content starts: the conversation with a placeholder user
      // message in its place (so the earlier turns render as in the prompt), against the prompt.
      const start = lcp(await tokensOf(srv, [...before, user('\u0001')], false), await tokensOf(srv, turn2));
      assert.equal(r2.trace.lastUser, start, `the server's last_user hint${detail(r2)}`);
      // Turn 2 restores turn 1's entry (its prompt and reply), which ends a few tokens (the
      // end-of-turn markup) before the message: fewer than --cache-last-user-min-gain (32), so no
      // split there (docs/architecture.md "What a split costs"); that restore point stays a
      // checkpoint, and an edit of the message restores it.
      const restored = r2.u.cached;
      assert.ok(restored > 0 && start - restored > 0 && start - restored < 32,
        `premise: turn 2 restored ${restored}, a few tokens before the message at ${start}${detail(r2)}`);
      assert.ok(!r2.trace.captures.some((c) => c.n === start), `a checkpoint at ${start}, ${start - restored} tokens after the restore point${detail(r2)}`);
      // Message rungs every 16 tokens (--cache-message-step) after the message start.
      const rungs = r2.trace.captures.filter((c) => c.kind === 'message').map((c) => c.n);
      assert.ok(rungs.length >= 3, `message rungs ${rungs}${detail(r2)}`);
      rungs.forEach((n, i) => assert.equal(n, start + 16 * (i + 1), `rung ${i}${detail(r2)}`));
      // Edited from its 31st word on: restored up to the last rung before the parting point.
      const edited = [...before, user(`${words(60, 4).split(' ').slice(0, 30).join(' ')} ${words(30, 5)}`)];
      const parts = lcp(await tokensOf(srv, edited), await tokensOf(srv, turn2));
      const want = Math.max(...rungs.filter((n) => n <= parts));
      assert.ok(want > start, `no rung between the message start ${start} and the parting point ${parts}`);
      const r3 = await sc.ask('turn 2 edited', edited);
      assert.equal(r3.u.cached, want, detail(r3));
      assert.equal(r3.hit, 'message', detail(r3));
      expectSame(r3, await sc.cold('turn 2 edited', edited), 'a restored message rung');
      // Edited from its 2nd word: before the first rung, so the restore point turn 2 came from,
      // a few tokens before the message start (a turn checkpoint).
      const early = [...before, user(`${words(60, 4).split(' ')[0]} ${words(50, 6)}`)];
      const r4 = await sc.ask('turn 2 edited at its start', early);
      assert.equal(r4.u.cached, restored, detail(r4));
      assert.equal(r4.hit, 'turn', detail(r4));
      expectSame(r4, await sc.cold('turn 2 edited at its start', early), 'a restored checkpoint before the message');
      // Without these restore points the edit lands on an earlier one.
      const o1 = await scOff.ask('turn 1 (off)', turn1);
      await scOff.ask('turn 2 (off)', [...turn1, echo(o1.res.choices[0].message), user(words(60, 4))]);
      const o3 = await scOff.ask('turn 2 edited (off)', [...turn1, echo(o1.res.choices[0].message), edited.at(-1)]);
      assert.ok(o3.u.cached < want, `without the message rungs the edit restored ${o3.u.cached} >= ${want}${detail(o3)}`);
    });

    it("a user turn's resend guard merges into its history boundary; a tool step keeps it", async (t) => {
      if (!sc.hybrid) return t.skip('dense: any prefix restores, no guard is taken');
      for (const s of [sc, scOff]) await s.reset();
      const turn1 = [sys(systemText('alpha', '2026-06-01')), user(words(30, 700))];
      const r1 = await sc.ask('user turn', turn1, { max_tokens: 3 });
      const P = r1.u.prompt;
      // The history boundary GEN tokens back is within --cache-guard-merge (16) of prompt - 1:
      // no guard, so no pass cut one token before the end.
      assert.deepEqual(r1.trace.captures.filter((c) => c.kind === 'guard'), [], detail(r1));
      assert.ok(r1.trace.captures.some((c) => c.kind === 'turn' && c.n === P - GEN), detail(r1));
      // A verbatim resend restores the boundary and computes the generation prompt in one pass,
      // as the first request's last pass did: the same reply as a never-cached server.
      const r2 = await sc.ask('verbatim resend', turn1, { max_tokens: 3 });
      assert.equal(r2.u.cached, P - GEN, detail(r2));
      assert.equal(r2.hit, 'turn', detail(r2));
      assert.equal(r2.res.timings.prefill_passes, 1, detail(r2));
      expectSame(r2, await sc.cold('verbatim resend', turn1, { max_tokens: 3 }), 'a resend restored at the history boundary');
      // A prompt that ends with a tool result has no history boundary: the guard at prompt - 1.
      const step = stepOf(turn1, r2.res.choices[0].message);
      const r3 = await sc.ask('agent step', step, { max_tokens: 3 });
      assert.ok(r3.trace.captures.some((c) => c.kind === 'guard' && c.n === r3.u.prompt - 1), detail(r3));
      const r4 = await sc.ask('agent step resent', step, { max_tokens: 3 });
      assert.equal(r4.u.cached, r3.u.prompt - 1, detail(r4));
      assert.equal(r4.hit, 'guard', detail(r4));
      // Off (--cache-guard-merge 0, in BASE_CAPTURE_ARGS): the guard beside the boundary, and a
      // resend restores all but one token.
      const o1 = await scOff.ask('user turn (merge off)', turn1, { max_tokens: 3 });
      assert.ok(o1.trace.captures.some((c) => c.kind === 'guard' && c.n === P - 1), detail(o1));
      const o2 = await scOff.ask('verbatim resend (merge off)', turn1, { max_tokens: 3 });
      assert.equal(o2.u.cached, P - 1, detail(o2));
      assert.equal(o2.hit, 'guard', detail(o2));
    });

    it('an agent-loop step that sends the reply back verbatim restores the reply too', async (t) => {
      if (!sc.hybrid) return t.skip('dense: the entry always holds everything decoded');
      for (const s of [sc, scOff]) await s.reset();
      // The random-weight test models often sample a token that the reply's text does not
      // tokenize back to (a real model rarely does): the entry then parts from the next prompt
      // inside the reply, which restores the prompt end. Conversations until one reply comes
      // back token for token (its logprobs pieces, each one token, are the next prompt's tokens).
      let verbatim = null;
      for (let seed = 0; seed < 24 && !verbatim; seed++) {
        const turn1 = [sys(systemText('alpha', '2026-06-01')), user(words(30, 200 + seed))];
        const r1 = await sc.ask(`turn 1 (conversation ${seed})`, turn1, { max_tokens: 3, logprobs: true });
        assert.equal(r1.res.choices[0].finish_reason, 'length', detail(r1));
        const P = r1.u.prompt;
        const decoded = r1.u.completion - 1;  // the last token was sampled, not decoded
        const step = stepOf(turn1, r1.res.choices[0].message);
        const S = await tokensOf(srv, step);
        assert.equal(lcp(await tokensOf(srv, turn1), S), P, 'the step re-renders the reply right after the prompt');
        let same = true;
        for (const [i, c] of r1.res.choices[0].logprobs.content.slice(0, decoded).entries()) {
          const k = await srv.post('/tokenize', { content: c.token, add_special: false, parse_special: false });
          same = same && k.json.tokens.length === 1 && k.json.tokens[0] === S[P + i];
        }
        const r2 = await sc.ask(`agent step (conversation ${seed})`, step, { max_tokens: 3 });
        if (same) {
          // The entry held the prompt and the reply: restored whole, only the tool call and result prefilled.
          assert.equal(r2.u.cached, P + decoded, detail(r2));
          assert.equal(r2.hit, 'full', detail(r2));
          verbatim = { step, r2 };
        } else {
          // Parted inside the reply: turn 1's prompt end, kept as a turn checkpoint where its
          // resend guard merged into the history boundary (--cache-guard-merge).
          assert.equal(r2.u.cached, P, detail(r2));
          assert.equal(r2.hit, 'turn', detail(r2));
        }
      }
      assert.ok(verbatim, 'no reply came back token for token in 24 conversations');
      expectSame(verbatim.r2, await sc.cold('agent step', verbatim.step, { max_tokens: 3 }), 'a restored reply');
      const s = await sc.stats();
      assert.ok(s.largest_lineage.checkpoints >= 2 && s.largest_lineage.checkpoints <= 4, JSON.stringify(s.largest_lineage));
      // With the entry ending at the prompt end (--cache-keep-reply false) the reply is prefilled
      // again.
      const turn1 = [sys(systemText('alpha', '2026-06-01')), user(words(30, 200))];
      const o1 = await scOff.ask('turn 1 (base capture set)', turn1, { max_tokens: 3 });
      const o2 = await scOff.ask('agent step (base capture set)', stepOf(turn1, o1.res.choices[0].message), { max_tokens: 3 });
      assert.equal(o2.u.cached, o1.u.prompt, detail(o2));
    });

    it('an agent-loop step that parts inside a long reply restores the reply checkpoint before the parting point', async (t) => {
      if (!sc.hybrid) return t.skip('dense: any prefix of the entry restores');
      for (const s of [sc, scOff]) await s.reset();
      // Replies of 40 tokens: reply checkpoints every 16 decoded tokens (--cache-reply-step), at
      // P + 16 and P + 32, kept when the reply's text gives its tokens back that far. The step
      // sends the text back and restores the longest point its prompt reaches: the entry's end
      // (the reply came back token for token), a kept reply checkpoint, or turn 1's prompt end
      // (kept as a turn checkpoint where its resend guard merged, --cache-guard-merge).
      let hits = 0;
      for (let seed = 0; seed < 12; seed++) {
        const turn1 = [sys(systemText('alpha', '2026-06-01')), user(words(30, 400 + seed))];
        const r1 = await sc.ask(`turn 1 (conversation ${seed})`, turn1, { max_tokens: 40 });
        if (r1.res.choices[0].finish_reason !== 'length') continue;  // ended early: too few decoded tokens
        const P = r1.u.prompt;
        const decoded = r1.u.completion - 1;
        assert.ok(Array.isArray(r1.trace.reply), `no reply checkpoint decision traced${detail(r1)}`);
        for (const n of r1.trace.reply) assert.ok([P + 16, P + 32].includes(n), `reply checkpoint at ${n}, P ${P}${detail(r1)}`);
        const step = stepOf(turn1, r1.res.choices[0].message);
        const r2 = await sc.ask(`agent step (conversation ${seed})`, step, { max_tokens: 3 });
        const want = { [P]: 'turn', [P + decoded]: 'full' };
        for (const n of r1.trace.reply) want[n] = 'reply';
        assert.equal(r2.hit, want[r2.u.cached], `restored ${r2.u.cached}: want one of ${JSON.stringify(want)}${detail(r2)}`);
        if (r2.hit === 'reply' && hits++ === 0) {
          expectSame(r2, await sc.cold('agent step', step, { max_tokens: 3 }), 'a restored reply checkpoint');
        }
      }
      assert.ok(hits > 0, 'no agent step restored a reply checkpoint in 12 conversations');
      const s = await sc.stats();
      assert.ok(s.largest_lineage.reply_checkpoints <= 4, JSON.stringify(s.largest_lineage));
      // Off (--cache-reply-step 0 with the base settings, BASE_CAPTURE_ARGS): never a reply checkpoint.
      const turn1 = [sys(systemText('alpha', '2026-06-01')), user(words(30, 400))];
      const o1 = await scOff.ask('turn 1 (off)', turn1, { max_tokens: 40 });
      assert.equal(o1.trace.reply, null, detail(o1));
    });
  });
}
