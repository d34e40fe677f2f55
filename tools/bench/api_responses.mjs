// The benchmark's requests through POST /v1/responses (--api responses): the trace's chat
// conversation sent as Responses API items with the official `openai` client's
// responses.create({stream: true}), and the streamed events read back into the record the chat
// driver fills (content, reasoning, tool calls, usage in chat terms), so the oracle and the
// summary are the same whichever API carried the traffic. `store: false`: every request carries
// its whole conversation, as the chat dialect does.

/** Chat messages and tools -> {input, tools} of a Responses request. */
export function responsesInput(messages, tools) {
  const input = [];
  for (const m of messages) {
    if (m.role === 'assistant') {
      if (m.reasoning_content != null) {
        input.push({ type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text: m.reasoning_content }] });
      }
      if (m.content || !m.tool_calls?.length) {
        input.push({ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: m.content ?? '' }] });
      }
      for (const tc of m.tool_calls ?? []) {
        input.push({ type: 'function_call', call_id: tc.id, name: tc.function.name, arguments: tc.function.arguments });
      }
    } else if (m.role === 'tool') {
      input.push({ type: 'function_call_output', call_id: m.tool_call_id, output: m.content });
    } else {
      input.push({ type: 'message', role: m.role, content: m.content });
    }
  }
  const rtools = tools?.map((t) => ({ type: 'function', name: t.function.name, description: t.function.description,
    parameters: t.function.parameters }));
  return { input, tools: rtools };
}

/** One streamed request; the same record as run.mjs's chat stream(). */
export async function streamResponses(client, model, messages, tools, maxTokens, dropAfter = 0) {
  const ac = new AbortController();
  const r = { content: null, reasoning: null, toolCalls: [], usage: null, timings: null, finish: null,
    ttftMs: null, totalMs: null, chunks: 0, dropped: false, error: null };
  const t0 = performance.now();
  const first = () => { if (r.ttftMs === null) r.ttftMs = performance.now() - t0; r.chunks++; };
  try {
    const body = responsesInput(messages, tools);
    const s = await client.responses.create({ model, ...body, max_output_tokens: maxTokens, temperature: 0,
      stream: true, store: false }, { signal: ac.signal });
    const calls = new Map();  // output_index -> tool call
    for await (const e of s) {
      if (e.type === 'response.output_text.delta') { r.content = (r.content ?? '') + e.delta; first(); }
      else if (e.type === 'response.reasoning_text.delta') { r.reasoning = (r.reasoning ?? '') + e.delta; first(); }
      else if (e.type === 'response.output_item.added' && e.item.type === 'function_call') {
        const tc = { id: e.item.call_id, type: 'function', function: { name: e.item.name, arguments: '' } };
        calls.set(e.output_index, tc);
        r.toolCalls.push(tc);
      } else if (e.type === 'response.function_call_arguments.delta') {
        calls.get(e.output_index).function.arguments += e.delta;
        first();
      } else if (e.type === 'response.completed' || e.type === 'response.incomplete') {
        const u = e.response.usage;
        r.usage = { prompt_tokens: u.input_tokens, completion_tokens: u.output_tokens, total_tokens: u.total_tokens,
          prompt_tokens_details: { cached_tokens: u.input_tokens_details.cached_tokens } };
        r.finish = e.type === 'response.incomplete' ? 'length' : r.toolCalls.length ? 'tool_calls' : 'stop';
      }
      if (dropAfter && r.chunks >= dropAfter) { r.dropped = true; ac.abort(); break; }
    }
  } catch (e) {
    if (!r.dropped) r.error = `${e.status ? `HTTP ${e.status}: ` : ''}${e.message}`;
  }
  r.totalMs = performance.now() - t0;
  return r;
}
