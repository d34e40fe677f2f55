// The retry race of a dropped stream (retry.test.mjs, directly; retry-proxy.test.mjs, through
// HAProxy): a streamed request dropped by its client after two deltas, then the same request
// sent again at once, while another client keeps the engine busy with long cache-bypassing
// prefills, so that the drop is noticed late.
import assert from 'node:assert/strict';

import { assertCompletion, usageOf, words } from './chat.mjs';
import { resendCached } from './agents.mjs';

/** The trial conversation of `seed`: a system prompt of 50 words and a user message of 25. */
export function retryMessages(seed) {
  return [
    { role: 'system', content: `You are a helpful assistant. ${words(50, seed)}` },
    { role: 'user', content: words(25, seed + 1) },
  ];
}

/** Runs `trials` drop-then-retry trials through `client` (an openai client on `srv` or on a proxy
 *  in front of it), trial t on retryMessages(seedBase + 10 t) with the fields of `extra(t)`; the
 *  background load goes to `srv` directly. Returns the retries that restored other than a resend
 *  of the same request restores on `srv` (resendCached): [{trial, prompt, cached, want}]. */
export async function dropThenRetry(srv, client, { trials, seedBase, extra = () => ({}) }) {
  const short = [];
  let loading = true;
  const load = (async () => {
    const long = [{ role: 'user', content: words(2300, 5) }];
    while (loading) {
      await srv.openai.chat.completions.create({ model: 'tiny', messages: long, max_tokens: 1, cache_prompt: false });
    }
  })();
  try {
    for (let t = 0; t < trials; t++) {
      const body = { model: 'tiny', messages: retryMessages(seedBase + 10 * t), max_tokens: 400, temperature: 0, ...extra(t) };
      const ac = new AbortController();
      const stream = await client.chat.completions.create({ ...body, stream: true }, { signal: ac.signal });
      let deltas = 0;
      try {
        for await (const chunk of stream) {
          const d = chunk.choices?.[0]?.delta ?? {};
          if ((d.content ?? '') + (d.reasoning_content ?? '') !== '' && ++deltas === 2) ac.abort();
        }
      } catch (e) {
        assert.ok(ac.signal.aborted, `trial ${t}: the stream failed before the client dropped it: ${e}`);
      }
      assert.ok(ac.signal.aborted, `trial ${t}: the stream ended before two deltas`);
      const retry = await client.chat.completions.create({ ...body, max_tokens: 4 });
      assertCompletion(retry, { maxTokens: 4 }, `trial ${t} retry`);
      const u = usageOf(retry);
      const want = await resendCached(srv, body, u.prompt);
      if (u.cached !== want) short.push({ trial: t, prompt: u.prompt, cached: u.cached, want });
    }
  } finally {
    loading = false;
    await load;
  }
  return short;
}
