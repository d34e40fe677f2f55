// The tier cost rule (docs/prompt-cache.md "The tier cost rule"), over real HTTP with the openai
// client: a copy below RAM is written and read only where reading it back is estimated to cost
// less than recomputing what it restores, from the run's measured prefill rate and the tier's
// read rate. `--cache-tier-bandwidth 1` (one byte a second) makes every copy dearer than its
// recompute once a prefill has been measured:
//  - at shutdown nothing is written (the trace says why, the directory holds no file), and the
//    restarted server's follow-up is a miss; with the measured rates (the default) the same
//    conversation leaves its files and the follow-up restores from disk (the positive case);
//  - a server that finds those files but reads at one byte a second, once it has measured a
//    prefill, declines the read (counted in tier_reads_declined) and prefills cold, == a
//    never-cached server.
//
//   cd tests/e2e && LINEAGE_MODELS_DIR=$PWD/../../build/models node --test tier-cost.test.mjs
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { echo, words } from './lib/chat.mjs';
import { blobFiles, diskSuite, followUpHit } from './lib/disk.mjs';
import { FAMILY, SYSTEM, sys, user, Scenario, expectHit, expectSame } from './lib/scenario.mjs';
import { ARCHS } from './lib/server.mjs';

const SLOW = ['--cache-tier-bandwidth', '1', '--cache-trace'];

for (const arch of ARCHS) {
  const hybrid = FAMILY[arch] === 'hybrid';
  describe(`the tier cost rule [${arch}]`, () => {
    const suite = diskSuite({ arch, tag: 'tier-cost' });
    const { dir, startOn } = suite;
    const P = [sys(SYSTEM(71)), user(`Summarise the build failure below.\n\n${words(60, 72)}`)];
    const followUp = (r1) => [...P, echo(r1.res.choices[0].message), user('And the root cause?')];

    it('a copy dearer to read than to recompute is not written at shutdown; with the measured rates it is, and restores', async () => {
      // The rule declines: one byte a second against a measured prefill.
      const slowDir = dir('slow');
      let srv = await startOn(arch, slowDir, `tier-cost-slow-a-${arch}`, SLOW);
      const sc = new Scenario(srv, arch, suite.ref);
      const r1 = await sc.ask('P', P);
      expectHit(r1, 0, 'miss');
      let s = await sc.stats();
      assert.ok(s.tier_cost.prefill_tokens_per_s > 0, `no prefill rate measured: ${JSON.stringify(s.tier_cost)}`);
      assert.equal(s.tier_cost.read_bytes_per_s, 1);
      assert.equal(s.tier_writes_declined, 0, 'nothing is due before the idle delay');
      await srv.stopGracefully();
      assert.match(srv.log(), /not written at shutdown: reading it back .* and writing it now .* cost more than recomputing it/);
      assert.deepEqual(blobFiles(slowDir), [], 'no file written');
      srv = await startOn(arch, slowDir, `tier-cost-slow-b-${arch}`);
      sc.srv = srv;
      expectHit(await sc.ask('P + reply + U after the restart', followUp(r1)), 0, 'miss');
      await srv.stop();

      // The positive case: the measured rates (tiny model, files in the page cache) keep the copies.
      const fastDir = dir('fast');
      srv = await startOn(arch, fastDir, `tier-cost-fast-a-${arch}`);
      sc.srv = srv;
      const f1 = await sc.ask('P', P);
      s = await sc.stats();
      assert.ok(s.tier_cost.prefill_tokens_per_s > 0);
      await srv.stopGracefully();
      assert.equal(blobFiles(fastDir).length, 2, `files after shutdown (the entry and its anchor): ${blobFiles(fastDir)}`);
      srv = await startOn(arch, fastDir, `tier-cost-fast-b-${arch}`);
      sc.srv = srv;
      const f2 = await sc.ask('P + reply + U after the restart', followUp(f1));
      const want = followUpHit(hybrid, f1.u.prompt);
      expectHit(f2, want.cached, want.kind);
      s = await sc.stats();
      assert.equal(s.disk_hits, 1);
      assert.deepEqual(s.tier_reads_declined, { disk: 0 });
      await srv.stop();

      // The same files, read at one byte a second once a prefill is measured: not read.
      srv = await startOn(arch, fastDir, `tier-cost-fast-c-${arch}`, SLOW);
      sc.srv = srv;
      const other = [sys(SYSTEM(73)), user(`Review the patch below.\n\n${words(60, 74)}`)];
      expectHit(await sc.ask('an unrelated conversation (measures the prefill rate)', other), 0, 'miss');
      const msgs = followUp(f1);
      const r3 = await sc.ask('P + reply + U, its file too slow to read', msgs);
      expectHit(r3, 0, 'miss');
      s = await sc.stats();
      assert.deepEqual(s.tier_reads_declined, { disk: 1 }, JSON.stringify(s));
      assert.equal(s.disk.loads, 0);
      assert.equal(s.disk_hits, 0);
      assert.match(srv.log(), /costs more than recomputing them .*; not read/);
      expectSame(r3, await sc.cold('P + reply + U', msgs), 'recomputed vs cold');
    });
  });
}
