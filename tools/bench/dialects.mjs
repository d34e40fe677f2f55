// The benchmark's requests through the other API dialects (run.mjs --api messages|responses):
// the same conversation, kept in chat-completions form for the trace and the oracle, sent as an
// Anthropic Messages or an OpenAI Responses request, streamed, and collected into the shape
// run.mjs's chat stream returns ({content, reasoning, toolCalls, usage, finish, ttftMs, ...},
// usage in chat terms: prompt_tokens and prompt_tokens_details.cached_tokens).
//
// What a real client sends back is what the server returned, verbatim: Claude Code echoes the
// assistant's content blocks (thinking with its signature, text, tool_use), Codex the output
// items (reasoning with encrypted_content, message, function_call). The collected reply keeps
// them (`echo`), and toAnthropic / toResponses put them back in place of the assistant message
// they were returned with. They ride on the chat message as a non-enumerable property, so
// JSON.stringify (the oracle's /apply-template, the prompts dump) never sees them.

const ECHO = Symbol.for('lineage.bench.echo');

/** Attaches the dialect's verbatim reply to the chat-form assistant message `m`. */
export function attachEcho(m, echo) {
  if (echo) Object.defineProperty(m, ECHO, { value: echo, enumerable: false });
  return m;
}

function textOf(content) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((p) => p.text ?? '').join('');
  return content ?? '';
}

/** Chat messages + tools -> an Anthropic Messages body (without stream/max_tokens). */
export function toAnthropic(messages, tools) {
  let i = 0;
  const system = [];
  while (i < messages.length && (messages[i].role === 'system' || messages[i].role === 'developer')) {
    system.push(textOf(messages[i].content));
    i++;
  }
  const out = [];
  const push = (role, blocks) => {
    const last = out.at(-1);
    if (last && last.role === role) last.content.push(...blocks);
    else out.push({ role, content: [...blocks] });
  };
  for (; i < messages.length; i++) {
    const m = messages[i];
    if (m.role === 'user') {
      push('user', [{ type: 'text', text: textOf(m.content) }]);
    } else if (m.role === 'tool') {
      push('user', [{ type: 'tool_result', tool_use_id: m.tool_call_id, content: textOf(m.content) }]);
    } else if (m.role === 'assistant') {
      if (m[ECHO]) { push('assistant', m[ECHO]); continue; }
      const blocks = [];
      if (m.reasoning_content) blocks.push({ type: 'thinking', thinking: m.reasoning_content, signature: '' });
      if (textOf(m.content)) blocks.push({ type: 'text', text: textOf(m.content) });
      for (const tc of m.tool_calls ?? []) {
        blocks.push({ type: 'tool_use', id: tc.id, name: tc.function.name, input: JSON.parse(tc.function.arguments || '{}') });
      }
      push('assistant', blocks.length ? blocks : [{ type: 'text', text: '' }]);
    }
  }
  const body = { messages: out };
  if (system.length) body.system = system.join('\n\n');
  if (tools?.length) {
    body.tools = tools.map((t) => ({ name: t.function.name, description: t.function.description,
      input_schema: t.function.parameters ?? { type: 'object', properties: {} } }));
  }
  return body;
}

/** Chat messages + tools -> an OpenAI Responses body (stateless: store false). */
export function toResponses(messages, tools) {
  let i = 0;
  const system = [];
  while (i < messages.length && (messages[i].role === 'system' || messages[i].role === 'developer')) {
    system.push(textOf(messages[i].content));
    i++;
  }
  const input = [];
  for (; i < messages.length; i++) {
    const m = messages[i];
    if (m.role === 'user') {
      input.push({ type: 'message', role: 'user', content: [{ type: 'input_text', text: textOf(m.content) }] });
    } else if (m.role === 'tool') {
      input.push({ type: 'function_call_output', call_id: m.tool_call_id, output: textOf(m.content) });
    } else if (m.role === 'assistant') {
      if (m[ECHO]) { input.push(...m[ECHO]); continue; }
      if (m.reasoning_content) {
        input.push({ type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text: m.reasoning_content }] });
      }
      if (textOf(m.content)) {
        input.push({ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: textOf(m.content) }] });
      }
      for (const tc of m.tool_calls ?? []) {
        input.push({ type: 'function_call', call_id: tc.id, name: tc.function.name, arguments: tc.function.arguments });
      }
    }
  }
  const body = { input, store: false, include: ['reasoning.encrypted_content'] };
  if (system.length) body.instructions = system.join('\n\n');
  if (tools?.length) {
    body.tools = tools.map((t) => ({ type: 'function', name: t.function.name, description: t.function.description,
      parameters: t.function.parameters ?? { type: 'object', properties: {} } }));
  }
  return body;
}

/** Server-sent events of a fetch Response: yields {event, data} with data parsed as JSON. */
async function* sse(res) {
  const decoder = new TextDecoder();
  let buf = '';
  for await (const chunk of res.body) {
    buf += decoder.decode(chunk, { stream: true });
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      let event = null;
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).trimStart());
      }
      if (!data.length || data.join('\n') === '[DONE]') continue;
      yield { event, data: JSON.parse(data.join('\n')) };
    }
  }
}

function emptyReply() {
  return { content: null, reasoning: null, toolCalls: [], usage: null, timings: null, finish: null,
    ttftMs: null, totalMs: null, chunks: 0, dropped: false, error: null, echo: null };
}

