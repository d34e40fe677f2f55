// Why a turn was slow, in the response itself (docs/prompt-cache.md "Per response"): every miss
// cause appears in `timings.cache_miss_reason`, and a hit says where its tokens came from in
// `timings.cache_tier` (the positive case: with the cache off no request would name a tier).
// One server per family, two tenants (API keys), at most one entry (so that an entry is evicted
// by the next one), no warm-up, no message rungs or last-user checkpoint (hybrid: an edit near
// the end of the only user message then has no restore point in reach):
//  - a fresh prompt -> no_shared_prefix
//  - the same prompt from the other tenant -> key_differs:tenant
//  - another prompt of the first tenant's (no_shared_prefix), then its first prompt again, its
//    entry evicted since -> evicted
//  - and again -> a hit from the device or RAM tier, no miss reason
//  - cache_prompt false -> bypassed
//  - a short prompt that is the start of the stored one, shorter than --prompt-cache-min-prefix
//    -> below_min_prefix
//  - (hybrid) the stored prompt with its last words edited -> before_first_restore_point; (dense)
//    the same restores the shared prefix from the entry, no miss reason
//
//   cd tests/e2e && node --test miss-reasons.test.mjs
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { words } from './lib/chat.mjs';
import { FAMILY, GEN } from './lib/scenario.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const KEYS = { alice: 'sk-alice-reasons-0123', bob: 'sk-bob-reasons-0123' };
const MIN_PREFIX = 100;
const CONTENT = words(260, 41);

for (const arch of ARCHS) {
  describe(`the miss reason in each response [${arch}]`, { timeout: 240_000 }, () => {
    let srv;
    let dir;
    before(async () => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lineage-reasons-'));
      const keyFile = path.join(dir, 'keys.txt');
      fs.writeFileSync(keyFile, `${KEYS.alice} alice\n${KEYS.bob} bob\n`);
      srv = await startServer({
        model: modelPath(arch), name: `reasons-${arch}`,
        args: ['--parallel', '1', '--ctx-size', '2048', '--api-key-file', keyFile, '--cache-disk=false',
          '--cache-warmup=false', '--prompt-cache-min-prefix', String(MIN_PREFIX),
          '--prompt-cache-max-entries', '1', '--prompt-cache-snapshot-max-entries', '1',
          '--cache-message-rungs', '0', '--cache-last-user-checkpoint=false'],
      });
    });
    after(async () => {
      await srv?.stopGracefully();
      fs.rmSync(dir, { recursive: true, force: true });
    });

    const ask = async (who, content, extra = {}) => {
      const r = await srv.post('/v1/chat/completions', {
        model: 'tiny', messages: [{ role: 'user', content }], max_tokens: 2, temperature: 0, ...extra,
      }, { authorization: `Bearer ${KEYS[who]}` });
      assert.equal(r.status, 200, r.text);
      const t = r.json.timings;
      assert.ok('cache_tier' in t && 'cache_miss_reason' in t, JSON.stringify(t));
      return { ...t, prompt: r.json.usage.prompt_tokens };
    };
    const promptTokens = async (content) => {
      const headers = { authorization: `Bearer ${KEYS.alice}` };
      const t = await srv.post('/apply-template', { messages: [{ role: 'user', content }] }, headers);
      const k = await srv.post('/tokenize', { content: t.json.prompt }, headers);
      return k.json.tokens.length;
    };

    it('every miss cause, and the tier of a hit', async () => {
      const first = await ask('alice', CONTENT);
      assert.ok(first.prompt > 2 * MIN_PREFIX, `premise: the prompt (${first.prompt} tokens) is long`);
      assert.deepEqual([first.cache_hit, first.cache_tier, first.cache_miss_reason], ['miss', null, 'no_shared_prefix']);

      const other = await ask('bob', CONTENT);
      assert.deepEqual([other.cached_n, other.cache_tier, other.cache_miss_reason], [0, null, 'key_differs:tenant']);

      // Bob's entry took the only place (alice's was evicted); another prompt of alice's takes it
      // from bob's. Alice's first prompt again: only the record of her evicted entry shares it.
      const fresh = await ask('alice', words(200, 77));
      assert.equal(fresh.cache_miss_reason, 'no_shared_prefix');
      const back = await ask('alice', CONTENT);
      assert.deepEqual([back.cached_n, back.cache_miss_reason], [0, 'evicted']);

      // The positive case: the same prompt again restores all but the last token (the entry
      // just stored; a hybrid, all but the generation prompt: its history boundary, into which the
      // resend guard merged), from the device (parked) or RAM tier, with no miss reason.
      const hit = await ask('alice', CONTENT);
      assert.equal(hit.cached_n, hit.prompt - (FAMILY[arch] === 'dense' ? 1 : GEN), JSON.stringify(hit));
      assert.ok(['device', 'ram'].includes(hit.cache_tier), JSON.stringify(hit));
      assert.equal(hit.cache_miss_reason, null);

      const bypass = await ask('alice', CONTENT, { cache_prompt: false });
      assert.deepEqual([bypass.cached_n, bypass.cache_tier, bypass.cache_miss_reason], [0, null, 'bypassed']);

      // A short prompt, the start of the stored one, shorter than --prompt-cache-min-prefix.
      const all = CONTENT.split(' ');
      let n = 40;
      while (n > 4 && await promptTokens(all.slice(0, n).join(' ')) > MIN_PREFIX - 10) n -= 6;
      const short = await ask('alice', all.slice(0, n).join(' '));
      assert.ok(short.prompt < MIN_PREFIX, `premise: ${short.prompt} tokens < ${MIN_PREFIX}`);
      assert.deepEqual([short.cached_n, short.cache_tier, short.cache_miss_reason], [0, null, 'below_min_prefix']);

      // The stored prompt with its last words edited.
      const edited = [...all.slice(0, all.length - 12), ...words(12, 99).split(' ')].join(' ');
      const edit = await ask('alice', edited);
      if (FAMILY[arch] === 'dense') {
        // Dense: any prefix of the entry's KV restores, up to where the edit starts.
        assert.ok(edit.cached_n > edit.prompt - 40, JSON.stringify(edit));
        assert.equal(edit.cache_miss_reason, null);
        assert.ok(['device', 'ram'].includes(edit.cache_tier), JSON.stringify(edit));
      } else {
        // Hybrid: the entry's restore points are its history boundary and its end, both past
        // the edit; nothing in reach (a short hit or a miss).
        assert.ok(edit.cached_n < edit.prompt - 64, JSON.stringify(edit));
        assert.equal(edit.cache_miss_reason, 'before_first_restore_point', JSON.stringify(edit));
      }
    });
  });
}
