// Tenants (issue 15 "Isolation and access"): API keys from --api-key-file name tenants; the
// tenant is part of the prompt cache's bucket, so two tenants sharing a system prompt never hit
// each other's entries (cached_tokens 0 across tenants: no prompt-extraction oracle) while each
// hits its own (the positive case: the test fails with caching off); GET /v1/cache/stats shows a
// tenant its own figures and the admin key everything; POST /v1/cache/reset drops only the
// caller's entries (the admin key drops all); GET /metrics needs the admin key. Clients: the
// official `openai` npm package, one per key.
//
//   cd tests/e2e && node --test tenants.test.mjs
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import OpenAI from 'openai';

import { words } from './lib/chat.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const KEYS = { alice: 'sk-alice-0123456789', alice2: 'sk-alice-second-key', bob: 'sk-bob-0123456789', admin: 'sk-admin-0123456789' };
const KEY_FILE_TEXT = [
  '# lineage tenants: KEY TENANT',
  '',
  `${KEYS.alice} alice`,
  `   ${KEYS.alice2}\talice`,
  `${KEYS.bob} bob`,
  '',
].join('\n');

// The same long system prompt for both tenants (the anchor both would share without tenants).
const SYSTEM = `You are the support assistant of a fictional company. ${words(160, 11)}`;
const body = (user, extra = {}) => ({
  model: 'tiny',
  messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: user }],
  max_tokens: 3,
  temperature: 0,
  ...extra,
});
const cachedOf = (res) => res.usage.prompt_tokens_details?.cached_tokens ?? 0;

