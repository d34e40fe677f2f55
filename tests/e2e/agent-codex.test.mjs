// Codex CLI (`@openai/codex`, pinned) against lineage-server on the tiny qwen35 model over the
// Responses API (README.md "Codex (Responses API)"): two `codex exec` sessions and a resumed turn
// (`codex exec resume --last`), non-interactive, CODEX_HOME in a temporary folder, the server
// as a custom model provider on 127.0.0.1 (the README's configuration), no approvals, a
// read-only sandbox. The weights are random, so the answers are garbage and may be cut by the
// server's --n-predict: Codex then reports an incomplete response and retries, which is its own
// handling of length, accepted here. Asserted from the server's log and the recorded requests:
// no 4xx/5xx for /v1/responses, the second session's first request restores >= 95% of its
// prompt, the resumed turn restores at least the history of the turn it resumes (computed with
// POST /apply-template + POST /tokenize from the recorded request, and checked against the
// prompt length the server logged for it).
//
//   cd tests/e2e && node --test agent-codex.test.mjs
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { chatTokens, installAgent, recordingProxy, requestLines, runAgent } from './lib/agents.mjs';
import { modelPath, startServer } from './lib/server.mjs';

const CODEX = '@openai/codex';
const CODEX_VERSION = '0.171.0';
const MODEL = 'tiny-qwen35';

/** Codex's Responses items and tools -> the chat body the server renders for them (the mapping
 *  of src/server/dialects/responses/responses_request.cpp: leading developer/system items merged by a blank line;
 *  namespace tools flattened; hosted tools left out). Messages and function calls only. */
function chatBodyOf(req) {
  const msgs = [];
  const items = req.input;
  let i = 0;
  const lead = [];
  while (i < items.length && items[i].type === 'message' && ['developer', 'system'].includes(items[i].role)) lead.push(items[i++]);
  const text = (c) => (typeof c === 'string' ? c : c.map((p) => p.text).join(''));
  const content = (c) => (typeof c === 'string' ? c : c.map((p) => ({ type: 'text', text: p.text })));
  if (req.instructions || lead.length > 1) {
    const parts = [...(req.instructions ? [req.instructions] : []), ...lead.map((it) => text(it.content))];
    msgs.push({ role: req.instructions ? 'system' : lead[0].role, content: parts.join('\n\n') });
  } else if (lead.length === 1) {
    msgs.push({ role: lead[0].role, content: content(lead[0].content) });
  }
  for (; i < items.length; i++) {
    const it = items[i];
    assert.ok(it.type === 'message' && it.role !== 'assistant', `chatBodyOf handles the first turn only, got ${it.type}`);
    msgs.push({ role: 'user', content: content(it.content) });
  }
  const tools = [];
  for (const t of req.tools ?? []) {
    const fns = t.type === 'function' ? [t] : t.type === 'namespace' ? t.tools.filter((x) => x.type === 'function') : [];
    for (const f of fns) {
      tools.push({ type: 'function', function: { name: f.name, ...(f.description ? { description: f.description } : {}), ...(f.parameters ? { parameters: f.parameters } : {}) } });
    }
  }
  return { messages: msgs, ...(tools.length ? { tools } : {}) };
}

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

