// Codex CLI (`@openai/codex`, pinned) in a real working session against lineage-server over the
// Responses API (README.md "Codex (Responses API)"), on the tiny hybrid (qwen35) and dense (qwen3)
// models: `codex exec`, non-interactive, CODEX_HOME in a temporary folder, the server as a custom
// model provider on 127.0.0.1 through a recording proxy, no approvals, the workspace-write sandbox.
// The models have random weights, so the server runs with --test-reply-script (docs/testing.md
// "Scripted replies"): each request is answered with the script's reply that its new input calls
// for, generated token by token, so the agent runs its own tools on a scratch project.
//
// The session (each step's reply is chosen by a marker the previous tool's result brought back):
//  A. `codex exec TASK`: exec_command `cat README.md` (a reply with reasoning: a reasoning item,
//     which Codex sends back with its text and the server's sealed copy), exec_command `grep -rn`
//     (search), update_plan (the plan tool: `-c tools.update_plan.enabled=true`; its `plan` is
//     written before `explanation`, see the todo below), exec_command `apply_patch <<EOF` (the edit:
//     Codex runs the patch itself; this version has no apply_patch function tool for a model it
//     does not know, and the freeform one a model catalog can turn on is a custom tool, which the
//     server does not offer the model), exec_command `echo`, spawn_agent (a subagent: its own thread
//     and tools, two requests of its own), wait_agent (its id is only known once spawn_agent
//     answered: the proxy rewrites the script before that request goes on), the final answer;
//  B. `codex exec resume <id>`: a resumed turn (echo, answer). `resume --last` would pick the
//     subagent's thread, the session recorded last;
//  C. `codex exec resume <id> -c model_auto_compact_token_limit=2000`: exec mode has no compact
//     command, the automatic compaction runs non-interactively: a summary request (no tools, the
//     conversation and a compaction instruction), then the turn on the compacted history;
//  E. a new session in the same folder with the same task (cat, answer);
//  F. a new session in another folder (cat, answer).
// Codex sends no side requests in exec mode at this version (no title or quota call): every
// request but the compaction's carries the tools. The server's --n-predict is raised so no reply
// is cut (Codex sends no max_output_tokens). The server runs with --cache-warmup on (as users run
// it): the checks are lower bounds, which a warm-up that finished in time can only raise.
//
// Asserted (the rules and their helpers as in agent-claude.test.mjs; the prompts are computed from
// the recorded bodies with lib/agents.mjs responsesChatBody, the server's mapping of Responses
// items to chat messages, then /apply-template + /tokenize, and each is checked against the prompt
// length the server logged for it):
//  - every run exits 0, every request got HTTP 200, every scripted reply was used, in order within
//    its chain, and the tools really ran (the README holds the patch, the markers came back);
//  - per request after a chain's first (the main thread of a session, resumed turns and the
//    compaction included; the subagent's thread its own chain): cached >= the restore point the
//    rules promise (lib/agents.mjs promisedRestore): dense: the prefix it shares with the chain's
//    previous request (or an earlier one, when more), less one when that is the whole prompt;
//    hybrid: that request's history boundary when it extends it, else the longest documented
//    restore point at or before where it parts (an earlier request's history boundary, the anchor,
//    its ladder: a rung at most 64 tokens before a parting point in the system prompt's last 512
//    tokens, one per --batch-size pass before that); nothing under --prompt-cache-min-prefix (32);
//  - where the request does not share what a verbatim echo of the previous response's output items
//    would, the agent's behaviour that caused it is named, with its cost in tokens. Seen at this
//    version: Codex sends every output item back as it got it (reasoning text and sealed copy
//    included); wait_agent's result comes with a <subagent_notification> user message (before
//    which Qwen3.5's template drops the reasoning of every earlier assistant turn: ~800 tokens); the
//    compaction request drops the tools (it shares 3 tokens with the session: the template renders
//    the tools first), and the turn after it replaces the history (the summary in a user message,
//    one developer message fewer: it parts inside the system prompt, ~600 tokens before its end);
//  - the second session (E) restores >= 95% of its first prompt; the one in another folder (F) at
//    least the prefix it shares with A's first request (dense), or that minus 64 (hybrid).
// The session's recording is written to build/agent-sessions/codex-<arch>.json for the benchmark's
// replay (lib/agents.mjs saveSession): no recorded text goes into the repository.
//
//   cd tests/e2e && node --test agent-codex.test.mjs
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { canonicalJSON, declinedTierCopy, firstChange, installAgent, knownGapTests, lcp, pairLines, promiseReport, promisedRestore, requestLines,
  responsesChatBody, responsesOutput, runAgent, saveSession, sessionProxy, short, textDiff, tokensOf, traceLines,
  withoutGenerationPrompt } from './lib/agents.mjs';
