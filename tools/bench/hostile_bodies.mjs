// The hostile request bodies of tools/bench/hostile.mjs and the soak's --hostile mode
// (docs/prompt-cache.md "Work per request"): each used to cost the server minutes or gigabytes, or
// stall the engine thread for every other request, and each is now refused (400) or served
// within bounds. [path, JSON body text] pairs, built once (some are megabytes).
const tool = (i) => ({ type: 'function', function: { name: `tool_${i}`, description: `Tool number ${i} does a thing`,
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } } });
const toolsBody = JSON.stringify({ model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }],
  tools: Array.from({ length: 10_000 }, (_, i) => tool(i)) });
const msgsBody = JSON.stringify({ model: 'm', max_tokens: 4, messages: Array.from({ length: 200_000 },
  (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `message ${i}` })) });
const chat = (extra) => JSON.stringify({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }], ...extra });
const alternatives = (n) => `root ::= ${Array.from({ length: n }, (_, i) => `"word${i}x"`).join(' | ')}`;
const schema = (sch) => ({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: sch } } });
const properties = (n) => ({ type: 'object', properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { type: 'string' }])) });
const enumOf = (n) => ({ type: 'string', enum: Array.from({ length: n }, (_, i) => `value${i}`) });

/** Bodies that are large: tools, messages, logit_bias entries, special tokens. */
export const sizeBodies = [['/v1/chat/completions', toolsBody], ['/apply-template', toolsBody], ['/v1/chat/completions', msgsBody],
  ['/v1/chat/completions', chat({ logit_bias: Object.fromEntries(Array.from({ length: 151_936 }, (_, i) => [String(i), -1])) })],
  ['/tokenize', JSON.stringify({ content: '<|im_start|>'.repeat(330_000), parse_special: true })]];
/** Sampling constraints: grammars, JSON Schema enums and properties, over and under the limits. */
export const constraintBodies = [
  ['/v1/chat/completions', chat({ grammar: alternatives(500) })],
  ['/v1/chat/completions', chat({ grammar: alternatives(5000) })],
  ['/v1/chat/completions', chat({ grammar: alternatives(20_000) })],
  ['/v1/chat/completions', chat(schema(enumOf(20_000)))],
  ['/v1/chat/completions', chat(schema(enumOf(500)))],
  ['/v1/chat/completions', chat(schema(properties(1000)))],
  ['/v1/chat/completions', chat(schema(properties(256)))]];
/** `all`, `sizes` or `constraints`; throws on another name. */
export function hostileBodies(which) {
  const b = { all: [...sizeBodies, ...constraintBodies], sizes: sizeBodies, constraints: constraintBodies }[which];
  if (!b) throw new Error(`hostile bodies: all, constraints or sizes, not ${which}`);
  return b;
}

/** Sends the bodies of `bodies` in turn, starting at the k-th, until `stopped()`; counts into
 *  `tally` ({sent, statuses: {status or error name: n}, ms: []}). */
export async function hostileClient(url, bodies, k, stopped, tally) {
  for (let n = k; !stopped(); ++n) {
    const [path, body] = bodies[n % bodies.length];
    const t0 = performance.now();
    try {
      const res = await fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body,
        signal: AbortSignal.timeout(60_000) });
      await res.text();
      tally.statuses[res.status] = (tally.statuses[res.status] ?? 0) + 1;
    } catch (e) {
      tally.statuses[e.name] = (tally.statuses[e.name] ?? 0) + 1;
    }
    tally.ms.push(performance.now() - t0);
    tally.sent++;
  }
}
