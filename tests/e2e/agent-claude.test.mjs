// Claude Code (`claude -p`, the real client, pinned; tests/e2e/agents/claude-code.mjs installs it
// once under the project's cache folder) in a real working session against lineage-server, on the
// tiny hybrid (qwen35) and dense (qwen3) models, non-interactively, with a private HOME and every
// connection but 127.0.0.1 blocked, through a recording proxy. The models have random weights, so
// the server runs with --test-reply-script (docs/testing.md "Scripted replies"): each request is
// answered with the script's reply that its new input calls for, generated token by token, so the
// agent runs its own tools on a scratch project and the cache holds what was generated.
//
// The session (each step's reply is chosen by a marker the previous tool's result brought back):
//  A. `claude -p TASK`: Read README.md (a reply with reasoning: a thinking block, which Claude Code
//     sends back with display "omitted": empty text, the server's signature carrying it), Bash grep
//     (search: this version offers no Grep/Glob tools by default, the Bash tool's own search), TaskCreate
//     (the plan: Claude Code's todo tools for a model it does not know need
//     CLAUDE_CODE_ENABLE_TODO_TOOLS; TodoWrite itself is only offered with the task tools off),
//     Edit README.md, Bash echo, TaskUpdate, Agent (a general-purpose subagent: its own system prompt
//     and tools, two requests of its own: Read greet.py, its report), then the final answer;
//  B. `--continue`: a resumed turn (Bash echo, answer);
//  C. `--continue /compact`: compaction works non-interactively (the summary request: the
//     conversation with the compaction instruction appended to its last user message);
//  D. `--continue`: a turn after the compaction (the summary replaces the conversation);
//  E. a new session in the same folder with the same task (Read, answer);
//  F. a new session in another folder (Read, answer).
// ENABLE_TOOL_SEARCH=false: Claude Code otherwise defers most tools behind ToolSearch, whose result
// is a `tool_reference` block that lineage-server refuses (HTTP 400; the todo below): the agent then
// retries and falls back to declaring every tool. --allowedTools lets Bash and the file tools run
// without a prompt. No side requests (title, topic, quota) are sent in -p mode at this version:
// every request carries the tools. CLAUDE_CODE_MAX_OUTPUT_TOKENS is raised so no reply is cut.
// The server runs with --cache-warmup on (as users run it): the checks are lower bounds, which a
// warm-up that finished before the next request can only raise.
//
// Asserted:
//  - every run exits 0, every request got HTTP 200, every scripted reply was used, in order, and the
//    tools really ran (the README holds the edit, the shell's and the subagent's markers came back);
//  - per request after a chain's first (a chain: the main loop of a session, resumed turns and the
//    compaction included; the subagent's requests form their own chain), from the recorded bodies
//    (/apply-template?api=messages + /tokenize) and the server's log line for it (paired by prompt
//    length, in arrival order): the restore point the rules promise (docs/prompt-cache.md "Restore
//    points"; lib/agents.mjs promisedRestore):
//      dense (qwen3): every token it shares with the chain's previous request (or with an earlier
//        one of the chain, when more), one less when that is the whole prompt;
//      hybrid (qwen35): the previous request's history boundary (its prompt without the generation
//        prompt) when the request extends it; else the longest documented restore point at or
//        before where it parts: an earlier request's history boundary it extends, a cache_control
//        mark of an earlier request (the lengths the server logs at debug, minus
//        --cache-anchor-slack), the anchor (system prompt + tools) and its ladder (a rung at most
//        64 tokens before a parting point in the region's last 512 tokens, one per --batch-size
//        pass before that);
//      either way nothing under --prompt-cache-min-prefix (32);
//    cached >= promised, for every such request (the gaps the server has are todos, each naming
//    what the decision trace showed);
//  - where the request does not share what a verbatim echo of the previous reply would (the reply
//    rendered by the template as the server would render it sent back, then a placeholder for the
//    tool result), the agent's behaviour that caused it is named, with its cost in tokens. Seen at
//    this version: it sends an Edit call back with `replace_all: false` added in front of the
//    arguments it was given (~84 tokens of the reply recomputed); after 5 tool turns without text
//    it adds a silent-turn reminder (a role "system" message, which lineage renders as a user
//    message, before which Qwen3.5's template drops the reasoning of every earlier assistant turn:
//    the prompt parts at the first one, ~525 tokens before the echo's end); the subagent gets the
//    agent-type list as a role "system" message after its first tool result (~50); the compaction
//    request leaves the last answer out and appends its instruction to the last user message; the
//    turn after it replaces the conversation with the summary. The billing header block of the
//    system prompt, whose suffix changes per session, is dropped by the server (no cost);
//  - the second session (E) restores >= 95% of its first request's prompt; the one in another folder
//    (F) at least the prefix it shares with A's first request (dense), or that minus 64 (hybrid: the
//    anchor's ladder); the resumed turn (B) at least its promised restore point.
// The session's recording is written to build/agent-sessions/claude-code-<arch>.json for the
// benchmark's replay (lib/agents.mjs saveSession): no recorded text goes into the repository.
// Skipped, with the reason, only when npm cannot install the package.
//
//   cd tests/e2e && node --test agent-claude.test.mjs
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { CLAUDE_CODE_VERSION, claudeEnv, ensureClaudeCode } from './agents/claude-code.mjs';
import { breakpointsOf, declinedTierCopy, firstChange, knownGapTests, lcp, pairLines, promiseReport, promisedRestore, requestLines, runAgent,
  saveSession, sessionProxy, short, textDiff, tokensOf, traceLines, withoutGenerationPrompt } from './lib/agents.mjs';