import { newScript, writeScript } from './lib/script.mjs';
import { ARCHS, REPO_ROOT, modelPath, startServer } from './lib/server.mjs';

const CODEX = '@openai/codex';
const CODEX_VERSION = '0.171.0';
const MODEL = 'tiny';
const SENTINEL = '\u2063';
const RUN_TIMEOUT_MS = 300_000;

/** The pinned Codex, installed once; {skip: reason} only when the npm registry cannot be
 *  reached (CI without network), any other install failure throws. */
function codexBinary() {
  try {
    return { bin: installAgent(CODEX, CODEX_VERSION, 'codex') };
  } catch (e) {
    if (/ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ECONNRESET|ENETUNREACH/.test(e.message)) {
      return { skip: `cannot install ${CODEX}@${CODEX_VERSION} from the npm registry (offline): ${e.message.split('\n').filter(Boolean).slice(-2).join(' | ')}` };
    }
    throw e;
  }
}

const exec = (cmd) => ({ name: 'exec_command', arguments: { cmd } });
const PATCH = "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: README.md\n@@\n-NOTES-7f3a: the project greets.\n" +
  '+NOTES-7f3a: the project greets. EDITED-7f3a\n*** End Patch\nEOF';
/** The scripts of the session's phases (A2: the rest of A once the subagent's id is known). */
const SCRIPTS = {
  A: [
    { label: 'a1-read', when: { input: 'TASK-7f3a', tools: true }, reasoning: 'The task asks about the project. I should read the README first.',
      tool_calls: [exec('cat README.md')] },
    { label: 'a2-search', when: { input: 'NOTES-7f3a' }, tool_calls: [exec('grep -rn NEEDLE-7f3a .')] },
    { label: 'a3-plan', when: { input: 'greet.py:2' }, tool_calls: [{ name: 'update_plan', arguments: {
      plan: [{ step: 'Edit the README', status: 'in_progress' }, { step: 'Check the edit', status: 'pending' }], explanation: 'PLAN-7f3a' } }] },
    { label: 'a4-edit', when: { input: 'Plan updated' }, reasoning: 'The plan is in place; now the edit.', tool_calls: [exec(PATCH)] },
    { label: 'a5-shell', when: { input: 'Success. Updated the following files' }, tool_calls: [exec('echo SHELL-7f3a')] },
    { label: 'a6-spawn', when: { input: 'SHELL-7f3a' },
      tool_calls: [{ name: 'spawn_agent', arguments: { message: 'SUB-7f3a: read greet.py and say what greet returns.' } }] },
    { label: 'sub1-read', when: { input: 'SUB-7f3a' }, tool_calls: [exec('cat greet.py')] },
  ],
  A2: (id) => [
    { label: 'a7-wait', when: { input: id }, tool_calls: [{ name: 'wait_agent', arguments: { targets: [id], timeout_ms: 120000 } }] },
    { label: 'sub1-read', when: { input: 'SUB-7f3a' }, tool_calls: [exec('cat greet.py')] },
    { label: 'sub2-report', when: { input: 'NEEDLE-7f3a' }, content: 'SUBREPORT-7f3a: greet returns hello.' },
    { label: 'a8-final', when: { input: 'SUBREPORT-7f3a' }, reasoning: 'The subagent reported back.',
      content: 'FINAL-7f3a: the README is edited and greet returns hello.' },
  ],
  B: [
    { label: 'b1-shell', when: { input: 'RESUME-7f3a' }, tool_calls: [exec('echo RESUMED-7f3a')] },
    { label: 'b2-answer', when: { input: 'RESUMED-7f3a' }, content: 'RESUMEDONE-7f3a.' },
  ],
  C: [
    { label: 'c1-summary', when: { input: 'CONTEXT CHECKPOINT COMPACTION', tools: false }, content: 'SUMMARY-7f3a: the README was edited.' },
    { label: 'c2-answer', when: { input: 'COMPACT-7f3a' }, content: 'AFTERDONE-7f3a.' },
  ],
  E: [
    { label: 'e1-read', when: { input: 'TASK-7f3a', tools: true }, tool_calls: [exec('cat README.md')] },
    { label: 'e2-answer', when: { input: 'EDITED-7f3a' }, content: 'DONE-E-7f3a.' },
  ],
  F: [
    { label: 'f1-read', when: { input: 'TASK-7f3a', tools: true }, tool_calls: [exec('cat README.md')] },
    { label: 'f2-answer', when: { input: 'NOTES2-7f3a' }, content: 'DONE-F-7f3a.' },
  ],
};
const TASK = 'TASK-7f3a: look at the project, plan, edit the README and have a subagent check greet.py.';
const CONVERSATION = { A: 's1', B: 's1', C: 's1', E: 's2', F: 's3' };