describe('Codex CLI over /v1/responses [qwen35]', { timeout: 900_000 }, () => {
  let srv;
  let proxy;
  let codex;
  let home;
  let work;
  before(async () => {
    codex = codexBinary();
    if (codex.skip) return;
    srv = await startServer({ model: modelPath('qwen35'), name: 'agent-codex',
      args: ['--parallel', '2', '--ctx-size', '32768', '--n-predict', '24', '--log-level', 'debug', '--alias', MODEL] });
    proxy = await recordingProxy(srv.port);
    home = fs.mkdtempSync(path.join(os.tmpdir(), 'lineage-codex-home-'));
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'lineage-codex-work-'));
    fs.writeFileSync(path.join(work, 'README.md'), '# demo\nA tiny project for the Codex e2e test.\n');
  });
  after(async () => {
    await proxy?.close();
    await srv?.stopGracefully();
    for (const d of [home, work]) if (d) fs.rmSync(d, { recursive: true, force: true });
  });

  it('two sessions and a resumed turn restore their prefixes', async (t) => {
    if (codex.skip) {
      process.stdout.write(`# SKIP agent-codex: ${codex.skip}\n`);
      t.skip(codex.skip);
      return;
    }
    const env = { ...process.env, CODEX_HOME: home, LINEAGE_API_KEY: 'sk-lineage-e2e', NO_COLOR: '1' };
    delete env.OPENAI_API_KEY;
    delete env.OPENAI_BASE_URL;
    const flags = ['--skip-git-repo-check', '-C', work, '-s', 'read-only', '--color', 'never',
      '-c', 'model_provider="lineage"', '-c', `model="${MODEL}"`,
      '-c', 'model_providers.lineage.name="lineage"',
      '-c', `model_providers.lineage.base_url="http://127.0.0.1:${proxy.port}/v1"`,
      '-c', 'model_providers.lineage.wire_api="responses"',
      '-c', 'model_providers.lineage.env_key="LINEAGE_API_KEY"',
      '-c', 'approval_policy="never"', '-c', 'check_for_update_on_startup=false', '-c', 'analytics.enabled=false'];
    const posts = () => proxy.requests.filter((r) => r.method === 'POST' && r.path.startsWith('/v1/responses'));
    const runs = [];
    const session = async (args, name) => {
      const before = posts().length;
      const res = await runAgent(codex.bin, ['exec', ...args], { cwd: work, env, timeoutMs: 300_000 });
      const r = { code: res.code, signal: res.signal, out: res.stdout, err: res.stderr };
      runs.push({ name, ...r });
      t.diagnostic(`${name}: codex exit ${r.code ?? r.signal}; ${(r.err.trim().split('\n').filter((l) => /ERROR|error/.test(l)).at(-1) ?? 'no error line')}`);
      // Exit 0, or Codex's own handling of a response cut at --n-predict (random weights).
      assert.ok(r.code === 0 || /Incomplete response returned, reason: max_output_tokens/.test(r.err + r.out),
        `${name}: codex exited ${r.code ?? r.signal}:\n${r.err.slice(-3000)}\n${r.out.slice(-1000)}`);
      assert.ok(posts().length > before, `${name}: no /v1/responses request reached the server`);
      return posts().slice(before);
    };
    await session([...flags, 'List the files in this folder.'], 'session 1');
    const s2 = await session([...flags, 'What does the README say about this project?'], 'session 2');
    const resumed = await session([...flags, 'resume', '--last', 'Now summarise it in one line.'], 'resume');

    // The server's own lines for every /v1/responses request, in the order they finished.
    await new Promise((r) => setTimeout(r, 500));  // the log pipe may lag the last response
    const log = srv.log();
    const bad = posts().filter((r) => r.status !== 200).map((r) => `${r.method} ${r.path} -> ${r.status}`);
    assert.deepEqual(bad, [], 'no 4xx/5xx for /v1/responses');
    const lines = requestLines(log).filter((l) => l.dialect === 'responses');
    assert.ok(lines.every((l) => l.status === 200), 'every responses log line is a 200');
    assert.equal(lines.length, posts().length, 'one log line per recorded request');
    const at = (req) => lines[posts().indexOf(req)];

    // The second session's first request restores >= 95% of its prompt (the first session left
    // Codex's instructions + tools pinned as an anchor, and its own entries).
    const first2 = at(s2[0]);
    assert.equal(first2.prompt, (await chatTokens(srv, chatBodyOf(s2[0].body))).length, 'session 2 first prompt == its chat rendering');
    t.diagnostic(`server: ${lines.map((l) => `${l.cached}/${l.prompt}`).join(', ')}`);
    assert.ok(first2.cached >= 0.95 * first2.prompt, `session 2 restored ${first2.cached}/${first2.prompt}`);

    // The resumed turn: its input starts with the resumed session's last request's input, so it
    // shares at least that request's history (its prompt before the generation prompt).
    const q = s2.at(-1).body;
    const r0 = resumed[0].body;
    assert.deepEqual(r0.input.slice(0, q.input.length), q.input, 'the resumed request extends the session');
    assert.equal(at(s2.at(-1)).prompt, (await chatTokens(srv, chatBodyOf(q))).length);
    // The prompt without its assistant header: where the next turn's prompt parts from it, and
    // the restore point the hybrid model keeps there.
    const history = (await chatTokens(srv, chatBodyOf(q), false)).length;
    const res = at(resumed[0]);
    t.diagnostic(`resumed turn: cached ${res.cached} of ${res.prompt}, shared history ${history}`);
    assert.ok(res.cached >= history, `resumed turn restored ${res.cached} < the shared history ${history} of ${res.prompt}`);
  });
});
