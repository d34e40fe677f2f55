// Helpers of the Anthropic Messages API e2e tests (messages.test.mjs, agent-claude.test.mjs):
// an official @anthropic-ai/sdk client on a lineage server, exact checks of the message and
// usage shapes, prompt tokens through /apply-template + /tokenize, and the server log's
// per-request lines.
import assert from 'node:assert/strict';

import Anthropic from '@anthropic-ai/sdk';

/** An Anthropic client on `srv` (no retries; 120 s timeout). */
export function anthropic(srv, { apiKey = 'sk-none', ...opts } = {}) {
  return new Anthropic({ baseURL: srv.url, apiKey, maxRetries: 0, timeout: 120_000, ...opts });
}

const isCount = (x) => Number.isInteger(x) && x >= 0;

/** Checks a Message exactly against the Messages API shape; returns its usage with `prompt`
 *  (= input + cache creation + cache read, the whole prompt as in the official API). */
export function assertMessage(m, { maxTokens, model } = {}, where = '') {
  assert.match(String(m.id), /^msg_/, `${where}: id ${m.id}`);
  assert.equal(m.type, 'message', `${where}: type`);
  assert.equal(m.role, 'assistant', `${where}: role`);
  if (model !== undefined) assert.equal(m.model, model, `${where}: model echoed`);
  assert.ok(Array.isArray(m.content), `${where}: content`);
  for (const b of m.content) {
    assert.ok(['text', 'thinking', 'tool_use'].includes(b.type), `${where}: block type ${b.type}`);
    if (b.type === 'text') assert.equal(typeof b.text, 'string', `${where}: text`);
    if (b.type === 'thinking') {
      assert.equal(typeof b.thinking, 'string', `${where}: thinking`);
      assert.ok(typeof b.signature === 'string' && b.signature.length > 0, `${where}: signature`);
    }
    if (b.type === 'tool_use') {
      assert.ok(b.id && b.name && b.input && typeof b.input === 'object', `${where}: tool_use ${JSON.stringify(b)}`);
    }
  }
  assert.ok(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use'].includes(m.stop_reason), `${where}: stop_reason ${m.stop_reason}`);
  const u = m.usage;
  for (const k of ['input_tokens', 'cache_creation_input_tokens', 'cache_read_input_tokens', 'output_tokens']) {
    assert.ok(isCount(u[k]), `${where}: usage.${k} = ${u[k]}`);
  }
  const prompt = u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens;
  assert.ok(u.cache_read_input_tokens <= prompt - 1, `${where}: cache_read ${u.cache_read_input_tokens} > prompt - 1`);
  if (maxTokens !== undefined) {
    assert.ok(u.output_tokens <= maxTokens, `${where}: output_tokens ${u.output_tokens} > max_tokens ${maxTokens}`);
    if (m.stop_reason === 'max_tokens') assert.equal(u.output_tokens, maxTokens, `${where}: max_tokens stop`);
  }
  return { ...u, prompt };
}

/** Tokens of the prompt the server renders for a chat-completions body (POST /apply-template,
 *  then /tokenize). */
export async function chatPromptTokens(srv, body) {
  const t = await srv.post('/apply-template', body);
  assert.equal(t.status, 200, `/apply-template: ${t.text}`);
  const k = await srv.post('/tokenize', { content: t.json.prompt, add_special: false, parse_special: true });
  assert.equal(k.status, 200, `/tokenize: ${k.text}`);
  return k.json.tokens;
}

/** Length of the common prefix of two token arrays. */
export function commonPrefix(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

/** The server log's "req N <dialect> <stream|json> <status>: prompt=P cached=C ..." lines:
 *  [{id, dialect, status, prompt, cached, completion, finish}]. */
export function requestLines(log) {
  const out = [];
  const re = /req (\d+) (\w+) (stream|json) (\d+): prompt=(\d+) cached=(\d+) completion=(\d+) .* finish=(\S+)/g;
  for (const m of log.matchAll(re)) {
    out.push({ id: Number(m[1]), dialect: m[2], mode: m[3], status: Number(m[4]), prompt: Number(m[5]),
      cached: Number(m[6]), completion: Number(m[7]), finish: m[8] });
  }
  return out;
}

// --- Scripted agent sessions (agent-claude.test.mjs) -----------------------------------------------

/** The prompt text the server renders for a Messages body (POST /apply-template?api=messages). */
export async function messagesPrompt(srv, body, headers = {}) {
  const t = await srv.post('/apply-template?api=messages', body, headers);
  if (t.status !== 200) throw new Error(`/apply-template?api=messages -> ${t.status}: ${t.text}`);
  return t.json.prompt;
}

/** The content blocks of a streamed (or JSON) Messages answer, as a client assembles them: text,
 *  thinking (with its signature) and tool_use (input parsed from its input_json_deltas). */
export function messageBlocks(sse) {
  if (!sse.startsWith('event:') && !sse.startsWith('data:')) {
    try { return JSON.parse(sse).content ?? []; } catch { return []; }
  }
  const blocks = [];
  const json = [];
  for (const line of sse.split('\n')) {
    if (!line.startsWith('data: ')) continue;
    let e;
    try { e = JSON.parse(line.slice(6)); } catch { continue; }
    if (e.type === 'content_block_start') {
      blocks[e.index] = { ...e.content_block };
      json[e.index] = '';
    } else if (e.type === 'content_block_delta') {
      const b = blocks[e.index];
      const d = e.delta;
      if (d.type === 'text_delta') b.text = (b.text ?? '') + d.text;
      else if (d.type === 'thinking_delta') b.thinking = (b.thinking ?? '') + d.thinking;
      else if (d.type === 'signature_delta') b.signature = (b.signature ?? '') + d.signature;
      else if (d.type === 'input_json_delta') json[e.index] += d.partial_json;
    } else if (e.type === 'content_block_stop') {
      const b = blocks[e.index];
      if (b.type === 'tool_use' && json[e.index]) {
        try { b.input = JSON.parse(json[e.index]); } catch { b.input = { __unparsed: json[e.index] }; }
      }
    }
  }
  return blocks.filter(Boolean);
}
