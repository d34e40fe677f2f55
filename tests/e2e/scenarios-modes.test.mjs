// The verbatim resend (all but one token restored) with --batch-size 16, exact mode
// (--lineage=false), the guard at prompt - 16 (--cache-resend-checkpoint=false) and the resend
// guard by rollback (--cache-guard-rollback), over real HTTP, for each tiny model (qwen35,
// kimi-linear, granite-hybrid: hybrids; qwen3: dense), with exact cached_tokens, restore kinds,
// captured checkpoints and stats; see scenarios.test.mjs and lib/scenario.mjs for the rules relied
// on.
//
//   cd tests/e2e && LINEAGE_MODELS_DIR=$PWD/../../build/models node --test --test-concurrency=1 scenarios-modes.test.mjs
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { echo, words } from './lib/chat.mjs';
import {
  ROLLBACK, SCENARIO_ARCHS, GEN, RERENDER_SHARED, GUARD_DISTANCE, SERVER_ARGS, TOOLS, SYSTEM, sys, user,
  Scenario, detail, expectHit, expectCaptures, expectSame, expectTally, ownCaptures,
  resendAndFollowUp,
} from './lib/scenario.mjs';
import { modelPath, startServer } from './lib/server.mjs';
import { HitTally } from './lib/trace.mjs';

