// Helpers shared by the end-to-end tests: deterministic filler text, echoing an assistant
// reply back exactly as the server returned it, collecting a stream, and exact checks of the
// response shapes in the server's contract (OpenAI chat completion + usage + `timings`).
import assert from 'node:assert/strict';

// Deterministic PRNG (mulberry32): the same seed gives the same text on every run; the one the
// demo and the benchmark use.
import { rng } from '../../../tools/demo/persona.mjs';

export { rng };

const WORDS = ('the a of to in and is for on with that this function file test error value return ' +
  'cache prompt token server request model build check line code change fix module config ' +
  'parse output input state branch commit diff path list read write run shell search result ' +
  'update default option flag count length buffer memory thread queue worker handler client').split(' ');

/** About `n` words of deterministic English-like text (≈ 1.3 tokens a word). */
export function words(n, seed = 1) {
  const r = rng(seed);
  const out = [];
  for (let i = 0; i < n; i++) {
    let w = WORDS[Math.floor(r() * WORDS.length)];
    if (i % 13 === 0) w = w[0].toUpperCase() + w.slice(1);
    out.push(w);
    if (i % 13 === 12) out[out.length - 1] += '.';
  }
  return out.join(' ') + '.';
}

/** The assistant message to send back for a reply, exactly as the server returned it:
 *  content (null only alongside tool_calls), tool_calls, and reasoning_content when present. */
export function echo(message) {
  assert.equal(message.role, 'assistant');
  const m = { role: 'assistant', content: message.content ?? null };
  if (Array.isArray(message.tool_calls) && message.tool_calls.length > 0) m.tool_calls = message.tool_calls;
  else if (m.content === null) m.content = '';
  if (typeof message.reasoning_content === 'string') m.reasoning_content = message.reasoning_content;
  return m;
}

/** Usage numbers of a completion or of a stream's final chunk. */
export function usageOf(res) {
  assert.ok(res.usage, `response has no usage: ${JSON.stringify(res)}`);
  return {
    prompt: res.usage.prompt_tokens,
    completion: res.usage.completion_tokens,
    cached: res.usage.prompt_tokens_details?.cached_tokens,
  };
}

const isCount = (x) => Number.isInteger(x) && x >= 0;
const isMs = (x) => typeof x === 'number' && Number.isFinite(x) && x >= 0;

/** Checks the usage block exactly: integer counts, total = prompt + completion,
 *  0 <= cached <= prompt - 1 (a restore always leaves >= 1 token to prefill). */
export function assertUsage(usage, where = '') {
  assert.ok(usage, `${where}: no usage`);
  assert.ok(isCount(usage.prompt_tokens) && usage.prompt_tokens > 0, `${where}: prompt_tokens ${usage.prompt_tokens}`);
  assert.ok(isCount(usage.completion_tokens), `${where}: completion_tokens ${usage.completion_tokens}`);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens, `${where}: total_tokens`);
  const cached = usage.prompt_tokens_details?.cached_tokens;
  assert.ok(isCount(cached), `${where}: usage.prompt_tokens_details.cached_tokens ${cached}`);
  assert.ok(cached <= usage.prompt_tokens - 1, `${where}: cached_tokens ${cached} > prompt_tokens - 1`);
}

/** Checks the non-standard `timings` object against usage:
 *  cached_n == cached_tokens, prompt_n + cached_n == prompt_tokens (prompt_n counts the
 *  prefilled tokens, as in llama-server), predicted_n == completion_tokens, cache_hit
 *  (boolean, or a restore kind string with "miss" for none) agrees with cached_n. */
export function assertTimings(res, where = '') {
  const t = res.timings;
  assert.ok(t && typeof t === 'object', `${where}: no timings object: ${JSON.stringify(res)}`);
  for (const k of ['prompt_n', 'cached_n', 'predicted_n']) assert.ok(isCount(t[k]), `${where}: timings.${k} = ${t[k]}`);
  for (const k of ['prompt_ms', 'ttft_ms', 'predicted_ms', 'predicted_per_second']) {
    assert.ok(isMs(t[k]), `${where}: timings.${k} = ${t[k]}`);
  }
  const u = res.usage;
  assert.equal(t.cached_n, u.prompt_tokens_details.cached_tokens, `${where}: timings.cached_n vs cached_tokens`);
  assert.equal(t.prompt_n + t.cached_n, u.prompt_tokens, `${where}: timings.prompt_n + cached_n vs prompt_tokens`);
  assert.equal(t.predicted_n, u.completion_tokens, `${where}: timings.predicted_n vs completion_tokens`);
  if (typeof t.cache_hit === 'boolean') {
    assert.equal(t.cache_hit, t.cached_n > 0, `${where}: timings.cache_hit vs cached_n`);
  } else {
    assert.equal(typeof t.cache_hit, 'string', `${where}: timings.cache_hit = ${JSON.stringify(t.cache_hit)}`);
    assert.equal(t.cache_hit === 'miss', t.cached_n === 0, `${where}: timings.cache_hit ${t.cache_hit} vs cached_n ${t.cached_n}`);
  }
}

