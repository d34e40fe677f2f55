// Real chat-completions coding agents against lineage-server (issue 11 "Done when"): pi
// (@mariozechner/pi-coding-agent) and opencode (opencode-ai), installed from npm at pinned
// versions (tests/e2e/lib/agents.mjs), driven non-interactively on loopback (no traffic leaves
// 127.0.0.1: a recording proxy sits between the agent and the server), on the tiny hybrid and
// dense models. Per agent: two sessions in one project folder, then a resumed turn of the
// second session. Asserted:
//  - every agent run exits 0 (the weights are random: the replies are noise the agents print);
//  - every request the agent made got HTTP 200 (no 4xx/5xx);
//  - the second session's first agent request (the first with tools; opencode sends a short
//    title request first) restores >= 95% of its prompt: the system prompt + tools an agent
//    sends every session is served from the cache (the anchor);
//  - the resumed turn restores at least the prefix it shares with the previous agent request,
//    computed here from the recorded bodies with /apply-template + /tokenize: on the dense model
//    the whole shared prefix (one token less when it is the whole prompt); on the hybrid model
//    the restore point at or before it, the previous prompt's history boundary (its tokens
//    without the assistant header, /apply-template with add_generation_prompt false);
//  - a new session in another project folder (the agents write the folder, and pi the date,
//    into their system prompts) restores >= the prefix its first agent request shares with the
//    first folder's minus 64 tokens (issue 14: the anchor's ladder on the hybrid model).
//
//   cd tests/e2e && node --test agent-chat.test.mjs
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { chatTokens, installAgent, lcp, recordingProxy, requestLines, runAgent } from './lib/agents.mjs';
import { ARCHS, modelPath, startServer } from './lib/server.mjs';

const PI = { pkg: '@mariozechner/pi-coding-agent', version: '0.73.1', bin: 'pi' };
const OPENCODE = { pkg: 'opencode-ai', version: '1.18.33', bin: 'opencode' };
const MAX_OUTPUT = 32;

/** pi: a custom OpenAI-compatible provider in $HOME/.pi/agent/models.json; -p prints and
 *  exits; -c continues the folder's latest session. */
const piAgent = {
  name: 'pi',
  spec: PI,
  setup(home, baseUrl) {
    fs.mkdirSync(path.join(home, '.pi/agent'), { recursive: true });
    fs.writeFileSync(path.join(home, '.pi/agent/models.json'), JSON.stringify({
      providers: { lineage: { baseUrl, api: 'openai-completions', apiKey: 'sk-none',
        compat: { supportsDeveloperRole: false, supportsReasoningEffort: false },
        models: [{ id: 'tiny', maxTokens: MAX_OUTPUT }] } },
    }));
    return { PI_OFFLINE: '1', PI_TELEMETRY: '0' };
  },
  args: (prompt, resume) => ['--provider', 'lineage', '--model', 'tiny', ...(resume ? ['-c'] : []), '-p', prompt],
};

/** opencode: the provider through OPENCODE_CONFIG_CONTENT (@ai-sdk/openai-compatible, bundled);
 *  `run` prints and exits; -c continues the latest session; no models.dev fetch, no updates,
 *  no LSP downloads, no sharing. */
const opencodeAgent = {
  name: 'opencode',
  spec: OPENCODE,
  setup(home, baseUrl) {
    return {
      OPENCODE_CONFIG_CONTENT: JSON.stringify({
        autoupdate: false, share: 'disabled',
        provider: { lineage: { npm: '@ai-sdk/openai-compatible', name: 'lineage',
          options: { baseURL: baseUrl, apiKey: 'sk-none' },
          models: { tiny: { name: 'tiny', limit: { context: 16384, output: MAX_OUTPUT } } } } },
      }),
      OPENCODE_DISABLE_MODELS_FETCH: '1', OPENCODE_DISABLE_AUTOUPDATE: '1', OPENCODE_DISABLE_LSP_DOWNLOAD: '1',
      OPENCODE_DISABLE_DEFAULT_PLUGINS: '1', OPENCODE_DISABLE_SHARE: '1',
    };
  },
  args: (prompt, resume) => ['run', '--model', 'lineage/tiny', ...(resume ? ['-c'] : []), prompt],
};

