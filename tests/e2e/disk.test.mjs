// Tier 2, the disk tier (docs/prompt-cache.md "Disk tier"), over real HTTP with the openai client:
// a restart restores from disk what the previous process served (exact cached_tokens, the hit
// counted as a disk hit, the reply == a never-cached server's); a conversation writes nothing
// while it runs (write-behind); damaged, truncated and foreign files are never restored from and
// the request still succeeds, cold; kill -9 while writing leaves a directory the next process
// starts from; the byte cap holds after every request. With a quantized KV cache (-ctk q8_0
// -ctv q8_0): a restart restores from disk == a never-cached q8_0 server, and files
// written under other KV types (f16) are a counted miss, never served (nor loaded).
//
//   cd tests/e2e && LINEAGE_MODELS_DIR=$PWD/../../build/models node --test disk.test.mjs
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';

import { echo, words } from './lib/chat.mjs';
import { blobBytes, blobFiles, diskSuite, followUpHit } from './lib/disk.mjs';
import { FAMILY, SERVER_ARGS, SYSTEM, sys, user, Scenario, expectHit, expectSame } from './lib/scenario.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A first conversation turn P and its follow-up P + reply + U (the restart test's pair). */
function conversation(seed) {
  const P = [sys(SYSTEM(seed)), user(`Summarise the build failure below.\n\n${words(60, seed + 1)}`)];
  const followUp = (r1) => [...P, echo(r1.res.choices[0].message), user('And the root cause?')];
  return { P, followUp };
}