/** Checks a non-streamed chat completion exactly against the OpenAI shape and the request's
 *  max_tokens; returns the reply message. */
export function assertCompletion(res, { maxTokens, tools = [] } = {}, where = '') {
  assert.match(String(res.id), /^chatcmpl-/, `${where}: id`);
  assert.equal(res.object, 'chat.completion', `${where}: object`);
  assert.ok(Number.isInteger(res.created) && Math.abs(res.created - Date.now() / 1000) < 600, `${where}: created ${res.created}`);
  assert.equal(typeof res.model, 'string', `${where}: model`);
  assert.equal(res.choices?.length, 1, `${where}: choices`);
  const c = res.choices[0];
  assert.equal(c.index, 0, `${where}: choices[0].index`);
  assert.equal(c.message.role, 'assistant', `${where}: role`);
  assert.ok(c.message.content === null || typeof c.message.content === 'string', `${where}: content type`);
  assertUsage(res.usage, where);
  assertTimings(res, where);
  const n = res.usage.completion_tokens;
  assert.ok(n >= 1, `${where}: no completion tokens`);
  assert.ok(['stop', 'length', 'tool_calls'].includes(c.finish_reason), `${where}: finish_reason ${c.finish_reason}`);
  if (maxTokens !== undefined) {
    assert.ok(n <= maxTokens, `${where}: completion_tokens ${n} > max_tokens ${maxTokens}`);
    if (c.finish_reason === 'length') assert.equal(n, maxTokens, `${where}: finish_reason length but ${n} tokens`);
  }
  if (c.message.tool_calls != null) assertToolCalls(c.message.tool_calls, tools, where);
  if (c.finish_reason === 'tool_calls') assert.ok(c.message.tool_calls?.length > 0, `${where}: tool_calls finish without calls`);
  return c.message;
}

/** A helper that sends one greedy chat completion: chat(srv, messages, extra, where) asks model
 *  "tiny" at temperature 0 for `maxTokens` tokens (unless `extra` sets max_tokens; `extra` is
 *  merged into the body), checks the response with assertCompletion and returns it. */
export const greedyChat = (maxTokens) => async (srv, messages, extra = {}, where = '') => {
  const res = await srv.openai.chat.completions.create({
    model: 'tiny', messages, max_tokens: maxTokens, temperature: 0, ...extra,
  });
  assertCompletion(res, { maxTokens: extra.max_tokens ?? maxTokens }, where);
  return res;
};

/** Tool calls as OpenAI returns them: id, type "function", a known name, JSON-string arguments. */
export function assertToolCalls(calls, tools = [], where = '') {
  assert.ok(Array.isArray(calls), `${where}: tool_calls not an array`);
  const names = new Set(tools.map((t) => t.function.name));
  for (const call of calls) {
    assert.equal(typeof call.id, 'string', `${where}: tool_call.id`);
    assert.ok(call.id.length > 0, `${where}: empty tool_call.id`);
    assert.equal(call.type, 'function', `${where}: tool_call.type`);
    assert.equal(typeof call.function?.name, 'string', `${where}: tool_call.function.name`);
    if (names.size) assert.ok(names.has(call.function.name), `${where}: unknown tool ${call.function.name}`);
    assert.equal(typeof call.function.arguments, 'string', `${where}: arguments must be a JSON string`);
    assert.doesNotThrow(() => JSON.parse(call.function.arguments), `${where}: arguments not JSON: ${call.function.arguments}`);
  }
}

/** Checks an error response: the status, a JSON body {"error":{"message","type","param","code"}}
 *  with a non-empty message. Returns the error object. */
export function assertError(r, status, where = '') {
  assert.equal(r.status, status, `${where}: HTTP status ${r.status} (want ${status}); body ${r.text}`);
  assert.match(r.headers.get('content-type') || '', /application\/json/, `${where}: content-type`);
  assert.ok(r.json && typeof r.json.error === 'object' && r.json.error, `${where}: no error object: ${r.text}`);
  const e = r.json.error;
  for (const k of ['message', 'type', 'param', 'code']) assert.ok(k in e, `${where}: error.${k} missing: ${r.text}`);
  assert.equal(typeof e.message, 'string', `${where}: error.message`);
  assert.ok(e.message.length > 0, `${where}: empty error.message`);
  assert.equal(typeof e.type, 'string', `${where}: error.type`);
  if (status >= 400 && status < 500 && status !== 404) {
    assert.equal(e.type, 'invalid_request_error', `${where}: error.type for ${status}`);
  }
  return e;
}