/** Server gaps measured and not fixed yet (node:test `todo`), by arch and scripted reply. *  None open: the thinning gaps (a lineage's first and last user turn boundaries thinned away
 *  after 4 tool steps) are fixed, docs/prompt-cache.md "Commit, thinning, eviction". */
const KNOWN_GAPS = {};

const codex = codexBinary();
if (codex.skip) process.stderr.write(`[agent-codex] SKIPPED: ${codex.skip}\n`);

/** An item as it bears on the prompt: without ids, status and the sealed reasoning copy (the
 *  server renders the reasoning text; the seal has a random nonce). */
function normItem(it) {
  const { id: _id, status: _st, encrypted_content: _ec, summary: _su, ...rest } = it;
  if (rest.type === undefined) rest.type = 'message';
  if (rest.type === 'message' && typeof rest.content !== 'string') {
    rest.content = rest.content.map((p) => ({ text: p.text ?? p.refusal }));
  }
  return rest;
}
/** What the agent did to its conversation between request `p` (with its output items `out`) and
 *  request `c`, in the terms of its body: [names]. */
function behaviours(p, out, c) {
  const names = [];
  const toolNames = (b) => (b.tools ?? []).map((t) => (t.type === 'namespace' ? `${t.name}.*` : t.name ?? t.type)).join(',');
  if (toolNames(p) !== toolNames(c)) names.push(`sends other tools: [${toolNames(p)}] -> [${toolNames(c)}]`);
  if ((p.instructions ?? null) !== (c.instructions ?? null)) names.push('changes its instructions');
  const pi = p.input.map(normItem);
  const ci = c.input.map(normItem);
  const change = firstChange(pi, ci, { same: (x, y) => canonicalJSON(x) === canonicalJSON(y) });
  if (change) {
    const { i, n } = change;
    // After a compaction request, the history is replaced: the summary (the compaction's output)
    // comes back inside a user message.
    const summary = out.filter((it) => it.type === 'message').map((it) => it.content.map((x) => x.text).join('')).join('');
    const compacted = !p.tools?.length && summary && ci.some((it) => it.type === 'message' && JSON.stringify(it.content).includes(summary));
    names.push(`${compacted ? 'replaces the history with the compacted one (the summary in a user message); ' : ''}` +
      `rewrites input item ${i} (${pi[i].type}${pi[i].role ? ` ${pi[i].role}` : ''})` +
      `${n > 1 ? ` (${n} of the ${pi.length} earlier items differ)` : ''}: ${change.around}`);
  }
  const echo = ci.slice(pi.length, pi.length + out.length);
  const gen = out.map(normItem);
  if (ci.length < pi.length + out.length) {
    if (!change) names.push(`sends ${ci.length} items where the conversation had ${pi.length} and ${out.length} output items: the output is not sent back`);
  } else if (canonicalJSON(echo) !== canonicalJSON(gen)) {
    for (let i = 0; i < gen.length; i++) {
      if (canonicalJSON(echo[i]) !== canonicalJSON(gen[i])) names.push(`changes output item ${i}: ${short(gen[i])} -> ${short(echo[i])}`);
    }
  }
  // A new user-role message after the output (a developer or user message): Qwen3.5's template
  // renders the assistant turns before the last user message without their reasoning.
  for (const it of ci.slice(pi.length + out.length)) {
    if (it.type === 'message' && it.role !== 'assistant') {
      const t = typeof it.content === 'string' ? it.content : it.content.map((x) => x.text).join(' ');
      names.push(`adds a ${it.role} message (${short(t, 70)}) after the output: a user-role message, before which the template renders ` +
        'the earlier assistant turns without their reasoning');
      break;
    }
  }
  return names;
}

