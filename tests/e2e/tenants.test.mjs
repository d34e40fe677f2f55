// Tenants (docs/prompt-cache.md "Tenants and access"): API keys from --api-key-file name tenants;
// the tenant is part of the prompt cache's bucket, so two tenants sharing a system prompt never hit
// each other's entries (cached_tokens 0 across tenants: no prompt-extraction oracle) while each
// hits its own (the positive case: the test fails with caching off); GET /v1/cache/stats shows a
// tenant its own figures and the admin key everything; POST /v1/cache/reset drops only the caller's
// entries (the admin key drops all), its disk-tier files included (after a restart the reset tenant
// restores nothing from disk while the other still does); GET /metrics needs the admin key; a
// stored Responses API response belongs to the tenant that created it (another tenant's GET, DELETE
// and previous_response_id get a 404 in the Responses error shape). Clients: the official `openai`
// npm package, one per key.
//
//   cd tests/e2e && node --test tenants.test.mjs
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import OpenAI from 'openai';

import { words } from './lib/chat.mjs';
import { FAMILY, GEN } from './lib/scenario.mjs';
import { ARCHS, makeAdapter, modelPath, startServer } from './lib/server.mjs';

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
/** The tokens a resend of a user turn leaves to compute: 1 (dense), the generation prompt (a
 *  hybrid restores the history boundary, into which its resend guard merged: --cache-guard-merge). */
const resendLeft = (arch) => (FAMILY[arch] === 'dense' ? 1 : GEN);

