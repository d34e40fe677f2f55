// Failover (issue #56; docs/prompt-cache.md "What a killed replica loses"): three replicas behind
// deploy/haproxy.cfg (checked on GET /ready) share a redis-server, all on loopback. Six sessions
// spread over them by their prompt_cache_key; once every replica has written its entries
// (--cache-disk-idle-s 0: as soon as a sequence is idle), the replica serving the most sessions
// is killed with SIGKILL while one more request of its is in flight. Every session's next turn,
// sent through the balancer at once (before the health checks have taken the dead replica out:
// HAProxy redispatches a refused connection), succeeds; the dead replica's sessions continue on
// the others, restored from Redis with the cached_tokens one server gives (nothing written is
// lost); the others stay where they were. Only the request in flight on the killed replica may
// fail.
//
//   cd tests/e2e && LINEAGE_MODELS_DIR=$PWD/../../build/models node --test failover.test.mjs
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { echo, words } from './lib/chat.mjs';
import { startHaproxy } from './lib/haproxy.mjs';
import { startRedis, waitStats } from './lib/redis.mjs';
import { FAMILY, GEN, RERENDER_SHARED, SERVER_ARGS, SYSTEM } from './lib/scenario.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const KEYS = ['s-alpha', 's-bravo', 's-charlie', 's-delta', 's-echo', 's-foxtrot', 's-golf', 's-hotel'];

for (const arch of ARCHS) {
  const hybrid = FAMILY[arch] === 'hybrid';
  describe(`failover: three replicas behind HAProxy, one killed -9 mid-session [${arch}]`, { timeout: 300_000 }, () => {
    let redis, proxy, lb;
    const replicas = [];
    before(async () => {
      redis = await startRedis(`failover-${arch}`);
      const args = [...SERVER_ARGS, '--cache-disk=false', '--cache-redis', redis.url, '--cache-disk-idle-s', '0',
        '--cache-redis-timeout-ms', '2000'];
      for (const name of ['r1', 'r2', 'r3']) {
        replicas.push(await startServer({ model: modelPath(arch), name: `failover-${name}-${arch}`, args }));
      }
      proxy = await startHaproxy(`failover-haproxy-${arch}`, replicas.map((r) => Number(new URL(r.url).port)));
      lb = proxy.url;
    });
    after(async () => {
      await proxy?.stop();
      for (const r of replicas) await r.stop();
      await redis?.kill();
    });

    /** POST through the balancer: {status, j, cached, prompt, hit}. */
    async function chat(messages, key, maxTokens = 4) {
      const res = await fetch(`${lb}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'tiny', messages, max_tokens: maxTokens, temperature: 0, prompt_cache_key: key }),
      });
      const text = await res.text();
      if (res.status !== 200) return { status: res.status, text };
      const j = JSON.parse(text);
      return { status: 200, j, cached: j.usage.prompt_tokens_details?.cached_tokens ?? 0, prompt: j.usage.prompt_tokens, hit: j.timings.cache_hit };
    }
    const lookups = async () => Promise.all(replicas.map(async (r) => (r.exit ? null : (await r.cacheStats()).lookups)));

    it('every session continues; the killed replica\'s restore from Redis what it wrote; only its request in flight may fail', async () => {
      const sessions = [];
      for (const [i, key] of KEYS.entries()) {
        const P = [{ role: 'system', content: SYSTEM(300 + i) }, { role: 'user', content: `Summarise: ${words(60, 310 + i)}` }];
        const l0 = await lookups();
        const r1 = await chat(P, key);
        assert.equal(r1.status, 200, r1.text);
        const l1 = await lookups();
        const who = l1.findIndex((n, k) => n === l0[k] + 1);
        assert.ok(who >= 0, `lookups ${l0} -> ${l1}`);
        sessions.push({ key, P, r1, who });
      }
      const load = [0, 1, 2].map((k) => sessions.filter((s) => s.who === k).length);
      const victim = load.indexOf(Math.max(...load));
      assert.ok(load[victim] >= 1 && load.filter((n) => n > 0).length >= 2, `sessions per replica: ${load}`);
      // Everything written (each entry once idle, each anchor once pinned) and mirrored everywhere.
      for (const r of replicas) await waitStats(r, (s) => s.redis.queued === 0 && s.redis.write_failures === 0, `${r.name} idle`);
      const n = Number(redis.cli('ZCARD', 'lineage:index').trim());
      for (const r of replicas) await waitStats(r, (s) => s.redis.entries >= n, `${r.name} mirrors the index`);

      // A long request of the victim's in flight when it dies (it may fail: the one allowed).
      const doomed = sessions.find((s) => s.who === victim);
      const inFlight = chat([...doomed.P, { role: 'user', content: 'Write a long answer.' }], doomed.key, 256).catch((e) => ({ status: 0, text: String(e) }));
      await sleep(150);
      const dead = replicas[victim];
      dead.proc.kill('SIGKILL');
      await dead.exited;
      const lost = await inFlight;
      process.stderr.write(`[failover] the request in flight on the killed replica: ${lost.status} ${(lost.text ?? '').slice(0, 120)}\n`);

      // Every session's next turn at once, before any health check has run against the dead one.
      const next = await Promise.all(sessions.map((s) => chat([...s.P, echo(s.r1.j.choices[0].message), { role: 'user', content: 'And the root cause?' }], s.key)));
      const l2 = await lookups();
      for (const [i, s] of sessions.entries()) {
        const r2 = next[i];
        assert.equal(r2.status, 200, `${s.key} (on r${s.who + 1}${s.who === victim ? ', killed' : ''}): ${r2.text}`);
        const want = hybrid ? { cached: s.r1.prompt - GEN, kind: 'turn' } : { cached: s.r1.prompt - GEN + RERENDER_SHARED, kind: 'prefix' };
        assert.equal(r2.cached, want.cached, `${s.key} (on r${s.who + 1}${s.who === victim ? ', killed' : ''}): ${JSON.stringify(r2.j.usage)}`);
        assert.equal(r2.hit, want.kind, s.key);
      }
      const moved = sessions.filter((s) => s.who === victim).length;
      const fromRedis = (await Promise.all(replicas.filter((r) => !r.exit).map(async (r) => (await r.cacheStats()).redis_hits)))
        .reduce((a, b) => a + b, 0);
      assert.ok(fromRedis >= moved, `${moved} sessions moved, ${fromRedis} restores from Redis; lookups ${l2}`);
    });
  });
}
