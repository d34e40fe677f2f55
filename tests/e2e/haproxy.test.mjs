// Routing replicas with HAProxy (docs/prompt-cache.md "Tier 3: Redis shared by replicas"):
// deploy/haproxy.cfg in front of two lineage-server replicas sharing a redis-server (all on
// loopback, started here, stopped by PID). A session (prompt_cache_key, X-Session-Id, Anthropic
// metadata.user_id) stays on one replica turn after turn; when that replica stops, the health
// checks take it out and the session's next turn is served by the other replica, restored from
// Redis with the cached_tokens one server gives.
//
//   cd tests/e2e && LINEAGE_MODELS_DIR=$PWD/../../build/models node --test haproxy.test.mjs
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { echo, words } from './lib/chat.mjs';
import { startRedis } from './lib/redis.mjs';
import { FAMILY, GEN, RERENDER_SHARED, SERVER_ARGS, SYSTEM } from './lib/scenario.mjs';
import { ARCHS, LOG_DIR, REPO_ROOT, freePort, modelPath, startServer } from './lib/server.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const arch = ARCHS[0];
const hybrid = FAMILY[arch] === 'hybrid';

/** deploy/haproxy.cfg with one server line per port, checked with haproxy -c. */
function haproxyConfig(ports, bind) {
  const lines = ports.map((p, i) => `    server r${i + 1} 127.0.0.1:${p} check`).join('\n');
  const cfg = fs.readFileSync(path.join(REPO_ROOT, 'deploy/haproxy.cfg'), 'utf8').replace(/^ {4}# @SERVERS@$/m, lines);
  assert.notEqual(cfg.indexOf('server r2'), -1, 'the SERVERS marker was replaced');
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'lineage-haproxy-')), 'haproxy.cfg');
  fs.writeFileSync(file, cfg);
  const c = spawnSync('haproxy', ['-c', '-f', file], { encoding: 'utf8', env: { ...process.env, LINEAGE_LB_BIND: bind } });
  assert.equal(c.status, 0, `haproxy -c: ${c.stdout}${c.stderr}`);
  return file;
}

describe(`HAProxy in front of two replicas sharing Redis [${arch}]`, { timeout: 300_000 }, () => {
  let redis, lbProc, lb;
  const replicas = [];
  before(async () => {
    redis = await startRedis(`haproxy-${arch}`);
    const args = [...SERVER_ARGS, '--cache-disk=false', '--cache-redis', redis.url, '--cache-disk-idle-s', '0'];
    for (const name of ['r1', 'r2']) {
      replicas.push(await startServer({ model: modelPath(arch), name: `haproxy-${name}-${arch}`, args }));
    }
    const port = await freePort();
    const bind = `127.0.0.1:${port}`;
    const cfg = haproxyConfig(replicas.map((r) => Number(new URL(r.url).port)), bind);
    fs.mkdirSync(LOG_DIR, { recursive: true });
    const log = fs.openSync(path.join(LOG_DIR, `haproxy-${arch}.log`), 'a');
    lbProc = spawn('haproxy', ['-f', cfg], { stdio: ['ignore', log, log], env: { ...process.env, LINEAGE_LB_BIND: bind } });
    lb = `http://${bind}`;
    for (let i = 0; i < 100; i++) {
      try {
        if ((await fetch(`${lb}/health`)).status === 200) break;
      } catch { /* not up yet */ }
      await sleep(100);
    }
  });
  after(async () => {
    if (lbProc && lbProc.exitCode === null) {
      process.kill(lbProc.pid, 'SIGTERM');
      await new Promise((r) => lbProc.on('exit', r));
    }
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
