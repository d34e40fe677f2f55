// Short request sequences of the kinds that break prompt caches (a trailing part that changes, a
// timestamp in the system prompt, an insertion mid-prompt, a verbatim resend, repeated restores,
// a strict prefix of a cached prompt, other template kwargs or tools) in lineage mode (the
// default), over real HTTP with the openai client, for each tiny model: qwen35 (Gated DeltaNet
// hybrid), kimi-linear (KDA hybrid), granite-hybrid (Mamba2 hybrid) and qwen3 (dense). Every
// cached_tokens value the cache rules make exact is asserted exactly, with the restore kind
// (timings.cache_hit), the checkpoints captured (server log at debug level) and the hits by kind
// in GET /v1/cache/stats; every test also has a positive hit, so none passes with the cache off.
// "== cold" compares greedy replies with a second server of the same model started with
// --no-cache-prompt ("a server that never cached anything"); the cache_prompt:false test also
// compares with cache_prompt:false on the server under test, the comparison a user makes. The
// rules and token facts relied on: lib/scenario.mjs.
// The other server modes (--batch-size 16, exact mode, no resend checkpoint): scenarios-modes.test.mjs.
//
//   cd tests/e2e && LINEAGE_MODELS_DIR=$PWD/../../build/models node --test --test-concurrency=1 scenarios*.test.mjs
//   (LINEAGE_E2E_ARCHS=qwen35,qwen3 narrows the models; the default here is all four.)
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { echo, words } from './lib/chat.mjs';
import {
  FAMILY, SCENARIO_ARCHS, GEN, RERENDER_SHARED, ANCHOR_SLACK, SERVER_ARGS, TOOLS, SYSTEM, sys, replyOf,
  user, Scenario, detail, expectHit, expectCaptures, ownCaptures, loopStepCaptures, expectSame, expectTally,
  resendAndFollowUp,
} from './lib/scenario.mjs';
import { modelPath, startServer } from './lib/server.mjs';
import { HitTally } from './lib/trace.mjs';

