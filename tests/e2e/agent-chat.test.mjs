// Real chat-completions coding agents against lineage-server: pi (@mariozechner/pi-coding-agent),
// opencode (opencode-ai), qwen-code (@qwen-code/qwen-code) and continue's CLI (@continuedev/cli),
// installed from npm at pinned versions (tests/e2e/lib/agents.mjs), driven non-interactively on
// loopback (no traffic leaves 127.0.0.1: a recording proxy sits between the agent and the
// server), on the tiny hybrid and dense models. Per agent: two sessions in one project folder,
// then a resumed turn of the second session, then a new session in another folder. Asserted:
//  - every agent run exits 0 (the weights are random: the replies are noise the agents print);
//  - every request the agent made got HTTP 200 (no 4xx/5xx);
//  - the second session's first agent request (the first with tools; opencode sends a short
//    title request first) restores >= 95% of its prompt: the system prompt + tools an agent
//    sends every session is served from the cache (the anchor);
//  - the resumed turn restores at least the prefix it shares with the previous agent request
//    (the last one with the agent's own tools, not a subagent's), computed here from the
//    recorded bodies with /apply-template + /tokenize: on the dense model the whole shared
//    prefix (one token less when it is the whole prompt); on the hybrid model the restore point
//    at or before it, the previous prompt's history boundary (its tokens without the assistant
//    header, /apply-template with add_generation_prompt false), or for qwen-code, whose resumed
//    prompt parts before that boundary, the shared prefix minus 64 tokens;
//  - a new session in another project folder (the agents write the folder, and pi the date,
//    into their prompts: qwen-code into its system prompt's memory paths and first user message,
//    continue into its system prompt and its Bash tool's description) restores the prefix its
//    first agent request shares with the first folder's: all of it on the dense model, all but
//    at most 64 tokens on the hybrid model (the anchor's ladder, whose rungs sit right before each
//    absolute path and date of the system prompt and tools as well: --cache-ladder-volatile-rungs;
//    docs/architecture.md "The anchor ladder").
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
const QWEN_CODE = { pkg: '@qwen-code/qwen-code', version: '0.24.4', bin: 'qwen' };
const CONTINUE = { pkg: '@continuedev/cli', version: '1.5.47', bin: 'cn' };
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

/** qwen-code: the `openai` auth type (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL), chosen by
 *  security.auth.selectedType in $HOME/.qwen/settings.json (else it asks for /auth); -p runs one
 *  prompt headless and exits; -c continues the folder's latest session. It sends no max_tokens
 *  unless QWEN_CODE_MAX_OUTPUT_TOKENS is set (and retries a length-cut reply with a larger limit).
 *  No update check, usage statistics, telemetry or auto title. Its managed memory stays on (the
 *  default): the system prompt names the memory folders, whose paths hold the project folder,
 *  and after each session a background extraction subagent (its own system prompt and tools)
 *  sends its requests, here capped at one (memory.agentMaxTurns; consolidation and skill review
 *  off). It also writes the folder into the environment context at the head of the first user
 *  message, and puts a date reminder before the user's text of each turn, which it leaves out of
 *  the history it stores: a resumed turn parts from the previous request inside its last user
 *  message, ~60 tokens before its end. */
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
    }));
    return { OPENAI_BASE_URL: baseUrl, OPENAI_API_KEY: 'sk-none', OPENAI_MODEL: 'tiny',
      QWEN_CODE_MAX_OUTPUT_TOKENS: String(MAX_OUTPUT), QWEN_USAGE_STATISTICS_ENABLED: '0',
      QWEN_TELEMETRY_ENABLED: '0', QWEN_DISABLE_AUTO_TITLE: '1' };
  },
  args: (prompt, resume) => [...(resume ? ['-c'] : []), '-p', prompt],
  resumePartsInLastUser: true,
};

/** continue (cn): a model with `provider: openai` and `apiBase` in $HOME/.continue/config.yaml
 *  (what cn reads when no --config is given; no hub login); -p prints and exits; --resume
 *  continues the latest session (the newest in ~/.continue/sessions, whatever its folder). No
 *  telemetry (CONTINUE_CLI_ENABLE_TELEMETRY=0), no self-update (autoUpdateCli false in
 *  ~/.continue/index/globalContext.json). cn 1.5.47 fetches https://api.continue.dev/cn/info (the
 *  latest version, with the machine id) when its version module loads, with no switch: a preloaded
 *  fetch wrapper makes that one host fail as it does offline, so no traffic leaves 127.0.0.1. It
 *  writes the folder into its system prompt and into its Bash tool's description. */
const CONTINUE_OFFLINE = "const f = globalThis.fetch; globalThis.fetch = (u, o) => new URL(String(u?.url ?? u)).hostname === " +
  "'api.continue.dev' ? Promise.reject(new TypeError('fetch failed: offline test')) : f(u, o);";
const continueAgent = {
  name: 'continue',
  spec: CONTINUE,
  setup(home, baseUrl) {
    fs.mkdirSync(path.join(home, '.continue/index'), { recursive: true });
    fs.writeFileSync(path.join(home, '.continue/index/globalContext.json'), JSON.stringify({ autoUpdateCli: false }));
    fs.writeFileSync(path.join(home, '.continue/config.yaml'), [
      'name: lineage', 'version: 1.0.0', 'schema: v1', 'models:',
      '  - name: tiny', '    provider: openai', '    model: tiny', `    apiBase: ${baseUrl}`, '    apiKey: sk-none',
      '    roles: [chat, edit, apply]', '    defaultCompletionOptions:', `      maxTokens: ${MAX_OUTPUT}`,
      '      contextLength: 16384', ''].join('\n'));
    return { CONTINUE_CLI_ENABLE_TELEMETRY: '0', CONTINUE_METRICS_ENABLED: '0', FORCE_NO_TTY: '1',
      NODE_OPTIONS: `--import=data:text/javascript,${encodeURIComponent(CONTINUE_OFFLINE)}` };
  },
  args: (prompt, resume) => ['-p', ...(resume ? ['--resume'] : []), prompt],
  folderInTools: true,
};