/** Runs a streamed chat completion through the OpenAI client and collects it.
 *  Returns {content, reasoning, toolCalls, finish, usage, usageChunk, chunks, ttftMs, totalMs}. */
export async function streamChat(client, body) {
  const t0 = performance.now();
  const stream = await client.chat.completions.create({ ...body, stream: true });
  const out = { content: '', reasoning: '', toolCalls: [], finish: null, usage: null, usageChunk: null,
    chunks: [], ttftMs: null, totalMs: null, role: null, timings: null };
  for await (const chunk of stream) {
    out.chunks.push(chunk);
    if (chunk.usage) { out.usage = chunk.usage; out.usageChunk = chunk; }
    if (chunk.timings) out.timings = chunk.timings;
    for (const ch of chunk.choices ?? []) {
      const d = ch.delta ?? {};
      if (d.role) out.role = d.role;
      const got = (d.content ?? '') + (d.reasoning_content ?? '');
      if (got.length > 0 || d.tool_calls) out.ttftMs ??= performance.now() - t0;
      if (d.content) out.content += d.content;
      if (d.reasoning_content) out.reasoning += d.reasoning_content;
      for (const tc of d.tool_calls ?? []) {
        const slot = (out.toolCalls[tc.index ?? 0] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
        if (tc.id) slot.id = tc.id;
        if (tc.function?.name) slot.function.name += tc.function.name;
        if (tc.function?.arguments) slot.function.arguments += tc.function.arguments;
      }
      if (ch.finish_reason) out.finish = ch.finish_reason;
    }
  }
  out.totalMs = performance.now() - t0;
  return out;
}

/** Reads a raw SSE response body; returns the list of `data:` payloads (strings). */
export async function readSSE(res) {
  const text = await res.text();
  const data = [];
  for (const block of text.split(/\r?\n\r?\n/)) {
    const lines = block.split(/\r?\n/).filter((l) => l.startsWith('data:'));
    if (lines.length) data.push(lines.map((l) => l.slice(5).replace(/^ /, '')).join('\n'));
  }
  return { text, data };
}

/** Whether a greedy reply's text agrees with a reference run of the same prompt that was
 *  computed in another batch shape, as docs/prompt-cache.md "What a hit guarantees" promises for
 *  that case: a dense hit (its prompt prefilled in other passes than the miss's), or any request
 *  decoded beside others (concurrent sequences in one step). llama.cpp's CPU matrix kernels round
 *  differently for different batch shapes on some CPUs (AVX2 without AVX-512: ~1e-3 nats between
 *  a token decoded alone and beside another sequence), so a greedy pick can flip where its top two
 *  candidates are that close, and the two continuations part there.
 *
 *  `text`: the reply to check, the generated text as one string (reasoning + content, as the
 *  tokens spell it). `ref`: the reference chat completion, asked with `logprobs: true` and
 *  `top_logprobs` >= 2. The reply must spell the reference's tokens, up to a position where it
 *  takes a runner-up of the reference whose logprob is within `tol` nats of the reference's pick
 *  (a near tie); past that position nothing is compared. Returns '' when it agrees, else why not. */
export function nearTieDiff(text, ref, tol = 0.01) {
  const toks = ref.choices[0].logprobs?.content ?? [];
  const m = ref.choices[0].message;
  const full = `${m.reasoning_content ?? ''}${m.content ?? ''}`;
  if (text === full) return '';
  const spelled = toks.map((e) => e.token).join('');
  if (spelled !== full) return `the reference's tokens spell ${JSON.stringify(spelled)}, its reply ${JSON.stringify(full)}`;
  let at = 0;
  for (const [i, e] of toks.entries()) {
    if (text.startsWith(e.token, at)) {
      at += e.token.length;
      continue;
    }
    const tie = e.top_logprobs.find((a) => a.token !== e.token && a.logprob >= e.logprob - tol && text.startsWith(a.token, at));
    if (tie) return '';
    return `token ${i}: the reply goes on with ${JSON.stringify(text.slice(at, at + 16))}, the reference picked ` +
      `${JSON.stringify(e.token)} (${e.logprob}), runners-up ${JSON.stringify(e.top_logprobs.map((a) => [a.token, a.logprob]))}`;
  }
  return `the reply ${JSON.stringify(text)} is longer than the reference ${JSON.stringify(full)}`;
}
