// Real coding-agent clients for the e2e tests (issue 11): each is installed once from the npm
// registry at a pinned version under the project's cache folder
// (${LINEAGE_CACHE:-~/.cache/lineage}/agents/<bin>-<version>/) and reused by every later run,
// so CI on a clean clone installs it on its first run only. A recording proxy sits between the
// client and lineage-server on 127.0.0.1 to keep the request bodies the client sent.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

export const CACHE_DIR = process.env.LINEAGE_CACHE || path.join(os.homedir(), '.cache/lineage');

/**
 * The path of `bin` of npm package `pkg@version`, installed under CACHE_DIR/agents when
 * missing. Returns {bin} or {skip: reason} when the registry cannot be reached (the only
 * reason to skip; any other failure throws).
 */
export function installAgent(pkg, version, bin) {
  const dir = path.join(CACHE_DIR, 'agents', `${bin}-${version}`);
  const exe = path.join(dir, 'node_modules', '.bin', bin);
  if (fs.existsSync(exe)) return { bin: exe };
  fs.mkdirSync(dir, { recursive: true });
  const r = spawnSync('npm', ['install', '--prefix', dir, '--no-audit', '--no-fund', '--save-exact', `${pkg}@${version}`],
    { encoding: 'utf8', timeout: 600_000 });
  if (r.status === 0 && fs.existsSync(exe)) return { bin: exe };
  const out = `${r.stdout}\n${r.stderr}`;
  if (/ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ECONNRESET|network|offline/i.test(out)) {
    return { skip: `cannot install ${pkg}@${version} from the npm registry (offline?): ${out.trim().split('\n').slice(-3).join(' | ')}` };
  }
  throw new Error(`npm install ${pkg}@${version} into ${dir} failed (${r.status ?? r.signal}):\n${out}`);
}

/**
 * A proxy on 127.0.0.1 that forwards every request to `target` (http://127.0.0.1:PORT) and
 * records {method, url, body} of each; `requests` is the list, `url` its base, close() stops it.
 */
export async function recordingProxy(target) {
  const requests = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      requests.push({ method: req.method, url: req.url, body: body.toString('utf8') });
      const up = http.request(`${target}${req.url}`, { method: req.method, headers: { ...req.headers, host: new URL(target).host } }, (ur) => {
        res.writeHead(ur.statusCode, ur.headers);
        ur.pipe(res);
      });
      up.on('error', (e) => { res.writeHead(502); res.end(String(e)); });
      up.end(body);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    requests,
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((resolve) => { server.closeAllConnections?.(); server.close(resolve); }),
  };
}
