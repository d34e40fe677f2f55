// Scripted replies (--test-reply-script, a test instrument; docs/testing.md "Scripted replies") on
// each tiny model: the random-weight model answers with the script's reply, generated token by
// token, so a client sees a real tool call and sends its result back, as an agent does. Asserted:
//  - a scripted tool call (with reasoning) reaches a chat client as OpenAI tool_calls with the
//    script's name and arguments (finish_reason tool_calls), streamed and not; an Anthropic client
//    as a tool_use block with its input; a Responses client as a function_call item;
//  - the next turn, which echoes the reply and adds the tool's result, gets the script's next reply
//    (chosen by what its new input contains) and restores everything the server holds of the first
//    turn: its prompt and the reply's tokens but the end-of-turn token, which ends generation and is
//    never computed (scenario A1 on a reply the model really generated);
//  - a raw prompt (/v1/completions) gets a `text` reply; a structured one is refused for it;
//  - a request no reply matches gets HTTP 400 no_scripted_reply in the dialect's error shape, and
//    the server goes on serving; the script is read again when its file changes;
//  - --help and the log say it is a test instrument;
//  - a tool loop longer than --cache-max-checkpoints (6 steps, reasoning in each), then a new user
//    message (the template re-renders the loop's turns without their reasoning: the prompt parts
//    just after the first user turn's boundary), then a new session with the same first message:
//    both restore at least that boundary (thinning keeps a lineage's first and last user turn
//    boundaries; the agent sessions of Claude Code and Codex part there).
//
//   cd tests/e2e && node --test scripted.test.mjs
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';

import { chatTokens } from './lib/agents.mjs';
import { anthropic } from './lib/anthropic.mjs';
import { assertError, assertToolCalls, streamChat, usageOf } from './lib/chat.mjs';
import { newScript, writeScript } from './lib/script.mjs';
import { ARCHS, SERVER_BIN, modelPath, startServer } from './lib/server.mjs';

const SYSTEM = 'You are a coding agent working in a scratch project. Use the tools to look before you answer.';
const TOOLS = [
  { type: 'function', function: { name: 'read_file', description: 'Reads a file of the project.',
    parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } } },
  { type: 'function', function: { name: 'run_shell', description: 'Runs a shell command.',
    parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] } } },
];

/** The two steps of one task: a tool call with reasoning, then an answer once the result is in. */
const steps = (tag) => [
  { label: `${tag}-call`, when: { input: `TASK-${tag}`, tools: true }, reasoning: `I should read notes-${tag}.txt first.`,
    tool_calls: [{ name: 'read_file', arguments: { path: `notes-${tag}.txt` } }] },
  { label: `${tag}-answer`, when: { input: `BODY-${tag}` }, content: `The notes of ${tag} say hello.` },
];

