// Tier 2 under damage and under load (docs/prompt-cache.md "Disk tier"), over real HTTP with the
// openai client:
//  - two same-size blob files swapped between restarts: never restored (the reply == a
//    never-cached server's), counted as identity damage in /v1/cache/stats and /metrics;
//  - write-behind under continuous load: with --cache-disk-max-unwritten-s, a conversation is
//    written while the engine never idles, and restores from disk after a kill -9 (exact
//    cached_tokens); with the bound off (the behaviour before), the same run writes nothing;
//  - a conversation's file deleted behind the running server's back (as a successor or the disk
//    budget deletes one between a lookup and its read): its next turn is planned again and
//    restores the system prompt's anchor (exact cached_tokens), not the whole prompt cold;
//  - a steady load of 60 s, then kill -9 (the durability bound under load): every conversation
//    stored more than the bound (plus a margin for the one-write-per-step pace) before the kill
//    restores from disk with the exact cached_tokens, and replies as a never-cached server does.
//
//   cd tests/e2e && LINEAGE_MODELS_DIR=$PWD/../../build/models node --test disk-damage.test.mjs
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';

import { echo, words } from './lib/chat.mjs';
import { blobFiles, diskSuite, followUpHit } from './lib/disk.mjs';
import { ANCHOR_SLACK, FAMILY, GEN, MAX_TOKENS, SYSTEM, sys, user, Scenario, askOn, expectHit, expectSame } from './lib/scenario.mjs';
import { ARCHS } from './lib/server.mjs';

/** Sends requests from `clients` concurrent loops of distinct conversations, so that the engine
 *  never idles, for at least `ms` and until `min` have completed (a slow or shared machine takes
 *  longer for them; 60 s at most); returns how many completed. */
async function load(srv, ms, clients = 2, min = 10) {
  const t0 = Date.now();
  let n = 0;
  const more = () => Date.now() - t0 < 60_000 && (Date.now() - t0 < ms || n < min);
  await Promise.all(Array.from({ length: clients }, async (_, c) => {
    for (let i = 0; more(); i++) {
      await askOn(srv, `load ${c}.${i}`, [sys(SYSTEM(500 + c, 60)), user(words(40, 1000 * c + i))], { max_tokens: 16 });
      n++;
    }
  }));
  return n;
}