for (const arch of ARCHS) {
  describe(`Codex CLI in a scripted session over /v1/responses [${arch}]`, { timeout: 900_000, skip: codex.skip }, () => {
    let srv;
    let proxy;
    let home;
    let p1;
    let p2;
    let family;
    let script;
    let sessionId;
    const written = [];
    const results = [];
    let posts;

    before(async () => {
      home = fs.mkdtempSync(path.join(os.tmpdir(), 'lineage-codex-home-'));
      p1 = path.join(home, 'project');
      p2 = path.join(home, 'another-project-folder');
      const codexHome = path.join(home, 'codex');
      for (const d of [p1, p2, codexHome]) fs.mkdirSync(d);
      fs.writeFileSync(path.join(p1, 'README.md'), '# demo\n\nNOTES-7f3a: the project greets.\n');
      fs.writeFileSync(path.join(p1, 'greet.py'), 'def greet():\n    return "hello"  # NEEDLE-7f3a\n');
      fs.writeFileSync(path.join(p2, 'README.md'), '# other\n\nNOTES2-7f3a: another project.\n');
      script = newScript([]);
      srv = await startServer({ model: modelPath(arch), name: `agent-codex-${arch}`,
        args: ['--parallel', '2', '--ctx-size', '32768', '--n-predict', '4096', '--alias', MODEL, '--test-reply-script', script,
          '--cache-warmup', '--cache-trace', '--log-level', 'debug'] });
      family = (await srv.cacheStats()).family;
      const write = (phase, replies) => {
        writeScript(script, replies);
        written.push({ phase, replies });
      };
      // wait_agent needs the id spawn_agent made up: the request that carries spawn_agent's output
      // waits at the proxy until the rest of the script names it.
      let spawned = false;
      proxy = await sessionProxy(srv.port, {
        keepHeaders: ['session_id', 'conversation_id', 'originator', 'openai-beta', 'x-codex-turn-metadata', 'x-codex-window-id'],
        before: async (rec) => {
          if (spawned || !Array.isArray(rec.body?.input)) return;
          const out = rec.body.input.filter((it) => it.type === 'function_call_output').map((it) => String(it.output)).join('\n');
          const m = /"agent_id":"([^"]+)"/.exec(out);
          if (m) {
            spawned = true;
            write('A2', SCRIPTS.A2(m[1]));
          }
        },
      });
      const env = { ...process.env, CODEX_HOME: codexHome, LINEAGE_API_KEY: 'sk-lineage-e2e', NO_COLOR: '1' };
      delete env.OPENAI_API_KEY;
      delete env.OPENAI_BASE_URL;
      const flags = (dir) => ['--skip-git-repo-check', '-C', dir, '-s', 'workspace-write', '--color', 'never',
        '-c', 'model_provider="lineage"', '-c', `model="${MODEL}"`,
        '-c', 'model_providers.lineage.name="lineage"',
        '-c', `model_providers.lineage.base_url="http://127.0.0.1:${proxy.port}/v1"`,
        '-c', 'model_providers.lineage.wire_api="responses"',
        '-c', 'model_providers.lineage.env_key="LINEAGE_API_KEY"',
        '-c', 'approval_policy="never"', '-c', 'check_for_update_on_startup=false', '-c', 'analytics.enabled=false',
        '-c', 'tools.update_plan.enabled=true'];
      const runs = [
        { phase: 'A', dir: p1, args: () => [...flags(p1), TASK] },
        { phase: 'B', dir: p1, args: () => [...flags(p1), 'resume', sessionId, 'RESUME-7f3a: one more check.'] },
        { phase: 'C', dir: p1, args: () => [...flags(p1), '-c', 'model_auto_compact_token_limit=2000', 'resume', sessionId,
          'COMPACT-7f3a: and now?'] },
        { phase: 'E', dir: p1, args: () => [...flags(p1), TASK] },
        { phase: 'F', dir: p2, args: () => [...flags(p2), TASK] },
      ];
      for (const run of runs) {
        write(run.phase, SCRIPTS[run.phase]);
        proxy.run = run.phase;
        // The ladder rungs the last run's new system prompts left to a ladder job are made first
        // (they run on the idle engine between runs; the wait makes it certain).
        await srv.waitLadder(`before run ${run.phase}`);
        const r = await runAgent(codex.bin, ['exec', ...run.args()], { cwd: run.dir, env, timeoutMs: RUN_TIMEOUT_MS });
        results.push({ phase: run.phase, r });
        if (run.phase === 'A') sessionId = /session id: (\S+)/.exec(r.stderr + r.stdout)?.[1];
        if (run.phase === 'A' && !sessionId) break;
      }
      await new Promise((r) => setTimeout(r, 300));  // the log pipe may lag the last response
    });
    after(async () => {
      await proxy?.close();
      await srv?.stopGracefully();
      if (home) fs.rmSync(home, { recursive: true, force: true });
      if (script) fs.rmSync(path.dirname(script), { recursive: true, force: true });
    });

    /** The chat rendering of a Responses body: {text, tokens, hist}. */
    async function render(body) {
      const chat = responsesChatBody(body);
      const t = await srv.post('/apply-template', { messages: chat.messages, tools: chat.tools, chat_template_kwargs: chat.chat_template_kwargs,
        add_generation_prompt: true });
      if (t.status !== 200) throw new Error(`/apply-template -> ${t.status}: ${t.text}`);
      return t.json.prompt;
    }

    async function analysed() {
      if (posts) return posts;
      const log = srv.log();
      const recs = proxy.requests.filter((r) => r.method === 'POST' && /^\/v1\/responses(\?|$)/.test(r.path));
      for (const r of recs) {
        const text = await render(r.body);
        r.tokens = await tokensOf(srv, text);
        r.text = text;
        r.hist = (await tokensOf(srv, withoutGenerationPrompt(text))).length;
        r.output = responsesOutput(r.response);
        // A chain: one Codex thread (a resumed session keeps its thread; a subagent has its own,
        // though it sends its parent's prompt_cache_key).
        r.thread = r.body.client_metadata?.thread_id ?? r.body.prompt_cache_key;
        r.chain = `${CONVERSATION[r.run]}|${r.thread}`;
      }
      const lines = pairLines(recs.map((r) => r.tokens.length), requestLines(log).filter((l) => l.dialect === 'responses'));
      for (const [i, r] of recs.entries()) {
        r.line = lines[i];
        r.label = r.line ? new RegExp(`req ${r.line.id} scripted reply (\\S+):`).exec(log)?.[1] : undefined;
      }
      for (const r of recs) {
        const chain = recs.filter((x) => x.chain === r.chain);
        const k = chain.indexOf(r);
        if (k === 0) continue;
        const p = chain[k - 1];
        r.prev = p;
        r.earlier = chain.slice(0, k - 1);
        r.shared = lcp(p.tokens, r.tokens);
        const call = p.output.find((it) => it.type === 'function_call');
        const placeholder = call ? { type: 'function_call_output', call_id: call.call_id, output: SENTINEL }
          : { type: 'message', role: 'user', content: [{ type: 'input_text', text: SENTINEL }] };
        const text = await render({ ...p.body, input: [...p.body.input, ...p.output, placeholder] });
        r.echoText = text;
        const at = text.lastIndexOf('<|im_start|>', text.indexOf(SENTINEL));
        r.echoEnd = (await tokensOf(srv, text.slice(0, at))).length;
        r.cost = r.echoEnd - Math.min(lcp(r.tokens, await tokensOf(srv, text)), r.echoEnd);
        r.behaviours = behaviours(p.body, p.output, r.body);
        let region = 0;
        if (r.shared < p.hist) {
          // The system prompt + tools of the request it shares the most with (its anchor): its
          // leading developer/system items rendered with the tools alone.
          const best = [p, ...r.earlier].reduce((a, b) => (lcp(b.tokens, r.tokens) > lcp(a.tokens, r.tokens) ? b : a));
          const n = best.body.input.findIndex((x) => !((x.type ?? 'message') === 'message' && ['developer', 'system'].includes(x.role)));
          const lead = best.body.input.slice(0, n < 0 ? best.body.input.length : n);
          const bare = await render({ ...best.body, input: [...lead, { type: 'message', role: 'user', content: [{ type: 'input_text', text: SENTINEL }] }] });
          region = lcp(best.tokens, await tokensOf(srv, bare));
        }
        const earlier = r.earlier.map((e) => ({ hist: e.hist, shared: lcp(e.tokens, r.tokens), label: e.label }));
        const { promised, why } = promisedRestore({ family, prompt: r.tokens.length, shared: r.shared, hist: p.hist, region, earlier,
          sharedMax: Math.max(r.shared, ...earlier.map((e) => e.shared)) });
        r.promised = promised;
        r.why = why;
      }
      posts = recs;
      return posts;
    }

    it('the scripted session runs: exit 0, HTTP 200 throughout, every scripted step used, the tools really ran', async (t) => {
      for (const { phase, r } of results) {
        assert.equal(r.code, 0, `run ${phase}: codex exited ${r.code ?? r.signal}:\n${r.stderr.slice(-3000)}\n${r.stdout.slice(-1000)}`);
      }
      assert.equal(results.length, 5, `every run ran (the session id of A: ${sessionId})`);
      const recs = await analysed();
      for (const r of proxy.requests) assert.equal(r.status, 200, `${r.run}: ${r.method} ${r.path} -> ${r.status}\n${srv.logTail(20)}`);
      const file = saveSession(REPO_ROOT, { agent: 'codex', arch, version: CODEX_VERSION, api: 'responses', scripts: written, requests: recs });
      t.diagnostic(`recording: ${file} (${recs.length} requests)`);
      for (const r of recs) {
        assert.ok(r.line, `${r.run}: no server log line with prompt=${r.tokens.length} (the chat rendering of the recorded body ` +
          `must be the prompt the server ran)\n${srv.logTail(20)}`);
      }
      // Every scripted reply used once, in order within its chain (the subagent's thread runs beside
      // the main one's wait_agent).
      const order = (labels) => labels.filter((l) => !/^sub/.test(l));
      const want = ['a1-read', 'a2-search', 'a3-plan', 'a4-edit', 'a5-shell', 'a6-spawn', 'a7-wait', 'a8-final', 'b1-shell', 'b2-answer',
        'c1-summary', 'c2-answer', 'e1-read', 'e2-answer', 'f1-read', 'f2-answer'];
      assert.deepEqual(order(recs.map((r) => r.label)), want, 'the main threads\' scripted replies, in order');
      assert.deepEqual(recs.filter((r) => /^sub/.test(r.label)).map((r) => r.label), ['sub1-read', 'sub2-report'], "the subagent's");
      const sub = recs.find((r) => r.label === 'sub1-read');
      assert.notEqual(sub.chain, recs[0].chain, 'the subagent has its own thread');
      t.diagnostic(`threads: ${[...new Set(recs.map((r) => `${r.run}:${r.thread}`))].join(' ')}`);
      assert.match(results[0].r.stdout, /FINAL-7f3a/);
      assert.match(fs.readFileSync(path.join(p1, 'README.md'), 'utf8'), /EDITED-7f3a/, 'apply_patch edited the README');
      const newInput = (r) => JSON.stringify(r.body.input.slice(r.body.input.findLastIndex((it) => it.type === 'function_call' ||
        (it.type === 'message' && it.role === 'assistant') || it.type === 'reasoning') + 1));
      const byLabel = (l) => recs.find((r) => r.label === l);
      assert.match(newInput(byLabel('a3-plan')), /greet\.py:2:.*NEEDLE-7f3a/, 'grep found the marker');
      assert.match(newInput(byLabel('a6-spawn')), /SHELL-7f3a/, 'echo ran');
      assert.match(newInput(byLabel('a8-final')), /SUBREPORT-7f3a/, "wait_agent brought the subagent's report back");
      // The reasoning went back: a reasoning item with its text (and the server's sealed copy), which
      // the next prompt renders.
      const a2 = byLabel('a2-search');
      const reasoning = a2.body.input.find((it) => it.type === 'reasoning');
      assert.ok(reasoning?.content?.[0]?.text?.startsWith('The task asks about the project.'), short(reasoning, 400));
      t.diagnostic(`reasoning item sent back: content ${short(reasoning.content)}, encrypted_content ${reasoning.encrypted_content ? 'yes' : 'no'}`);
      assert.match(await render(a2.body), /I should read the README first\.\n<\/think>/);
      const c1 = byLabel('c1-summary');
      assert.ok(!c1.body.tools?.length, 'the compaction request offers no tools');
    });

    it("every request after a chain's first restores at least the restore point the rules promise", async (t) => {
      const { rows, failures } = promiseReport(await analysed(), srv.log(), KNOWN_GAPS[arch]);
      for (const row of rows) t.diagnostic(row);
      assert.deepEqual(failures, [], 'requests that restored less than promised');
    });

    knownGapTests(it, KNOWN_GAPS[arch] ?? {}, analysed, srv);

    it('where a request shares less than a verbatim echo of the previous output would, the agent behaviour is named', async (t) => {
      const recs = await analysed();
      const unnamed = [];
      for (const r of recs.filter((x) => x.prev)) {
        if (r.behaviours.length) t.diagnostic(`${r.run} ${r.label}: ${r.cost} tokens: ${r.behaviours.join('; ')}`);
        if (r.cost > 0 && r.behaviours.length === 0) unnamed.push(`${r.label}: parts ${r.cost} tokens before the end of the echoed output: ${textDiff(r.echoText, r.text)}`);
      }
      assert.deepEqual(unnamed, []);
      const seen = recs.flatMap((r) => r.behaviours ?? []).join('\n');
      assert.match(seen, /sends other tools: \[.+\] -> \[\]/, 'the compaction request drops the tools');
      assert.match(seen, /replaces the history with the compacted one/, 'the turn after the compaction');
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

    it('the resumed turn and the turn after the compaction restore at least their promised restore points', async (t) => {
      const recs = await analysed();
      for (const label of ['b1-shell', 'c1-summary', 'c2-answer']) {
        const r = recs.find((x) => x.label === label);
        assert.ok(r?.prev, `${label}: no request continuing the session`);
        t.diagnostic(`${label}: cached ${r.line.cached} of ${r.tokens.length}, shared ${r.shared}, promised ${r.promised} (${r.why})`);
        const declined = declinedTierCopy(srv.log(), r);
        if (declined) t.diagnostic(`  (a tier copy of ${declined[1]} tokens was not read: recomputing its ${declined[2]} more is cheaper)`);
        if (!declined) assert.ok(r.line.cached >= r.promised, `${label}: cached ${r.line.cached} < promised ${r.promised}`);
      }
      // The resumed turn extends the session: its input starts with the session's last request's.
      const b1 = recs.find((x) => x.label === 'b1-shell');
      assert.deepEqual(b1.body.input.slice(0, b1.prev.body.input.length).map(normItem), b1.prev.body.input.map(normItem));
    });

    it('known gap: a tool call whose optional argument comes before a required one is a function call', {
      todo: "the server's Qwen3.5 tool-call parser takes a call's required parameters before its optional ones: update_plan " +
        "written in its schema's order (explanation, then the required plan) comes back as plain text without streaming, and " +
        "streamed as a function_call whose arguments stop at `{` (Codex: \"failed to parse function arguments\", then a 400 " +
        'on its next request, whose history holds that call)',
    }, async () => {
      const recs = await analysed();
      writeScript(script, [{ label: 'order', when: { input: 'TASK-7f3a' }, tool_calls: [{ name: 'update_plan', arguments: {
        explanation: 'PLAN-7f3a', plan: [{ step: 'Edit the README', status: 'in_progress' }] } }] }]);
      const res = await srv.post('/v1/responses', { ...recs[0].body, stream: false });
      assert.equal(res.status, 200, res.text);
      const call = res.json.output.find((it) => it.type === 'function_call');
      assert.ok(call, `no function_call: ${short(res.json.output, 400)}`);
      assert.deepEqual(JSON.parse(call.arguments), { explanation: 'PLAN-7f3a', plan: [{ step: 'Edit the README', status: 'in_progress' }] });
    });
  });
}