for (const agent of [piAgent, opencodeAgent]) {
  for (const arch of ARCHS) {
    describe(`${agent.name} against lineage-server [${arch}]`, { timeout: 900_000 }, () => {
      let srv;
      let proxy;
      let bin;
      let work;
      let env;
      let family;
      const runs = [];  // {result, requests: the recorded requests of that run}

      before(async () => {
        bin = installAgent(agent.spec.pkg, agent.spec.version, agent.spec.bin);
        srv = await startServer({ model: modelPath(arch), name: `agent-${agent.name}-${arch}`,
          args: ['--parallel', '2', '--ctx-size', '16384'] });
        family = (await srv.get('/v1/models')).json.data[0].meta.family;
        proxy = await recordingProxy(srv.port);
        work = fs.mkdtempSync(path.join(os.tmpdir(), `lineage-agent-${agent.name}-`));
        const home = path.join(work, 'home');
        const project = path.join(work, 'project');
        fs.mkdirSync(home, { recursive: true });
        fs.mkdirSync(project, { recursive: true });
        fs.writeFileSync(path.join(project, 'README.md'), '# demo\n\nA tiny project for the agent test.\n');
        fs.writeFileSync(path.join(project, 'main.py'), 'print("hello")\n');
        const baseUrl = `http://127.0.0.1:${proxy.port}/v1`;
        env = { PATH: process.env.PATH, HOME: home, XDG_CONFIG_HOME: path.join(home, '.config'),
          XDG_DATA_HOME: path.join(home, '.local/share'), XDG_CACHE_HOME: path.join(home, '.cache'),
          XDG_STATE_HOME: path.join(home, '.local/state'), TERM: 'dumb', NO_COLOR: '1', CI: '1',
          ...agent.setup(home, baseUrl) };
        // Another project, in a folder whose path differs from the first one's.
        const other = path.join(work, 'another-project-folder');
        fs.mkdirSync(other, { recursive: true });
        fs.writeFileSync(path.join(other, 'README.md'), '# other\n\nAnother tiny project.\n');
        const turns = [['List the files in this project.', false, project], ['What does main.py print?', false, project],
          ['Now add a test for it.', true, project], ['List the files in this project.', false, other]];
        for (const [prompt, resume, cwd] of turns) {
          const from = proxy.requests.length;
          const result = await runAgent(bin, agent.args(prompt, resume), { cwd, env });
          runs.push({ result, requests: proxy.requests.slice(from) });
        }
      });
      after(async () => {
        await proxy?.close();
        await srv?.stopGracefully();
        if (work) fs.rmSync(work, { recursive: true, force: true });
      });

      const chats = (run) => run.requests.filter((r) => r.method === 'POST' && /\/chat\/completions$/.test(r.path));
      const agentRequest = (run) => chats(run).find((r) => Array.isArray(r.body?.tools) && r.body.tools.length > 0);
      /** The server's log line of a recorded request: the first unclaimed one with its prompt length. */
      const claimed = new Set();
      async function served(rec) {
        const n = (await chatTokens(srv, rec.body)).length;
        const line = requestLines(srv.log()).find((l) => l.prompt === n && !claimed.has(l.id));
        assert.ok(line, `no server log line with prompt=${n}:\n${srv.logTail(20)}`);
        claimed.add(line.id);
        return line;
      }

      it('every run exits 0 and every request got HTTP 200', () => {
        for (const [i, { result, requests }] of runs.entries()) {
          assert.equal(result.code, 0, `run ${i + 1} exited ${result.code ?? result.signal}:\n` +
            `${result.stdout.slice(-2000)}\n${result.stderr.slice(-2000)}`);
          assert.ok(chats({ requests }).length > 0, `run ${i + 1} sent no chat completion`);
          for (const r of requests) assert.equal(r.status, 200, `run ${i + 1}: ${r.method} ${r.path} -> ${r.status}`);
        }
      });

      it("the second session's first agent request restores >= 95% of its prompt", async (t) => {
        const first = agentRequest(runs[0]);
        const second = agentRequest(runs[1]);
        assert.ok(first && second, 'each session must send a request with tools');
        await served(first);
        const line = await served(second);
        t.diagnostic(`${agent.name} [${arch}] second session: cached ${line.cached} of ${line.prompt}`);
        assert.ok(line.cached >= 0.95 * line.prompt,
          `second session: cached ${line.cached} of ${line.prompt} (< 95%)`);
      });

      it('the resumed turn restores at least the prefix it shares with the previous turn', async (t) => {
        const prev = chats(runs[1]).filter((r) => r.body?.tools?.length).at(-1);
        const resumed = agentRequest(runs[2]);
        assert.ok(prev && resumed, 'the resumed run must send a request with tools');
        const prevTokens = await chatTokens(srv, prev.body);
        const tokens = await chatTokens(srv, resumed.body);
        const shared = lcp(prevTokens, tokens);
        const line = await served(resumed);
        assert.equal(line.prompt, tokens.length);
        let want;
        if (family === 'dense') {
          want = Math.min(shared, tokens.length - 1);
        } else {
          want = (await chatTokens(srv, prev.body, false)).length;  // the history boundary
          assert.ok(want <= shared, `history boundary ${want} beyond the shared prefix ${shared}`);
        }
        t.diagnostic(`${agent.name} [${arch}] resumed turn: cached ${line.cached} of ${tokens.length}, shared ${shared}, want >= ${want}`);
        assert.ok(want > 0.5 * tokens.length, `the resumed turn must share most of its prompt (${shared} of ${tokens.length})`);
        assert.ok(line.cached >= want,
          `resumed turn: cached ${line.cached}, shared prefix ${shared}, want >= ${want} (${family}) of ${tokens.length}`);
      });

      it('a new session in another folder restores >= the prefix it shares with the first folder minus 64', async (t) => {
        const first = agentRequest(runs[0]);
        const moved = agentRequest(runs[3]);
        assert.ok(first && moved, 'each session must send a request with tools');
        const a = await chatTokens(srv, first.body);
        const b = await chatTokens(srv, moved.body);
        const shared = lcp(a, b);
        const line = await served(moved);
        assert.equal(line.prompt, b.length);
        t.diagnostic(`${agent.name} [${arch}] another folder: cached ${line.cached} of ${b.length}, shared ${shared}`);
        // The folder really changes the system prompt (else this checks nothing new), and most of
        // the prompt is still shared.
        assert.ok(shared < b.length - 16, `the other folder's prompt shares ${shared} of ${b.length}: no variation`);
        assert.ok(shared > 0.5 * b.length, `the other folder's prompt shares only ${shared} of ${b.length}`);
        assert.ok(line.cached >= shared - 64,
          `another folder: cached ${line.cached}, shared prefix ${shared}, want >= ${shared - 64} (${family})`);
      });
    });
  }
}
