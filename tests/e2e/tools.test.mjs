// Tools, for the tiny hybrid (qwen35) and tiny dense (qwen3) models. The weights are random,
// so the model does not call tools reliably; these tests exercise the tool-history path:
//  - a request with `tools` (tool_choice auto / none) returns 200 and valid shapes (any
//    tool_calls the model makes have an id, type "function", a declared name and JSON
//    arguments; tool_choice "none" never yields tool_calls);
//  - a history with an assistant message carrying tool_calls (content null, or text) and
//    the matching tool result messages (one or two calls) renders and returns 200;
//  - streamed and non-streamed replies to a tool history agree;
//  - an agent-loop turn (the previous prompt + an assistant tool call as a client replays it
//    + its tool result) reuses at least the whole previous prompt.
//
//   cd tests/e2e && node --test tools.test.mjs
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { assertCompletion, streamChat, usageOf, words } from './lib/chat.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const MAX_TOKENS = 12;

export const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'read_file',
      description: 'Read a text file from the repository and return its contents with line numbers.',
      parameters: {
        type: 'object',
        properties: {
          path: { type: 'string', description: 'Path relative to the repository root.' },
          start_line: { type: 'integer', description: 'First line to return (1-based).' },
          end_line: { type: 'integer', description: 'Last line to return (inclusive).' },
        },
        required: ['path'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'run_shell',
      description: 'Run a shell command in the repository root and return its exit code, stdout and stderr.',
      parameters: {
        type: 'object',
        properties: {
          command: { type: 'string', description: 'The command line, passed to bash -lc.' },
          timeout_s: { type: 'number', description: 'Seconds before the command is killed.' },
        },
        required: ['command'],
      },
    },
  },
];

const SYSTEM = `You are a coding agent. Use the tools to inspect the repository before answering. ${words(80, 31)}`;

const callRead = { id: 'call_read_1', type: 'function',
  function: { name: 'read_file', arguments: JSON.stringify({ path: 'src/cache/trie.cpp', start_line: 1, end_line: 40 }) } };
const callShell = { id: 'call_shell_1', type: 'function',
  function: { name: 'run_shell', arguments: JSON.stringify({ command: 'ctest --test-dir build -R cache', timeout_s: 120 }) } };
const fileText = Array.from({ length: 12 }, (_, i) => `${i + 1}\t${words(9, 200 + i)}`).join('\n');
const shellText = `exit 0\n--- stdout ---\n${words(40, 300)}\n--- stderr ---\n`;

function toolHistory({ content = null, calls = [callRead] } = {}) {
  const msgs = [
    { role: 'system', content: SYSTEM },
    { role: 'user', content: 'Why does the trie lookup return a shorter prefix than expected?' },
    { role: 'assistant', content, tool_calls: calls },
  ];
  for (const c of calls) msgs.push({ role: 'tool', tool_call_id: c.id, content: c === callRead ? fileText : shellText });
  return msgs;
}

