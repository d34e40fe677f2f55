// Tier 2 under damage and under load (issue 15), over real HTTP with the openai client:
//  - two same-size blob files swapped between restarts: never restored (the reply == a
//    never-cached server's), counted as identity damage in /v1/cache/stats and /metrics;
//  - write-behind under continuous load: with --cache-disk-max-unwritten-s, a conversation is
//    written while the engine never idles, and restores from disk after a kill -9 (exact
//    cached_tokens); with the bound off (the behaviour before), the same run writes nothing.
//
//   cd tests/e2e && LINEAGE_MODELS_DIR=$PWD/../../build/models node --test disk-damage.test.mjs
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { echo, words } from './lib/chat.mjs';
import { FAMILY, GEN, RERENDER_SHARED, SERVER_ARGS, SYSTEM, sys, user, Scenario, askOn, expectHit, expectSame } from './lib/scenario.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const tmpDir = (name) => fs.mkdtempSync(path.join(os.tmpdir(), `lineage-dd-${name}-`));
const blobFiles = (dir) => fs.readdirSync(dir).filter((f) => f.endsWith('.lcache')).sort();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const followUpHit = (hybrid, p) => (hybrid ? { cached: p - GEN, kind: 'turn' } : { cached: p - GEN + RERENDER_SHARED, kind: 'prefix' });

const started = [];
async function startOn(arch, dir, name, extra = []) {
  const srv = await startServer({ model: modelPath(arch), name, args: [...SERVER_ARGS, '--metrics', '--cache-dir', dir, ...extra] });
  started.push(srv);
  return srv;
}

/** Sends requests from `clients` concurrent loops of distinct conversations until `ms` have
 *  passed, so that the engine never idles; returns how many completed. */
async function load(srv, ms, clients = 2) {
  const end = Date.now() + ms;
  let n = 0;
  await Promise.all(Array.from({ length: clients }, async (_, c) => {
    for (let i = 0; Date.now() < end; i++) {
      await askOn(srv, `load ${c}.${i}`, [sys(SYSTEM(500 + c, 60)), user(words(40, 1000 * c + i))], { max_tokens: 16 });
      n++;
    }
  }));
  return n;
}

for (const arch of ARCHS) {
  const hybrid = FAMILY[arch] === 'hybrid';
  describe(`disk damage and load [${arch}]`, { timeout: 300_000 }, () => {
    let ref;
    const dirs = [];
    const dir = (name) => {
      const d = tmpDir(`${arch}-${name}`);
      dirs.push(d);
      return d;
    };
    before(async () => {
      ref = await startServer({ model: modelPath(arch), name: `dd-ref-${arch}`, args: [...SERVER_ARGS, '--no-cache-prompt'] });
    });
    after(async () => {
      for (const srv of started.splice(0)) await srv.stop();
      await ref?.stopGracefully();
      for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
    });

    it('two same-size files swapped: never restored, == cold, counted as identity damage', async () => {
      const d = dir('swap');
      // Same system prompt, user turns of the same token count: entries of the same size.
      const P = (k) => [sys(SYSTEM(41)), user(`Summarise ticket number ${k}.\n\n${words(60, 7)}`)];
      let srv = await startOn(arch, d, `dd-swap-a-${arch}`);
      const sc = new Scenario(srv, arch, ref);
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

    for (const bound of [2, 0]) {
      it(`continuous load, then kill -9: --cache-disk-max-unwritten-s ${bound} ${bound ? 'restores the conversation from disk' : '(off) writes nothing'}`, async () => {
        const d = dir(`load${bound}`);
        // Idle writes far away: only the bound can write while the load runs.
        let srv = await startOn(arch, d, `dd-load${bound}-a-${arch}`, ['--cache-disk-idle-s', '600', '--cache-disk-max-unwritten-s', String(bound)]);
        const sc = new Scenario(srv, arch, ref);
        const P = [sys(SYSTEM(81)), user(`Summarise the build failure below.\n\n${words(60, 82)}`)];
        const r1 = await sc.ask('P', P);
        const n = await load(srv, 6000);
        assert.ok(n >= 10, `only ${n} requests in 6 s`);
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