for (const arch of ARCHS) {
  const hybrid = FAMILY[arch] === 'hybrid';
  describe(`disk tier [${arch}]`, { timeout: 300_000 }, () => {
    const suite = diskSuite({ arch, tag: 'disk' });
    const { dir, startOn } = suite;

    it('after a graceful restart the follow-up restores from disk, == cold; nothing is written while the conversation runs', async () => {
      const d = dir('d1');
      const { P, followUp } = conversation(41);
      let srv = await startOn(arch, d, `disk-d1a-${arch}`);
      const sc = new Scenario(srv, arch, suite.ref);
      const r1 = await sc.ask('P', P);
      expectHit(r1, 0, 'miss');
      const p = r1.u.prompt;
      // Write-behind: a live conversation costs no disk writes (the idle delay is 30 s).
      let s = await sc.stats();
      assert.equal(s.disk.enabled, true);
      assert.equal(s.disk.dir, d);
      assert.equal(s.disk.writes, 0, `written during the conversation: ${JSON.stringify(s.disk)}`);
      await srv.stopGracefully();
      assert.match(srv.log(), /disk tier: writing \d+ cache entries to .* before exit/);
      // The entry and the system-prompt anchor.
      assert.equal(blobFiles(d).length, 2, `files after shutdown: ${blobFiles(d)}`);

      srv = await startOn(arch, d, `disk-d1b-${arch}`);
      sc.srv = srv;
      s = await sc.stats();
      assert.equal(s.disk.files, 2);
      assert.equal(s.entries + s.anchors, 0, 'memory starts empty');
      const msgs = followUp(r1);
      const r2 = await sc.ask('P + reply + U after the restart', msgs);
      const want = followUpHit(hybrid, p);
      expectHit(r2, want.cached, want.kind);
      s = await sc.stats();
      assert.equal(s.disk_hits, 1, `disk hits: ${JSON.stringify(s)}`);
      assert.deepEqual(s.tier_hits, { disk: 1 }, 'the same hit, by tier name');
      assert.equal(s.disk.loads, 1);
      expectSame(r2, await sc.cold('P + reply + U', msgs), 'restored from disk vs cold');
      // Without the files (reset frees every tier) the same request is a miss: the hit above
      // came from disk.
      const reset = await srv.post('/v1/cache/reset', {});
      assert.equal(reset.status, 200);
      assert.ok(reset.json.disk_files_freed >= 1, `reset: ${reset.text}`);
      assert.deepEqual(reset.json.tiers, {
        disk: { copies_freed: reset.json.disk_files_freed, bytes_freed: reset.json.disk_bytes_freed },
      });
      const r3 = await sc.ask('P + reply + U after a reset', msgs);
      expectHit(r3, 0, 'miss');
      await srv.stopGracefully();
    });

    it('damaged, truncated and foreign files are never restored from; the request succeeds cold and is counted', async () => {
      const d = dir('d2');
      const { P, followUp } = conversation(51);
      let srv = await startOn(arch, d, `disk-d2a-${arch}`);
      const sc = new Scenario(srv, arch, suite.ref);
      const r1 = await sc.ask('P', P);
      await srv.stopGracefully();
      const files = blobFiles(d);
      assert.equal(files.length, 2);
      // Flip one byte in the middle of every file (the state section): only the checksum sees it.
      for (const f of files) {
        const fd = fs.openSync(path.join(d, f), 'r+');
        const size = fs.fstatSync(fd).size;
        const b = Buffer.alloc(1);
        fs.readSync(fd, b, 0, 1, Math.floor(size / 2));
        b[0] ^= 0x40;
        fs.writeSync(fd, b, 0, 1, Math.floor(size / 2));
        fs.closeSync(fd);
      }
      srv = await startOn(arch, d, `disk-d2b-${arch}`);
      sc.srv = srv;
      const msgs = followUp(r1);
      const r2 = await sc.ask('follow-up over a damaged file', msgs);
      expectHit(r2, 0, 'miss');
      expectSame(r2, await sc.cold('follow-up', msgs), 'after a damaged file vs cold');
      let s = await sc.stats();
      assert.equal(s.disk.damaged, 1, JSON.stringify(s.disk));
      assert.equal(s.rejections.disk_damaged, 1);
      assert.equal(s.disk_hits, 0);
      assert.equal(s.disk.files, 1, 'the damaged file is deleted');
      assert.equal((srv.log().match(/failed its checks/g) || []).length, 1, 'logged once');
      // The server keeps serving and caching: the same request again hits memory.
      const r3 = await sc.ask('follow-up again', msgs);
      assert.equal(r3.u.cached, r3.u.prompt - 1, `resend after the damaged file: cached ${r3.u.cached}`);
      await srv.stopGracefully();

      // Truncated files: caught at startup by the index's sizes, counted as damage, removed,
      // never loaded.
      const truncated = blobFiles(d);
      assert.ok(truncated.length >= 1);
      for (const f of truncated) fs.truncateSync(path.join(d, f), 100);
      srv = await startOn(arch, d, `disk-d2c-${arch}`);
      sc.srv = srv;
      s = await sc.stats();
      assert.equal(s.disk.files, 0, JSON.stringify(s.disk));
      assert.equal(s.disk.damage.truncated, truncated.length, JSON.stringify(s.disk));
      assert.equal(blobFiles(d).length, 0);
      assert.match(srv.log(), /failed its startup check \(truncated\); deleted/);
      const r4 = await sc.ask('follow-up over truncated files', msgs);
      expectHit(r4, 0, 'miss');
      expectSame(r4, r2, 'after truncated files vs cold');
      await srv.stopGracefully();
    });

    it('files of another model are ignored with a log line, and never hit', async () => {
      const d = dir('other');
      const { P } = conversation(61);
      let srv = await startOn(arch, d, `disk-om-a-${arch}`);
      await new Scenario(srv, arch).ask('P', P);
      await srv.stopGracefully();
      const n = blobFiles(d).length;
      assert.ok(n >= 1);
      const other = ARCHS.find((a) => a !== arch) ?? (arch === 'qwen3' ? 'qwen35' : 'qwen3');
      srv = await startOn(other, d, `disk-om-b-${arch}`);
      const sc = new Scenario(srv, other);
      const s = await sc.stats();
      assert.equal(s.disk.ignored_other_model, n, JSON.stringify(s.disk));
      assert.equal(s.disk.files, 0);
      assert.match(srv.log(), new RegExp(`ignored ${n} files written by another model`));
      const r = await sc.ask('P on another model', P);
      expectHit(r, 0, 'miss');
      await srv.stopGracefully();
      assert.equal(blobFiles(d).length, n + 2, "the other model's files are left in place");
    });

    it('kill -9 while writing: the next process starts, restores only intact files, replies == cold', async () => {
      const d = dir('kill');
      const { P, followUp } = conversation(71);
      // Idle delay 0: every finished entry is written at once, so the kill lands mid-write.
      let srv = await startOn(arch, d, `disk-kill-a-${arch}`, ['--cache-disk-idle-s', '0']);
      const sc = new Scenario(srv, arch, suite.ref);
      const r1 = await sc.ask('P', P);
      await sc.ask('another conversation', [sys(SYSTEM(72)), user(words(80, 73))]);
      srv.proc.kill('SIGKILL');
      await srv.exited;
      await srv.stop();
      srv = await startOn(arch, d, `disk-kill-b-${arch}`);
      sc.srv = srv;
      const msgs = followUp(r1);
      const r2 = await sc.ask('follow-up after kill -9', msgs);
      const want = followUpHit(hybrid, r1.u.prompt);
      // Either P's file was durable (an exact restore) or it was not (cold); nothing in between.
      if (r2.u.cached !== 0) expectHit(r2, want.cached, want.kind);
      expectSame(r2, await sc.cold('follow-up', msgs), 'after kill -9 vs cold');
      const s = await sc.stats();
      assert.equal(s.disk.damaged, 0, `a restore met a damaged file: ${JSON.stringify(s.disk)}`);
      assert.equal(fs.readdirSync(d).filter((f) => f.endsWith('.tmp')).length, 0, 'temporary files removed');
      await srv.stopGracefully();
    });

    it('the byte cap holds after every request; least recently used files go first', async () => {
      const d = dir('cap');
      // Measure one conversation's files, then cap the tier at a bit more than that.
      let srv = await startOn(arch, d, `disk-cap-a-${arch}`);
      await new Scenario(srv, arch).ask('P0', [sys(SYSTEM(80)), user(words(60, 81))]);
      await srv.stopGracefully();
      const one = blobBytes(d);
      const cap = Math.floor(one * 1.5);
      srv = await startOn(arch, d, `disk-cap-b-${arch}`, ['--cache-disk-idle-s', '0', '--cache-disk-capacity-bytes', String(cap)]);
      const sc = new Scenario(srv, arch);
      for (let i = 0; i < 4; i++) {
        await sc.ask(`conversation ${i}`, [sys(SYSTEM(90 + i)), user(words(60, 95 + i))]);
        await sleep(300);  // the idle write happens between requests
        const s = await sc.stats();
        assert.ok(s.disk.bytes <= cap, `after conversation ${i}: ${s.disk.bytes} bytes on disk > cap ${cap}`);
        const onDisk = blobBytes(d);
        assert.ok(onDisk <= cap, `after conversation ${i}: ${onDisk} bytes of files > cap ${cap}`);
      }
      const s = await sc.stats();
      assert.ok(s.disk.writes >= 4, JSON.stringify(s.disk));
      assert.ok(s.disk.evictions >= 2, `no eviction under the cap: ${JSON.stringify(s.disk)}`);
      await srv.stopGracefully();
    });
  });
}

