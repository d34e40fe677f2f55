// Real chat-completions coding agents in real working sessions against lineage-server: pi
// (@mariozechner/pi-coding-agent), opencode (opencode-ai), qwen-code (@qwen-code/qwen-code) and
// continue's CLI (@continuedev/cli), installed from npm at pinned versions (lib/agents.mjs), driven
// non-interactively on loopback (no traffic leaves 127.0.0.1: a recording proxy sits between the
// agent and the server), on the tiny hybrid (qwen35) and dense (qwen3) models. The models have
// random weights, so the server runs with --test-reply-script (docs/testing.md "Scripted replies"):
// each request gets the script's reply that its new input calls for, generated token by token, so
// the agent runs its own tools on a scratch project and the cache holds what was generated.
//
// The session, per agent (each step's reply is chosen by a marker the previous tool's result
// brought back: a broken step gets HTTP 400 no_scripted_reply, never the next step's reply):
//  A. a task of 9-10 model calls: write a plan (the agent's todo tool: opencode todowrite, qwen-code
//     todo_write, continue Checklist; pi has none: `ls` through its bash tool), read README.md,
//     find the Python files (opencode/qwen-code glob, continue List, pi `find`), search for a marker
//     (opencode grep, qwen-code grep_search, continue Search, pi `grep -rn`), read main.py, edit it,
//     run `echo SHELL-$((6*7))-7f3a | tee <project>/shell.txt` (the marker SHELL-42 is in the file only
//     if a shell ran it; the next step is chosen by `SHELL-`, which the result holds whether or not
//     the agent captured the output: qwen-code 0.x sometimes returns "Output: (empty)" for a command
//     this fast, beside "Command: echo SHELL-..."), write
//     notes.txt, mark the plan done, answer; the plan and the edit replies carry reasoning;
//  B. the session resumed (pi -c, opencode -c, qwen-code -c, cn --resume): a subagent call
//     (opencode task, qwen-code agent) whose own requests (another system prompt and tools) read
//     README.md and report, then the answer; pi has no subagent, continue's does not run in -p mode
//     (see the agent): a read instead;
//  C. a compaction, as each agent does it non-interactively: pi's automatic one (the context
//     window shrunk for this run: it compacts before sending the prompt), opencode's on overflow
//     (a context limit the session's last reply reached: it compacts, then continues by itself),
//     qwen-code `-p /compress`, continue `-p /compact`;
//  D. the session resumed after the compaction: a read, an answer;
//  E. a second session in the same folder: a read, an answer;
//  F. a new session in another folder: a read, an answer.
// Side requests (opencode's titles; qwen-code's memory extraction, if it runs) get repeatable
// replies. opencode and continue run ripgrep from PATH for their search tools: the test puts the one
// qwen-code's npm package ships in PATH (ripgrepDir). MAX_OUTPUT is large enough that no scripted
// reply is cut. The server runs with --cache-warmup on (as users run it) and --cache-trace: the
// checks are lower bounds, which a warm-up that finished before the next request can only raise (the
// cached counts above them are timing-dependent: a tool step whose previous reply had no reasoning
// parts at that prompt's last token: the template renders the empty think block `<think>\n\n</think>`,
// whose `>\n\n` token replaces the `>\n` the generation prompt ended with, so the step restores the
// reply only when the warm-up ran in between).
//
// Asserted, per agent and model:
//  - every run exits 0, every request got HTTP 200, every scripted step was used in the order
//    written, each run printed its answer, and the tools really ran (main.py holds the edit,
//    notes.txt exists, the search's, the shell's and the subagent's markers came back); the
//    compaction request was made and the session after it carries the summary (continue: it does
//    not, see the agent); the reasoning went back (continue: it does not);
//  - every request but the first restores at least the restore point the rules promise, computed
//    from the recorded bodies (/apply-template + /tokenize) and the server's log line for it (paired
//    by prompt length in arrival order, lib/agents.mjs pairLines), against the previous request of
//    its chain (a chain: the agent's own requests in one conversation, resumed turns and a
//    compaction that keeps its system prompt and tools included; a subagent's, a title or a
//    summarization request with its own system prompt forms its own), or, for a chain's first
//    request, against the earlier request it shares the most with (lib/agents.mjs
//    promisedRestore; docs/prompt-cache.md "Restore points"):
//      dense (qwen3): every token it shares with that request, one less when that is the whole
//        prompt;
//      hybrid (qwen35): that request's history boundary (its prompt without the generation prompt)
//        when the request extends it; else the longest documented restore point at or before where
//        it parts: an earlier request's history boundary it extends, the anchor (system prompt +
//        tools, minus --cache-anchor-slack) and its ladder (where it parts inside the system prompt:
//        a rung at most 64 tokens before the parting point in the region's last 512 tokens, 512
//        before it earlier), none where it parts inside the tool block (a subagent's other tool
//        list: the ladder lies after the tools anchor; the volatile rungs before absolute paths are
//        not placed here);
//    message rungs, reply checkpoints and warm-ups are not promised (they can only raise cached);
//    server gaps not fixed yet are node:test todos, each naming what the decision trace showed;
//  - where a request shares less than a verbatim echo of the previous reply would (the reply
//    rendered by the template, then a placeholder for the tool result or the next user message),
//    the agent behaviour that caused it is named, with its cost in tokens: the expectation above
//    follows what is shared, so such a behaviour is a cost of the agent, not a failure; and the
//    behaviours each agent's version is known for (its `known` list) are seen, so that a change in
//    the agent is noticed;
//  - the second session's first request restores >= 95% of its prompt (the system prompt + tools
//    an agent sends every session); the resumed turn (B), the compaction (C, where it continues the
//    chain) and the turn after it (D) their promised restore points, B sharing most of its prompt;
//    the session in another folder (the agents write the folder, and pi, opencode and qwen-code the
//    date, into their prompts) the prefix its first request shares with the first folder's: all of
//    it on the dense model, all but at most 64 tokens on the hybrid model (the anchor's ladder).
// Each session's recording goes to build/agent-sessions/<agent>-<arch>.json for the benchmark's
// replay (lib/agents.mjs saveSession): no recorded text goes into the repository.
//
//   cd tests/e2e && node --test agent-chat.test.mjs
//   (LINEAGE_E2E_AGENTS=pi,opencode: only those agents; LINEAGE_E2E_ARCHS=qwen35: only that model)
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { declinedTierCopy, firstChange, installAgent, knownGapTests, lcp, pairLines, promiseReport, promisedRestore, requestLines, runAgent,
  saveSession, sessionProxy, short, tokensOf, traceLines } from './lib/agents.mjs';
import { newScript, writeScript } from './lib/script.mjs';
import { ARCHS, REPO_ROOT, modelPath, startServer } from './lib/server.mjs';

