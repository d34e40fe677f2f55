// Helpers of the Responses API e2e tests: chat messages <-> Responses API items, and the
// checks of a response object (the prompt tokens of a chat body: lib/agents.mjs chatTokens).
import assert from 'node:assert/strict';

/** A chat function tool -> the Responses API's flat function tool. */
export const responsesTool = (t) => ({ type: 'function', name: t.function.name, description: t.function.description,
  parameters: t.function.parameters });

/** The assistant turn of a response's output items as the chat message a chat client would
 *  echo: reasoning_content, content, tool_calls. */
export function chatMessageOf(output) {
  const m = { role: 'assistant', content: '' };
  const calls = [];
  for (const it of output) {
    if (it.type === 'reasoning') m.reasoning_content = (m.reasoning_content ?? '') + (it.content ?? []).map((c) => c.text).join('');
    else if (it.type === 'message') m.content += it.content.map((c) => c.text).join('');
    else if (it.type === 'function_call') calls.push({ id: it.call_id, type: 'function', function: { name: it.name, arguments: it.arguments } });
  }
  if (calls.length) m.tool_calls = calls;
  return m;
}

/** Output items sent back as input items, as a client that keeps no server state does (ids and
 *  statuses dropped where the API does not need them). */
export function asInput(output) {
  return output.map((it) => {
    if (it.type === 'reasoning') {
      const r = { type: 'reasoning', summary: it.summary ?? [] };
      if (it.encrypted_content) r.encrypted_content = it.encrypted_content;
      else r.content = it.content;
      return r;
    }
    if (it.type === 'message') return { type: 'message', role: 'assistant', content: it.content.map((c) => ({ type: 'output_text', text: c.text })) };
    if (it.type === 'function_call') return { type: 'function_call', call_id: it.call_id, name: it.name, arguments: it.arguments };
    return it;
  });
}

/** Checks a Responses API `usage` block: integer counts, total = input + output, cached <= input - 1. */
export function assertResponsesUsage(u, where = '') {
  assert.ok(u, `${where}: no usage`);
  for (const k of ['input_tokens', 'output_tokens', 'total_tokens']) assert.ok(Number.isInteger(u[k]) && u[k] >= 0, `${where}: usage.${k} = ${u[k]}`);
  assert.equal(u.total_tokens, u.input_tokens + u.output_tokens, `${where}: total_tokens`);
  const c = u.input_tokens_details?.cached_tokens;
  assert.ok(Number.isInteger(c) && c >= 0 && c <= u.input_tokens - 1, `${where}: cached_tokens ${c} of ${u.input_tokens}`);
  assert.ok(Number.isInteger(u.output_tokens_details?.reasoning_tokens), `${where}: reasoning_tokens`);
}

/** Checks a response object's shape and that its status agrees with its usage. */
export function assertResponse(r, { maxOutputTokens } = {}, where = '') {
  assert.equal(r.object, 'response', where);
  assert.match(r.id, /^resp_[0-9A-Za-z]+$/, where);
  assert.ok(['completed', 'incomplete'].includes(r.status), `${where}: status ${r.status}`);
  assertResponsesUsage(r.usage, where);
  if (r.status === 'incomplete') {
    assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' }, where);
    if (maxOutputTokens) assert.equal(r.usage.output_tokens, maxOutputTokens, `${where}: incomplete before max_output_tokens`);
  } else {
    assert.equal(r.incomplete_details, null, where);
  }
  assert.ok(r.output.length >= 1, `${where}: no output items`);
  for (const it of r.output) {
    assert.ok(['reasoning', 'message', 'function_call'].includes(it.type), `${where}: output item ${it.type}`);
    if (it.type === 'message') {
      assert.equal(it.role, 'assistant');
      assert.equal(it.content[0].type, 'output_text');
    }
  }
}