for (const arch of SCENARIO_ARCHS) {
  describe(`scenarios, --batch-size 16 [${arch}]`, { timeout: 120_000 }, () => {
    let srv;
    let sc;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `scenarios-b16-${arch}`, args: [...SERVER_ARGS, '--batch-size', '16'] });
      sc = new Scenario(srv, arch);
    });
    after(async () => { await srv?.stopGracefully(); });

    it('P (max_tokens 1), P, P + reply + user message (batch and ubatch 16)', async () => {
      await resendAndFollowUp(sc, 'resend, batch 16');
    });
  });

  describe(`scenarios, exact mode (--lineage=false) [${arch}]`, { timeout: 120_000 }, () => {
    let srv;
    let sc;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `scenarios-exact-${arch}`, args: [...SERVER_ARGS, '--lineage=false'] });
      sc = new Scenario(srv, arch);
      assert.equal((await sc.stats()).mode, 'exact');
    });
    after(async () => { await srv?.stopGracefully(); });

    it('an agent-loop turn restores the whole previous prompt; resends and user follow-ups get less than in lineage mode; no checkpoints, no anchors', async () => {
      await sc.reset();
      const tally = new HitTally(await sc.stats());
      const t1 = [sys(`You are a coding agent. ${words(200, 101)}`), user('Run the cache unit tests and tell me what fails.')];
      const r1 = await sc.ask('agent turn 1', t1, { tools: TOOLS });
      expectHit(r1, 0, 'miss', tally);
      expectCaptures(r1, [], []);
      const p1 = r1.u.prompt;
      const call = { id: 'call_1', type: 'function', function: { name: 'run_shell', arguments: JSON.stringify({ command: 'ctest -R cache' }) } };
      const t2 = [...t1,
        { role: 'assistant', content: '', reasoning_content: 'I will run the tests first.', tool_calls: [call] },
        { role: 'tool', tool_call_id: 'call_1', content: `exit 1\n${words(60, 102)}` }];
      // Turn 2 appends to turn 1's prompt: the whole turn-1 snapshot (hybrid: the entry itself;
      // dense: the common prefix with turn 1's prompt + generated tokens).
      const r2 = await sc.ask('agent turn 2', t2, { tools: TOOLS });
      expectHit(r2, p1, sc.hybrid ? 'full' : 'prefix', tally);
      // A resend of turn 2: its own snapshot is at its prompt end and leaves no token to
      // prefill, so a hybrid falls back to turn 1's snapshot (lineage mode: p2 - 1).
      const r2b = await sc.ask('agent turn 2 resent', t2, { tools: TOOLS });
      expectHit(r2b, sc.hybrid ? p1 : r2.u.prompt - 1, sc.hybrid ? 'full' : 'prefix', tally);
      expectSame(r2b, r2, 'resend (greedy)');
      // A fresh prompt resent: a hybrid has nothing to restore (lineage mode: p - 1).
      const P = [sys(SYSTEM(103)), user(words(30, 104))];
      const q1 = await sc.ask('P', P);
      expectHit(q1, 0, 'miss', tally);
      const q2 = await sc.ask('P resent', P);
      expectHit(q2, sc.hybrid ? 0 : q1.u.prompt - 1, sc.hybrid ? 'miss' : 'prefix', tally);
      // A user follow-up leaves P inside its generation prompt: nothing for a hybrid (lineage
      // mode: the history boundary), the common prefix for a dense model.
      const q3 = await sc.ask('P + reply + user', [...P, echo(q2.res.choices[0].message), user('Go on.')]);
      expectHit(q3, sc.hybrid ? 0 : q1.u.prompt - GEN + RERENDER_SHARED, sc.hybrid ? 'miss' : 'prefix', tally);
      for (const r of [r2, r2b, q1, q2, q3]) expectCaptures(r, [], []);
      const s = await expectTally(sc, tally, 'exact mode');
      // No absorption: every prompt keeps its snapshot (turn 1, turn 2, P, P + reply + user;
      // the resends superseded their twins).
      assert.deepEqual([s.entries, s.anchors, s.checkpoints], [4, 0, {}], `exact mode holds: ${JSON.stringify(s)}`);
    });
  });

  describe(`scenarios, --cache-guard-rollback [${arch}]`, { timeout: 120_000 }, () => {
    let srv;
    let sc;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `scenarios-rollback-${arch}`,
        args: [...SERVER_ARGS, '--cache-guard-rollback'] });
      sc = new Scenario(srv, arch);
      sc.rollback = ROLLBACK[arch];
    });
    after(async () => { await srv?.stopGracefully(); });

    it('the resend guard at prompt - 1 without a prefill split where llama.cpp rolls back; a resend restores it and answers the same', async () => {
      await sc.reset();
      const tally = new HitTally(await sc.stats());
      const P = [sys(SYSTEM(121)), user(`Question: ${words(40, 122)}`)];
      const r1 = await sc.ask('P', P);
      expectHit(r1, 0, 'miss', tally);
      const p = r1.u.prompt;
      expectCaptures(r1, sc.hybrid ? ownCaptures(r1) : [], r1.trace.anchors);
      assert.deepEqual(r1.trace.rollbacks, ROLLBACK[arch] ? [p - 1] : [], `P: the guard by rollback${detail(r1)}`);
      const r2 = await sc.ask('P again', P);
      expectHit(r2, p - 1, sc.hybrid ? 'guard' : 'prefix', tally);
      expectSame(r2, r1, 'resend (greedy)');
      // A bypass rolls back as the miss did: the same answer.
      expectSame(await sc.uncached('P with cache_prompt:false', P), r1, 'cache_prompt:false vs the miss');
      await expectTally(sc, tally, 'guard by rollback');
    });

    it('P (max_tokens 1) ends before its last token is decoded again; the resend continues its entry', async () => {
      await resendAndFollowUp(sc, 'resend, rollback');
    });
  });

  describe(`scenarios, --cache-resend-checkpoint=false [${arch}]`, { timeout: 120_000 }, () => {
    let srv;
    let sc;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `scenarios-noresend-${arch}`,
        args: [...SERVER_ARGS, '--cache-resend-checkpoint=false'] });
      sc = new Scenario(srv, arch);
    });
    after(async () => { await srv?.stopGracefully(); });

    it('the guard without a resend checkpoint: prompt - 16 only when >= 256 tokens are prefilled; a short turn is not split; a resend restores the turn boundary', async () => {
      await sc.reset();
      const tally = new HitTally(await sc.stats());
      const m1 = [sys(SYSTEM(111)), user(`Question: ${words(20, 112)}`)];
      const r1 = await sc.ask('long prefill', m1);
      expectHit(r1, 0, 'miss', tally);
      const p1 = r1.u.prompt;
      assert.ok(p1 >= 256);
      const A = r1.trace.anchors[0];
      expectCaptures(r1, sc.hybrid ? [{ kind: 'guard', n: p1 - GUARD_DISTANCE }, { kind: 'turn', n: p1 - GEN }] : [], [A]);
      const m2 = [...m1, echo(r1.res.choices[0].message), user('Why?')];
      const r2 = await sc.ask('short turn', m2);
      expectHit(r2, sc.hybrid ? p1 - GEN : p1 - GEN + RERENDER_SHARED, sc.hybrid ? 'turn' : 'prefix', tally);
      // Only the history boundary: no guard split of a short suffix.
      expectCaptures(r2, sc.hybrid ? [{ kind: 'turn', n: r2.u.prompt - GEN }] : []);
      const r3 = await sc.ask('short turn resent', m2);
      expectHit(r3, sc.hybrid ? r2.u.prompt - GEN : r2.u.prompt - 1, sc.hybrid ? 'turn' : 'prefix', tally);
      expectSame(r3, r2, 'resend (greedy)');
      const s = await expectTally(sc, tally, 'no resend checkpoint');
      // One lineage: the guard at p1 - 16 and the turn boundaries of both prompts.
      assert.deepEqual([s.entries, s.anchors, s.checkpoints], [1, 1, sc.hybrid ? { guard: 1, turn: 2 } : {}],
        `what the cache holds: ${JSON.stringify(s)}`);
    });
  });
}
