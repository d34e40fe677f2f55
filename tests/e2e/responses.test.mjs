// POST /v1/responses (OpenAI Responses API) with the official `openai` client, for
// the tiny hybrid (qwen35) and dense (qwen3) models: responses.create and responses.stream
// (exact event sequence), the prompt equal token for token to the chat dialect's rendering of
// the same conversation, a second turn's exact restore, a function_call -> function_call_output
// round trip with sealed reasoning (encrypted_content) restoring at least the whole previous
// prompt, previous_response_id (also across a restart: stored responses persist), GET / DELETE /
// 404, input_items (order, limit, after), cancel without a body, and a conversation started on
// /v1/chat/completions continued here.
//
//   cd tests/e2e && node --test responses.test.mjs
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { words } from './lib/chat.mjs';
import { chatTokens as chatPromptTokens } from './lib/agents.mjs';
import { asInput, assertResponse, chatMessageOf, responsesTool } from './lib/dialects.mjs';
import { FAMILY, GEN, RERENDER_SHARED, SERVER_ARGS, SYSTEM, TOOLS } from './lib/scenario.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const MAX = 6;

/** A POST with no body, no Content-Type and no Content-Length (as `curl -X POST URL` sends it);
 *  resolves to the raw HTTP response text. */
function rawPost(port, target) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1', () => {
      sock.write(`POST ${target} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAccept: */*\r\nConnection: close\r\n\r\n`);
    });
    let text = '';
    sock.setEncoding('utf8');
    sock.on('data', (d) => { text += d; });
    sock.on('end', () => resolve(text));
    sock.on('error', reject);
  });
}

/** cached_tokens of a follow-up (previous turn + its reply + a new user message) when the
 *  previous turn's entry is restored (lib/scenario.mjs rules, as for chat completions). */
const followUpCached = (hybrid, p) => (hybrid ? p - GEN : p - GEN + RERENDER_SHARED);