for (const arch of ARCHS) {
  describe(`tenants [${arch}]`, { timeout: 240_000 }, () => {
    let srv;
    let dir;
    const client = {};
    const usage = { alice: [], bob: [] };
    before(async () => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lineage-tenants-'));
      const keyFile = path.join(dir, 'keys.txt');
      fs.writeFileSync(keyFile, KEY_FILE_TEXT);
      srv = await startServer({ model: modelPath(arch), name: `tenants-${arch}`,
        args: ['--parallel', '1', '--ctx-size', '1024', '--api-key-file', keyFile, '--metrics', '--cache-disk=false'],
        env: { LINEAGE_ADMIN_API_KEY: KEYS.admin } });
      for (const [name, key] of Object.entries(KEYS)) {
        client[name] = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: key, maxRetries: 0, timeout: 120_000 });
      }
    });
    after(async () => { await srv?.stopGracefully(); fs.rmSync(dir, { recursive: true, force: true }); });

    const get = async (pathname, key) => {
      const res = await fetch(srv.url + pathname, { headers: key ? { Authorization: `Bearer ${key}` } : {} });
      const text = await res.text();
      let json;
      try { json = JSON.parse(text); } catch { json = undefined; }
      return { status: res.status, text, json };
    };
    const post = (pathname, key) => srv.post(pathname, {}, { Authorization: `Bearer ${key}` });
    const chat = async (who, tenant, user) => {
      const res = await client[who].chat.completions.create(body(user));
      usage[tenant].push(res.usage);
      return res;
    };

    it('no hit across tenants sharing a system prompt; hits within a tenant (both of its keys)', async () => {
      const a1 = await chat('alice', 'alice', 'What are your opening hours?');
      assert.equal(cachedOf(a1), 0, 'first request of the server');
      const a2 = await chat('alice2', 'alice', 'Where is your office?');
      assert.ok(cachedOf(a2) > 0, `alice's second key shares alice's cache: ${JSON.stringify(a2.usage)}`);
      // Bob sends alice's very first request, as a guess of her system prompt would: a full hit
      // for alice, nothing for bob (before tenants, cached_tokens told him how much he guessed).
      const b1 = await chat('bob', 'bob', 'What are your opening hours?');
      assert.equal(cachedOf(b1), 0, `bob must not restore alice's entries: ${JSON.stringify(b1.usage)}`);
      const b2 = await chat('bob', 'bob', 'Where is your office?');
      assert.ok(cachedOf(b2) > 0, `bob hits his own entry: ${JSON.stringify(b2.usage)}`);
      const a3 = await chat('alice', 'alice', 'What are your opening hours?');
      assert.ok(cachedOf(a3) >= a1.usage.prompt_tokens - 1, `alice's resend restores all but at most one token: ${JSON.stringify(a3.usage)}`);
    });

    it('GET /v1/cache/stats: a tenant sees its own figures, the admin all of them', async () => {
      const sum = (list, f) => list.reduce((n, u) => n + f(u), 0);
      for (const [who, tenant] of [['alice', 'alice'], ['alice2', 'alice'], ['bob', 'bob']]) {
        const r = await get('/v1/cache/stats', KEYS[who]);
        assert.equal(r.status, 200, r.text);
        const s = r.json;
        assert.equal(s.tenant, tenant);
        assert.equal(s.requests, usage[tenant].length);
        assert.equal(s.prompt_tokens, sum(usage[tenant], (u) => u.prompt_tokens));
        assert.equal(s.cached_tokens, sum(usage[tenant], (u) => u.prompt_tokens_details?.cached_tokens ?? 0));
        assert.equal(s.completion_tokens, sum(usage[tenant], (u) => u.completion_tokens));
        assert.ok(s.entries >= 1, `${tenant} has entries: ${r.text}`);
        assert.ok(s.bytes > 0, r.text);
        for (const global of ['lookups', 'hits', 'tokens_reused', 'disk', 'evictions', 'tenants']) {
          assert.equal(s[global], undefined, `a tenant must not see the global '${global}': ${r.text}`);
        }
      }
      const r = await get('/v1/cache/stats', KEYS.admin);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.tenants.alice.requests, usage.alice.length);
      assert.equal(r.json.tenants.bob.requests, usage.bob.length);
      assert.equal(r.json.entries + r.json.anchors,
        r.json.tenants.alice.entries + r.json.tenants.alice.anchors + r.json.tenants.bob.entries + r.json.tenants.bob.anchors);
      assert.ok(r.json.lookups >= usage.alice.length + usage.bob.length, r.text);
      assert.equal((await get('/v1/cache/stats')).status, 401);
      assert.equal((await get('/v1/cache/stats', 'sk-nobody')).status, 401);
    });

    it('POST /v1/cache/reset with a tenant key drops only that tenant; the admin key drops all', async () => {
      const bobBefore = (await get('/v1/cache/stats', KEYS.bob)).json;
      const aliceBefore = (await get('/v1/cache/stats', KEYS.alice)).json;
      assert.ok(bobBefore.entries > 0 && aliceBefore.entries > 0);
      const r = await post('/v1/cache/reset', KEYS.bob);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.tenant, 'bob');
      assert.equal(r.json.entries_freed, bobBefore.entries + bobBefore.anchors);
      assert.equal(r.json.bytes_freed, bobBefore.bytes);
      const bobAfter = (await get('/v1/cache/stats', KEYS.bob)).json;
      assert.equal(bobAfter.entries, 0);
      assert.equal(bobAfter.bytes, 0);
      const aliceAfter = (await get('/v1/cache/stats', KEYS.alice)).json;
      assert.equal(aliceAfter.entries, aliceBefore.entries, "alice's entries stay");
      assert.equal(aliceAfter.bytes, aliceBefore.bytes);
      const b = await chat('bob', 'bob', 'Where is your office?');
      assert.equal(cachedOf(b), 0, `bob's cache is empty after his reset: ${JSON.stringify(b.usage)}`);
      const a = await chat('alice2', 'alice', 'Where is your office?');
      assert.ok(cachedOf(a) > 0, `alice still hits: ${JSON.stringify(a.usage)}`);

      const all = await post('/v1/cache/reset', KEYS.admin);
      assert.equal(all.status, 200, all.text);
      assert.equal(all.json.tenant, undefined);
      const g = (await get('/v1/cache/stats', KEYS.admin)).json;
      assert.equal(g.entries + g.anchors, 0, JSON.stringify(g));
      const a2 = await chat('alice', 'alice', 'Where is your office?');
      assert.equal(cachedOf(a2), 0, 'nothing left after the admin reset');
    });

    it('GET /metrics needs the admin key', async () => {
      const t = await get('/metrics', KEYS.alice);
      assert.equal(t.status, 403, t.text);
      assert.equal(t.json.error.code, 'admin_key_required');
      assert.equal((await get('/metrics')).status, 401);
      const m = await get('/metrics', KEYS.admin);
      assert.equal(m.status, 200, m.text);
      assert.match(m.text, /^lineage_/m);
    });
  });
}