/** Server gaps measured on the hybrid model and not fixed yet: the check runs and reports (node:test
 *  `todo`: a failure is listed, not counted), so that the day the server restores what it must the
 *  todo is removed here. Each names what the decision trace showed. */
const KNOWN_GAPS = {
  // (qwen-code's second session restored only its first user message's start, 11,088 of 13,308
  // shared tokens: the ~2.2k-token context block held no restore point; the pass-end message
  // rungs, --cache-message-pass-rungs, closed it.)
  'qwen-code': {
    resume: 'hybrid: the resumed prompt parts at 13246, inside the first user message (its date line); the nearest ' +
      'restore point is the pass-end message rung at 13130, 116 tokens before it, where the check wants 64',
  },
};
function knownGap(agent, arch, check) {
  const why = arch !== 'qwen3' ? KNOWN_GAPS[agent.name]?.[check] : undefined;  // the test families: qwen3 is the dense one
  return why ? { todo: `known server gap, ${why}` } : {};
}

for (const agent of [piAgent, opencodeAgent, qwenCodeAgent, continueAgent]) {
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
      /** The agent's own turns in a run: the requests with its first agent request's tools (not a
       *  subagent's, such as qwen-code's memory extraction). */
      const toolNames = (r) => r.body.tools.map((t) => t.function?.name ?? t.name).join(',');
      const agentTurns = (run) => {
        const first = agentRequest(run);
        return first ? chats(run).filter((r) => r.body?.tools?.length && toolNames(r) === toolNames(first)) : [];
      };
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

      it("the second session's first agent request restores >= 95% of its prompt", knownGap(agent, arch, 'second'), async (t) => {
        const first = agentRequest(runs[0]);
        const second = agentRequest(runs[1]);
        assert.ok(first && second, 'each session must send a request with tools');
        await served(first);
        const line = await served(second);
        t.diagnostic(`${agent.name} [${arch}] second session: cached ${line.cached} of ${line.prompt}`);
        assert.ok(line.cached >= 0.95 * line.prompt,
          `second session: cached ${line.cached} of ${line.prompt} (< 95%)`);
      });

      it('the resumed turn restores at least the prefix it shares with the previous turn', knownGap(agent, arch, 'resume'), async (t) => {
        const prev = agentTurns(runs[1]).at(-1);
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
          if (agent.resumePartsInLastUser && want > shared) {
            // qwen-code: the resumed prompt parts inside the previous request's last user message
            // (at the date reminder it does not store), before the history boundary: the restore point
            // before the parting point, with the 64 tokens a new session in another folder gets.
            want = shared - 64;
          }
          assert.ok(want <= shared, `history boundary ${want} beyond the shared prefix ${shared}`);
        }
        t.diagnostic(`${agent.name} [${arch}] resumed turn: cached ${line.cached} of ${tokens.length}, shared ${shared}, want >= ${want}`);
        assert.ok(want > 0.5 * tokens.length, `the resumed turn must share most of its prompt (${shared} of ${tokens.length})`);
        assert.ok(line.cached >= want,
          `resumed turn: cached ${line.cached}, shared prefix ${shared}, want >= ${want} (${family}) of ${tokens.length}`);
      });

      it('a new session in another folder restores >= the prefix it shares with the first folder minus 64', knownGap(agent, arch, 'folder'), async (t) => {
        const first = agentRequest(runs[0]);
        const moved = agentRequest(runs[3]);
        assert.ok(first && moved, 'each session must send a request with tools');
        const a = await chatTokens(srv, first.body);
        const b = await chatTokens(srv, moved.body);
        const shared = lcp(a, b);
        const line = await served(moved);
        assert.equal(line.prompt, b.length);
        t.diagnostic(`${agent.name} [${arch}] another folder: cached ${line.cached} of ${b.length}, shared ${shared}`);
        // The folder really changes the prompt (else this checks nothing new), and most of the
        // prompt is still shared; not for continue, which writes the folder into its third tool's
        // description and the first third of its system prompt (~210 of ~1550 tokens shared): there
        // the shared prefix must only be long enough for the check below to mean something.
        assert.ok(shared < b.length - 16, `the other folder's prompt shares ${shared} of ${b.length}: no variation`);
        if (agent.folderInTools) {
          assert.ok(shared > 128, `the other folder's prompt shares only ${shared} of ${b.length}`);
        } else {
          assert.ok(shared > 0.5 * b.length, `the other folder's prompt shares only ${shared} of ${b.length}`);
        }
        // The dense model restores the whole shared prefix, the hybrid model the restore point at
        // most 64 tokens before it (the anchor's ladder).
        const want = family === 'dense' ? Math.min(shared, b.length - 1) : shared - 64;
        assert.ok(line.cached >= want,
          `another folder: cached ${line.cached}, shared prefix ${shared}, want >= ${want} (${family})`);
      });
    });
  }
}