const PI = { pkg: '@mariozechner/pi-coding-agent', version: '0.73.1', bin: 'pi' };
const OPENCODE = { pkg: 'opencode-ai', version: '1.18.33', bin: 'opencode' };
const QWEN_CODE = { pkg: '@qwen-code/qwen-code', version: '0.24.4', bin: 'qwen' };
const CONTINUE = { pkg: '@continuedev/cli', version: '1.5.47', bin: 'cn' };
/** Output tokens an agent asks for: more than any scripted reply, so none is cut. */
const MAX_OUTPUT = 1024;
/** Tokens one sequence holds: qwen-code's system prompt, tools and reminders are ~13k tokens. */
const CTX = 32768;
const RUN_TIMEOUT_MS = 240_000;
const M = '7f3a';  // the markers' suffix
const SENTINEL = '\u2063';

// --- The agents -----------------------------------------------------------------------------------
// Each: how to configure and run it (setup(home, baseUrl, phase) -> env, before every run: a
// phase may change the configuration), its tool calls (the names and arguments of its own tools,
// as its request's tools array declares them), what its tools' results say (the markers the next
// step waits for), its compaction and its side requests.

/** pi: a custom OpenAI-compatible provider in $HOME/.pi/agent/models.json; -p prints and exits; -c
 *  continues the folder's latest session. Its default tools (read, bash, edit, write: no todo, no
 *  search tool and no subagent; its grep and find tools are off by default and need rg and fd).
 *  Compaction: automatic only in -p mode (/compact is interactive), when the last reply's context
 *  exceeds contextWindow - reserveTokens: phase C shrinks the model's context window so that it
 *  compacts before sending the prompt (a summarization request: its own system prompt, the
 *  conversation as text, no tools), keeping the last keepRecentTokens. */
const piAgent = {
  name: 'pi',
  spec: PI,
  setup(home, baseUrl, phase) {
    fs.mkdirSync(path.join(home, '.pi/agent'), { recursive: true });
    const small = phase === 'C';
    fs.writeFileSync(path.join(home, '.pi/agent/models.json'), JSON.stringify({
      providers: { lineage: { baseUrl, api: 'openai-completions', apiKey: 'sk-none',
        compat: { supportsDeveloperRole: false, supportsReasoningEffort: false },
        models: [{ id: 'tiny', maxTokens: MAX_OUTPUT, contextWindow: small ? 4096 : CTX }] } },
    }));
    fs.writeFileSync(path.join(home, '.pi/agent/settings.json'), JSON.stringify({
      compaction: { enabled: true, reserveTokens: small ? 2048 : 4096, keepRecentTokens: small ? 256 : 20000 } }));
    return { PI_OFFLINE: '1', PI_TELEMETRY: '0' };
  },
  args: (prompt, resume) => ['--provider', 'lineage', '--model', 'tiny', ...(resume ? ['-c'] : []), '-p', prompt],
  calls: {
    plan: null,
    read: (p, file) => ({ name: 'read', arguments: { path: `${p}/${file}` } }),
    glob: () => ({ name: 'bash', arguments: { command: "find . -name '*.py'" } }),
    grep: () => ({ name: 'bash', arguments: { command: `grep -rn NEEDLE-${M} .` } }),
    edit: (p) => ({ name: 'edit', arguments: { path: `${p}/main.py`, edits: [{ oldText: 'return "hello"', newText: 'return "hello, world"' }] } }),
    shell: (command) => ({ name: 'bash', arguments: { command } }),
    write: (p) => ({ name: 'write', arguments: { path: `${p}/notes.txt`, content: `WROTE-${M}\n` } }),
    subagent: null,
  },
  says: { edit: 'Successfully replaced 1 block(s)', write: 'Successfully wrote' },
  compaction: { prompt: `COMPACT-${M}: where are we?`, summary: { system: 'context summarization assistant' } },
  known: [
    [/rewrites message 1 \(user\)[\s\S]*The conversation history before this point was compacted/,
      'its compaction replaces the conversation with a summary message and the turns it keeps'],
    [/No prior history[\s\S]*-> [\s\S]*SUMMARY-7f3a/,
      'the summary message it resumes from (-c) is not the one the compacting run sent (there: the history summary and the split turn\'s)'],
  ],
  side: [],
};

/** opencode: the provider through OPENCODE_CONFIG_CONTENT (@ai-sdk/openai-compatible, bundled);
 *  `run` prints and exits (--auto: its tools run without asking); -c continues the latest
 *  session; no models.dev fetch, no updates, no LSP downloads, no sharing. A title request (its
 *  own system prompt, no tools) beside the first turn of each session. Compaction: automatic when a
 *  reply's tokens reach the model's context limit minus its output limit: phase C gives the model
 *  a 4096-token limit, so after the first reply it sends a summary request (the compaction agent,
 *  no tools) and then continues the session by itself ("Continue if you have next steps"). */
const opencodeAgent = {
  name: 'opencode',
  spec: OPENCODE,
  setup(home, baseUrl, phase, last) {
    // Phase C: a context limit the session's last reply reached, but the conversation after the
    // compaction (the system prompt and tools alone are ~7k tokens) does not.
    const context = phase === 'C' ? last.prompt + last.completion + MAX_OUTPUT - 100 : CTX;
    return {
      OPENCODE_CONFIG_CONTENT: JSON.stringify({
        autoupdate: false, share: 'disabled',
        provider: { lineage: { npm: '@ai-sdk/openai-compatible', name: 'lineage',
          options: { baseURL: baseUrl, apiKey: 'sk-none' },
          models: { tiny: { name: 'tiny', limit: { context, output: MAX_OUTPUT } } } } },
      }),
      OPENCODE_DISABLE_MODELS_FETCH: '1', OPENCODE_DISABLE_AUTOUPDATE: '1', OPENCODE_DISABLE_LSP_DOWNLOAD: '1',
      OPENCODE_DISABLE_DEFAULT_PLUGINS: '1', OPENCODE_DISABLE_SHARE: '1',
    };
  },
  args: (prompt, resume) => ['run', '--auto', '--model', 'lineage/tiny', ...(resume ? ['-c'] : []), prompt],
  calls: {
    plan: (items) => ({ name: 'todowrite', arguments: { todos: items.map(([content, done]) => ({ content,
      status: done ? 'completed' : 'pending', priority: 'medium' })) } }),
    read: (p, file) => ({ name: 'read', arguments: { filePath: `${p}/${file}` } }),
    glob: () => ({ name: 'glob', arguments: { pattern: '**/*.py' } }),
    grep: () => ({ name: 'grep', arguments: { pattern: `NEEDLE-${M}` } }),
    edit: (p) => ({ name: 'edit', arguments: { filePath: `${p}/main.py`, oldString: 'return "hello"', newString: 'return "hello, world"' } }),
    shell: (command) => ({ name: 'bash', arguments: { command } }),
    write: (p) => ({ name: 'write', arguments: { filePath: `${p}/notes.txt`, content: `WROTE-${M}\n` } }),
    subagent: (prompt) => ({ name: 'task', arguments: { description: 'Check the notes', prompt, subagent_type: 'general' } }),
  },
  says: { edit: 'Edit applied successfully', write: 'Wrote file successfully' },
  compaction: { prompt: `COMPACT-${M}: where are we?`, summary: { tools: false, system: 'context summarization agent' }, continues: true },
  known: [[/rewrites message 1 \(user\)[\s\S]*What did we do so far\?/, 'its compaction replaces the conversation with a question and the summary']],
  // A bash call with a parameter its bash tool does not declare (opencode's has none for a
  // description; other agents' do): what a model that knows another agent's tools may emit.
  parserGap: { call: { name: 'bash', arguments: { command: 'echo hi', description: 'Print hi' } },
    why: "a tool call with a parameter the tool does not declare: the server's output parser does not take it: without " +
      'streaming the whole call comes out as content text (with the `</think>` before it), streamed the arguments stop at ' +
      '`{"command":"echo hi"` and finish is "stop": JSON the client cannot parse (opencode then answers "JSON parsing failed")' },
  side: [{ label: 'title', when: { tools: false, system: 'title generator' }, repeat: true, content: 'Greeting edit' }],
};