async function post(base, pathname, body, signal) {
  const res = await fetch(base + pathname, { method: 'POST', signal,
    headers: { 'content-type': 'application/json', 'x-api-key': 'sk-none', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify(body) });
  if (res.status !== 200) throw Object.assign(new Error((await res.text()).slice(0, 300)), { status: res.status });
  return res;
}

/** One streamed Anthropic Messages request (POST /v1/messages). */
export async function streamMessages(base, { model, messages, tools, maxTokens, dropAfter = 0, sessionKey, timeoutMs }) {
  const r = emptyReply();
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), timeoutMs);
  const t0 = performance.now();
  const blocks = [];
  let usage = {};
  try {
    const res = await post(base, '/v1/messages', { model, max_tokens: maxTokens, temperature: 0, stream: true,
      ...(sessionKey ? { metadata: { user_id: sessionKey } } : {}), ...toAnthropic(messages, tools) }, ac.signal);
    for await (const { data } of sse(res)) {
      if (data.type === 'message_start') usage = { ...usage, ...data.message?.usage };
      else if (data.type === 'content_block_start') blocks[data.index] = { ...data.content_block, _json: '' };
      else if (data.type === 'content_block_delta') {
        const b = blocks[data.index];
        const d = data.delta;
        if (d.type === 'text_delta') { b.text = (b.text ?? '') + d.text; r.content = (r.content ?? '') + d.text; }
        else if (d.type === 'thinking_delta') { b.thinking = (b.thinking ?? '') + d.thinking; r.reasoning = (r.reasoning ?? '') + d.thinking; }
        else if (d.type === 'signature_delta') b.signature = (b.signature ?? '') + d.signature;
        else if (d.type === 'input_json_delta') b._json += d.partial_json;
        if (['text_delta', 'thinking_delta', 'input_json_delta'].includes(d.type)) {
          if (r.ttftMs === null) r.ttftMs = performance.now() - t0;
          r.chunks++;
        }
      } else if (data.type === 'message_delta') {
        usage = { ...usage, ...data.usage };
        r.finish = data.delta?.stop_reason ?? r.finish;
      } else if (data.type === 'error') {
        throw new Error(data.error?.message ?? 'stream error');
      }
      if (dropAfter && r.chunks >= dropAfter) { r.dropped = true; ac.abort(); break; }
    }
  } catch (e) {
    if (!r.dropped) r.error = `${e.status ? `HTTP ${e.status}: ` : ''}${e.message}`;
  }
  clearTimeout(timer);
  r.totalMs = performance.now() - t0;
  for (const b of blocks) {
    if (b?.type !== 'tool_use') continue;
    const input = b._json ? JSON.parse(b._json) : (b.input ?? {});
    r.toolCalls.push({ id: b.id, type: 'function', function: { name: b.name, arguments: JSON.stringify(input) } });
  }
  r.echo = blocks.filter(Boolean).map(({ _json, ...b }) => (b.type === 'tool_use' && _json ? { ...b, input: JSON.parse(_json) } : b));
  if (usage.input_tokens !== undefined) {
    const cached = usage.cache_read_input_tokens ?? 0;
    const prompt = usage.input_tokens + cached + (usage.cache_creation_input_tokens ?? 0);
    r.usage = { prompt_tokens: prompt, completion_tokens: usage.output_tokens ?? null,
      prompt_tokens_details: { cached_tokens: cached } };
  }
  return r;
}

/** One streamed OpenAI Responses request (POST /v1/responses). */
export async function streamResponses(base, { model, messages, tools, maxTokens, dropAfter = 0, sessionKey, timeoutMs }) {
  const r = emptyReply();
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), timeoutMs);
  const t0 = performance.now();
  let final = null;
  try {
    const res = await post(base, '/v1/responses', { model, max_output_tokens: maxTokens, temperature: 0, stream: true,
      ...(sessionKey ? { prompt_cache_key: sessionKey } : {}), ...toResponses(messages, tools) }, ac.signal);
    for await (const { data } of sse(res)) {
      const t = data.type;
      if (t === 'response.output_text.delta') r.content = (r.content ?? '') + data.delta;
      else if (t === 'response.reasoning_text.delta' || t === 'response.reasoning_summary_text.delta') r.reasoning = (r.reasoning ?? '') + data.delta;
      else if (t === 'response.completed' || t === 'response.incomplete') final = data.response;
      else if (t === 'response.failed' || t === 'error') throw new Error(JSON.stringify(data).slice(0, 300));
      if (/\.delta$/.test(t)) {
        if (r.ttftMs === null) r.ttftMs = performance.now() - t0;
        r.chunks++;
      }
      if (dropAfter && r.chunks >= dropAfter) { r.dropped = true; ac.abort(); break; }
    }
  } catch (e) {
    if (!r.dropped) r.error = `${e.status ? `HTTP ${e.status}: ` : ''}${e.message}`;
  }
  clearTimeout(timer);
  r.totalMs = performance.now() - t0;
  if (final) {
    r.echo = final.output ?? [];
    for (const it of r.echo) {
      if (it.type === 'function_call') {
        r.toolCalls.push({ id: it.call_id, type: 'function', function: { name: it.name, arguments: it.arguments } });
      }
    }
    r.finish = final.status === 'incomplete' ? 'length' : (r.toolCalls.length ? 'tool_calls' : 'stop');
    const u = final.usage;
    if (u) {
      r.usage = { prompt_tokens: u.input_tokens, completion_tokens: u.output_tokens,
        prompt_tokens_details: { cached_tokens: u.input_tokens_details?.cached_tokens ?? 0 } };
    }
  }
  return r;
}
