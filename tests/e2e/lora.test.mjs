// LoRA adapters (docs/prompt-cache.md "LoRA adapters") over real HTTP with the openai client, on
// the tiny hybrid (qwen35) and dense (qwen3) models: two random-weight adapters from
// lineage-mkmodel --lora-out, the per-request `lora` field, GET/POST /lora-adapters, and the cache
// key's lora_id. The same prompt P with adapter A, then B, then none, then A after its file
// changed: cached 0 at every change (the decision trace names "lora_id differs"), a hit when
// nothing changed; every output equals a cold run (cache_prompt: false) with the same adapter, and
// differs from the base model's (the adapter is applied).
//
//   cd tests/e2e && LINEAGE_MODELS_DIR=$PWD/../../build/models node --test lora.test.mjs
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { words } from './lib/chat.mjs';
import { FAMILY, SERVER_ARGS, Scenario, expectHit, replyOf, sys, user } from './lib/scenario.mjs';
import { ARCHS, makeAdapter, modelPath, startServer } from './lib/server.mjs';

const GEN = 8;

for (const arch of ARCHS) {
  describe(`LoRA adapters [${arch}]`, { timeout: 300_000 }, () => {
    let srv;
    let sc;
    let dir;
    let fileA;
    let fileB;
    before(async () => {
      const model = modelPath(arch);
      dir = fs.mkdtempSync(path.join(os.tmpdir(), `lineage-lora-${arch}-`));
      fileA = path.join(dir, 'a.gguf');
      fileB = path.join(dir, 'b.gguf');
      makeAdapter(model, fileA, 2);
      makeAdapter(model, fileB, 3);
      srv = await startServer({
        model, name: `lora-${arch}`,
        args: [...SERVER_ARGS, '--cache-trace', '--lora', fileA, '--lora-scaled', `${fileB}:0`],
      });
      sc = new Scenario(srv, arch);
    });
    after(async () => {
      await srv?.stopGracefully();
      if (dir) fs.rmSync(dir, { recursive: true, force: true });
    });

    const P = [sys(`You answer briefly. ${words(60, 161)}`), user(`Adapter test: ${words(30, 162)}`)];
    const A = { lora: [{ id: 0, scale: 1 }], max_tokens: GEN };
    const B = { lora: [{ id: 1, scale: 1 }], max_tokens: GEN };
    const NONE = { lora: [{ id: 0, scale: 0 }], max_tokens: GEN };
    const reply = (r) => replyOf(r.res);
    const sinceMark = (mark) => srv.log().slice(mark);
    // A verbatim resend restores all but one token: the resend checkpoint (hybrid) or a prefix
    // of the dense entry.
    const RESEND = FAMILY[arch] === 'hybrid' ? 'guard' : 'prefix';

    it('GET /lora-adapters lists the adapters with their startup scales', async () => {
      const r = await srv.get('/lora-adapters');
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(r.json.map(({ id, path: p, scale }) => ({ id, path: p, scale })),
        [{ id: 0, path: fileA, scale: 1 }, { id: 1, path: fileB, scale: 0 }]);
      assert.match(r.json[0].digest, /^[0-9a-f]{64}$/);
      assert.notEqual(r.json[0].digest, r.json[1].digest);
    });

    it('P with A, B, none, then A after its file changed: a miss at every change, a hit when nothing changed',
      async () => {
        await sc.reset();
        const a1 = await sc.ask('P with A', P, A);
        expectHit(a1, 0, 'miss');
        const a2 = await sc.ask('P with A again', P, A);
        expectHit(a2, a1.u.prompt - 1, RESEND);
        assert.deepEqual(reply(a2), reply(a1), 'a restore under A computes as the first run under A');
        const aCold = await sc.uncached('P with A, cache_prompt false', P, A);
        assert.deepEqual(reply(aCold), reply(a1), 'A restored == A cold');

        let mark = srv.log().length;
        const b1 = await sc.ask('P with B', P, B);
        expectHit(b1, 0, 'miss');
        assert.match(sinceMark(mark), /lora_id differs/, 'the decision trace names the dimension');
        const bCold = await sc.uncached('P with B, cache_prompt false', P, B);
        assert.deepEqual(reply(b1), reply(bCold), 'B == B cold');

        const n1 = await sc.ask('P with no adapter', P, NONE);
        expectHit(n1, 0, 'miss');
        const nCold = await sc.uncached('P with no adapter, cache_prompt false', P, NONE);
        assert.deepEqual(reply(n1), reply(nCold), 'none == none cold');
        assert.notDeepEqual(reply(a1), reply(n1), 'adapter A changes the output: it is applied');
        assert.notDeepEqual(reply(a1), reply(b1), 'adapters A and B give different outputs');
        expectHit(await sc.ask('P with no adapter again', P, NONE), n1.u.prompt - 1, RESEND);

        // A's file changes on disk: POST /lora-adapters re-reads it and reloads it.
        const before = (await srv.get('/lora-adapters')).json;
        makeAdapter(modelPath(arch), fileA, 4);
        const post = await srv.post('/lora-adapters', [{ id: 0, scale: 1 }]);
        assert.equal(post.status, 200, post.text);
        assert.deepEqual(post.json, { success: true, reloaded: [0] });
        const now = (await srv.get('/lora-adapters')).json;
        assert.notEqual(now[0].digest, before[0].digest, 'the new content has a new digest');
        assert.equal(now[1].digest, before[1].digest);
        mark = srv.log().length;
        const c1 = await sc.ask('P with A after its file changed', P, A);
        expectHit(c1, 0, 'miss');
        assert.match(sinceMark(mark), /lora_id differs/);
        const cCold = await sc.uncached('P with the new A, cache_prompt false', P, A);
        assert.deepEqual(reply(c1), reply(cCold), 'new A == new A cold');
        assert.notDeepEqual(reply(c1), reply(a1), 'the reloaded adapter is in use');
        expectHit(await sc.ask('P with the new A again', P, A), c1.u.prompt - 1, RESEND);
      });

    it('global scales (POST /lora-adapters) key like the same per-request lora', async () => {
      await sc.reset();
      const b1 = await sc.ask('P with B per request', P, B);
      expectHit(b1, 0, 'miss');
      const set = await srv.post('/lora-adapters', [{ id: 1, scale: 1 }]);
      assert.deepEqual(set.json, { success: true, reloaded: [] });
      const scales = (await srv.get('/lora-adapters')).json.map((e) => e.scale);
      assert.deepEqual(scales, [0, 1], 'adapters a POST does not name go to 0');
      const g = await sc.ask('P with the global scales (B)', P, { max_tokens: GEN });
      expectHit(g, b1.u.prompt - 1, RESEND);
      assert.deepEqual(reply(g), reply(b1));
      const off = await srv.post('/lora-adapters', []);
      assert.equal(off.status, 200, off.text);
      const n = await sc.ask('P with every scale 0', P, { max_tokens: GEN });
      expectHit(n, 0, 'miss');
    });

    it('requests with different adapters in flight together each equal their cold run', async () => {
      await sc.reset();
      const bodies = [A, B, NONE].map((x) => ({ model: 'tiny', messages: P, temperature: 0, ...x, cache_prompt: false }));
      const cold = [];
      for (const b of bodies) cold.push(await srv.openai.chat.completions.create(b));
      const together = await Promise.all(bodies.map((b) => srv.openai.chat.completions.create(b)));
      for (let i = 0; i < bodies.length; i++) {
        assert.deepEqual(together[i].choices[0].message.content, cold[i].choices[0].message.content, `request ${i}`);
      }
    });

    it('/v1/messages takes the same lora field', async () => {
      const body = (lora) => ({ model: 'tiny', max_tokens: GEN, temperature: 0, system: P[0].content,
        messages: [{ role: 'user', content: P[1].content }], lora });
      const text = (r) => JSON.stringify(r.json.content);
      const a = await srv.post('/v1/messages', body([{ id: 0, scale: 1 }]));
      assert.equal(a.status, 200, a.text);
      const n = await srv.post('/v1/messages', body([{ id: 0, scale: 0 }]));
      assert.equal(n.status, 200, n.text);
      const aCold = await srv.post('/v1/messages', { ...body([{ id: 0, scale: 1 }]), cache_prompt: false });
      assert.equal(text(a), text(aCold));
      assert.notEqual(text(a), text(n), 'adapter A changes the Messages reply');
      const bad = await srv.post('/v1/messages', body([{ id: 7, scale: 1 }]));
      assert.equal(bad.status, 400, bad.text);
      assert.equal(bad.json.type, 'error');
      assert.match(bad.json.error.message, /lora/);
    });

    it('bad lora fields get a 400 that names them', async () => {
      const r = await srv.post('/v1/chat/completions',
        { model: 'tiny', messages: P, max_tokens: 1, lora: [{ id: 7, scale: 1 }] });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.param, 'lora');
      assert.match(r.json.error.message, /2 LoRA adapter/);
      const t = await srv.post('/v1/chat/completions', { model: 'tiny', messages: P, max_tokens: 1, lora: { id: 0 } });
      assert.equal(t.status, 400, t.text);
      assert.equal(t.json.error.param, 'lora');
      const p = await srv.post('/lora-adapters', { id: 0, scale: 1 });
      assert.equal(p.status, 400, p.text);
      const q = await srv.post('/lora-adapters', [{ id: 9, scale: 1 }]);
      assert.equal(q.status, 400, q.text);
    });
  });
}