/** qwen-code: the `openai` auth type (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL), chosen by
 *  security.auth.selectedType in $HOME/.qwen/settings.json (else it asks for /auth); -p runs one
 *  prompt headless and exits; -c continues the folder's latest session; --approval-mode yolo lets
 *  its edit, write and shell tools run (headless, the default mode leaves them out of the tools);
 *  tools.todoWrite.enabled offers todo_write. QWEN_CODE_MAX_OUTPUT_TOKENS sets max_tokens (it sends
 *  none otherwise). No update check, usage statistics, telemetry or auto title. Its managed memory
 *  stays on (the default): after a run a background extraction subagent (its own system prompt and
 *  tools, capped at one turn: memory.agentMaxTurns) may send a request; it gets a repeatable reply
 *  (none was sent in this test's runs: the -p process ends first). It writes the folder and
 *  the date into the environment context at the head of the first user message, and puts a date
 *  reminder before the user's text of each turn, which it leaves out of the history it stores. Its
 *  agent tool runs a subagent in the background unless run_in_background is false, given here as
 *  the text "false" (see the todo on booleans below). Compaction: `-p /compress`. */
const qwenCodeAgent = {
  name: 'qwen-code',
  spec: QWEN_CODE,
  setup(home, baseUrl) {
    fs.mkdirSync(path.join(home, '.qwen'), { recursive: true });
    fs.writeFileSync(path.join(home, '.qwen/settings.json'), JSON.stringify({
      security: { auth: { selectedType: 'openai' } },
      model: { name: 'tiny' },
      general: { enableAutoUpdate: false },
      privacy: { usageStatisticsEnabled: false },
      telemetry: { enabled: false },
      memory: { agentMaxTurns: 1, enableManagedAutoDream: false, enableAutoSkill: false },
      tools: { todoWrite: { enabled: true } },
    }));
    return { OPENAI_BASE_URL: baseUrl, OPENAI_API_KEY: 'sk-none', OPENAI_MODEL: 'tiny',
      QWEN_CODE_MAX_OUTPUT_TOKENS: String(MAX_OUTPUT), QWEN_USAGE_STATISTICS_ENABLED: '0',
      QWEN_TELEMETRY_ENABLED: '0', QWEN_DISABLE_AUTO_TITLE: '1', QWEN_CODE_SUPPRESS_YOLO_WARNING: '1' };
  },
  args: (prompt, resume) => ['--approval-mode', 'yolo', ...(resume ? ['-c'] : []), '-p', prompt],
  calls: {
    plan: (items) => ({ name: 'todo_write', arguments: { todos: items.map(([content, done], i) => ({ id: String(i + 1), content,
      status: done ? 'completed' : 'pending' })) } }),
    read: (p, file) => ({ name: 'read_file', arguments: { file_path: `${p}/${file}` } }),
    glob: () => ({ name: 'glob', arguments: { pattern: '**/*.py' } }),
    grep: () => ({ name: 'grep_search', arguments: { pattern: `NEEDLE-${M}` } }),
    edit: (p) => ({ name: 'edit', arguments: { file_path: `${p}/main.py`, old_string: 'return "hello"', new_string: 'return "hello, world"' } }),
    shell: (command) => ({ name: 'run_shell_command', arguments: { command, description: 'Print a marker' } }),
    write: (p) => ({ name: 'write_file', arguments: { file_path: `${p}/notes.txt`, content: `WROTE-${M}\n` } }),
    subagent: (prompt) => ({ name: 'agent', arguments: { description: 'Check the notes', prompt, subagent_type: 'general-purpose',
      run_in_background: 'false' } }),
  },
  says: { edit: 'has been updated', write: 'Successfully created and wrote' },
  compaction: { prompt: '/compress', summary: { input: 'You are the component that summarizes a conversation' },
    // the summary it takes: <analysis> (stripped) and the <state_snapshot> XML
    wrap: (text) => `<analysis>ANALYSIS-${M}</analysis>\n<state_snapshot>\n<primary_request_and_intent>${text}</primary_request_and_intent>\n` +
      '<pending_tasks>none</pending_tasks>\n</state_snapshot>' },
  side: [{ label: 'memory', when: { system: 'managed memory extraction subagent' }, repeat: true, content: `MEMORY-${M}: nothing to save.` }],
  known: [
    [/adds a user message \(<system-reminder>\nThe current task still has unfinished todo items/,
      'a todo reminder (a user message) after the tool results while the plan has open items'],
    [/rewrites message 1 \(user\)[\s\S]*notes\.txt/, 'on -c it renders the folder tree of its first user message again (a file was added)'],
    [/rewrites message \d+ \(user\)[\s\S]*The current date is[\s\S]*-> [\s\S]*RESUME-7f3a/,
      'the date reminder before the text of a turn is not in the history it sends later'],
    [/rewrites message 1 \(user\)[\s\S]*state_snapshot/, 'after /compress the first user message holds the snapshot'],
  ],
  // The agent tool's run_in_background ({"type": "boolean", "default": true}) as a JSON false.
  parserGap: { call: { name: 'agent', arguments: { description: 'd', prompt: 'p', subagent_type: 'general-purpose', run_in_background: false } },
    why: 'the Qwen3.5 template renders a JSON false argument as `False` (the scripted reply, and any past tool call sent back); ' +
      "the server's output parser does not read it back: without streaming the whole call comes out as content text (with " +
      'the `</think>` before it), streamed the arguments stop at `..."run_in_background":` and finish is "stop": JSON the client ' +
      'cannot parse (here the script sends run_in_background as the text "false", which renders as `false`)' },
};

/** continue (cn): a model with `provider: openai` and `apiBase` in $HOME/.continue/config.yaml
 *  (what cn reads when no --config is given; no hub login); -p prints and exits (--auto: every tool
 *  allowed, else Edit and Write are left out); --resume continues the latest session (the newest in
 *  ~/.continue/sessions, whatever its folder). No telemetry (CONTINUE_CLI_ENABLE_TELEMETRY=0), no
 *  self-update (autoUpdateCli false in ~/.continue/index/globalContext.json). cn 1.5.47 fetches
 *  https://api.continue.dev/cn/info (the latest version, with the machine id) when its version
 *  module loads, with no switch: a preloaded fetch wrapper makes that one host fail as it does
 *  offline, so no traffic leaves 127.0.0.1. It writes the folder into its system prompt and into its
 *  Bash tool's description. Compaction: `-p /compact`. No subagent: cn's Subagent tool (--beta-subagent-tool, over the
 *  config's models with role subagent) needs the chat history's session id, which -p mode never
 *  sets (headless, --resume included, only sets the history): it answers "No active session found". */
const CONTINUE_OFFLINE = "const f = globalThis.fetch; globalThis.fetch = (u, o) => new URL(String(u?.url ?? u)).hostname === " +
  "'api.continue.dev' ? Promise.reject(new TypeError('fetch failed: offline test')) : f(u, o);";
const continueAgent = {
  name: 'continue',
  spec: CONTINUE,
  setup(home, baseUrl) {
    fs.mkdirSync(path.join(home, '.continue/index'), { recursive: true });
    fs.writeFileSync(path.join(home, '.continue/index/globalContext.json'), JSON.stringify({ autoUpdateCli: false }));
    const model = (name, roles) => [`  - name: ${name}`, '    provider: openai', '    model: tiny', `    apiBase: ${baseUrl}`,
      '    apiKey: sk-none', `    roles: [${roles}]`, '    defaultCompletionOptions:', `      maxTokens: ${MAX_OUTPUT}`,
      `      contextLength: ${CTX}`];
    fs.writeFileSync(path.join(home, '.continue/config.yaml'), ['name: lineage', 'version: 1.0.0', 'schema: v1', 'models:',
      ...model('tiny', 'chat, edit, apply'), ''].join('\n'));
    return { CONTINUE_CLI_ENABLE_TELEMETRY: '0', CONTINUE_METRICS_ENABLED: '0', FORCE_NO_TTY: '1',
      NODE_OPTIONS: `--import=data:text/javascript,${encodeURIComponent(CONTINUE_OFFLINE)}` };
  },
  args: (prompt, resume) => ['-p', '--auto', ...(resume ? ['--resume'] : []), prompt],
  calls: {
    plan: (items) => ({ name: 'Checklist', arguments: { checklist: items.map(([c, done]) => `- [${done ? 'x' : ' '}] ${c}`).join('\n') } }),
    read: (p, file) => ({ name: 'Read', arguments: { filepath: `${p}/${file}` } }),
    glob: (p) => ({ name: 'List', arguments: { dirpath: `${p}/src` } }),
    grep: () => ({ name: 'Search', arguments: { pattern: `NEEDLE-${M}` } }),
    edit: (p) => ({ name: 'Edit', arguments: { file_path: `${p}/main.py`, old_string: 'return "hello"', new_string: 'return "hello, world"' } }),
    shell: (command) => ({ name: 'Bash', arguments: { command } }),
    write: (p) => ({ name: 'Write', arguments: { filepath: `${p}/notes.txt`, content: `WROTE-${M}\n` } }),
    subagent: null,
  },
  says: { edit: 'Successfully edited', write: 'Successfully created file' },
  // -p /compact summarizes, but the compacted history is not saved (no session id in -p mode): the
  // next --resume sends the whole conversation again.
  compaction: { prompt: '/compact', summary: { input: 'provide a concise summary of our conversation' }, persists: false },
  // It does not send a reply's reasoning back (reasoning_content is dropped from its history).
  dropsReasoning: true,
  known: [[/sends the reply's reasoning back as  \(was/, 'it sends no reasoning back']],
  side: [],
};

/** LINEAGE_E2E_AGENTS: a comma list of the agents to run (default all). */
const AGENTS = [piAgent, opencodeAgent, qwenCodeAgent, continueAgent]
  .filter((a) => !process.env.LINEAGE_E2E_AGENTS || process.env.LINEAGE_E2E_AGENTS.split(',').includes(a.name));

// --- The session ----------------------------------------------------------------------------------

/** The runs: phase, project folder (1 or 2), resumed, the prompt. */
function runsOf(agent) {
  return [
    { phase: 'A', dir: 1, resume: false, prompt: `TASK-${M}: plan, look around, make main.py greet with "hello, world", check it and note it.` },
    { phase: 'B', dir: 1, resume: true, prompt: `RESUME-${M}: have a helper double-check the notes.` },
    { phase: 'C', dir: 1, resume: true, prompt: agent.compaction.prompt },
    { phase: 'D', dir: 1, resume: true, prompt: `AFTER-${M}: is main.py still right?` },
    { phase: 'E', dir: 1, resume: false, prompt: `SECOND-${M}: what do the notes say?` },
    { phase: 'F', dir: 2, resume: false, prompt: `FOLDER-${M}: what does this project's README say?` },
  ];
}
/** The conversation a phase belongs to: resumed turns and the compaction continue A's. */
const CONVERSATION = { A: 's1', B: 's1', C: 's1', D: 's1', E: 's2', F: 's3' };

/** The scripts of the phases for `agent` in project folders `p1`, `p2`. */
function scriptsOf(agent, p1, p2) {
  const c = agent.calls;
  const said = {
    plan: c.plan ? `PLAN-${M}` : 'main.py',  // pi: `ls` lists main.py
    glob: 'lookup.py',
    grep: 'VALUE = 42',                       // the matching line, which only a search that ran brings back
    read: 'def greet',
    edit: agent.says.edit,
    shell: 'SHELL-',                          // the output, or the command as qwen-code echoes it
    write: agent.says.write,
  };
  const A = [
    { label: 'a1-plan', when: { input: `TASK-${M}`, tools: true }, reasoning: 'The task has several steps. I will write them down first.',
      tool_calls: [c.plan ? c.plan([[`Read the notes PLAN-${M}`], ['Edit main.py'], ['Check it']]) : c.shell('ls')] },
    { label: 'a2-read', when: { input: said.plan }, tool_calls: [c.read(p1, 'README.md')] },
    { label: 'a3-glob', when: { input: `NOTES-${M}` }, tool_calls: [c.glob(p1)] },
    { label: 'a4-grep', when: { input: said.glob }, tool_calls: [c.grep(p1)] },
    { label: 'a5-read', when: { input: said.grep }, tool_calls: [c.read(p1, 'main.py')] },
    { label: 'a6-edit', when: { input: said.read }, reasoning: 'main.py returns "hello"; it should say "hello, world".',
      tool_calls: [c.edit(p1)] },
    { label: 'a7-shell', when: { input: said.edit }, tool_calls: [c.shell(`echo SHELL-$((6*7))-${M} | tee ${p1}/shell.txt`)] },
    { label: 'a8-write', when: { input: said.shell }, tool_calls: [c.write(p1)] },
    ...(c.plan ? [{ label: 'a9-plan-done', when: { input: said.write },
      tool_calls: [c.plan([[`Read the notes PLAN-${M}`, true], ['Edit main.py', true], [`Check it CHECKED-${M}`, true]])] }] : []),
    { label: 'a10-final', when: { input: c.plan ? `CHECKED-${M}` : said.write },
      content: `FINAL-${M}: main.py now greets with "hello, world"; notes.txt records it.` },
  ];
  const B = c.subagent ? [
    { label: 'b1-agent', when: { input: `RESUME-${M}` }, tool_calls: [c.subagent(`SUB-${M}: read README.md in ${p1} and say what the notes say.`)] },
    { label: 'sub1-read', when: { input: `SUB-${M}` }, tool_calls: [c.read(p1, 'README.md')] },
    { label: 'sub2-report', when: { input: `NOTES-${M}` }, content: `SUBREPORT-${M}: the notes say NOTES-${M}.` },
    { label: 'b2-final', when: { input: `SUBREPORT-${M}` }, content: `RESUMEDONE-${M}: the helper confirmed the notes.` },
  ] : [
    { label: 'b1-read', when: { input: `RESUME-${M}` }, tool_calls: [c.read(p1, 'README.md')] },
    { label: 'b2-final', when: { input: `NOTES-${M}` }, content: `RESUMEDONE-${M}: the notes are right.` },
  ];
  const summaryText = `SUMMARY-${M}: main.py was edited to greet with "hello, world" and notes.txt was written.`;
  const summary = { label: 'c-summary', when: agent.compaction.summary, repeat: agent.name === 'pi',
    content: agent.compaction.wrap ? agent.compaction.wrap(summaryText) : summaryText };
  const C = agent.name === 'pi' ? [summary, { label: 'c2-answer', when: { input: `COMPACT-${M}` }, content: `COMPACTDONE-${M}.` }]
    : agent.compaction.continues ? [
      summary,
      { label: 'c2-continue', when: { input: 'Continue if you have next steps' }, content: `CONTINUED-${M}.` },
    ] : [summary];
  const D = [
    { label: 'd1-read', when: { input: `AFTER-${M}` }, tool_calls: [c.read(p1, 'main.py')] },
    { label: 'd2-answer', when: { input: 'hello, world' }, content: `AFTERDONE-${M}: yes.` },
  ];
  const E = [
    { label: 'e1-read', when: { input: `SECOND-${M}`, tools: true }, tool_calls: [c.read(p1, 'notes.txt')] },
    { label: 'e2-answer', when: { input: `WROTE-${M}` }, content: `SECONDDONE-${M}.` },
  ];
  const F = [
    { label: 'f1-read', when: { input: `FOLDER-${M}`, tools: true }, tool_calls: [c.read(p2, 'README.md')] },
    { label: 'f2-answer', when: { input: `NOTES2-${M}` }, content: `FOLDERDONE-${M}.` },
  ];
  const withSide = (replies) => [...agent.side, ...replies];
  return { A: withSide(A), B: withSide(B), C: withSide(C), D: withSide(D), E: withSide(E), F: withSide(F) };
}

/** Server gaps measured and not fixed yet (node:test `todo`: a failure is listed, not counted), by
 *  agent, arch and the scripted reply of the request ('folder': the check of the session in another
 *  folder); each names what the decision trace showed. */
const KNOWN_GAPS = {
  // (none now: qwen-code's new session in another folder, on qwen35, restored a far rung ~400
  // tokens before its memory path while the 8 volatile rungs went to the tool descriptions'
  // placeholder paths; they are now the first half and the last half of those paths.)
};
function knownGap(agent, arch, key) {
  const why = KNOWN_GAPS[agent.name]?.[arch]?.[key];
  return why ? { todo: `known server gap, ${why}` } : {};
}

/** A folder holding an executable `rg` (ripgrep 15), made in `dir`: the binary qwen-code ships in
 *  its npm package (vendor/ripgrep/<arch>-<platform>/rg, unpacked without its executable bit),
 *  copied with mode 0755. opencode's glob and grep run ripgrep from PATH ("ripgrep execution failed"
 *  without it: it does not download one on loopback); cn offers its Search tool only where
 *  `rg --version` runs. */
function ripgrepDir(dir) {
  const bin = installAgent(QWEN_CODE.pkg, QWEN_CODE.version, QWEN_CODE.bin);
  const arch = { x64: 'x64', arm64: 'arm64' }[process.arch];
  const src = path.join(path.dirname(bin), '..', QWEN_CODE.pkg, 'vendor/ripgrep', `${arch}-${process.platform}`, 'rg');
  if (!fs.existsSync(src)) throw new Error(`no ripgrep for ${process.arch}-${process.platform} in ${QWEN_CODE.pkg}@${QWEN_CODE.version}`);
  const out = path.join(dir, 'rg-bin');
  fs.mkdirSync(out, { recursive: true });
  fs.copyFileSync(src, path.join(out, 'rg'));
  fs.chmodSync(path.join(out, 'rg'), 0o755);
  return out;
}

// --- Reading what was recorded --------------------------------------------------------------------

/** The server's scripted-reply log lines (`req N scripted reply LABEL: K tokens forced`): request
 *  id -> label. */
function scriptedLabels(log) {
  return new Map([...log.matchAll(/req (\d+) scripted reply (\S+): \d+ tokens forced/g)].map((m) => [Number(m[1]), m[2]]));
}

/** The prompt text the server renders for a chat body (POST /apply-template). */
async function render(srv, body, addGenerationPrompt = true) {
  const { messages, tools, chat_template_kwargs } = body;
  const t = await srv.post('/apply-template', { messages, tools, chat_template_kwargs, add_generation_prompt: addGenerationPrompt });
  if (t.status !== 200) throw new Error(`/apply-template -> ${t.status}: ${t.text}`);
  return t.json.prompt;
}

/** The assistant message of a chat completion (JSON or event stream): {content, reasoning_content,
 *  tool_calls}. */
function chatReply(text) {
  const msg = { role: 'assistant', content: '', reasoning_content: '', tool_calls: [] };
  if (!text.startsWith('data:') && !text.includes('\ndata:')) {
    const m = JSON.parse(text).choices[0].message;
    return { role: 'assistant', content: m.content ?? '', reasoning_content: m.reasoning_content ?? '', tool_calls: m.tool_calls ?? [] };
  }
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const d = JSON.parse(line.slice(6)).choices?.[0]?.delta;
    if (!d) continue;
    if (d.content) msg.content += d.content;
    if (d.reasoning_content) msg.reasoning_content += d.reasoning_content;
    for (const tc of d.tool_calls ?? []) {
      const cur = (msg.tool_calls[tc.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
      if (tc.id) cur.id = tc.id;
      if (tc.function?.name) cur.function.name += tc.function.name;
      if (tc.function?.arguments) cur.function.arguments += tc.function.arguments;
    }
  }
  return msg;
}

/** The usage of a chat completion (JSON or event stream): {prompt, completion}. */
function usageOf(text) {
  let u;
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    u = JSON.parse(line.slice(6)).usage ?? u;
  }
  if (!u && text.startsWith('{')) u = JSON.parse(text).usage;
  return { prompt: u?.prompt_tokens ?? 0, completion: u?.completion_tokens ?? 0 };
}

/** A message's text and parts in one shape (string content = one text part). */
function norm(m) {
  const content = typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : (m.content ?? []);
  return { ...m, content };
}
const textOf = (m) => norm(m).content.filter((p) => p.type === 'text').map((p) => p.text).join(' ');

/** What the agent did to its conversation between request `p` (with its reply `reply`) and request
 *  `c`, in the terms of its body: [names]. */
function behaviours(p, reply, c) {
  const out = [];
  const pm = p.messages;
  const cm = c.messages;
  const change = firstChange(pm, cm, { norm, back: 40, ahead: 60 });
  if (change) {
    out.push(`rewrites message ${change.i} (${pm[change.i].role})` +
      `${change.n > 1 ? ` (${change.n} of the ${pm.length} earlier messages differ)` : ''}: ${change.around}`);
  }
  if (cm.length < pm.length + 1) {
    out.push(`sends ${cm.length} messages where the conversation had ${pm.length} and a reply`);
    return out;
  }
  const echo = cm[pm.length];
  if (echo.role !== 'assistant') {
    out.push(`does not send the reply back as the next message (${echo.role} instead)`);
  } else {
    const got = { content: textOf(echo), reasoning: echo.reasoning_content ?? echo.reasoning ?? '',
      calls: (echo.tool_calls ?? []).map((t) => [t.function.name, JSON.parse(t.function.arguments || '{}')]) };
    const want = { content: reply.content, reasoning: reply.reasoning_content,
      calls: reply.tool_calls.map((t) => [t.function.name, JSON.parse(t.function.arguments || '{}')]) };
    if (got.reasoning.trim() !== want.reasoning.trim()) {
      out.push(`sends the reply's reasoning back as ${short(got.reasoning, 60)} (was ${short(want.reasoning, 60)})`);
    }
    if (got.content.trim() !== want.content.trim()) out.push(`sends the reply's text back as ${short(got.content, 60)} (was ${short(want.content, 60)})`);
    if (JSON.stringify(got.calls) !== JSON.stringify(want.calls)) out.push(`sends the reply's tool calls back as ${short(got.calls)} (was ${short(want.calls)})`);
  }
  // New user-role text after the tool results: Qwen3.5's template renders the assistant turns before
  // the last user message without their reasoning.
  for (const m of cm.slice(pm.length + 1)) {
    if (m.role === 'user' || m.role === 'system') {
      out.push(`adds a ${m.role} message (${short(textOf(m), 80)}) after the reply: the template renders the earlier assistant ` +
        'turns without their reasoning');
      break;
    }
  }
  return out;
}

for (const agent of AGENTS) {
  for (const arch of ARCHS) {
    describe(`${agent.name} in a scripted session against lineage-server [${arch}]`, { timeout: 900_000 }, () => {
      let srv;
      let proxy;
      let work;
      let p1;
      let p2;
      let family;
      let script;
      let bin;
      const written = [];  // every script, in order
      const results = [];  // {phase, r}
      let posts;           // the chat-completion requests, analysed
      let recording;       // the file saveSession wrote

      before(async () => {
        bin = installAgent(agent.spec.pkg, agent.spec.version, agent.spec.bin);
        work = fs.mkdtempSync(path.join(os.tmpdir(), `lineage-agent-${agent.name}-`));
        const home = path.join(work, 'home');
        p1 = path.join(work, 'project');
        p2 = path.join(work, 'another-project-folder');
        for (const d of [home, p1, p2, path.join(p1, 'src')]) fs.mkdirSync(d, { recursive: true });
        fs.writeFileSync(path.join(p1, 'README.md'), `# demo\n\nNOTES-${M}: a tiny project for the agent test.\n`);
        fs.writeFileSync(path.join(p1, 'main.py'), 'def greet():\n    return "hello"\n\n\nprint(greet())\n');
        fs.writeFileSync(path.join(p1, 'src/lookup.py'), `VALUE = 42  # NEEDLE-${M}\n`);
        fs.writeFileSync(path.join(p2, 'README.md'), `# other\n\nNOTES2-${M}: another tiny project.\n`);
        const rg = ripgrepDir(work);
        script = newScript([]);
        srv = await startServer({ model: modelPath(arch), name: `agent-${agent.name}-${arch}`,
          args: ['--parallel', '2', '--ctx-size', String(CTX), '--test-reply-script', script, '--cache-warmup', '--cache-trace'] });
        family = (await srv.cacheStats()).family;
        proxy = await sessionProxy(srv.port);
        const baseUrl = `http://127.0.0.1:${proxy.port}/v1`;
        const all = scriptsOf(agent, p1, p2);
        let last = null;  // the usage of the agent's last request
        for (const run of runsOf(agent)) {
          const env = { PATH: `${rg}:${process.env.PATH}`, HOME: home, XDG_CONFIG_HOME: path.join(home, '.config'),
            XDG_DATA_HOME: path.join(home, '.local/share'), XDG_CACHE_HOME: path.join(home, '.cache'),
            XDG_STATE_HOME: path.join(home, '.local/state'), TERM: 'dumb', NO_COLOR: '1', CI: '1',
            ...agent.setup(home, baseUrl, run.phase, last) };
          writeScript(script, all[run.phase]);
          written.push({ phase: run.phase, replies: all[run.phase] });
          proxy.run = run.phase;
          // The ladder rungs the last run's new system prompts left to a ladder job are made first
          // (they run on the idle engine between runs; the wait makes it certain).
          await srv.waitLadder(`before run ${run.phase}`);
          const r = await runAgent(bin, agent.args(run.prompt, run.resume), { cwd: run.dir === 1 ? p1 : p2, env, timeoutMs: RUN_TIMEOUT_MS });
          results.push({ phase: run.phase, r });
          last = usageOf(proxy.requests.filter((x) => x.run === run.phase && x.status === 200 && x.body?.tools?.length).at(-1)?.response ?? '');
        }
        await new Promise((r) => setTimeout(r, 300));  // the log pipe may lag the last response
        recording = saveSession(REPO_ROOT, { agent: agent.name, arch, version: agent.spec.version, api: 'chat', scripts: written,
          requests: proxy.requests.filter((r) => r.method === 'POST' && /\/chat\/completions$/.test(r.path)) });
      });
      after(async () => {
        await proxy?.close();
        await srv?.stopGracefully();
        if (work) fs.rmSync(work, { recursive: true, force: true });
        if (script) fs.rmSync(path.dirname(script), { recursive: true, force: true });
      });

      /** The chat-completion requests with their tokens, log line, scripted reply and chain; computed once. */
      async function analysed() {
        if (posts) return posts;
        const log = srv.log();
        const recs = proxy.requests.filter((r) => r.method === 'POST' && /\/chat\/completions$/.test(r.path) && r.body?.messages &&
          r.status === 200);
        for (const r of recs) {
          const prompt = await render(srv, r.body);
          r.tokens = await tokensOf(srv, prompt);
          r.hist = (await tokensOf(srv, await render(srv, r.body, false))).length;
          r.reply = r.status === 200 ? chatReply(r.response) : null;
          const sys = r.body.messages.filter((m) => m.role === 'system').map(textOf).join('\n');
          r.chain = `${CONVERSATION[r.run]}|${sys.length}:${sys.slice(0, 200)}|${(r.body.tools ?? []).map((t) => t.function?.name).join(',')}`;
        }
        const lines = pairLines(recs.map((r) => r.tokens.length), requestLines(log).filter((l) => l.dialect === 'chat'));
        const labels = scriptedLabels(log);
        for (const [i, r] of recs.entries()) {
          r.line = lines[i];
          r.label = r.line ? labels.get(r.line.id) : undefined;
        }
        // A compaction request (pi's, opencode's) has its own system prompt; its chain is its own.
        // The conversation after it keeps the agent's system prompt and tools: the same chain.
        // A chain's first request (a new session, a subagent's, a title, a compaction request) is
        // held to the same rule against the earlier request it shares the most with, in any chain.
        for (const [i, r] of recs.entries()) {
          const chain = recs.filter((x) => x.chain === r.chain);
          const k = chain.indexOf(r);
          if (k > 0) {
            r.prev = chain[k - 1];
            r.earlier = chain.slice(0, k - 1);
          } else if (i > 0) {
            const before_ = recs.slice(0, i);
            r.prev = before_.reduce((a, b) => (lcp(b.tokens, r.tokens) >= lcp(a.tokens, r.tokens) ? b : a));
            r.earlier = before_.filter((x) => x !== r.prev);
            r.crossChain = true;
          }
        }
        for (const r of recs.filter((x) => x.prev)) {
          const p = r.prev;
          r.shared = lcp(p.tokens, r.tokens);
          // What a verbatim echo of the previous reply would share: the previous conversation, the
          // reply as the template renders it, then a placeholder (the first call's result, or a user
          // message after an answer).
          const call = p.reply?.tool_calls?.[0];
          const placeholder = call ? { role: 'tool', tool_call_id: call.id, content: SENTINEL } : { role: 'user', content: SENTINEL };
          const echoed = { ...p.reply };
          if (!echoed.tool_calls?.length) delete echoed.tool_calls;
          const text = await render(srv, { ...p.body, messages: [...p.body.messages, echoed, placeholder] }, false);
          const at = text.lastIndexOf('<|im_start|>', text.indexOf(SENTINEL));
          const echoEnd = (await tokensOf(srv, text.slice(0, at))).length;
          const echoShared = lcp(r.tokens, await tokensOf(srv, text));
          r.echoEnd = echoEnd;
          r.cost = r.crossChain ? 0 : echoEnd - Math.min(echoShared, echoEnd);
          r.behaviours = r.crossChain ? [] : behaviours(p.body, p.reply, r.body);
          const earlier = r.earlier.map((e) => ({ hist: e.hist, shared: lcp(e.tokens, r.tokens), label: e.label }));
          const sharedMax = Math.max(r.shared, ...earlier.map((e) => e.shared));
          let region = 0;
          if (r.shared < p.hist) {
            // The system prompt + tools of the request it shares the most with (its anchor), and where
            // its tool block ends (the Qwen3.5 template renders the tools first): a request that parts
            // inside the tool block (a subagent's other tool list) has no anchor and no ladder rung
            // there (the ladder lies after the tools anchor; only the volatile rungs before absolute
            // paths and dates reach into the tools, and this test does not place them): no promise.
            const best = [p, ...r.earlier].reduce((a, b) => (lcp(b.tokens, r.tokens) > lcp(a.tokens, r.tokens) ? b : a));
            const bare = await render(srv, { ...best.body, messages: [...best.body.messages.filter((m) => m.role === 'system'),
              { role: 'user', content: SENTINEL }] });
            region = lcp(best.tokens, await tokensOf(srv, bare));
            const toolsEnd = best.body.tools?.length
              ? lcp(best.tokens, await tokensOf(srv, await render(srv, { tools: best.body.tools, messages: [{ role: 'user', content: SENTINEL }] })))
              : 0;
            if (sharedMax < toolsEnd) region = 0;
            r.inTools = sharedMax < toolsEnd;
          }
          const { promised, why } = promisedRestore({ family, prompt: r.tokens.length, shared: r.shared, hist: p.hist, region, earlier,
            sharedMax });
          r.promised = promised;
          r.why = r.inTools && family !== 'dense' ? `${why}: parts inside the tool block` : why;
        }
        posts = recs;
        return posts;
      }
      const byLabel = (recs, l) => recs.find((r) => r.label === l);
      /** The request's new input: its messages after the last assistant message. */
      const newInput = (r) => JSON.stringify(r.body.messages.slice(r.body.messages.findLastIndex((m) => m.role === 'assistant') + 1));

      it('the scripted session runs: exit 0, HTTP 200 throughout, every scripted step used, the tools really ran', async (t) => {
        for (const { phase, r } of results) {
          assert.equal(r.code, 0, `run ${phase}: ${agent.name} exited ${r.code ?? r.signal}\n--- stdout ---\n${r.stdout.slice(-1500)}\n` +
            `--- stderr ---\n${r.stderr.slice(-1500)}`);
        }
        for (const r of proxy.requests) assert.equal(r.status, 200, `${r.run}: ${r.method} ${r.path} -> ${r.status}\n${srv.logTail(20)}`);
        const recs = await analysed();
        assert.ok(recs.every((r) => r.line), `every request has its server log line:\n${recs.map((r) => `${r.run} ${r.tokens.length} ${r.line?.id}`).join('\n')}`);
        // Every step (a reply used once) was used, in the order written; the repeatable side replies
        // (titles, memory) as often as the agent asked.
        const repeatable = new Set(written.flatMap((s) => s.replies.filter((x) => x.repeat).map((x) => x.label)));
        const steps = recs.map((r) => r.label).filter((l) => !repeatable.has(l));
        const want = written.flatMap((s) => s.replies.filter((x) => !x.repeat).map((x) => x.label));
        assert.deepEqual(steps, want, `the scripted steps used, in order\n${srv.logTail(30)}`);
        for (const [phase, marker] of [['A', 'FINAL'], ['B', 'RESUMEDONE'], ['D', 'AFTERDONE'], ['E', 'SECONDDONE'], ['F', 'FOLDERDONE']]) {
          assert.match(results.find((x) => x.phase === phase).r.stdout, new RegExp(`${marker}-${M}`), `run ${phase} printed its answer`);
        }
        // The tools ran: the edit and the new file are on disk; the searches and the shell brought
        // their results back.
        assert.match(fs.readFileSync(path.join(p1, 'main.py'), 'utf8'), /return "hello, world"/);
        assert.equal(fs.readFileSync(path.join(p1, 'notes.txt'), 'utf8'), `WROTE-${M}\n`);
        assert.match(newInput(byLabel(recs, 'a5-read')), /lookup\.py.*VALUE = 42  # NEEDLE-7f3a/, 'the search found the marker');
        assert.equal(fs.readFileSync(path.join(p1, 'shell.txt'), 'utf8'), `SHELL-42-${M}\n`, 'a shell ran the echo');
        if (agent.calls.subagent) {
          assert.match(newInput(byLabel(recs, 'b2-final')), /SUBREPORT-7f3a/, "the subagent's report came back");
          assert.notEqual(byLabel(recs, 'sub1-read').chain, byLabel(recs, 'b1-agent').chain, 'the subagent has its own chain');
        }
        // The compaction happened: the summary request, then the session goes on from the summary
        // (continue: it does not keep the summary in -p mode).
        assert.ok(byLabel(recs, 'c-summary'), 'a compaction request');
        const after = JSON.stringify(byLabel(recs, 'd1-read').body.messages);
        if (agent.compaction.persists === false) {
          assert.doesNotMatch(after, /SUMMARY-7f3a/, 'continue keeps no compaction in -p mode (when it does, this test should follow)');
        } else {
          assert.match(after, /SUMMARY-7f3a/, 'the session after the compaction carries the summary');
        }
        // The reasoning went back with the reply (reasoning_content) and the next prompt renders it
        // (continue: not sent back).
        const a2 = await render(srv, byLabel(recs, 'a2-read').body);
        if (agent.dropsReasoning) assert.doesNotMatch(a2, /I will write them down first/, "continue sends a1's reasoning back (this test should follow)");
        else assert.match(a2, /I will write them down first\.\n<\/think>/, "the reasoning of a1 is in a2's prompt");
        t.diagnostic(`recording: ${recording} (${recs.length} requests)`);
      });

      it('every request restores at least the restore point the rules promise', async (t) => {
        const { rows, failures } = promiseReport(await analysed(), srv.log(), KNOWN_GAPS[agent.name]?.[arch]);
        for (const row of rows) t.diagnostic(row);
        assert.deepEqual(failures, [], 'requests that restored less than promised');
      });

      knownGapTests(it, Object.fromEntries(Object.entries(KNOWN_GAPS[agent.name]?.[arch] ?? {}).filter(([k]) => k !== 'folder')),
        analysed, srv);

      it('where a request shares less than a verbatim echo of the previous reply would, the agent behaviour is named', async (t) => {
        const recs = await analysed();
        const unnamed = [];
        for (const r of recs.filter((x) => x.prev)) {
          if (r.behaviours.length) t.diagnostic(`${r.run} ${r.label}: ${r.cost} tokens: ${r.behaviours.join('; ')}`);
          if (r.cost > 0 && r.behaviours.length === 0) unnamed.push(`${r.label}: parts ${r.cost} tokens before the end of the echoed reply`);
        }
        assert.deepEqual(unnamed, []);
        // The behaviours this version is known for, each seen here (so that a change in the agent is noticed).
        const seen = recs.flatMap((r) => r.behaviours ?? []);
        for (const [re, what] of agent.known) assert.ok(seen.some((b) => re.test(b)), `${agent.name}: ${what} (${re})`);
      });

      const firstOf = (recs, phase) => recs.find((r) => r.run === phase && r.body.tools?.length && !agent.side.some((x) => x.label === r.label));

      it("the second session's first request restores >= 95% of its prompt", async (t) => {
        const e = firstOf(await analysed(), 'E');
        t.diagnostic(`second session: cached ${e.line.cached} of ${e.tokens.length}`);
        assert.ok(e.line.cached >= 0.95 * e.tokens.length, `second session restored ${e.line.cached} of ${e.tokens.length} (< 95%)\n  ` +
          traceLines(srv.log(), e.line.id).join('\n  '));
      });

      it("a new session in another folder restores the prefix it shares with the first folder's (minus 64 on hybrid)",
        knownGap(agent, arch, 'folder'), async (t) => {
          const recs = await analysed();
          const a = firstOf(recs, 'A');
          const f = firstOf(recs, 'F');
          const shared = lcp(a.tokens, f.tokens);
          // The folder really changes the prompt (else this checks nothing new), and most of it is still
          // shared; not for continue, which writes the folder into its Bash tool's description and the
          // first third of its system prompt: there the shared prefix must only be long enough for the
          // check to mean something.
          assert.ok(shared < f.tokens.length - 16, `the other folder's prompt shares ${shared} of ${f.tokens.length}: no variation`);
          assert.ok(shared > (agent.name === 'continue' ? 128 : 0.5 * f.tokens.length), `the other folder shares only ${shared} of ${f.tokens.length}`);
          // The dense model restores the whole shared prefix, the hybrid model the restore point at most
          // 64 tokens before it (the anchor's ladder: a rung right before each absolute path and date).
          const want = family === 'dense' ? Math.min(shared, f.tokens.length - 1) : shared - 64;
          t.diagnostic(`another folder: cached ${f.line.cached} of ${f.tokens.length}, shared ${shared}, want >= ${want}`);
          assert.ok(f.line.cached >= want, `another folder: cached ${f.line.cached} < ${want} (shared ${shared}, ${family})\n  ` +
            traceLines(srv.log(), f.line.id).join('\n  '));
        });

      it('the resumed turns and the compaction restore at least their promised restore points', async (t) => {
        const recs = await analysed();
        for (const phase of ['B', 'C', 'D']) {
          const r = recs.find((x) => x.run === phase && x.prev && CONVERSATION[x.prev.run] === 's1' && x.chain === byLabel(recs, 'a1-plan').chain);
          if (!r) {
            assert.ok(phase === 'C', `${phase}: no request continuing the session`);
            continue;  // qwen-code's and continue's compaction is a request of its own chain
          }
          const gap = KNOWN_GAPS[agent.name]?.[arch]?.[r.label];
          t.diagnostic(`${phase} ${r.label}: cached ${r.line.cached} of ${r.tokens.length}, shared ${r.shared}, promised ${r.promised} (${r.why})` +
            `${gap ? ' [known gap]' : ''}`);
          assert.ok(r.shared > 0.5 * r.tokens.length || phase !== 'B', `the resumed turn shares only ${r.shared} of ${r.tokens.length}`);
          const declined = declinedTierCopy(srv.log(), r);
          if (declined) t.diagnostic(`  (a tier copy of ${declined[1]} tokens was not read: recomputing its ${declined[2]} more is cheaper)`);
          if (!gap && !declined) assert.ok(r.line.cached >= r.promised, `${phase}: cached ${r.line.cached} < promised ${r.promised}`);
        }
      });

      if (agent.parserGap) {
        it(`known gap: a scripted ${agent.parserGap.call.name} call with ${JSON.stringify(agent.parserGap.call.arguments)} streams as valid JSON`,
          { todo: `known server gap, ${agent.parserGap.why}` }, async () => {
            const a1 = byLabel(await analysed(), 'a1-plan');
            writeScript(script, [{ label: 'parser', when: { input: `TASK-${M}` }, tool_calls: [agent.parserGap.call] }]);
            const res = await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
              body: JSON.stringify({ ...a1.body, stream: true }) });
            const reply = chatReply(await res.text());
            const args = reply.tool_calls[0]?.function.arguments;
            assert.deepEqual(args === undefined ? undefined : JSON.parse(args), agent.parserGap.call.arguments, JSON.stringify(reply));
          });
      }
    });
  }
}