import { messageBlocks, messagesPrompt } from './lib/anthropic.mjs';
import { newScript, writeScript } from './lib/script.mjs';
import { ARCHS, REPO_ROOT, modelPath, startServer } from './lib/server.mjs';

// Claude Code's system prompt and tools are ~21k tokens on these models; the context holds them,
// the conversation and the subagent's.
const CTX = 65536;
const RUN_TIMEOUT_MS = 240_000;
const KEY = { 'x-api-key': 'sk-lineage' };
const TOOLS_ALLOWED = ['--allowedTools', 'Bash,Read,Edit,Write'];
const SENTINEL = '\u2063';

/** The scripts of the session's phases, for the project folders `p1` and `p2` (markers: M). */
function scripts(p1, p2) {
  const bash = (command, description) => ({ name: 'Bash', arguments: { command, description } });
  return {
    A: [
      { label: 'a1-read', when: { input: 'TASK-7f3a', tools: true }, reasoning: 'The task asks about the project. I should read the README first.',
        tool_calls: [{ name: 'Read', arguments: { file_path: `${p1}/README.md` } }] },
      { label: 'a2-search', when: { input: 'NOTES-7f3a' }, tool_calls: [bash('grep -rn NEEDLE-7f3a .', 'Search the project for the marker')] },
      { label: 'a3-plan', when: { input: 'greet.py:2' },
        tool_calls: [{ name: 'TaskCreate', arguments: { subject: 'PLAN-7f3a edit the README', description: 'Add a line to the README, then check it' } }] },
      { label: 'a4-edit', when: { input: 'PLAN-7f3a' }, reasoning: 'The plan is in place; now the edit.',
        tool_calls: [{ name: 'Edit', arguments: { file_path: `${p1}/README.md`, old_string: 'NOTES-7f3a: the project greets.',
          new_string: 'NOTES-7f3a: the project greets. EDITED-7f3a' } }] },
      { label: 'a5-shell', when: { input: 'has been updated successfully' }, tool_calls: [bash('echo SHELL-7f3a', 'Print a marker')] },
      { label: 'a6-plan-done', when: { input: 'SHELL-7f3a' }, tool_calls: [{ name: 'TaskUpdate', arguments: { taskId: '1', status: 'completed' } }] },
      // run_in_background as the text "false": the template renders a JSON false as Python's
      // `False`, which the server's output parser does not take back (the todo below); "false"
      // renders as `false`, which it parses as the boolean.
      { label: 'a7-agent', when: { input: 'Updated task #1' },
        tool_calls: [{ name: 'Agent', arguments: { description: 'Inspect greet.py', prompt: 'SUB-7f3a: read greet.py and say what greet returns.',
          subagent_type: 'general-purpose', run_in_background: 'false' } }] },
      { label: 'sub1-read', when: { input: 'SUB-7f3a', system: 'You are an agent for Claude Code' },
        tool_calls: [{ name: 'Read', arguments: { file_path: `${p1}/greet.py` } }] },
      { label: 'sub2-report', when: { input: 'NEEDLE-7f3a', system: 'You are an agent for Claude Code' }, content: 'SUBREPORT-7f3a: greet returns hello.' },
      { label: 'a8-final', when: { input: 'SUBREPORT-7f3a' }, reasoning: 'The subagent reported back.',
        content: 'FINAL-7f3a: the README is edited and greet returns hello.' },
    ],
    B: [
      { label: 'b1-shell', when: { input: 'RESUME-7f3a' }, tool_calls: [bash('echo RESUMED-7f3a', 'Print a marker')] },
      { label: 'b2-answer', when: { input: 'RESUMED-7f3a' }, content: 'RESUMEDONE-7f3a.' },
    ],
    C: [
      { label: 'c1-summary', when: { input: 'create a detailed summary of the conversation' },
        content: '<analysis>ANALYSIS-7f3a</analysis>\n<summary>SUMMARY-7f3a: the README was edited.</summary>' },
    ],
    D: [{ label: 'd1-answer', when: { input: 'AFTER-7f3a' }, content: 'AFTERDONE-7f3a.' }],
    E: [
      { label: 'e1-read', when: { input: 'TASK-7f3a', tools: true }, tool_calls: [{ name: 'Read', arguments: { file_path: `${p1}/README.md` } }] },
      { label: 'e2-answer', when: { input: 'EDITED-7f3a' }, content: 'DONE-E-7f3a.' },
    ],
    F: [
      { label: 'f1-read', when: { input: 'TASK-7f3a', tools: true }, tool_calls: [{ name: 'Read', arguments: { file_path: `${p2}/README.md` } }] },
      { label: 'f2-answer', when: { input: 'NOTES2-7f3a' }, content: 'DONE-F-7f3a.' },
    ],
  };
}
const TASK = 'TASK-7f3a: look at the project, plan, edit the README and have a subagent check greet.py.';
const RUNS = [
  { phase: 'A', dir: 1, args: [TASK, ...TOOLS_ALLOWED] },
  { phase: 'B', dir: 1, args: ['--continue', 'RESUME-7f3a: one more check.', ...TOOLS_ALLOWED] },
  { phase: 'C', dir: 1, args: ['--continue', '/compact'] },
  { phase: 'D', dir: 1, args: ['--continue', 'AFTER-7f3a: and now?', ...TOOLS_ALLOWED] },
  { phase: 'E', dir: 1, args: [TASK, ...TOOLS_ALLOWED] },
  { phase: 'F', dir: 2, args: [TASK, ...TOOLS_ALLOWED] },
];
/** The conversation a phase belongs to: resumed turns and the compaction continue A's. */
const CONVERSATION = { A: 's1', B: 's1', C: 's1', D: 's1', E: 's2', F: 's3' };