for (const arch of ARCHS) {
  const hybrid = FAMILY[arch] === 'hybrid';
  describe(`disk damage and load [${arch}]`, { timeout: 300_000 }, () => {
    const suite = diskSuite({ arch, tag: 'dd', args: ['--metrics'] });
    const { dir, startOn } = suite;

    it('two same-size files swapped: never restored, == cold, counted as identity damage', async () => {
      const d = dir('swap');
      // Same system prompt, user turns of the same token count: entries of the same size.
      const P = (k) => [sys(SYSTEM(41)), user(`Summarise ticket number ${k}.\n\n${words(60, 7)}`)];
      let srv = await startOn(arch, d, `dd-swap-a-${arch}`);
      const sc = new Scenario(srv, arch, suite.ref);
      const r1 = await sc.ask('P1', P(1));
      const r2 = await sc.ask('P2', P(2));
      assert.equal(r1.u.prompt, r2.u.prompt, 'the two prompts have the same token count');
      await srv.stopGracefully();
      const bySize = new Map();
      for (const f of blobFiles(d)) {
        const size = fs.statSync(path.join(d, f)).size;
        bySize.set(size, [...(bySize.get(size) ?? []), f]);
      }
      const pair = [...bySize.values()].find((fs_) => fs_.length === 2);
      assert.ok(pair, `two files of the same size: ${JSON.stringify([...bySize])}`);
      const [a, b] = pair.map((f) => path.join(d, f));
      fs.renameSync(a, `${a}.swap`);
      fs.renameSync(b, a);
      fs.renameSync(`${a}.swap`, b);

      srv = await startOn(arch, d, `dd-swap-b-${arch}`);
      sc.srv = srv;
      const s = await sc.stats();
      assert.equal(s.disk.damage.identity, 2, JSON.stringify(s.disk));
      assert.equal(s.disk.damaged, 2);
      assert.equal(s.disk.files, blobFiles(d).length);
      assert.equal(blobFiles(d).length, 1, `only the anchor's file is left: ${blobFiles(d)}`);
      assert.match(srv.log(), /failed its startup check \(identity\)/);
      const metrics = await srv.get('/metrics');
      assert.match(metrics.text, /^lineage_prompt_cache_disk_damaged_total\{kind="identity"\} 2$/m);
      // Each follow-up restores at most the intact anchor, and answers as a cold server does.
      for (const [k, r] of [[1, r1], [2, r2]]) {
        const msgs = [...P(k), echo(r.res.choices[0].message), user('And the root cause?')];
        const rf = await sc.ask(`follow-up ${k} after the swap`, msgs);
        assert.ok(rf.u.cached < r.u.prompt - GEN, `follow-up ${k} restored ${rf.u.cached} tokens from a swapped file`);
        expectSame(rf, await sc.cold(`follow-up ${k}`, msgs), `follow-up ${k} after the swap vs cold`);
      }
      await srv.stopGracefully();
    });

    it('a file deleted before its read: the next turn is planned again and restores the anchor, not cold', async () => {
      const d = dir('gone');
      const P = [sys(SYSTEM(45)), user(`Review the patch below.\n\n${words(60, 46)}`)];
      let srv = await startOn(arch, d, `dd-gone-a-${arch}`);
      const sc = new Scenario(srv, arch, suite.ref);
      const r1 = await sc.ask('P', P);
      expectHit(r1, 0, 'miss');
      const A = r1.trace.hints.anchor - ANCHOR_SLACK;
      await srv.stopGracefully();  // both files written: the anchor's and the conversation's
      srv = await startOn(arch, d, `dd-gone-b-${arch}`);
      sc.srv = srv;
      const files = blobFiles(d).map((f) => ({ f, size: fs.statSync(path.join(d, f)).size })).sort((a, b) => b.size - a.size);
      assert.equal(files.length, 2, `the anchor's file and the conversation's: ${JSON.stringify(files)}`);
      // The conversation's file is the larger: more tokens, and its turn and guard checkpoints (the
      // base capture set has no ladder, so the anchor's file holds its state alone). Its index row stays.
      fs.unlinkSync(path.join(d, files[0].f));
      const msgs = [...P, echo(r1.res.choices[0].message), user('And the root cause?')];
      const r2 = await sc.ask('follow-up, its file gone', msgs);
      expectHit(r2, A, 'anchor');  // the anchor's own file: its state at A, dense or hybrid
      assert.match(srv.log(), /not loaded \(missing: [^)]*\); planned again/);
      const s = await sc.stats();
      assert.equal(s.misses, 0, `one lookup, counted as the hit it became: ${JSON.stringify(s)}`);
      expectSame(r2, await sc.cold('follow-up', msgs), 'planned again vs cold');
      await srv.stopGracefully();
    });

    for (const bound of [2, 0]) {
      it(`continuous load, then kill -9: --cache-disk-max-unwritten-s ${bound} ${bound ? 'restores the conversation from disk' : '(off) writes nothing'}`, async () => {
        const d = dir(`load${bound}`);
        // Idle writes far away: only the bound can write while the load runs.
        let srv = await startOn(arch, d, `dd-load${bound}-a-${arch}`, ['--cache-disk-idle-s', '600', '--cache-disk-max-unwritten-s', String(bound)]);
        const sc = new Scenario(srv, arch, suite.ref);
        const P = [sys(SYSTEM(81)), user(`Summarise the build failure below.\n\n${words(60, 82)}`)];
        const r1 = await sc.ask('P', P);
        const n = await load(srv, 6000);
        assert.ok(n >= 10, `only ${n} requests in 60 s`);
        const s = await sc.stats();
        if (bound) {
          assert.ok(s.disk.overdue_writes >= 1, JSON.stringify(s.disk));
          assert.ok(s.disk.writes >= 1, JSON.stringify(s.disk));
          assert.ok(s.disk.overdue_read_seconds >= 0);
          console.log(`[${arch}] ${s.disk.overdue_writes} writes forced under load, ` +
            `${(1000 * s.disk.overdue_read_seconds / s.disk.overdue_writes).toFixed(3)} ms of engine time each`);
        } else {
          assert.equal(s.disk.writes, 0, `written under load with the bound off: ${JSON.stringify(s.disk)}`);
          assert.equal(s.disk.overdue_writes, 0);
        }
        srv.proc.kill('SIGKILL');
        await srv.exited;
        await srv.stop();

        srv = await startOn(arch, d, `dd-load${bound}-b-${arch}`);
        sc.srv = srv;
        const msgs = [...P, echo(r1.res.choices[0].message), user('And the root cause?')];
        const r2 = await sc.ask('follow-up after kill -9', msgs);
        if (bound) {
          const want = followUpHit(hybrid, r1.u.prompt);
          expectHit(r2, want.cached, want.kind);
          const s2 = await sc.stats();
          assert.equal(s2.disk_hits, 1, JSON.stringify(s2));
        } else {
          expectHit(r2, 0, 'miss');
        }
        expectSame(r2, await sc.cold('follow-up', msgs), 'after kill -9 vs cold');
        await srv.stopGracefully();
      });
    }
  });
}