for (const arch of ARCHS) {
  describe(`tools [${arch}]`, { timeout: 240_000 }, () => {
    let srv;
    before(async () => {
      srv = await startServer({ model: modelPath(arch), name: `tools-${arch}`, args: ['--parallel', '2', '--ctx-size', '4096'] });
    });
    after(async () => { await srv?.stopGracefully(); });

    async function chat(body, where) {
      const res = await srv.openai.chat.completions.create({ model: 'tiny', max_tokens: MAX_TOKENS, temperature: 0, ...body });
      assertCompletion(res, { maxTokens: body.max_tokens ?? MAX_TOKENS, tools: TOOLS }, where);
      return res;
    }

    it('a request with tools returns a valid completion (tool_choice auto and none)', async () => {
      const messages = [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'Read src/cache/trie.cpp.' }];
      await chat({ messages, tools: TOOLS }, 'tools, default tool_choice');
      await chat({ messages, tools: TOOLS, tool_choice: 'auto' }, 'tool_choice auto');
      const none = await chat({ messages, tools: TOOLS, tool_choice: 'none' }, 'tool_choice none');
      assert.ok(!none.choices[0].message.tool_calls?.length, 'tool_choice none returned tool_calls');
      assert.notEqual(none.choices[0].finish_reason, 'tool_calls');
    });

    it('a history with an assistant tool call and its result is accepted', async () => {
      for (const [where, history] of [
        ['content null, one call', toolHistory()],
        ['content text, one call', toolHistory({ content: 'Let me read the file first.' })],
        ['two calls, two results', toolHistory({ calls: [callRead, callShell] })],
      ]) {
        const res = await chat({ messages: history, tools: TOOLS }, where);
        assert.ok(res.usage.prompt_tokens > 100, `${where}: prompt_tokens ${res.usage.prompt_tokens}`);
      }
      // Also without the tools array (a client that stopped sending tools).
      await chat({ messages: toolHistory() }, 'tool history without tools');
    });

    it('the tool results are part of the prompt', async () => {
      const one = await chat({ messages: toolHistory(), tools: TOOLS, cache_prompt: false }, 'one result');
      const two = await chat({ messages: toolHistory({ calls: [callRead, callShell] }), tools: TOOLS, cache_prompt: false },
        'two results');
      assert.ok(two.usage.prompt_tokens > one.usage.prompt_tokens + 40,
        `second tool result not rendered: ${one.usage.prompt_tokens} vs ${two.usage.prompt_tokens}`);
    });

    it('streamed and non-streamed replies to a tool history agree', async () => {
      const body = { messages: toolHistory({ content: 'Checking.' }), tools: TOOLS, max_tokens: MAX_TOKENS, temperature: 0 };
      const plain = await chat({ ...body, cache_prompt: false }, 'non-streamed');
      const s = await streamChat(srv.openai, { model: 'tiny', ...body, cache_prompt: false, stream_options: { include_usage: true } });
      const detail = `non-streamed message ${JSON.stringify(plain.choices[0].message)}; streamed content ` +
        `${JSON.stringify(s.content)}, reasoning_content ${JSON.stringify(s.reasoning)}`;
      assert.equal(s.content, plain.choices[0].message.content ?? '', `content differs: ${detail}`);
      assert.equal(s.reasoning, plain.choices[0].message.reasoning_content ?? '', `reasoning_content differs: ${detail}`);
      assert.equal(s.finish, plain.choices[0].finish_reason);
      assert.equal(s.usage.completion_tokens, plain.usage.completion_tokens);
      assert.equal(s.usage.prompt_tokens, plain.usage.prompt_tokens);
    });

    it('an agent-loop turn (tool call + result appended) reuses the previous prompt', async () => {
      // Turn 1: the user asks; turn 2: the client appends the assistant's tool call (replayed,
      // with its reasoning) and the tool result, as an agent loop does.
      const turn1 = [{ role: 'system', content: `${SYSTEM} Session 2.` },
        { role: 'user', content: 'Find where the checkpoint list is thinned.' }];
      const r1 = await chat({ messages: turn1, tools: TOOLS }, 'agent turn 1');
      const turn2 = [...turn1,
        { role: 'assistant', content: '', reasoning_content: 'I should search the cache sources first.', tool_calls: [callShell] },
        { role: 'tool', tool_call_id: callShell.id, content: shellText }];
      const r2 = await chat({ messages: turn2, tools: TOOLS }, 'agent turn 2');
      // A hybrid entry keeps the model's own reply (--cache-keep-reply): this turn replays another
      // reply, so it parts at the prompt end and restores the resend guard, the prompt's last
      // token (docs/prompt-cache.md); a dense entry restores any prefix.
      const hybrid = (await srv.cacheStats()).family === 'hybrid';
      const want = hybrid ? usageOf(r1).prompt - 1 : usageOf(r1).prompt;
      assert.ok(usageOf(r2).cached >= want,
        `agent turn 2: cached_tokens ${usageOf(r2).cached} < ${want} (turn 1 prompt_tokens ${usageOf(r1).prompt}); ` +
        `request: ${JSON.stringify(turn2)}`);
      if (hybrid && usageOf(r2).cached === want) assert.equal(r2.timings.cache_hit, 'guard', JSON.stringify(r2.timings));
    });
  });
}