for (const arch of SCENARIO_ARCHS) {
  describe(`scenarios, lineage mode [${arch}]`, { timeout: 300_000 }, () => {
    let srv;
    let ref;
    let sc;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `scenarios-${arch}`, args: SERVER_ARGS });
      ref = await startServer({ model: modelPath(arch), name: `scenarios-ref-${arch}`, args: [...SERVER_ARGS, '--no-cache-prompt'] });
      sc = new Scenario(srv, arch, ref);
      const s = await sc.stats();
      assert.equal(s.family, FAMILY[arch], `${arch}: the server's model family`);
      assert.equal(s.mode, 'lineage');
    });
    after(async () => {
      await ref?.stopGracefully();
      await srv?.stopGracefully();
    });

    it('chat traffic: anchor for a new session, turn for an edit, guard for a regenerate or resend, a short turn prefills only its new tokens', async () => {
      await sc.reset();
      const tally = new HitTally(await sc.stats());
      const S = SYSTEM(11);
      const U1 = user(`Alpha question: ${words(20, 12)}`);
      const r1 = await sc.ask('turn 1', [sys(S), U1], { prompt_cache_key: 'conv-1' });
      expectHit(r1, 0, 'miss', tally);
      const p1 = r1.u.prompt;
      // Premises (template and tokenizer, as the server computed them).
      assert.deepEqual(r1.trace.hints, { prompt: p1, anchor: r1.trace.hints.anchor, history: p1 - GEN }, 'hints');
      const A = r1.trace.hints.anchor - ANCHOR_SLACK;
      assert.ok(A >= 32 && A < p1 - GEN, `anchor ${A} of ${p1}`);
      expectCaptures(r1, sc.hybrid ? ownCaptures(r1) : [], [A]);
      // The resend guard splits the prefill by default (--cache-guard-rollback: scenarios-modes).
      assert.deepEqual(r1.trace.rollbacks, [], `turn 1: no guard by rollback${detail(r1)}`);
      let s = await sc.stats();
      assert.deepEqual([s.entries, s.anchors, s.checkpoints], [1, 1, sc.hybrid ? { turn: 1, guard: 1 } : {}],
        `after turn 1: ${JSON.stringify(s)}`);

      // A new session (another prompt_cache_key, or none) with the same system prompt: the anchor
      // (hybrid), or the whole shared prefix, which ends with the anchor hint (dense).
      // (The user messages differ from their first token.)
      for (const [where, key, text] of [['new session', { prompt_cache_key: 'conv-2' }, `Zulu question: ${words(15, 13)}`],
        ['no session key', {}, `Yankee question: ${words(15, 14)}`]]) {
        const r = await sc.ask(where, [sys(S), user(text)], key);
        expectHit(r, sc.hybrid ? A : A + ANCHOR_SLACK, sc.hybrid ? 'anchor' : 'prefix', tally);
        expectCaptures(r, sc.hybrid ? ownCaptures(r) : [], []);
      }

      // Turn 2 of the conversation (the reply echoed as returned): the history boundary of turn 1.
      const m2 = [sys(S), U1, echo(r1.res.choices[0].message), user(`Bravo follow-up: ${words(12, 15)}`)];
      const r2 = await sc.ask('turn 2', m2, { prompt_cache_key: 'conv-1' });
      expectHit(r2, sc.hybrid ? p1 - GEN : p1 - GEN + RERENDER_SHARED, sc.hybrid ? 'turn' : 'prefix', tally);
      expectCaptures(r2, sc.hybrid ? ownCaptures(r2) : []);
      const p2 = r2.u.prompt;

      // The last user message edited: back to the turn boundary (hybrid); dense: up to the edit,
      // i.e. the shared re-rendered assistant header, its content, "<|im_end|>\n<|im_start|>user\n".
      const m2e = [...m2.slice(0, -1), user(`Charlie follow-up, edited: ${words(12, 16)}`)];
      const r2e = await sc.ask('edited last user message', m2e, { prompt_cache_key: 'conv-1' });
      if (sc.hybrid) {
        expectHit(r2e, p1 - GEN, 'turn', tally);
      } else if ((r1.res.choices[0].message.content ?? '') === '') {
        expectHit(r2e, p1 - GEN + RERENDER_SHARED + 5, 'prefix', tally);
      } else {
        assert.ok(r2e.u.cached > p1 - GEN + RERENDER_SHARED + 5, `edit${detail(r2e)}`);
        tally.add(r2e.hit);
      }

      // A regenerate (same prompt, sampled) and a verbatim resend: all but one token.
      const regen = await sc.ask('regenerate', m2, { prompt_cache_key: 'conv-1', temperature: 0.9, seed: 7 });
      expectHit(regen, p2 - 1, sc.hybrid ? 'guard' : 'prefix', tally);
      expectCaptures(regen, []);
      const resend = await sc.ask('verbatim resend', m2, { prompt_cache_key: 'conv-1' });
      expectHit(resend, p2 - 1, sc.hybrid ? 'guard' : 'prefix', tally);
      expectSame(resend, r2, 'a verbatim resend (greedy)');

      // A short turn on the conversation: restores turn 2's boundary and prefills only its new
      // tokens; the only capture points are its own history boundary and the resend checkpoint
      // (no guard at prompt - 16, the one --cache-resend-checkpoint=false takes instead, which
      // would split a short suffix once more).
      const m3 = [...m2, echo(resend.res.choices[0].message), user('Why?')];
      const r3 = await sc.ask('short turn', m3, { prompt_cache_key: 'conv-1' });
      expectHit(r3, sc.hybrid ? p2 - GEN : p2 - GEN + RERENDER_SHARED, sc.hybrid ? 'turn' : 'prefix', tally);
      expectCaptures(r3, sc.hybrid ? ownCaptures(r3) : []);
      assert.ok(r3.u.prompt - r3.u.cached < 32, `short turn prefilled ${r3.u.prompt - r3.u.cached} tokens${detail(r3)}`);
      s = await expectTally(sc, tally, 'chat traffic');
      assert.equal(s.anchors, 1, 'one anchor for one system prompt');
    });

    it('agent loop: each tool turn restores the whole previous prompt; a retried tool result lands on the previous turn; thinning keeps 4 checkpoints', async () => {
      await sc.reset();
      const tally = new HitTally(await sc.stats());
      const call = (id, command) => ({ id, type: 'function', function: { name: 'run_shell', arguments: JSON.stringify({ command }) } });
      const t1 = [sys(`You are a coding agent. ${words(200, 121)}`), user('Run the cache unit tests and fix what fails.')];
      const r1 = await sc.ask('agent turn 1', t1, { tools: TOOLS });
      expectHit(r1, 0, 'miss', tally);
      const p1 = r1.u.prompt;
      const t2 = [...t1,
        { role: 'assistant', content: '', reasoning_content: 'I will run the tests first.', tool_calls: [call('call_1', 'ctest -R cache')] },
        { role: 'tool', tool_call_id: 'call_1', content: `exit 1\n${words(40, 122)}` }];
      const r2 = await sc.ask('agent turn 2', t2, { tools: TOOLS });
      // The whole turn-1 prompt: the entry itself (hybrid), or that prefix of its KV (dense).
      expectHit(r2, p1, sc.hybrid ? 'full' : 'prefix', tally);
      expectCaptures(r2, sc.hybrid ? loopStepCaptures(r2) : []);
      const p2 = r2.u.prompt;
      const held = (s) => [s.entries, s.anchors, s.checkpoints];
      // Turn 2 absorbed turn 1: its checkpoints (p1 - 6 turn, p1 - 1 guard) and its final state
      // at p1 (a turn checkpoint) joined turn 2's own guard (p2 - 1): four, nothing thinned.
      // Pinned: the anchor, and on a hybrid the tools anchor (the template renders the tools
      // before the system text).
      const anchors = sc.hybrid ? 2 : 1;
      assert.deepEqual(held(await sc.stats()), [1, anchors, sc.hybrid ? { turn: 2, guard: 2 } : {}], 'after turn 2');
      const t3 = (result) => [...t2,
        { role: 'assistant', content: '', reasoning_content: 'The test output names the failing case.', tool_calls: [call('call_2', 'ctest -R cache --output-on-failure')] },
        { role: 'tool', tool_call_id: 'call_2', content: result }];
      const r3 = await sc.ask('agent turn 3', t3(`exit 1\n${words(40, 123)}`), { tools: TOOLS });
      expectHit(r3, p2, sc.hybrid ? 'full' : 'prefix', tally);
      // Six candidates (+ p2 final as a turn, + p3 - 1 guard); thinning (max 4) drops the old
      // guards first: p1 - 6, p1 and p2 (turns) and p3 - 1 (guard) remain.
      assert.deepEqual(held(await sc.stats()), [1, anchors, sc.hybrid ? { turn: 3, guard: 1 } : {}], 'after turn 3');
      // The same tool call retried with another result: turn 2's final state (hybrid).
      const r3b = await sc.ask('agent turn 3, tool retried', t3(`exit 0\n${words(40, 124)}`), { tools: TOOLS });
      if (sc.hybrid) {
        expectHit(r3b, p2, 'turn', tally);
      } else {
        assert.ok(r3b.u.cached > p2, `retried tool result${detail(r3b)}`);
        tally.add(r3b.hit);
      }
      await expectTally(sc, tally, 'agent loop');
    });

    it('sibling system prompts: a system prompt differing near its end misses and captures the divergence; a third variant restores it', async () => {
      await sc.reset();
      const tally = new HitTally(await sc.stats());
      // >= 256 tokens before the difference: the divergence checkpoint's minimum gain.
      const base = SYSTEM(41, 300);
      const Q = user('What changed in this build?');
      const variant = (day) => [sys(`${base} Build 4417 was deployed on ${day}.`), Q];
      const ra = await sc.ask('variant Monday', variant('Monday'), { prompt_cache_key: 'sib-a' });
      expectHit(ra, 0, 'miss', tally);
      const A = ra.trace.anchors[0];
      // " Monday", " Tuesday", " Friday" are one token each, followed by ".", "<|im_end|>", "\n"
      // and the "<|im_start|>" the pinned anchor ends with: the variants part 5 tokens before it.
      const L = A - 5;
      assert.ok(L >= 256, `divergence point ${L}`);
      const rb = await sc.ask('variant Tuesday', variant('Tuesday'), { prompt_cache_key: 'sib-b' });
      if (sc.hybrid) {
        // No restore point at or before the divergence yet: Monday's anchor ends after it.
        expectHit(rb, 0, 'miss', tally);
        expectCaptures(rb, [{ kind: 'divergence', n: L }, ...ownCaptures(rb)], [A]);
      } else {
        expectHit(rb, L, 'prefix', tally);
        expectCaptures(rb, [], [A]);
      }
      const rc = await sc.ask('variant Friday', variant('Friday'), { prompt_cache_key: 'sib-c' });
      expectHit(rc, L, sc.hybrid ? 'divergence' : 'prefix', tally);
      expectCaptures(rc, sc.hybrid ? ownCaptures(rc) : [], [A]);
      const cold = await sc.cold('variant Friday cold', variant('Friday'));
      expectSame(rc, cold, 'divergence restore vs cold');
      const s = await expectTally(sc, tally, 'siblings');
      if (sc.hybrid) assert.equal(s.checkpoints.divergence, 1, `one divergence checkpoint: ${JSON.stringify(s)}`);
    });

    it('Q + t1 then Q + t2 restores the restore point nearest |Q| (never 0); a third t restores the divergence', async () => {
      await sc.reset();
      const tally = new HitTally(await sc.stats());
      const S = `You are a careful software engineer. ${words(40, 3)}`;
      const Qtext = words(300, 21);
      const at = (t) => [sys(S), user(`${Qtext}\n\nSent at ${t}.`)];
      const r1 = await sc.ask('Q + t1', at('10:41:07'), { prompt_cache_key: 'b1' });
      expectHit(r1, 0, 'miss', tally);
      const A = r1.trace.anchors[0];
      // The stamps part at the minute's tens digit; after it come 4 digits and ":" (one token
      // each), ".", "<|im_end|>", "\n" and the generation prompt: 14 tokens before the end.
      const L = r1.u.prompt - 14;
      assert.ok(L - A >= 256, `|Q| ${L} vs anchor ${A}`);
      const r2 = await sc.ask('Q + t2', at('10:52:33'), { prompt_cache_key: 'b1' });
      if (sc.hybrid) {
        expectHit(r2, A, 'anchor', tally);
        expectCaptures(r2, [{ kind: 'divergence', n: L }, ...ownCaptures(r2)]);
      } else {
        expectHit(r2, L, 'prefix', tally);
      }
      const r3 = await sc.ask('Q + t3', at('10:37:45'), { prompt_cache_key: 'b1' });
      expectHit(r3, L, sc.hybrid ? 'divergence' : 'prefix', tally);
      await expectTally(sc, tally, 'Q + t');
    });

    it('Q + t in the system prompt: a timestamp ending the system text after the tool block; a new session restores the tools anchor (never 0), later ones the divergence', async () => {
      await sc.reset();
      const tally = new HitTally(await sc.stats());
      // The bench's carmen persona in small: the Qwen3.5 template renders the tools first, then
      // the system text, whose last line is a per-session timestamp; so every session's anchor
      // differs, and the divergence point with the previous session depends on which digits
      // changed (08:12 -> 08:49 at the minute, -> 09:26 at the hour: earlier).
      const base = SYSTEM(63, 260);
      const at = (stamp) => [sys(`${base}\n\nCurrent date and time: Monday 9 March 2026, ${stamp} (Europe/Madrid).`),
        user(`Anything new in my inbox? ${words(12, 64)}`)];
      const toks = async (stamp) => {
        const a = await sc.srv.post('/apply-template', { messages: at(stamp), tools: TOOLS });
        assert.equal(a.status, 200, a.text);
        const t = await sc.srv.post('/tokenize', { content: a.json.prompt });
        assert.equal(t.status, 200, t.text);
        return t.json.tokens;
      };
      const lcp = (a, b) => { let n = 0; while (n < a.length && a[n] === b[n]) n++; return n; };
      const [t1, t2, t3, t4] = await Promise.all(['08:12', '08:49', '09:26', '09:03'].map(toks));
      const M = lcp(t1, t2);  // the minute's tens digit
      const H = lcp(t1, t3);  // the hour's last digit
      assert.ok(H < M && lcp(t2, t3) === H && lcp(t3, t4) === M && lcp(t2, t4) === H, `stamps part at ${H}, ${M}`);

      const r1 = await sc.ask('session 1 (08:12)', at('08:12'), { tools: TOOLS, prompt_cache_key: 'ts-1' });
      expectHit(r1, 0, 'miss', tally);
      const A1 = r1.trace.hints.anchor - ANCHOR_SLACK;
      const r2 = await sc.ask('session 2 (08:49)', at('08:49'), { tools: TOOLS, prompt_cache_key: 'ts-2' });
      assert.ok(r2.u.cached > 0, `session 2: never 0${detail(r2)}`);
      const T = r1.trace.toolsAnchor - ANCHOR_SLACK;
      assert.ok(T >= 32 && H - T >= 256 && A1 > M, `tools anchor ${T}, stamps at ${H}/${M}, anchor ${A1}`);
      expectCaptures(r1, sc.hybrid ? ownCaptures(r1) : [], sc.hybrid ? [T, A1] : [A1]);
      const A2 = r2.trace.hints.anchor - ANCHOR_SLACK;
      if (sc.hybrid) {
        expectHit(r2, T, 'anchor', tally);
        expectCaptures(r2, [{ kind: 'divergence', n: M }, ...ownCaptures(r2)], [A2]);
      } else {
        expectHit(r2, M, 'prefix', tally);
      }
      // The hour changed: it leaves both earlier sessions before the divergence at M.
      const r3 = await sc.ask('session 3 (09:26)', at('09:26'), { tools: TOOLS, prompt_cache_key: 'ts-3' });
      const A3 = r3.trace.hints.anchor - ANCHOR_SLACK;
      if (sc.hybrid) {
        expectHit(r3, T, 'anchor', tally);
        expectCaptures(r3, [{ kind: 'divergence', n: H }, ...ownCaptures(r3)], [A3]);
      } else {
        expectHit(r3, H, 'prefix', tally);
      }
      // Session 4 leaves session 3 at M, session 2 at H: session 3's divergence checkpoint at H
      // (session 2's at M is past where it leaves session 2).
      const r4 = await sc.ask('session 4 (09:03)', at('09:03'), { tools: TOOLS, prompt_cache_key: 'ts-4' });
      expectHit(r4, sc.hybrid ? H : M, sc.hybrid ? 'divergence' : 'prefix', tally);
      expectSame(r4, await sc.cold('session 4 cold', at('09:03'), { tools: TOOLS }), 'session 4 vs cold');
      const s = await expectTally(sc, tally, 'Q + t in the system prompt');
      // Pinned: the tools anchor (hybrid) and one anchor per distinct system text.
      assert.equal(s.anchors, sc.hybrid ? 5 : 4, `anchors: ${JSON.stringify(s)}`);
    });

    it('AAAA.BBBB then AAAA.C.BBBB restores at or before |AAAA| and equals cold', async () => {
      await sc.reset();
      const tally = new HitTally(await sc.stats());
      const S = `You are a careful software engineer reviewing a patch. ${words(40, 4)}`;
      const AAAA = words(300, 21);
      const BBBB = `Finally, ${words(40, 22)}`;
      const msgs = (middle) => [sys(S), user(middle ? `${AAAA}\n\n${middle}\n\n${BBBB}` : `${AAAA}\n\n${BBBB}`)];
      const r1 = await sc.ask('AAAA.BBBB', msgs(''), { prompt_cache_key: 'b2' });
      expectHit(r1, 0, 'miss', tally);
      const A = r1.trace.anchors[0];
      const r2 = await sc.ask('AAAA.C.BBBB', msgs(`Insertion one: ${words(20, 23)}`), { prompt_cache_key: 'b2' });
      let L;
      if (sc.hybrid) {
        // The only restore point at or before |AAAA| is the anchor; the request captures the
        // point where it leaves AAAA.BBBB for the next sibling.
        expectHit(r2, A, 'anchor', tally);
        assert.equal(r2.trace.captures.length, 3, `captures${detail(r2)}`);
        assert.equal(r2.trace.captures[0].kind, 'divergence', `captures${detail(r2)}`);
        L = r2.trace.captures[0].n;
        expectCaptures(r2, [{ kind: 'divergence', n: L }, ...ownCaptures(r2)]);
      } else {
        L = r2.u.cached;
        expectHit(r2, L, 'prefix', tally);
      }
      assert.ok(L - A >= 256 && L < r1.u.prompt - GEN, `|AAAA| ${L}, anchor ${A}, prompt ${r1.u.prompt}`);
      expectSame(r2, await sc.cold('AAAA.C.BBBB cold', r2.body.messages), 'AAAA.C.BBBB vs cold');
      const r3 = await sc.ask('AAAA.D.BBBB', msgs(`Another insertion: ${words(20, 24)}`), { prompt_cache_key: 'b2' });
      expectHit(r3, L, sc.hybrid ? 'divergence' : 'prefix', tally);
      expectSame(r3, await sc.cold('AAAA.D.BBBB cold', r3.body.messages), 'AAAA.D.BBBB vs cold');
      await expectTally(sc, tally, 'AAAA.C.BBBB');
    });

    it('P (max_tokens 1), P, P + reply + user message (batch 512)', async () => {
      await resendAndFollowUp(sc, 'resend, batch 512');
    });

    it('30 restores of the same checkpoint give the first greedy output and cold, without drift', async () => {
      await sc.reset();
      const tally = new HitTally(await sc.stats());
      const P = [sys(SYSTEM(51)), user(`Explain this stack trace.\n\n${words(40, 52)}`)];
      const first = await sc.ask('greedy 1', P);
      expectHit(first, 0, 'miss', tally);
      const p = first.u.prompt;
      const want = { entries: 1, anchors: 1, checkpoints: sc.hybrid ? { turn: 1, guard: 1 } : {} };
      // The anchor in RAM, or its disk file once RAM let it go (a loaded machine's busy engine
      // writes it early, --cache-disk-max-unwritten-s, and --cache-ram-release-s then frees the
      // idle RAM copy): held either way, and one at most (the reset above deleted the files).
      const held = (s) => ({ entries: s.entries, anchors: Math.max(s.anchors, s.disk?.anchor_files ?? 0),
        checkpoints: s.checkpoints });
      for (let k = 2; k <= 31; k++) {
        const r = await sc.ask(`greedy ${k}`, P);
        expectHit(r, p - 1, sc.hybrid ? 'guard' : 'prefix', tally);
        expectSame(r, first, `restore ${k - 1}`);
        if (k % 10 === 1) assert.deepEqual(held(await sc.stats()), want, `after restore ${k - 1}: what the cache holds`);
      }
      expectSame(await sc.cold('cold', P), first, 'cold vs greedy 1');
      const s = await expectTally(sc, tally, '30 restores');
      assert.deepEqual(held(s), want, 'after 30 restores');
    });

    it('P greedy, P greedy, P with cache_prompt:false give the same output', async () => {
      await sc.reset();
      const P = [sys(SYSTEM(61)), user(words(30, 62))];
      const a = await sc.ask('P', P);
      expectHit(a, 0, 'miss');
      const b = await sc.ask('P again', P);
      expectHit(b, a.u.prompt - 1, sc.hybrid ? 'guard' : 'prefix');
      const c = await sc.uncached('P with cache_prompt:false', P);
      expectSame(b, a, 'second vs first');
      expectSame(a, await sc.cold('P cold', P), 'first vs a never-cached server');
      // cache_prompt:false on this server runs while P's entry is parked in the shared KV pool,
      // so its sequence lands at other KV cells than on an empty server; a user comparing
      // cached and uncached replies sees this comparison.
      expectSame(c, a, 'cache_prompt:false vs first');
    });

    it('a miss gives the same greedy output whatever unrelated conversation is parked on the device', async () => {
      // A hit is only as good as cold if a request does not depend on other sequences: P shares
      // nothing with the parked conversation (another first message), so P is a miss each time.
      // (P is the cache_prompt:false test's prompt, whose greedy reply has a near tie within 4
      // tokens on some models.)
      const P = [sys(SYSTEM(61)), user(words(30, 62))];
      const want = await sc.cold('P cold', P);
      const differ = [];
      for (let k = 13; k <= 20; k++) {
        await sc.reset();
        const q = await sc.ask(`parked ${k}`, [user(words(40 + 7 * k, 5000 + k))], { max_tokens: 8 });
        const r = await sc.ask(`P with conversation ${k} parked`, P, { prompt_cache_key: `p${k}` });
        expectHit(r, 0, 'miss');
        if (JSON.stringify(replyOf(r.res)) !== JSON.stringify(replyOf(want.res))) {
          differ.push(`${q.u.prompt}+${q.u.completion} tokens parked: ${JSON.stringify(replyOf(r.res).reasoning_content)}`);
        }
      }
      assert.deepEqual(differ, [], `P's greedy reply on a never-cached server is ${JSON.stringify(replyOf(want.res).reasoning_content)}; ` +
        `with an unrelated conversation parked it differs:\n  ${differ.join('\n  ')}${detail(want)}`);
    });

    it('P + Q, then P alone (a strict prefix), then P again: no crash, outputs == cold P', async () => {
      await sc.reset();
      const tally = new HitTally(await sc.stats());
      const P = [sys(SYSTEM(71)), user(`Prefix test: ${words(30, 72)}`)];
      // A trailing assistant message renders P's generation prompt followed by the reply, so
      // P's tokens are a strict prefix of P + Q's (the dense result below shows it).
      const PQ = [...P, { role: 'assistant', content: 'Here it is.', reasoning_content: 'Let me think about it.' }];
      const r1 = await sc.ask('P + Q', PQ, { prompt_cache_key: 'c3' });
      expectHit(r1, 0, 'miss', tally);
      const A = r1.trace.anchors[0];
      const r2 = await sc.ask('P alone', P, { prompt_cache_key: 'c3' });
      const p = r2.u.prompt;
      assert.ok(p < r1.u.prompt);
      // Hybrid: P + Q's checkpoints are at |P + Q| - 6 and - 1; the anchor is the only restore
      // point at or before |P| - 1. Dense: all of P but one token.
      expectHit(r2, sc.hybrid ? A : p - 1, sc.hybrid ? 'anchor' : 'prefix', tally);
      const r3 = await sc.ask('P again (zero new tokens)', P, { prompt_cache_key: 'c3' });
      expectHit(r3, p - 1, sc.hybrid ? 'guard' : 'prefix', tally);
      srv.assertAlive();
      const cold = await sc.cold('P cold', P);
      expectSame(r2, cold, 'P after P + Q vs cold');
      expectSame(r3, cold, 'P again vs cold');
      await expectTally(sc, tally, 'strict prefix');
    });

    it('restores from the RAM tier (an entry demoted off the device) are as exact and as good as cold', async () => {
      await sc.reset();
      const tally = new HitTally(await sc.stats());
      const X = [sys(SYSTEM(131)), user(`Question X: ${words(30, 132)}`)];
      const fill = sys(`You answer short questions. ${words(60, 133)}`);
      // Other conversations take the device's sequence slots (2 parallel + 4 parked by default):
      // the least recently used entry, X, leaves the device for RAM.
      const crowd = async (round) => {
        for (let i = 0; i < 6; i++) tally.add((await sc.ask(`filler ${round}.${i}`, [fill, user(`Filler ${round} ${i}: ${words(12, 140 + 10 * round + i)}`)])).hit);
      };
      const x1 = await sc.ask('X', X);
      expectHit(x1, 0, 'miss', tally);
      const p = x1.u.prompt;
      await crowd(1);
      // X left the device as a patch over its system prompt's anchor (--cache-ram-share-prefix).
      const held = await sc.stats();
      assert.ok(held.shared_prefix_entries >= 1 && held.shared_prefix_bytes > 0,
        `no entry held as a patch over its anchor: ${JSON.stringify({ n: held.shared_prefix_entries, b: held.shared_prefix_bytes })}`);
      const x2 = await sc.ask('X resent, from RAM', X);
      assert.match(x2.trace.restore ?? '', /\(ram, /, `X was not restored from RAM${detail(x2)}`);
      expectHit(x2, p - 1, sc.hybrid ? 'guard' : 'prefix', tally);
      expectSame(x2, x1, 'X resent from RAM vs X');
      const X2 = [...X, echo(x2.res.choices[0].message), user('Go on.')];
      await crowd(2);
      const x3 = await sc.ask('X turn 2, from RAM', X2);
      assert.match(x3.trace.restore ?? '', /\(ram, /, `X was not restored from RAM${detail(x3)}`);
      expectHit(x3, sc.hybrid ? p - GEN : p - GEN + RERENDER_SHARED, sc.hybrid ? 'turn' : 'prefix', tally);
      expectSame(x3, await sc.cold('X turn 2 cold', X2), 'X turn 2 from RAM vs cold');
      expectSame(x1, await sc.cold('X cold', X), 'X vs cold');
      await expectTally(sc, tally, 'RAM tier');
    });

    it('other chat_template_kwargs or tools restore the tokens they share (template_sig is not a bucket dimension)', async () => {
      await sc.reset();
      const tally = new HitTally(await sc.stats());
      const P = [sys(SYSTEM(81)), user(`Key test: ${words(20, 82)}`)];
      const one = [TOOLS[0]];
      const r1 = await sc.ask('tools [read_file]', P, { tools: one });
      expectHit(r1, 0, 'miss', tally);
      const p = r1.u.prompt;
      const resend = sc.hybrid ? 'guard' : 'prefix';
      const cross0 = (await sc.stats()).cross_template_hits;
      // kwargs that do not change the rendering: the very same tokens under another template_sig
      // restore all but one token (the state of a token sequence does not depend on what
      // rendered it).
      const r4 = await sc.ask('add_vision_id false', P, { tools: one, chat_template_kwargs: { add_vision_id: false } });
      assert.equal(r4.u.prompt, p, 'add_vision_id does not change a text-only prompt');
      expectHit(r4, p - 1, resend, tally);
      // The kwargs are canonical: the same map in either key order, and the defaults spelled out.
      const kw = await sc.ask('kwargs {enable_thinking, add_vision_id}', P,
        { tools: one, chat_template_kwargs: { enable_thinking: true, add_vision_id: false } });
      expectHit(kw, p - 1, resend, tally);
      const kw2 = await sc.ask('kwargs {add_vision_id, enable_thinking}', P,
        { tools: one, chat_template_kwargs: { add_vision_id: false, enable_thinking: true } });
      expectHit(kw2, p - 1, resend, tally);
      const r5 = await sc.ask('tools [read_file] again', P, { tools: one });
      expectHit(r5, p - 1, resend, tally);
      // r4 crossed template_sig (kwargs); kw, kw2 and r5 found r4's own twin or an entry of
      // their own template_sig, so at least one and at most four crossed.
      const cross = (await sc.stats()).cross_template_hits - cross0;
      assert.ok(cross >= 1 && cross <= 4, `cross_template_hits moved by ${cross}`);
      // kwargs that change the generation prompt only: the history is shared, restored at least
      // up to its boundary (never past where the prompts part).
      const r3 = await sc.ask('enable_thinking false', P, { tools: one, chat_template_kwargs: { enable_thinking: false } });
      assert.ok(r3.u.cached >= p - GEN && r3.u.cached < r3.u.prompt, `enable_thinking false: cached ${r3.u.cached}${detail(r3)}`);
      tally.add(r3.hit);
      // Another tool list: the prompts part inside the tool block; what comes before it is
      // restored where a restore point lies (any prefix on a dense model), nothing after it.
      const r2 = await sc.ask('tools [read_file, run_shell]', P, { tools: TOOLS });
      assert.ok(r2.u.cached < p - GEN, `another tool list cannot restore past the tool block: ${r2.u.cached}${detail(r2)}`);
      if (!sc.hybrid) assert.ok(r2.u.cached > 0, `dense: the shared head of the tool block is a prefix${detail(r2)}`);
      tally.add(r2.hit);
      await expectTally(sc, tally, 'kwargs and tools');
    });

    it('prompts shorter than --prompt-cache-min-prefix (32) are not stored; longer ones are', async () => {
      await sc.reset();
      const s0 = await sc.stats();
      const tiny = [user('Hi there.')];
      const a = await sc.ask('short prompt', tiny);
      assert.ok(a.u.prompt + a.u.completion < 32, `short prompt is ${a.u.prompt} tokens`);
      expectHit(a, 0, 'miss');
      const b = await sc.ask('short prompt again', tiny);
      expectHit(b, 0, 'miss');
      const s1 = await sc.stats();
      assert.equal(s1.entries, 0, 'a prompt under the minimum prefix was stored');
      assert.equal((s1.rejections.min_prefix ?? 0) - (s0.rejections.min_prefix ?? 0), 2, `rejections: ${JSON.stringify(s1)}`);
      const longer = [user(`Hi there. ${words(40, 91)}`)];
      const c = await sc.ask('longer prompt', longer);
      expectHit(c, 0, 'miss');
      const d = await sc.ask('longer prompt again', longer);
      expectHit(d, c.u.prompt - 1, sc.hybrid ? 'guard' : 'prefix');
    });
  });

}