// One family is enough here (the write path is the same for all; the test takes ~80 s).
describe(`steady load of 60 s, then kill -9 [${ARCHS[0]}]`, { timeout: 300_000 }, () => {
  const arch = ARCHS[0];
  const hybrid = FAMILY[arch] === 'hybrid';
  const BOUND_S = 2;
  const MARGIN_S = 4;
  const suite = diskSuite({ arch, tag: 'dd-steady', args: ['--metrics'] });
  const { startOn } = suite;

  it(`every conversation stored more than ${BOUND_S} + ${MARGIN_S} s before the kill restores from disk`, async () => {
    const d = suite.dir('steady');
    // Idle writes far away: only the bound writes while the load runs.
    let srv = await startOn(arch, d, `dd-steady-a-${arch}`,
      ['--cache-disk-idle-s', '600', '--cache-disk-max-unwritten-s', String(BOUND_S)]);
    // Two clients, each a stream of new conversations (a first turn each), for 60 s: the engine
    // never idles. Each conversation's first turn is kept with the time its reply ended.
    const done = [];
    const t0 = Date.now();
    await Promise.all([0, 1].map(async (c) => {
      for (let i = 0; Date.now() - t0 < 60_000; i++) {
        const P = [sys(SYSTEM(700 + c, 60)), user(`Ticket ${c}.${i}: ${words(40, 5000 * c + i)}`)];
        // Straight to the API, not askOn: ~1,000 conversations, and askOn's per-request trace
        // search over the whole server log grows the test's heap past node's limit.
        const res = await srv.openai.chat.completions.create({ model: 'tiny', messages: P, max_tokens: MAX_TOKENS, temperature: 0 });
        assert.equal(res.choices.length, 1, `steady ${c}.${i}: ${JSON.stringify(res)}`);
        done.push({ P, message: res.choices[0].message, prompt: res.usage.prompt_tokens, at: Date.now() });
      }
    }));
    const s = await (new Scenario(srv, arch, suite.ref)).stats();
    assert.ok(s.disk.overdue_writes >= 1, JSON.stringify(s.disk));
    const killedAt = Date.now();
    srv.proc.kill('SIGKILL');
    await srv.exited;
    await srv.stop();
    const due = done.filter((x) => killedAt - x.at > (BOUND_S + MARGIN_S) * 1000);
    assert.ok(due.length >= 20, `${done.length} conversations in 60 s, ${due.length} due on disk`);

    srv = await startOn(arch, d, `dd-steady-b-${arch}`);
    const sc = new Scenario(srv, arch, suite.ref);
    const st = await sc.stats();
    assert.ok(st.disk.files >= due.length, `${st.disk.files} files for ${due.length} conversations due`);
    // Eight of them, from the first to the last one due: each follow-up restores exactly its turn.
    const picks = Array.from({ length: 8 }, (_, k) => due[Math.round((k * (due.length - 1)) / 7)]);
    for (const [k, x] of picks.entries()) {
      const msgs = [...x.P, echo(x.message), user('And the root cause?')];
      const r2 = await sc.ask(`follow-up ${k} (stored ${((killedAt - x.at) / 1000).toFixed(1)} s before the kill)`, msgs);
      const want = followUpHit(hybrid, x.prompt);
      expectHit(r2, want.cached, want.kind);
      if (k === 0 || k === 7) expectSame(r2, await sc.cold(`follow-up ${k}`, msgs), 'after kill -9 vs cold');
    }
    assert.equal((await sc.stats()).disk_hits, picks.length);
    console.log(`[${arch}] ${done.length} conversations in 60 s, ${s.disk.overdue_writes} writes forced; ` +
      `${due.length} due, 8 checked: all restored`);
    await srv.stopGracefully();
  });
});