for (const arch of ARCHS) {
  describe(`scripted replies [${arch}]`, { timeout: 300_000 }, () => {
    let srv;
    let script;
    before(async () => {
      script = newScript([]);
      srv = await startServer({ model: modelPath(arch), name: `scripted-${arch}`,
        args: ['--parallel', '2', '--ctx-size', '4096', '--test-reply-script', script] });
    });
    after(async () => {
      await srv?.stopGracefully();
    });

    it('says it is a test instrument in --help and in the log', () => {
      const help = spawnSync(SERVER_BIN, ['--help'], { encoding: 'utf8' }).stdout;
      assert.match(help, /--test-reply-script[\s\S]*TEST INSTRUMENT/);
      assert.match(srv.log(), /TEST INSTRUMENT: --test-reply-script/);
    });

    it('chat: a scripted tool call reaches the client, and the next turn restores all the first one computed', async () => {
      writeScript(script, steps('chat'));
      const messages = [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'TASK-chat: what do the notes say?' }];
      const r1 = await srv.openai.chat.completions.create({ model: 'tiny', messages, tools: TOOLS, max_tokens: 200 });
      const m1 = r1.choices[0].message;
      assert.equal(r1.choices[0].finish_reason, 'tool_calls', JSON.stringify(r1));
      assertToolCalls(m1.tool_calls, TOOLS, 'turn 1');
      assert.equal(m1.tool_calls.length, 1);
      assert.equal(m1.tool_calls[0].function.name, 'read_file');
      assert.deepEqual(JSON.parse(m1.tool_calls[0].function.arguments), { path: 'notes-chat.txt' });
      // The output parser keeps the newline the template puts before "</think>"; the template trims
      // it again when the client echoes the reasoning, so the next turn renders what was generated.
      assert.equal(m1.reasoning_content, 'I should read notes-chat.txt first.\n');
      const u1 = usageOf(r1);
      assert.ok(u1.completion > 10, `the reply was generated token by token: ${u1.completion} tokens`);

      const history = [...messages,
        { role: 'assistant', content: m1.content ?? '', reasoning_content: m1.reasoning_content, tool_calls: m1.tool_calls },
        { role: 'tool', tool_call_id: m1.tool_calls[0].id, content: 'BODY-chat: hello from the notes.' }];
      const r2 = await srv.openai.chat.completions.create({ model: 'tiny', messages: history, tools: TOOLS, max_tokens: 200 });
      assert.equal(r2.choices[0].finish_reason, 'stop');
      assert.equal(r2.choices[0].message.content, 'The notes of chat say hello.');
      const u2 = usageOf(r2);
      // The sequence holds the prompt and the reply but its last token (<|im_end|>: sampled, never
      // computed); the echoed turn renders the same tokens, so all of them are restored.
      assert.ok(u2.cached >= u1.prompt + u1.completion - 1,
        `turn 2 restored ${u2.cached} of ${u2.prompt}; turn 1 held ${u1.prompt} + ${u1.completion} - 1\n${srv.logTail(20)}`);
      assert.match(srv.log(), /scripted reply chat-answer: \d+ tokens forced/);
    });

    it('chat, streamed: the tool call arrives in deltas with the same name and arguments', async () => {
      writeScript(script, steps('stream'));
      const out = await streamChat(srv.openai, { model: 'tiny', max_tokens: 200, tools: TOOLS,
        messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'TASK-stream: look.' }] });
      assert.equal(out.finish, 'tool_calls');
      assert.equal(out.reasoning, 'I should read notes-stream.txt first.\n');
      assert.equal(out.toolCalls.length, 1);
      assert.equal(out.toolCalls[0].function.name, 'read_file');
      assert.deepEqual(JSON.parse(out.toolCalls[0].function.arguments), { path: 'notes-stream.txt' });
    });

    it('Anthropic Messages: a tool_use block, then the answer to its tool_result', async () => {
      writeScript(script, steps('msg'));
      const client = anthropic(srv);
      const tools = TOOLS.map((t) => ({ name: t.function.name, description: t.function.description, input_schema: t.function.parameters }));
      const messages = [{ role: 'user', content: 'TASK-msg: what do the notes say?' }];
      const m1 = await client.messages.create({ model: 'tiny', system: SYSTEM, max_tokens: 200, tools, messages });
      assert.equal(m1.stop_reason, 'tool_use', JSON.stringify(m1));
      const use = m1.content.find((b) => b.type === 'tool_use');
      assert.ok(use, JSON.stringify(m1.content));
      assert.equal(use.name, 'read_file');
      assert.deepEqual(use.input, { path: 'notes-msg.txt' });
      const m2 = await client.messages.create({ model: 'tiny', system: SYSTEM, max_tokens: 200, tools, messages: [...messages,
        { role: 'assistant', content: m1.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'BODY-msg: hello.' }] }] });
      assert.equal(m2.stop_reason, 'end_turn');
      assert.deepEqual(m2.content.filter((b) => b.type === 'text').map((b) => b.text), ['The notes of msg say hello.']);
      const held = m1.usage.input_tokens + (m1.usage.cache_read_input_tokens ?? 0) + (m1.usage.cache_creation_input_tokens ?? 0) +
        m1.usage.output_tokens - 1;
      assert.ok(m2.usage.cache_read_input_tokens >= held,
        `turn 2 restored ${m2.usage.cache_read_input_tokens}; turn 1 held ${held}\n${srv.logTail(20)}`);
    });

    it('Responses: a function_call item', async () => {
      writeScript(script, steps('resp'));
      const r = await srv.openai.responses.create({ model: 'tiny', instructions: SYSTEM, max_output_tokens: 200, store: false,
        input: 'TASK-resp: what do the notes say?',
        tools: TOOLS.map((t) => ({ type: 'function', name: t.function.name, description: t.function.description,
          parameters: t.function.parameters })) });
      const call = r.output.find((it) => it.type === 'function_call');
      assert.ok(call, JSON.stringify(r.output));
      assert.equal(call.name, 'read_file');
      assert.deepEqual(JSON.parse(call.arguments), { path: 'notes-resp.txt' });
    });

    it('completions: a raw prompt gets a text reply, ended by the end-of-turn token', async () => {
      writeScript(script, [{ label: 'raw', when: { input: 'RAW-PROMPT' }, text: 'Raw reply, then the turn ends.' },
        { label: 'structured', when: { input: 'STRUCTURED' }, content: 'needs a template' }]);
      const r = await srv.openai.completions.create({ model: 'tiny', prompt: 'A RAW-PROMPT for the model:', max_tokens: 50 });
      assert.equal(r.choices[0].text, 'Raw reply, then the turn ends.');
      assert.equal(r.choices[0].finish_reason, 'stop');
      // A structured reply needs the chat template: refused for a raw prompt, naming why.
      const e = assertError(await srv.post('/v1/completions', { model: 'tiny', prompt: 'STRUCTURED', max_tokens: 20 }),
        400, 'structured reply for a raw prompt');
      assert.equal(e.code, 'no_scripted_reply');
      assert.match(e.message, /has no "text"/);
    });

    it("a tool loop longer than the checkpoint cap keeps the first user turn's boundary: the next user message and a " +
      'new session with the same first message restore it', async () => {
      const N = 6;  // tool steps: more than --cache-max-checkpoints (4)
      writeScript(script, [
        ...Array.from({ length: N }, (_, i) => ({ label: `loop-${i + 1}`, when: { input: i === 0 ? 'TASK-loop' : `RESULT-loop-${i}:` },
          reasoning: `Step ${i + 1}: the next check.`, tool_calls: [{ name: 'run_shell', arguments: { command: `echo step-${i + 1}` } }] })),
        { label: 'loop-done', when: { input: `RESULT-loop-${N}:` }, content: 'All checks ran.' },
        { label: 'loop-next', when: { input: 'NEXT-loop' }, content: 'Nothing more to do.' },
        { label: 'loop-again', when: { input: 'TASK-loop' }, content: 'A new session on the same task.' },
      ]);
      const first = [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'TASK-loop: run the checks one by one. ' +
        'The project has a README, a greet.py and a notes folder; every check prints its step number. '.repeat(6) }];
      const hist1 = (await chatTokens(srv, { messages: first, tools: TOOLS }, false)).length;
      const messages = [...first];
      const rows = [];
      for (let i = 1; i <= N + 1; i++) {
        const r = await srv.openai.chat.completions.create({ model: 'tiny', messages, tools: TOOLS, max_tokens: 200 });
        const m = r.choices[0].message;
        rows.push(`step ${i}: prompt ${usageOf(r).prompt} cached ${usageOf(r).cached}`);
        if (i === N + 1) {
          assert.equal(m.content, 'All checks ran.', rows.join('\n'));
          messages.push({ role: 'assistant', content: m.content });
          break;
        }
        assert.equal(r.choices[0].finish_reason, 'tool_calls', `step ${i}: ${JSON.stringify(r.choices[0])}`);
        messages.push({ role: 'assistant', content: m.content ?? '', reasoning_content: m.reasoning_content, tool_calls: m.tool_calls },
          { role: 'tool', tool_call_id: m.tool_calls[0].id, content: `RESULT-loop-${i}: step-${i}` });
      }
      messages.push({ role: 'user', content: 'NEXT-loop: anything else?' });
      const next = await srv.openai.chat.completions.create({ model: 'tiny', messages, tools: TOOLS, max_tokens: 200 });
      assert.equal(next.choices[0].message.content, 'Nothing more to do.');
      const un = usageOf(next);
      rows.push(`next user message: prompt ${un.prompt} cached ${un.cached}; first user turn's boundary ${hist1}`);
      assert.ok(un.cached >= hist1, `${rows.join('\n')}\n${srv.logTail(30)}`);
      // A new session (its own key) that sends the same first message.
      const again = await srv.openai.chat.completions.create({ model: 'tiny', messages: first, tools: TOOLS, max_tokens: 200,
        prompt_cache_key: 'another-session' });
      assert.equal(again.choices[0].message.content, 'A new session on the same task.');
      const ua = usageOf(again);
      rows.push(`new session, same first message: prompt ${ua.prompt} cached ${ua.cached}`);
      assert.ok(ua.cached >= hist1, `${rows.join('\n')}\n${srv.logTail(30)}`);
    });

    it('a request no reply matches gets 400 no_scripted_reply, and the server goes on serving', async () => {
      writeScript(script, [{ label: 'only', when: { input: 'MATCH-ME' }, content: 'Matched.' }]);
      const miss = await srv.post('/v1/chat/completions', { model: 'tiny', max_tokens: 20,
        messages: [{ role: 'user', content: 'something else' }] });
      const e = assertError(miss, 400, 'unmatched');
      assert.equal(e.code, 'no_scripted_reply');
      assert.match(e.message, /test instrument/);
      const hit = await srv.openai.chat.completions.create({ model: 'tiny', max_tokens: 20,
        messages: [{ role: 'user', content: 'MATCH-ME please' }] });
      assert.equal(hit.choices[0].message.content, 'Matched.');
      // Used once: the same request again is refused; a new file starts over.
      const again = await srv.post('/v1/chat/completions', { model: 'tiny', max_tokens: 20,
        messages: [{ role: 'user', content: 'MATCH-ME please' }] });
      assert.equal(assertError(again, 400, 'used').code, 'no_scripted_reply');
      writeScript(script, [{ label: 'only', when: { input: 'MATCH-ME' }, content: 'Matched again.', repeat: true }]);
      for (let i = 0; i < 2; i++) {
        const r = await srv.openai.chat.completions.create({ model: 'tiny', max_tokens: 20,
          messages: [{ role: 'user', content: 'MATCH-ME please' }] });
        assert.equal(r.choices[0].message.content, 'Matched again.');
      }
    });
  });
}
