// A retry right after a dropped stream, for the tiny hybrid (qwen35) and tiny dense (qwen3)
// models: a client aborts a stream after two content deltas and sends the same request again at
// once; the retry restores the whole prompt but one token (cached_tokens == prompt_tokens - 1;
// a hybrid, all but the generation prompt: lib/agents.mjs resendCached) in every trial, although the dropped request may still be decoding when the retry arrives
// (the retry hold: docs/architecture.md "Retries"). Each trial is a new conversation, so only
// the dropped request's own entry can serve the retry. Another client keeps the engine busy
// with long cold prefills meanwhile, so that each decode step of the dropped request takes a
// prefill chunk's time, as on a real model: its HTTP thread then notices the dropped client only
// after the retry has arrived (the server log shows "retry hold" lines). The retry answers as a
// cold run.
//
//   cd tests/e2e && node --test retry.test.mjs
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { usageOf } from './lib/chat.mjs';
import { resendCached } from './lib/agents.mjs';
import { dropThenRetry, retryMessages } from './lib/retry.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const TRIALS = Number(process.env.LINEAGE_E2E_RETRY_TRIALS || 24);


for (const arch of ARCHS) {
  describe(`retry after a dropped stream [${arch}]`, { timeout: 300_000 }, () => {
    let srv;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `retry-${arch}`, args: ['--parallel', '3', '--ctx-size', '4096'] });
    });
    after(async () => { await srv?.stopGracefully(); });

    it(`restores the whole prompt but one token in ${TRIALS} of ${TRIALS} trials`, async () => {
      const short = await dropThenRetry(srv, srv.openai, { trials: TRIALS, seedBase: 1000 });
      srv.assertAlive();
      const raced = (srv.log().match(/retry hold/g) ?? []).length;
      process.stderr.write(`[retry] ${arch}: ${raced} of ${TRIALS} retries arrived before the drop was noticed\n`);
      assert.deepEqual(short, [], `retries that restored short:\n${srv.logTail(40)}`);
    });

    it('the retried reply equals a cold run', async () => {
      const body = { model: 'tiny', messages: retryMessages(7), max_tokens: 200, temperature: 0 };
      const ac = new AbortController();
      const stream = await srv.openai.chat.completions.create({ ...body, stream: true }, { signal: ac.signal });
      let n = 0;
      try {
        for await (const _chunk of stream) { if (++n === 3) ac.abort(); }
      } catch (e) {
        assert.ok(ac.signal.aborted, `${e}`);
      }
      const retry = await srv.openai.chat.completions.create({ ...body, max_tokens: 12 });
      const cold = await srv.openai.chat.completions.create({ ...body, max_tokens: 12, cache_prompt: false });
      assert.equal(usageOf(retry).cached, await resendCached(srv, body, usageOf(retry).prompt));
      assert.deepEqual(retry.choices[0].message, cold.choices[0].message);
      assert.equal(retry.choices[0].finish_reason, cold.choices[0].finish_reason);
    });
  });
}