// The KV cache types are a bucket dimension; the disk tier holds states in their types.
const Q8 = ['-ctk', 'q8_0', '-ctv', 'q8_0'];
for (const arch of ARCHS) {
  const hybrid = FAMILY[arch] === 'hybrid';
  describe(`disk tier with -ctk q8_0 -ctv q8_0 [${arch}]`, { timeout: 300_000 }, () => {
    const suite = diskSuite({ arch, tag: 'disk-q8', args: Q8 });
    const { dir, startOn } = suite;

    it('after a graceful restart the follow-up restores from disk, == a never-cached q8_0 server', async () => {
      const d = dir('d1');
      const { P, followUp } = conversation(141);
      let srv = await startOn(arch, d, `disk-q8-a-${arch}`);
      const sc = new Scenario(srv, arch, suite.ref);
      const r1 = await sc.ask('P', P);
      expectHit(r1, 0, 'miss');
      await srv.stopGracefully();
      assert.equal(blobFiles(d).length, 2, `files after shutdown: ${blobFiles(d)}`);
      srv = await startOn(arch, d, `disk-q8-b-${arch}`);
      sc.srv = srv;
      const msgs = followUp(r1);
      const r2 = await sc.ask('P + reply + U after the restart', msgs);
      const want = followUpHit(hybrid, r1.u.prompt);
      expectHit(r2, want.cached, want.kind);
      const s = await sc.stats();
      assert.equal(s.disk_hits, 1, `disk hits: ${JSON.stringify(s)}`);
      expectSame(r2, await sc.cold('P + reply + U', msgs), 'restored from disk (q8_0) vs cold (q8_0)');
      await srv.stopGracefully();
    });

    it('files written under f16 are a counted miss under q8_0, and q8_0 files under f16; none is loaded', async () => {
      const d = dir('mixed');
      const { P, followUp } = conversation(151);
      // f16 (no -ctk/-ctv) writes, q8_0 reads.
      let srv = await startServer({ model: modelPath(arch), name: `disk-q8-f16-a-${arch}`,
        args: [...SERVER_ARGS, '--cache-dir', d] });
      const f16 = new Scenario(srv, arch);
      const r1 = await f16.ask('P under f16', P);
      await srv.stopGracefully();
      const n = blobFiles(d).length;
      assert.equal(n, 2);
      srv = await startOn(arch, d, `disk-q8-f16-b-${arch}`);
      const sc = new Scenario(srv, arch, suite.ref);
      let s = await sc.stats();
      assert.equal(s.disk.files, n, 'the f16 files are indexed (same model)');
      const msgs = followUp(r1);
      const r2 = await sc.ask('follow-up under q8_0 over f16 files', msgs);
      expectHit(r2, 0, 'miss');
      expectSame(r2, await sc.cold('follow-up', msgs), 'q8_0 over f16 files vs cold');
      s = await sc.stats();
      assert.equal(s.disk_hits, 0, JSON.stringify(s));
      assert.equal(s.disk.loads, 0, `an f16 file was loaded: ${JSON.stringify(s.disk)}`);
      // Counted as a miss (its cause reads no_shared_prefix: the causes look at the entries in
      // memory, not at the disk tier's other buckets).
      assert.equal(s.misses, 1, `the miss is counted: ${JSON.stringify(s)}`);
      await srv.stopGracefully();
      // Back to f16 on the same directory: its own files hit, the q8_0 ones written meanwhile do not.
      srv = await startServer({ model: modelPath(arch), name: `disk-q8-f16-c-${arch}`,
        args: [...SERVER_ARGS, '--cache-dir', d] });
      const back = new Scenario(srv, arch);
      const r3 = await back.ask('the same follow-up under f16 again', msgs);
      const want = followUpHit(hybrid, r1.u.prompt);
      expectHit(r3, want.cached, want.kind);
      s = await back.stats();
      assert.equal(s.disk_hits, 1, JSON.stringify(s));
      await srv.stopGracefully();
    });
  });
}