for (const arch of ARCHS) {
  const hybrid = FAMILY[arch] === 'hybrid';
  describe(`responses [${arch}]`, { timeout: 300_000 }, () => {
    let srv;
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), `lineage-responses-${arch}-`));
    const start = async (name) => startServer({ model: modelPath(arch), name, args: [...SERVER_ARGS, '--cache-dir', dir] });
    before(async () => { srv = await start(`responses-${arch}`); });
    after(async () => {
      await srv?.stopGracefully();
      fs.rmSync(dir, { recursive: true, force: true });
    });

    const create = (body) => srv.openai.responses.create({ model: 'tiny', max_output_tokens: MAX, temperature: 0, ...body });
    const chatTokens = async (messages, tools) => (await chatPromptTokens(srv, { messages, ...(tools ? { tools } : {}) })).length;

    it('create: a response object whose prompt is the chat rendering of the same conversation', async () => {
      const instructions = SYSTEM(501);
      const input = `Explain the failure.\n\n${words(40, 502)}`;
      const r = await create({ instructions, input, metadata: { run: 'a' }, user: 'u1' });
      assertResponse(r, { maxOutputTokens: MAX }, 'create');
      assert.equal(r.usage.input_tokens, await chatTokens([{ role: 'system', content: instructions }, { role: 'user', content: input }]));
      assert.equal(r.usage.input_tokens_details.cached_tokens, 0);
      assert.equal(r.instructions, instructions);
      assert.deepEqual(r.metadata, { run: 'a' });
      assert.equal(r.user, 'u1');
      assert.equal(r.store, true);
      assert.equal(r.max_output_tokens, MAX);
      assert.equal(r.model, (await srv.get('/v1/models')).json.data[0].id);
    });

    it('stream: the event sequence the openai client accumulates, == the non-streamed response', async () => {
      const body = { instructions: SYSTEM(511), input: `Summarise.\n\n${words(30, 512)}`, store: false };
      const plain = await create(body);
      const stream = srv.openai.responses.stream({ model: 'tiny', max_output_tokens: MAX, temperature: 0, ...body });
      const events = [];
      for await (const e of stream) events.push(e);
      const fin = await stream.finalResponse();
      events.forEach((e, i) => assert.equal(e.sequence_number, i, `event ${i} (${e.type})`));
      assert.deepEqual(events.slice(0, 2).map((e) => e.type), ['response.created', 'response.in_progress']);
      const last = events.at(-1);
      assert.equal(last.type, plain.status === 'completed' ? 'response.completed' : 'response.incomplete');
      assert.equal(fin.id, last.response.id);
      assertResponse(fin, { maxOutputTokens: MAX }, 'stream');
      // Same output as the non-streamed request (greedy, same prompt): texts, types, usage.
      const strip = (out) => out.map((it) => ({ type: it.type, text: (it.content ?? []).map((c) => c.text).join('') }));
      assert.deepEqual(strip(fin.output), strip(plain.output));
      assert.equal(fin.usage.output_tokens, plain.usage.output_tokens);
      assert.equal(fin.usage.input_tokens, plain.usage.input_tokens);
      // Deltas add up to the items' texts; every item opened is closed.
      for (const [idx, item] of fin.output.entries()) {
        const mine = events.filter((e) => e.output_index === idx);
        assert.equal(mine[0].type, 'response.output_item.added');
        assert.equal(mine.at(-1).type, 'response.output_item.done');
        const deltas = mine.filter((e) => e.type.endsWith('.delta')).map((e) => e.delta).join('');
        const text = item.type === 'function_call' ? item.arguments : item.content.map((c) => c.text).join('');
        assert.equal(deltas, text, `output[${idx}] deltas`);
      }
      // store: false -> not retrievable; a stored stream is, as its final event says.
      await assert.rejects(srv.openai.responses.retrieve(fin.id), (e) => e.status === 404);
      const kept = srv.openai.responses.stream({ model: 'tiny', max_output_tokens: MAX, temperature: 0, ...body, store: true });
      const keptEvents = [];
      for await (const e of kept) keptEvents.push(e);
      const keptLast = keptEvents.at(-1).response;
      const { output_text: _added, ...stored } = await srv.openai.responses.retrieve(keptLast.id);  // the client adds output_text
      assert.deepEqual(stored, keptLast);
    });

    it('a second turn restores the first exactly as the chat dialect does', async () => {
      const input1 = [{ role: 'system', content: SYSTEM(521) }, { role: 'user', content: `Review this.\n\n${words(50, 522)}` }];
      const r1 = await create({ input: input1, store: false });
      const p1 = r1.usage.input_tokens;
      const input2 = [...input1, ...asInput(r1.output), { role: 'user', content: 'And the root cause?' }];
      const r2 = await create({ input: input2, store: false });
      assertResponse(r2, { maxOutputTokens: MAX }, 'turn 2');
      assert.equal(r2.usage.input_tokens, await chatTokens([...input1, chatMessageOf(r1.output), { role: 'user', content: 'And the root cause?' }]));
      assert.equal(r2.usage.input_tokens_details.cached_tokens, followUpCached(hybrid, p1));
    });

    it('function_call -> function_call_output with sealed reasoning restores the whole previous prompt', async () => {
      const tools = TOOLS.map(responsesTool);
      const input1 = [{ role: 'developer', content: SYSTEM(531) }, { role: 'user', content: 'Find where the checkpoint list is thinned.' }];
      const r1 = await create({ input: input1, tools, store: false, include: ['reasoning.encrypted_content'] });
      assertResponse(r1, { maxOutputTokens: MAX }, 'agent turn 1');
      const reasoning = r1.output.filter((it) => it.type === 'reasoning');
      // The template opens a thinking block: the (random) answer starts as reasoning.
      assert.equal(reasoning.length, 1, JSON.stringify(r1.output));
      assert.ok(reasoning[0].content[0].text.length > 0, 'empty reasoning');
      assert.match(reasoning[0].encrypted_content, /^lnr1:/);
      const call = { type: 'function_call', call_id: 'call_e2e_1', name: 'run_shell', arguments: JSON.stringify({ command: 'grep -rn thin src/cache' }) };
      const output = { type: 'function_call_output', call_id: 'call_e2e_1', output: `src/cache/store.cpp:42: thin()\n${words(20, 533)}` };
      const input2 = [...input1, ...asInput(r1.output), call, output];
      const r2 = await create({ input: input2, tools, store: false, include: ['reasoning.encrypted_content'] });
      assertResponse(r2, { maxOutputTokens: MAX }, 'agent turn 2');
      // The sealed reasoning came back as the text it sealed: the prompt is the chat rendering
      // with that reasoning_content.
      const assistant = chatMessageOf([...r1.output, { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments }]);
      assert.equal(r2.usage.input_tokens, await chatTokens([...input1, assistant,
        { role: 'tool', tool_call_id: call.call_id, content: output.output }], TOOLS));
      assert.ok(r2.usage.input_tokens_details.cached_tokens >= r1.usage.input_tokens,
        `agent turn 2 cached ${r2.usage.input_tokens_details.cached_tokens} < turn 1 prompt ${r1.usage.input_tokens}`);
      // A seal that does not open (altered) drops the reasoning: a shorter prompt, still served.
      const altered = input2.map((it) => (it.type === 'reasoning'
        ? { ...it, encrypted_content: `${it.encrypted_content.slice(0, -4)}AAAA` } : it));
      const r3 = await create({ input: altered, tools, store: false });
      assert.ok(r3.usage.input_tokens < r2.usage.input_tokens, `${r3.usage.input_tokens} >= ${r2.usage.input_tokens}`);
    });

    it('previous_response_id continues a stored response, also after a restart; GET, DELETE and 404', async () => {
      const instructions = SYSTEM(541);
      const r1 = await create({ instructions, input: `Plan the refactor.\n\n${words(40, 542)}` });
      const p1 = r1.usage.input_tokens;
      const r2 = await create({ instructions, previous_response_id: r1.id, input: 'Next step?' });
      assertResponse(r2, { maxOutputTokens: MAX }, 'continued');
      assert.equal(r2.previous_response_id, r1.id);
      const msgs2 = [{ role: 'system', content: instructions }, { role: 'user', content: `Plan the refactor.\n\n${words(40, 542)}` },
        chatMessageOf(r1.output), { role: 'user', content: 'Next step?' }];
      assert.equal(r2.usage.input_tokens, await chatTokens(msgs2));
      assert.equal(r2.usage.input_tokens_details.cached_tokens, followUpCached(hybrid, p1));
      const got = await srv.openai.responses.retrieve(r2.id);
      assert.deepEqual(got, r2);

      // Restart on the same --cache-dir: the stored responses (and the disk tier) survive.
      await srv.stopGracefully();
      srv = await start(`responses-${arch}-restarted`);
      assert.deepEqual(await srv.openai.responses.retrieve(r2.id), r2);
      const r3 = await create({ instructions, previous_response_id: r2.id, input: 'And then?' });
      assertResponse(r3, { maxOutputTokens: MAX }, 'after restart');
      assert.equal(r3.usage.input_tokens, await chatTokens([...msgs2, chatMessageOf(r2.output), { role: 'user', content: 'And then?' }]));
      assert.equal(r3.usage.input_tokens_details.cached_tokens, followUpCached(hybrid, r2.usage.input_tokens),
        'the restarted server restores the continued conversation from its disk tier');

      // DELETE, then 404 for GET, DELETE and previous_response_id, in the OpenAI error shape.
      const del = await fetch(`${srv.url}/v1/responses/${r1.id}`, { method: 'DELETE' });
      assert.equal(del.status, 200);
      assert.deepEqual(await del.json(), { id: r1.id, object: 'response', deleted: true });
      const missing = await srv.get(`/v1/responses/${r1.id}`);
      assert.equal(missing.status, 404);
      assert.equal(missing.json.error.type, 'invalid_request_error');
      assert.equal(missing.json.error.code, 'not_found');
      await assert.rejects(srv.openai.responses.delete(r1.id), (e) => e.status === 404);
      await assert.rejects(create({ previous_response_id: 'resp_nope', input: 'x' }),
        (e) => e.status === 404 && e.error?.param === 'previous_response_id');
      // r2 still continues: a stored conversation does not depend on its predecessor's row.
      assertResponse(await create({ previous_response_id: r2.id, input: 'Still there?' }), { maxOutputTokens: MAX }, 'r2 after r1 deleted');
    });

    it('a conversation started on /v1/chat/completions continues on /v1/responses from its cache entry', async () => {
      const messages = [{ role: 'system', content: SYSTEM(551) }, { role: 'user', content: `Look at this.\n\n${words(50, 552)}` }];
      const c1 = await srv.openai.chat.completions.create({ model: 'tiny', messages, max_tokens: MAX, temperature: 0 });
      const p1 = c1.usage.prompt_tokens;
      const m = c1.choices[0].message;
      const items = [];
      if (m.reasoning_content) items.push({ type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text: m.reasoning_content }] });
      items.push({ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: m.content ?? '' }] });
      const r2 = await create({ input: [...messages, ...items, { role: 'user', content: 'Why?' }], store: false });
      assert.equal(r2.usage.input_tokens, await chatTokens([...messages,
        { role: 'assistant', content: m.content ?? '', ...(m.reasoning_content ? { reasoning_content: m.reasoning_content } : {}) },
        { role: 'user', content: 'Why?' }]));
      assert.equal(r2.usage.input_tokens_details.cached_tokens, followUpCached(hybrid, p1));
    });

    it('input_items lists the conversation a stored response came from: order, limit, after; 404', async () => {
      const instructions = SYSTEM(561);
      const first = `Plan the migration.\n\n${words(20, 562)}`;
      const r1 = await create({ instructions, input: [{ role: 'user', content: first }] });
      const r2 = await create({ instructions, previous_response_id: r1.id,
        input: [{ role: 'user', content: 'Next step?' }, { role: 'user', content: [{ type: 'input_text', text: 'Be brief.' }] }] });
      const user = (text) => ({ type: 'message', role: 'user', content: [{ type: 'input_text', text }], status: 'completed' });
      const shape = ({ id: _id, ...rest }) => rest;

      // r1: its one input message (instructions are no item), under a message id.
      const p1 = await srv.openai.responses.inputItems.list(r1.id);
      assert.equal(p1.data.length, 1, JSON.stringify(p1.data));
      assert.match(p1.data[0].id, /^msg_/);
      assert.deepEqual(shape(p1.data[0]), user(first));
      // The list object as sent (the client's page keeps only data and has_more).
      const raw1 = await srv.get(`/v1/responses/${r1.id}/input_items`);
      assert.deepEqual(raw1.json, { object: 'list', data: p1.data, first_id: p1.data[0].id, last_id: p1.data[0].id, has_more: false });

      // r2: r1's input, r1's output (under its output ids), then its own two messages. The
      // default order is newest first; asc is the conversation's order.
      const asc = await srv.openai.responses.inputItems.list(r2.id, { order: 'asc' });
      assert.equal(asc.data.length, 3 + r1.output.length, JSON.stringify(asc.data));
      assert.deepEqual(asc.data[0], p1.data[0], 'r1\'s input item keeps its id in the conversation r2 continued');
      assert.deepEqual(asc.data.slice(1, 1 + r1.output.length).map((it) => [it.id, it.type]), r1.output.map((it) => [it.id, it.type]));
      assert.deepEqual(asc.data.slice(-2).map(shape), [user('Next step?'), user('Be brief.')]);
      const ids = asc.data.map((it) => it.id);
      assert.equal(new Set(ids).size, ids.length, `ids are unique: ${ids}`);
      const desc = await srv.openai.responses.inputItems.list(r2.id);
      assert.deepEqual(desc.data.map((it) => it.id), [...ids].reverse());
      const rawDesc = (await srv.get(`/v1/responses/${r2.id}/input_items`)).json;
      assert.deepEqual([rawDesc.first_id, rawDesc.last_id, rawDesc.has_more], [ids.at(-1), ids[0], false]);
      assert.deepEqual((await srv.openai.responses.inputItems.list(r2.id, { order: 'asc' })).data, asc.data, 'ids are stable');

      // limit: a page of 2 with has_more; the client follows `after` (its last id) page by page.
      const page = (await srv.get(`/v1/responses/${r2.id}/input_items?order=asc&limit=2`)).json;
      assert.deepEqual([page.data.map((it) => it.id), page.first_id, page.last_id, page.has_more], [ids.slice(0, 2), ids[0], ids[1], true]);
      assert.equal((await srv.openai.responses.inputItems.list(r2.id, { order: 'asc', limit: 2 })).has_more, true);
      const all = [];
      for await (const it of srv.openai.responses.inputItems.list(r2.id, { limit: 2 })) all.push(it.id);
      assert.deepEqual(all, [...ids].reverse());
      const after = await srv.openai.responses.inputItems.list(r2.id, { order: 'asc', after: ids[1], limit: 100 });
      assert.deepEqual(after.data.map((it) => it.id), ids.slice(2));

      // Errors: 404 in the OpenAI shape for an unknown id, 400 naming the bad parameter.
      await assert.rejects(srv.openai.responses.inputItems.list('resp_nope'),
        (e) => e.status === 404 && e.error?.code === 'not_found' && e.error?.type === 'invalid_request_error');
      for (const [q, param] of [['limit=0', 'limit'], ['limit=101', 'limit'], ['limit=x', 'limit'], ['order=up', 'order'],
        ['after=msg_nope', 'after']]) {
        const r = await srv.get(`/v1/responses/${r2.id}/input_items?${q}`);
        assert.equal(r.status, 400, `${q}: ${r.text}`);
        assert.equal(r.json.error.param, param, q);
      }
    });

    it('cancel needs no body: a foreground response cannot be cancelled (400), an unknown one is a 404', async () => {
      const r = await create({ input: `Say hello.\n\n${words(10, 571)}` });
      // The openai client sends the cancel without a body (and without a Content-Type).
      await assert.rejects(srv.openai.responses.cancel(r.id), (e) => e.status === 400 && e.error?.type === 'invalid_request_error' &&
        e.error?.message === `cannot cancel response '${r.id}': only responses created with background: true can be ` +
          `cancelled, and this server runs every response in the foreground (it has finished; GET /v1/responses/${r.id} returns it)`);
      await assert.rejects(srv.openai.responses.cancel('resp_nope'), (e) => e.status === 404 && e.error?.code === 'not_found');
      // As curl -X POST without -d sends it: no Content-Type, no Content-Length.
      const raw = await rawPost(srv.port, `/v1/responses/${r.id}/cancel`);
      assert.match(raw, /^HTTP\/1\.1 400 /, raw);
      assert.match(raw, /only responses created with background: true can be cancelled/);
      // A body that is there must still be JSON; a JSON one is accepted (and ignored).
      const text = await fetch(`${srv.url}/v1/responses/${r.id}/cancel`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'x' });
      assert.equal(text.status, 415);
      assert.equal((await text.json()).error.code, 'unsupported_media_type');
      assert.equal((await srv.post(`/v1/responses/${r.id}/cancel`, {})).status, 400);
      // A JSON content type over a body that is not a JSON object: the parse error, not the cancel answer.
      for (const body of ['hello', '[1]']) {
        const bad = await fetch(`${srv.url}/v1/responses/${r.id}/cancel`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
        assert.equal(bad.status, 400, body);
        const e = (await bad.json()).error;
        assert.equal(e.type, 'invalid_request_error', body);
        assert.doesNotMatch(e.message, /cannot cancel/, `${body}: ${e.message}`);
      }
      // The response is untouched, and a body-less POST elsewhere is still refused.
      assert.equal((await srv.openai.responses.retrieve(r.id)).status, r.status);
      assert.match(await rawPost(srv.port, '/v1/cache/reset'), /^HTTP\/1\.1 415 /);
    });

    it('bad requests get a 400 naming the field; hosted tools are ignored', async () => {
      const bad = await srv.post('/v1/responses', { model: 'tiny', input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] });
      assert.equal(bad.status, 400);
      assert.equal(bad.json.error.param, 'input[0].content[0].image_url');
      assert.match(bad.json.error.message, /must be a data URI/);
      const fmt = await srv.post('/v1/responses', { model: 'tiny', input: 'x', text: { format: { type: 'xml' } } });
      assert.equal(fmt.status, 400);
      assert.equal(fmt.json.error.param, 'text.format.type');
      const hosted = await create({ input: 'Search the web.', tools: [{ type: 'web_search' }, responsesTool(TOOLS[0])], store: false });
      assert.deepEqual(hosted.tools.map((t) => t.name), [TOOLS[0].function.name]);
      assert.match(srv.log(), /ignored tools this server cannot run \(the model is not told about them\): web_search/);
    });
  });
}
