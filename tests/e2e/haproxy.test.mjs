// Routing replicas with HAProxy (docs/prompt-cache.md "Tier 3: Redis shared by replicas"):
// deploy/haproxy.cfg in front of two lineage-server replicas sharing a redis-server (all on
// loopback, started here, stopped by PID). A session (prompt_cache_key, X-Session-Id, Anthropic
// metadata.user_id) stays on one replica turn after turn; when that replica stops, the health
// checks take it out and the session's next turn is served by the other replica, restored from
// Redis with the cached_tokens one server gives.
//
//   cd tests/e2e && LINEAGE_MODELS_DIR=$PWD/../../build/models node --test haproxy.test.mjs
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { echo, words } from './lib/chat.mjs';
import { startHaproxy } from './lib/haproxy.mjs';
import { startRedis } from './lib/redis.mjs';
import { FAMILY, GEN, RERENDER_SHARED, SERVER_ARGS, SYSTEM } from './lib/scenario.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const arch = ARCHS[0];
const hybrid = FAMILY[arch] === 'hybrid';

describe(`HAProxy in front of two replicas sharing Redis [${arch}]`, { timeout: 300_000 }, () => {
  let redis, proxy, lb;
  const replicas = [];
  before(async () => {
    redis = await startRedis(`haproxy-${arch}`);
    const args = [...SERVER_ARGS, '--cache-disk=false', '--cache-redis', redis.url, '--cache-disk-idle-s', '0'];
    for (const name of ['r1', 'r2']) {
      replicas.push(await startServer({ model: modelPath(arch), name: `haproxy-${name}-${arch}`, args }));
    }
    proxy = await startHaproxy(`haproxy-${arch}`, replicas.map((r) => Number(new URL(r.url).port)), { waitPath: '/health' });
    lb = proxy.url;
  });
  after(async () => {
    await proxy?.stop();
    for (const r of replicas) await r.stop();
    await redis?.kill();
  });

  /** POST through the balancer; returns the parsed reply. */
  async function chat(messages, extra = {}, headers = {}) {
    const res = await fetch(`${lb}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: 'tiny', messages, max_tokens: 4, temperature: 0, ...extra }),
    });
    assert.equal(res.status, 200, await res.clone().text());
    const j = await res.json();
    return { j, cached: j.usage.prompt_tokens_details?.cached_tokens ?? 0, prompt: j.usage.prompt_tokens, hit: j.timings.cache_hit };
  }
  const lookups = async () => Promise.all(replicas.map(async (r) => (r.exit ? null : (await r.cacheStats()).lookups)));
  /** Index of the replica whose lookups grew by `n` while the others' did not. */
  function servedBy(before, afterCounts, n) {
    const grew = afterCounts.map((a, i) => (a === null ? 0 : a - before[i]));
    const who = grew.findIndex((g) => g === n);
    assert.ok(who >= 0 && grew.reduce((x, y) => x + y, 0) === n, `lookups before ${before}, after ${afterCounts}`);
    return who;
  }

  for (const [what, extra, headers] of [
    ['prompt_cache_key', (k) => ({ prompt_cache_key: k }), () => ({})],
    ['X-Session-Id', () => ({}), (k) => ({ 'X-Session-Id': k })],
    ['user', (k) => ({ user: k }), () => ({})],
  ]) {
    it(`a session keyed by ${what} stays on one replica, turn after turn`, async () => {
      for (const key of ['alpha', 'bravo', 'charlie']) {
        const msgs = [{ role: 'system', content: SYSTEM(7) }, { role: 'user', content: `${key}: ${words(30, key.length)}` }];
        const l0 = await lookups();
        await chat(msgs, extra(key), headers(key));
        const r2 = await chat([...msgs, { role: 'assistant', content: 'ok' }, { role: 'user', content: 'more' }], extra(key), headers(key));
        servedBy(l0, await lookups(), 2);
        assert.ok(r2.cached > 0, `turn 2 of ${key} restored nothing`);
      }
    });
  }

  it('Anthropic metadata.user_id keys a session too', async () => {
    const body = (text) => ({ model: 'tiny', max_tokens: 4, system: SYSTEM(8), metadata: { user_id: 'user-42' },
      messages: [{ role: 'user', content: text }] });
    const l0 = await lookups();
    for (const text of ['first', 'second', 'third']) {
      const res = await fetch(`${lb}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body(text)) });
      assert.equal(res.status, 200, await res.text());
    }
    servedBy(l0, await lookups(), 3);
  });

  it('the replica serving a session stops: the next turn goes to the other one, restored from Redis', async () => {
    const key = 'failover';
    const P = [{ role: 'system', content: SYSTEM(9) }, { role: 'user', content: `Summarise: ${words(60, 10)}` }];
    const l0 = await lookups();
    const r1 = await chat(P, { prompt_cache_key: key });
    const who = servedBy(l0, await lookups(), 1);
    const other = 1 - who;
    await replicas[who].stop();  // SIGTERM: what it had not written goes to Redis
    const mirrored = await (async () => {
      for (let i = 0; i < 100; i++) {
        const s = await replicas[other].cacheStats();
        if (s.redis.entries >= Number(redis.cli('ZCARD', 'lineage:index').trim())) return s;
        await sleep(100);
      }
      return null;
    })();
    assert.ok(mirrored, 'the other replica mirrors the index');
    await sleep(2500);  // two failed health checks, 1 s apart
    const before = mirrored.redis_hits;
    const msgs = [...P, echo(r1.j.choices[0].message), { role: 'user', content: 'And the root cause?' }];
    const r2 = await chat(msgs, { prompt_cache_key: key });
    const want = hybrid ? { cached: r1.prompt - GEN, kind: 'turn' } : { cached: r1.prompt - GEN + RERENDER_SHARED, kind: 'prefix' };
    assert.equal(r2.cached, want.cached, JSON.stringify(r2.j.usage));
    assert.equal(r2.hit, want.kind);
    assert.equal((await replicas[other].cacheStats()).redis_hits, before + 1);
  });
});