/** Server gaps measured and not fixed yet (node:test `todo`: a failure is listed, not counted), by
 *  arch and the scripted reply of the request; each names what the decision trace showed.
 *  None open: the thinning gaps (a lineage's first and last user turn boundaries thinned away
 *  after 4 tool steps) are fixed, docs/prompt-cache.md "Commit, thinning, eviction". */
const KNOWN_GAPS = {};

const install = ensureClaudeCode();
if (install.skip) process.stderr.write(`[agent-claude] SKIPPED: ${install.skip}\n`);

/** Content blocks without cache_control (the client moves its marks every turn; they do not
 *  change the rendered prompt). */
function norm(m) {
  const content = typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : m.content;
  return { role: m.role, content: content.map(({ cache_control: _cc, ...b }) => b) };
}
/** What the agent did to its conversation between request `p` (with its reply `reply`) and request
 *  `c`, in the terms of its body: [names]. */
function behaviours(p, reply, c) {
  const out = [];
  const pm = p.messages;
  const cm = c.messages;
  const change = firstChange(pm, cm, { norm });
  if (change) {
    const first = /This session is being continued from a previous conversation/.test(change.b)
      ? 'replaces the conversation with the compaction summary'
      : `rewrites message ${change.i} (${pm[change.i].role})`;
    out.push(`${first}${change.n > 1 ? ` (${change.n} of the ${pm.length} earlier messages differ)` : ''}: ${change.around}`);
  }
  if (cm.length < pm.length + 1) {
    if (change?.i !== 0) out.push(`sends ${cm.length} messages where the conversation had ${pm.length} and a reply: the reply is not sent back`);
    return out;
  }
  const echo = norm(cm[pm.length]);
  if (echo.role !== 'assistant') {
    out.push(`does not send the reply back as the next message (${echo.role} instead)`);
  } else {
    const gen = reply.map(({ cache_control: _cc, ...b }) => b);
    if (JSON.stringify(gen) !== JSON.stringify(echo.content)) {
      for (let i = 0; i < Math.max(gen.length, echo.content.length); i++) {
        const g = gen[i];
        const e = echo.content[i];
        if (JSON.stringify(g) === JSON.stringify(e)) continue;
        if (g?.type === 'tool_use' && e?.type === 'tool_use' && JSON.stringify(g.input) !== JSON.stringify(e.input)) {
          out.push(`rewrites the ${g.name} call's input: ${short(g.input)} -> ${short(e.input)}`);
        } else if (g?.type === 'thinking' && e?.type === 'thinking' && g.signature === e.signature) {
          // the text travels in the signature (display "omitted"): no change to the prompt
        } else {
          out.push(`changes reply block ${i}: ${short(g)} -> ${short(e)}`);
        }
      }
    }
  }
  // New user-role text after the tool result: Qwen3.5's template renders the assistant turns before
  // the last user message without their reasoning (and without an empty think block).
  for (const m of cm.slice(pm.length + 1)) {
    const blocks = typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : m.content;
    const texts = blocks.filter((b) => b.type === 'text').map((b) => b.text);
    if (m.role === 'system' || texts.length) {
      const t = texts.join(' ');
      const what = /hasn't heard from you/.test(t) ? "the silent-turn reminder (a role \"system\" message after 5 tool turns without text)"
        : /create a detailed summary/.test(t) ? 'the compaction instruction appended to the last user message'
          : m.role === 'system' ? `a role "system" message (${short(t, 60)})` : `a new user message (${short(t, 60)})`;
      out.push(`adds ${what} after the reply: a user-role message, before which the template renders the earlier assistant ` +
        'turns without their reasoning');
      break;
    }
  }
  return out;
}