for (const arch of ARCHS) {
  describe(`tenants [${arch}]`, { timeout: 240_000 }, () => {
    let srv;
    let dir;
    let adapter;
    const client = {};
    const usage = { alice: [], bob: [] };
    before(async () => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lineage-tenants-'));
      const keyFile = path.join(dir, 'keys.txt');
      fs.writeFileSync(keyFile, KEY_FILE_TEXT);
      adapter = path.join(dir, 'adapter.gguf');
      makeAdapter(modelPath(arch), adapter, 2);
      srv = await startServer({ model: modelPath(arch), name: `tenants-${arch}`,
        args: ['--parallel', '1', '--ctx-size', '1024', '--api-key-file', keyFile, '--metrics', '--cache-disk=false',
          '--lora-scaled', `${adapter}:0`],
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
      assert.ok(cachedOf(a3) >= a1.usage.prompt_tokens - resendLeft(arch),
        `alice's resend restores all but at most its generation prompt: ${JSON.stringify(a3.usage)}`);
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
      // The scheme is case-insensitive (RFC 9110 section 11.1): "bearer KEY" is bob's key, and a
      // wrong key is refused however the scheme is spelled.
      for (const scheme of ['bearer', 'BEARER']) {
        const lower = await fetch(`${srv.url}/v1/cache/stats`, { headers: { Authorization: `${scheme} ${KEYS.bob}` } });
        const text = await lower.text();
        assert.equal(lower.status, 200, `${scheme}: ${text}`);
        assert.equal(JSON.parse(text).tenant, 'bob');
        const wrong = await fetch(`${srv.url}/v1/cache/stats`, { headers: { Authorization: `${scheme} sk-nobody` } });
        assert.equal(wrong.status, 401);
      }
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

    it('POST /lora-adapters needs the admin key; a tenant sees the adapters without their paths', async () => {
      const set = (key, scale) => srv.post('/lora-adapters', [{ id: 0, scale }], { Authorization: `Bearer ${key}` });
      // The whole reply (the tiny models may answer in reasoning_content only).
      const reply = async (name) => {
        const c = (await client[name].chat.completions.create(body('Name one colour.', { max_tokens: 8 }))).choices[0];
        return JSON.stringify([c.message, c.finish_reason]);
      };
      const before = await reply('bob');
      // A tenant's change of a server-wide setting is refused, and changes nothing for the others.
      const t = await set(KEYS.alice, 1);
      assert.equal(t.status, 403, t.text);
      assert.equal(t.json.error.code, 'admin_key_required');
      assert.match(t.json.error.message, /every tenant/);
      assert.equal(await reply('bob'), before, 'bob\'s output unchanged by alice\'s refused POST');
      const mine = await get('/lora-adapters', KEYS.alice);
      assert.equal(mine.status, 200, mine.text);
      assert.deepEqual(mine.json.map((a) => Object.keys(a).sort()), [['digest', 'id', 'scale']], 'no server path for a tenant');
      assert.equal(mine.json[0].scale, 0);
      assert.ok(!mine.text.includes(dir), mine.text);
      // The admin's change works (and the admin sees the path).
      const a = await set(KEYS.admin, 1);
      assert.equal(a.status, 200, a.text);
      const all = await get('/lora-adapters', KEYS.admin);
      assert.deepEqual(all.json.map(({ id, path: p, scale }) => ({ id, path: p, scale })), [{ id: 0, path: adapter, scale: 1 }]);
      assert.notEqual(await reply('bob'), before, 'the adapter applied at scale 1 changes the reply');
      assert.equal((await set(KEYS.admin, 0)).status, 200);
      assert.equal(await reply('bob'), before);
    });
  });
}

for (const arch of ARCHS) {
  describe(`tenants with the disk tier [${arch}]`, { timeout: 300_000 }, () => {
    let dir;
    let keyFile;
    let srv;
    const started = [];
    const start = async (name) => {
      srv = await startServer({ model: modelPath(arch), name: `tenants-disk-${name}-${arch}`,
        args: ['--parallel', '1', '--ctx-size', '1024', '--api-key-file', keyFile, '--cache-dir', path.join(dir, 'cache')],
        env: { LINEAGE_ADMIN_API_KEY: KEYS.admin } });
      started.push(srv);
      return srv;
    };
    const as = (who) => new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: KEYS[who], maxRetries: 0, timeout: 120_000 });
    const stats = async (who) => {
      const res = await fetch(`${srv.url}/v1/cache/stats`, { headers: { Authorization: `Bearer ${KEYS[who]}` } });
      assert.equal(res.status, 200);
      return res.json();
    };
    before(() => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lineage-tenants-disk-'));
      keyFile = path.join(dir, 'keys.txt');
      fs.writeFileSync(keyFile, KEY_FILE_TEXT);
    });
    after(async () => {
      for (const s of started) await s.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    });

    it("a tenant's reset deletes its disk files: after a restart it restores nothing, the other tenant still does", async () => {
      await start('a');
      const first = {};
      for (const who of ['alice', 'bob']) {
        first[who] = await as(who).chat.completions.create(body(`${who}: What are your opening hours?`));
        assert.equal(cachedOf(first[who]), 0, `${who}'s first request`);
      }
      await srv.stopGracefully();  // writes every entry to disk, each with its tenant
      await start('b');
      const files = (await stats('admin')).disk.files;
      assert.ok(files >= 2, `both tenants' entries on disk: ${files}`);
      const reset = await srv.post('/v1/cache/reset', {}, { Authorization: `Bearer ${KEYS.bob}` });
      assert.equal(reset.status, 200, reset.text);
      assert.equal(reset.json.tenant, 'bob');
      assert.ok(reset.json.disk_files_freed >= 1, `bob's files freed: ${reset.text}`);
      assert.ok(reset.json.disk_bytes_freed > 0, reset.text);
      const left = (await stats('admin')).disk.files;
      assert.equal(left, files - reset.json.disk_files_freed, 'only the freed files left the tier');
      assert.ok(left >= 1, "alice's files stay");
      await srv.stopGracefully();

      // Another restart: the reset held on disk (its rows went with the files).
      await start('c');
      assert.equal((await stats('admin')).disk.files, left);
      const b = await as('bob').chat.completions.create(body('bob: What are your opening hours?'));
      assert.equal(cachedOf(b), 0, `bob restores nothing after his reset: ${JSON.stringify(b.usage)}`);
      const a = await as('alice').chat.completions.create(body('alice: What are your opening hours?'));
      assert.ok(cachedOf(a) >= first.alice.usage.prompt_tokens - resendLeft(arch),
        `alice restores her conversation from disk: ${JSON.stringify(a.usage)}`);
      const g = await stats('admin');
      assert.ok(g.disk_hits >= 1, `a disk hit for alice: ${JSON.stringify(g.disk)}`);
      await srv.stopGracefully();
    });

    it("a stored response is its tenant's: another tenant's GET, DELETE and previous_response_id get 404", async () => {
      await start('d');
      const r1 = await as('alice').responses.create({ model: 'tiny', input: 'Remember the word tangerine.',
        max_output_tokens: 3, temperature: 0 });
      assert.match(r1.id, /^resp_/);  // stored (store defaults to true); 3 tokens: 'incomplete'
      const headers = (who) => ({ Authorization: `Bearer ${KEYS[who]}` });
      const notFound = async (res, param, code) => {
        assert.equal(res.status, 404, res.text);
        assert.deepEqual(Object.keys(res.json.error).sort(), ['code', 'message', 'param', 'type']);
        assert.equal(res.json.error.type, 'invalid_request_error');
        assert.equal(res.json.error.code, code);
        assert.equal(res.json.error.param, param);
        assert.match(res.json.error.message, new RegExp(r1.id));
      };
      for (const who of ['bob', 'admin']) {
        const got = await fetch(`${srv.url}/v1/responses/${r1.id}`, { headers: headers(who) });
        await notFound({ status: got.status, json: await got.json(), text: '' }, null, 'not_found');
        const cont = await srv.post('/v1/responses', { model: 'tiny', previous_response_id: r1.id, input: 'Which word?',
          max_output_tokens: 3 }, headers(who));
        await notFound(cont, 'previous_response_id', 'previous_response_not_found');
        const del = await fetch(`${srv.url}/v1/responses/${r1.id}`, { method: 'DELETE', headers: headers(who) });
        await notFound({ status: del.status, json: await del.json(), text: '' }, null, 'not_found');
      }
      await assert.rejects(as('bob').responses.retrieve(r1.id), (e) => e.status === 404);
      // Positive: alice (either key) reads and continues it; bob's DELETE above left it alone.
      const again = await as('alice2').responses.retrieve(r1.id);
      assert.equal(again.id, r1.id);
      const r2 = await as('alice').responses.create({ model: 'tiny', previous_response_id: r1.id, input: 'Which word?',
        max_output_tokens: 3, temperature: 0 });
      assert.equal(r2.previous_response_id, r1.id);
      assert.ok(r2.usage.input_tokens > r1.usage.input_tokens, 'the stored conversation was continued');
      await srv.stopGracefully();
    });
  });
}
