// A retry right after a dropped stream, through deploy/haproxy.cfg (issue #56: "a retry behind the
// proxy restores as on one server"). As retry.test.mjs, but the client talks to HAProxy, which
// routes the conversation by its prompt_cache_key to one replica: the replica sees HAProxy's
// connection, not the client's, so it learns of the drop only once HAProxy closes its side
// (option abortonclose). The retry restores the whole prompt but one token (a hybrid: all but the
// generation prompt) in every trial, as on one server.
//
//   cd tests/e2e && node --test retry-proxy.test.mjs
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import OpenAI from 'openai';

import { startHaproxy } from './lib/haproxy.mjs';
import { dropThenRetry } from './lib/retry.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const TRIALS = Number(process.env.LINEAGE_E2E_RETRY_TRIALS || 16);


for (const arch of ARCHS) {
  describe(`retry after a dropped stream, through HAProxy [${arch}]`, { timeout: 300_000 }, () => {
    let srv, proxy, lb;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `retry-proxy-${arch}`, args: ['--parallel', '3', '--ctx-size', '4096'] });
      proxy = await startHaproxy(`retry-proxy-haproxy-${arch}`, [Number(new URL(srv.url).port)]);
      lb = proxy.url;
    });
    after(async () => {
      await proxy?.stop();
      await srv?.stopGracefully();
    });

    it(`restores the whole prompt but one token in ${TRIALS} of ${TRIALS} trials`, async () => {
      const client = new OpenAI({ baseURL: `${lb}/v1`, apiKey: 'sk-none', maxRetries: 0, timeout: 120_000 });
      const short = await dropThenRetry(srv, client, { trials: TRIALS, seedBase: 2000, extra: (t) => ({ prompt_cache_key: `retry-${t}` }) });
      srv.assertAlive();
      const raced = (srv.log().match(/retry hold/g) ?? []).length;
      process.stderr.write(`[retry-proxy] ${arch}: ${raced} retry hold lines, ${short.length} of ${TRIALS} short\n`);
      assert.deepEqual(short, [], `retries that restored short:\n${srv.logTail(40)}`);
    });
  });
}