for (const arch of ARCHS) {
  describe(`Claude Code in a scripted session against lineage-server [${arch}]`, { timeout: 900_000, skip: install.skip }, () => {
    let srv;
    let proxy;
    let home;
    let family;
    let p1;
    let p2;
    const written = [];  // every script, in order
    const results = [];  // {phase, r}
    let posts;           // the generating requests, analysed
    let script;

    before(async () => {
      home = fs.mkdtempSync(path.join(os.tmpdir(), 'lineage-claude-home-'));
      p1 = path.join(home, 'project');
      p2 = path.join(home, 'another-project-folder');
      for (const d of [p1, p2]) fs.mkdirSync(d);
      fs.writeFileSync(path.join(p1, 'README.md'), '# demo\n\nNOTES-7f3a: the project greets.\n');
      fs.writeFileSync(path.join(p1, 'greet.py'), 'def greet():\n    return "hello"  # NEEDLE-7f3a\n');
      fs.writeFileSync(path.join(p2, 'README.md'), '# other\n\nNOTES2-7f3a: another project.\n');
      script = newScript([]);
      srv = await startServer({ model: modelPath(arch), name: `agent-claude-${arch}`,
        args: ['--parallel', '2', '--ctx-size', String(CTX), '--api-key', 'sk-lineage', '--test-reply-script', script,
          '--cache-warmup', '--cache-trace', '--log-level', 'debug'] });
      srv.getHeaders = KEY;
      family = (await srv.cacheStats()).family;
      proxy = await sessionProxy(srv.port, { keepHeaders: ['anthropic-beta', 'anthropic-version', 'x-claude-code-session-id', 'x-app'] });
      const env = { ...claudeEnv({ baseUrl: `http://127.0.0.1:${proxy.port}`, home, maxOutputTokens: 8192 }),
        CLAUDE_CODE_ENABLE_TODO_TOOLS: 'true', ENABLE_TOOL_SEARCH: 'false' };
      const all = scripts(p1, p2);
      for (const run of RUNS) {
        writeScript(script, all[run.phase]);
        written.push({ phase: run.phase, replies: all[run.phase] });
        proxy.run = run.phase;
        // The ladder rungs the last run's new system prompts left to a ladder job are made first
        // (they run on the idle engine between runs; the wait makes it certain).
        await srv.waitLadder(`before run ${run.phase}`);
        const r = await runAgent(install.bin, ['-p', ...run.args], { cwd: run.dir === 1 ? p1 : p2, env, timeoutMs: RUN_TIMEOUT_MS });
        results.push({ phase: run.phase, r });
      }
      await new Promise((r) => setTimeout(r, 300));  // the log pipe may lag the last response
    });
    after(async () => {
      await proxy?.close();
      await srv?.stopGracefully();
      if (home) fs.rmSync(home, { recursive: true, force: true });
      if (script) fs.rmSync(path.dirname(script), { recursive: true, force: true });
    });

    /** The generating requests with their tokens, log line, scripted reply and chain; computed once. */
    async function analysed() {
      if (posts) return posts;
      const log = srv.log();
      const recs = proxy.requests.filter((r) => r.method === 'POST' && /^\/v1\/messages(\?|$)/.test(r.path));
      for (const r of recs) {
        const prompt = await messagesPrompt(srv, r.body, KEY);
        r.tokens = await tokensOf(srv, prompt, KEY);
        r.text = prompt;
        r.hist = (await tokensOf(srv, withoutGenerationPrompt(prompt), KEY)).length;
        r.reply = messageBlocks(r.response);
        const sys = (r.body.system ?? []).map((b) => b.text).filter((t) => !t.startsWith('x-anthropic-billing-header:')).join('\n');
        r.chain = `${CONVERSATION[r.run]}|${sys.length}:${sys.slice(0, 200)}|${(r.body.tools ?? []).map((t) => t.name).join(',')}`;
      }
      const lines = pairLines(recs.map((r) => r.tokens.length), requestLines(log).filter((l) => l.dialect === 'messages'));
      for (const [i, r] of recs.entries()) {
        r.line = lines[i];
        r.label = r.line ? new RegExp(`req ${r.line.id} scripted reply (\\S+):`).exec(log)?.[1] : undefined;
        r.marks = r.line ? breakpointsOf(log, r.line.id) : [];
      }
      const prevOf = new Map();
      for (const r of recs) {
        const chain = recs.filter((x) => x.chain === r.chain);
        const k = chain.indexOf(r);
        r.chainIndex = k;
        if (k > 0) prevOf.set(r, chain[k - 1]);
        r.earlier = chain.slice(0, Math.max(0, k - 1));
      }
      for (const r of recs) {
        const p = prevOf.get(r);
        if (!p) continue;
        r.prev = p;
        r.shared = lcp(p.tokens, r.tokens);
        // What a verbatim echo of the previous reply would share: the previous conversation, the
        // reply as the template renders it, then a placeholder (the first call's result, or a user
        // message after an answer).
        const use = p.reply.find((b) => b.type === 'tool_use');
        const placeholder = use
          ? { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: SENTINEL }] }
          : { role: 'user', content: SENTINEL };
        const text = await messagesPrompt(srv, { ...p.body, messages: [...p.body.messages, { role: 'assistant', content: p.reply }, placeholder] }, KEY);
        r.echoText = text;
        const at = text.lastIndexOf('<|im_start|>', text.indexOf(SENTINEL));
        const echoEnd = (await tokensOf(srv, text.slice(0, at), KEY)).length;
        const echoShared = lcp(r.tokens, await tokensOf(srv, text, KEY));
        r.echoEnd = echoEnd;
        r.cost = echoEnd - Math.min(echoShared, echoEnd);
        r.behaviours = behaviours(p.body, p.reply, r.body);
        let region = 0;
        if (r.shared < p.hist) {
          // The system prompt + tools of the request it shares the most with (its anchor).
          const best = [p, ...r.earlier].reduce((a, b) => (lcp(b.tokens, r.tokens) > lcp(a.tokens, r.tokens) ? b : a));
          const bare = await messagesPrompt(srv, { ...best.body, messages: [{ role: 'user', content: SENTINEL }] }, KEY);
          region = lcp(best.tokens, await tokensOf(srv, bare, KEY));
        }
        const earlier = r.earlier.map((e) => ({ hist: e.hist, shared: lcp(e.tokens, r.tokens), label: e.label }));
        const { promised, why } = promisedRestore({ family, prompt: r.tokens.length, shared: r.shared, hist: p.hist, region, earlier,
          sharedMax: Math.max(r.shared, ...earlier.map((e) => e.shared)),
          marks: [p, ...r.earlier].flatMap((e) => e.marks) });
        r.promised = promised;
        r.why = why;
      }
      posts = recs;
      return posts;
    }

    it('the scripted session runs: exit 0, HTTP 200 throughout, every scripted step used, the tools really ran', async (t) => {
      for (const { phase, r } of results) {
        assert.equal(r.code, 0, `run ${phase}: claude exited ${r.code ?? r.signal}\n--- stdout ---\n${r.stdout.slice(-1500)}\n` +
          `--- stderr ---\n${r.stderr.slice(-1500)}`);
      }
      const recs = await analysed();
      for (const r of proxy.requests) assert.equal(r.status, 200, `${r.run}: ${r.method} ${r.path} -> ${r.status}\n${srv.logTail(20)}`);
      const file = saveSession(REPO_ROOT, { agent: 'claude-code', arch, version: CLAUDE_CODE_VERSION, api: 'messages',
        scripts: written, requests: recs });
      t.diagnostic(`recording: ${file} (${recs.length} requests)`);
      assert.ok(recs.every((r) => r.line), `every request has its server log line:\n${recs.map((r) => `${r.run} ${r.tokens.length} ${r.line?.id}`).join('\n')}`);
      // Every scripted reply was used once, in the order written (the subagent's between a7 and a8).
      const labels = recs.map((r) => r.label);
      const want = written.flatMap((s) => s.replies.map((x) => x.label));
      assert.deepEqual(labels, want, `the scripted replies used, in order\n${srv.logTail(30)}`);
      assert.match(results.find((x) => x.phase === 'A').r.stdout, /FINAL-7f3a/);
      assert.match(results.find((x) => x.phase === 'B').r.stdout, /RESUMEDONE-7f3a/);
      assert.match(results.find((x) => x.phase === 'D').r.stdout, /AFTERDONE-7f3a/);
      // The tools ran: the edit is in the file, the tool results carried the markers back.
      assert.match(fs.readFileSync(path.join(p1, 'README.md'), 'utf8'), /EDITED-7f3a/);
      // The request's new input: its messages after the last assistant message.
      const results_ = (r) => r.body.messages.slice(r.body.messages.findLastIndex((m) => m.role === 'assistant') + 1);
      const byLabel = (l) => recs.find((r) => r.label === l);
      assert.match(JSON.stringify(results_(byLabel('a3-plan'))), /greet\.py:2:.*NEEDLE-7f3a/, 'the Bash grep found the marker');
      assert.match(JSON.stringify(results_(byLabel('a6-plan-done'))), /SHELL-7f3a/, 'the Bash echo ran');
      assert.match(JSON.stringify(results_(byLabel('a8-final'))), /SUBREPORT-7f3a/, "the subagent's report came back");
      // The subagent ran in its own chain: another system prompt and tools.
      assert.notEqual(byLabel('sub1-read').chain, byLabel('a1-read').chain);
      // The reasoning went back: a thinking block with the server's signature and empty text
      // (display "omitted"), and the next prompt renders its text.
      const a2 = byLabel('a2-search');
      const thinking = a2.body.messages.find((m) => m.role === 'assistant').content.find((b) => b.type === 'thinking');
      assert.ok(thinking?.signature, `a2's echo of a1 holds a signed thinking block: ${short(a2.body.messages.at(-2))}`);
      t.diagnostic(`thinking block sent back: text ${JSON.stringify(thinking.thinking)}, signature ${thinking.signature.length} chars`);
      assert.match(await messagesPrompt(srv, a2.body, KEY), /I should read the README first\.\n<\/think>/);
    });

    it("every request after a chain's first restores at least the restore point the rules promise", async (t) => {
      const { rows, failures } = promiseReport(await analysed(), srv.log(), KNOWN_GAPS[arch]);
      for (const row of rows) t.diagnostic(row);
      assert.deepEqual(failures, [], 'requests that restored less than promised');
    });

    knownGapTests(it, KNOWN_GAPS[arch] ?? {}, analysed, srv);

    it('where a request shares less than a verbatim echo of the previous reply would, the agent behaviour is named', async (t) => {
      const recs = await analysed();
      const unnamed = [];
      for (const r of recs.filter((x) => x.prev)) {
        if (r.behaviours.length) t.diagnostic(`${r.run} ${r.label}: ${r.cost} tokens: ${r.behaviours.join('; ')}`);
        if (r.cost > 0 && r.behaviours.length === 0) unnamed.push(`${r.label}: parts ${r.cost} tokens before the end of the echoed reply: ${textDiff(r.echoText, r.text)}`);
      }
      assert.deepEqual(unnamed, []);
      // The behaviours this version is known for, each seen here (so that a change in the client is noticed).
      const seen = recs.flatMap((r) => r.behaviours ?? []).join('\n');
      assert.match(seen, /rewrites the Edit call's input: .* -> \{"replace_all":false,/, 'Claude Code adds replace_all: false to an Edit call it sends back');
      assert.match(seen, /silent-turn reminder/, 'the silent-turn reminder after 5 tool turns');
    });

    it("the second session restores >= 95% of its first prompt; the one in another folder its shared prefix (minus the ladder's 64 on hybrid)", async (t) => {
      const recs = await analysed();
      const first = (phase) => recs.find((r) => r.run === phase);
      const a = first('A');
      const e = first('E');
      t.diagnostic(`second session: cached ${e.line.cached} of ${e.tokens.length}`);
      assert.ok(e.line.cached >= 0.95 * e.tokens.length, `second session restored ${e.line.cached} of ${e.tokens.length} (< 95%)`);
      const f = first('F');
      const shared = lcp(a.tokens, f.tokens);
      assert.ok(shared < f.tokens.length - 16 && shared > 0.5 * f.tokens.length, `the other folder shares ${shared} of ${f.tokens.length}`);
      const want = family === 'dense' ? Math.min(shared, f.tokens.length - 1) : shared - 64;
      t.diagnostic(`another folder: cached ${f.line.cached} of ${f.tokens.length}, shared ${shared}, want >= ${want}`);
      assert.ok(f.line.cached >= want, `another folder: cached ${f.line.cached} < ${want} (shared ${shared}, ${family})\n  ` +
        traceLines(srv.log(), f.line.id).join('\n  '));
    });

    it('the resumed turn and the compaction restore at least their promised restore points', async (t) => {
      const recs = await analysed();
      for (const phase of ['B', 'C', 'D']) {
        const r = recs.find((x) => x.run === phase);
        assert.ok(r?.prev, `${phase}: no request continuing the session`);
        t.diagnostic(`${phase} ${r.label}: cached ${r.line.cached} of ${r.tokens.length}, shared ${r.shared}, promised ${r.promised} (${r.why})`);
        const declined = declinedTierCopy(srv.log(), r);
        if (declined) t.diagnostic(`  (a tier copy of ${declined[1]} tokens was not read: recomputing its ${declined[2]} more is cheaper)`);
        if (!declined) assert.ok(r.line.cached >= r.promised, `${phase}: cached ${r.line.cached} < promised ${r.promised}`);
      }
    });

    it('known gap: a ToolSearch result (tool_reference blocks) is accepted', {
      todo: 'Claude Code defers most tools behind ToolSearch by default; its result is a tool_result holding ' +
        '`tool_reference` blocks, which /v1/messages refuses with HTTP 400 ("a tool_result message cannot hold here"): ' +
        'the agent retries three times, then declares every tool in full (a new tools block: the prompt parts inside it)',
    }, async () => {
      const recs = await analysed();
      const body = structuredClone(recs.find((r) => r.label === 'a2-search').body);
      body.messages.push({ role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'ToolSearch', input: { query: 'select:WebFetch' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'tool_reference', tool_name: 'WebFetch' }] },
          { type: 'text', text: 'Tool loaded.' }] });
      const r = await srv.post('/apply-template?api=messages', body, KEY);
      assert.equal(r.status, 200, r.text);
    });

    it('known gap: a scripted boolean argument streams as valid JSON', {
      todo: 'the Qwen3.5 template renders a JSON false argument as `False` (a past tool call, and so the scripted reply); the ' +
        "server's output parser does not read it back: without streaming the whole call comes out as text, streamed the " +
        'tool_use input stops at `..."run_in_background":` and the client gets JSON it cannot parse',
    }, async () => {
      const recs = await analysed();
      writeScript(script, [{ label: 'bool', when: { input: 'TASK-7f3a' }, tool_calls: [{ name: 'Agent',
        arguments: { description: 'd', prompt: 'p', subagent_type: 'general-purpose', run_in_background: false } }] }]);
      const body = { ...recs[0].body, stream: true };
      const res = await fetch(`${srv.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json', ...KEY }, body: JSON.stringify(body) });
      const blocks = messageBlocks(await res.text());
      const use = blocks.find((b) => b.type === 'tool_use');
      assert.deepEqual(use?.input?.run_in_background, false, JSON.stringify(blocks));
    });
  });
}
