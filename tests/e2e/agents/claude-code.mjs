// Claude Code (`@anthropic-ai/claude-code`, pinned) for the agent e2e tests: installed once with
// npm under the project's cache folder, ${LINEAGE_CACHE:-~/.cache/lineage}/agents/
// claude-code-<version>/, and reused by later runs (CI keeps that folder). The package's `claude`
// is a native binary that its postinstall copies from the platform's optional dependency
// (@anthropic-ai/claude-code-linux-x64 here).
// The install runs in a private folder that is renamed into place when `claude --version`
// answers, so a failed or concurrent install never leaves a half-installed agent behind.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const CLAUDE_CODE_VERSION = '2.1.332';

/** The project's cache folder for agents (as scripts/bootstrap's LINEAGE_CACHE). */
export function agentsDir() {
  const cache = process.env.LINEAGE_CACHE || path.join(os.homedir(), '.cache/lineage');
  return path.join(cache, 'agents');
}

function versionOf(bin) {
  const r = spawnSync(bin, ['--version'], { encoding: 'utf8', timeout: 60_000,
    env: { ...process.env, HOME: os.tmpdir(), DISABLE_AUTOUPDATER: '1', CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1' } });
  return r.status === 0 ? r.stdout.trim() : null;
}

/**
 * The path of the pinned `claude` binary, installing it first when missing.
 * Returns {bin} or {skip: reason} when npm cannot install the package (the reason carries
 * npm's own message, e.g. no access to the registry).
 */
export function ensureClaudeCode() {
  const dir = path.join(agentsDir(), `claude-code-${CLAUDE_CODE_VERSION}`);
  const bin = path.join(dir, 'node_modules/.bin/claude');
  if (fs.existsSync(bin) && versionOf(bin)?.startsWith(CLAUDE_CODE_VERSION)) return { bin };

  fs.mkdirSync(agentsDir(), { recursive: true });
  const tmp = `${dir}.tmp-${process.pid}`;
  fs.rmSync(tmp, { recursive: true, force: true });
  fs.mkdirSync(tmp);
  fs.writeFileSync(path.join(tmp, 'package.json'), JSON.stringify({
    name: 'lineage-agent-claude-code', private: true,
    dependencies: { '@anthropic-ai/claude-code': CLAUDE_CODE_VERSION },
  }, null, 2));
  process.stderr.write(`[agents] installing @anthropic-ai/claude-code@${CLAUDE_CODE_VERSION} into ${dir}\n`);
  const r = spawnSync('npm', ['install', '--no-audit', '--no-fund', '--save-exact', '--loglevel=error'],
    { cwd: tmp, encoding: 'utf8', timeout: 600_000 });
  const tmpBin = path.join(tmp, 'node_modules/.bin/claude');
  const got = r.status === 0 && fs.existsSync(tmpBin) ? versionOf(tmpBin) : null;
  if (!got?.startsWith(CLAUDE_CODE_VERSION)) {
    fs.rmSync(tmp, { recursive: true, force: true });
    const why = r.error ? r.error.message : `npm install exited ${r.status}: ${(r.stderr || r.stdout || '').trim().slice(-600)}`;
    return { skip: `cannot install @anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}: ` +
      (r.status === 0 ? `installed, but 'claude --version' did not answer ${CLAUDE_CODE_VERSION}` : why) };
  }
  fs.rmSync(dir, { recursive: true, force: true });
  try {
    fs.renameSync(tmp, dir);
  } catch (e) {
    // Another run installed it meanwhile: use theirs.
    fs.rmSync(tmp, { recursive: true, force: true });
    if (!fs.existsSync(bin)) throw e;
  }
  return { bin };
}

/**
 * The environment of a non-interactive Claude Code run against `baseUrl` (a lineage server on
 * 127.0.0.1): a private HOME (no user settings, sessions kept there for --continue), the API
 * key, every non-essential connection (telemetry, error reporting, auto-update, feedback) off,
 * and a proxy that does not exist for everything but 127.0.0.1, so that no request can leave
 * the machine even if one of those switches were ignored.
 */
export function claudeEnv({ baseUrl, home, apiKey = 'sk-lineage', maxOutputTokens = 64 }) {
  const env = {
    PATH: process.env.PATH,
    HOME: home,
    XDG_CONFIG_HOME: path.join(home, '.config'),
    ANTHROPIC_BASE_URL: baseUrl,
    ANTHROPIC_API_KEY: apiKey,  // sent as x-api-key (ANTHROPIC_AUTH_TOKEN would send a Bearer token)
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_TELEMETRY: '1',
    DISABLE_ERROR_REPORTING: '1',
    DISABLE_AUTOUPDATER: '1',
    DISABLE_BUG_COMMAND: '1',
    CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY: '1',
    CLAUDE_CODE_MAX_OUTPUT_TOKENS: String(maxOutputTokens),
    HTTPS_PROXY: 'http://127.0.0.1:9',
    HTTP_PROXY: 'http://127.0.0.1:9',
    NO_PROXY: '127.0.0.1,localhost',
    CI: '1',
  };
  return env;
}
