// docs/prompt-cache.md "Configuration" and "Security and failure model" against
// `lineage-server --help`: every row of their tables names a flag that --help lists with the
// same environment variable and default, and every cache, lineage, metrics, connection (http,
// max-uri/header/body), per-request work limit (max-tools/messages/content-parts/prompt-bytes,
// memory-trim) and API-key flag of --help has a row. So the operator guide cannot drift from
// the binary. Needs only the binary (no model).
//
//   cd tests/e2e && node --test docs.test.mjs
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';

import { REPO_ROOT, SERVER_BIN } from './lib/server.mjs';

const GUIDE = path.join(REPO_ROOT, 'docs/prompt-cache.md');

/** --help entries: {names: ['--x', ...], env, def}. An entry starts on a line "  -..." and
 *  may continue on the next lines (CLI11 puts a long name's description on its own line). */
function helpEntries() {
  const r = spawnSync(SERVER_BIN, ['--help'], { encoding: 'utf8' });
  assert.equal(r.status, 0, `${SERVER_BIN} --help failed: ${r.stderr}`);
  const entries = [];
  let cur = null;
  for (const line of r.stdout.split('\n')) {
    if (/^ {2}-/.test(line)) {
      cur = { text: line };
      entries.push(cur);
    } else if (cur && /^ {3,}\S/.test(line)) {
      cur.text += ` ${line.trim()}`;
    } else {
      cur = null;
    }
  }
  return entries.map(({ text }) => {
    const head = text.trim().split(/\s{2,}/)[0];
    const names = [...head.matchAll(/--[a-z0-9-]+/g)].map((m) => m[0]);
    const m = text.match(/\[env (\S+); default ([^\]]+)\]/);
    return { names, env: m?.[1], def: m?.[2] };
  });
}

/** Rows of the guide's configuration table: {flags, env, def}. */
function guideRows() {
  const text = fs.readFileSync(GUIDE, 'utf8');
  // The configuration table, and those of "Security and failure model" (connections, keys).
  const section = ['\n## Configuration', '\n## Security and failure model']
    .map((h) => text.split(h)[1].split('\n## ')[0]).join('\n');
  return section.split('\n').filter((l) => l.startsWith('| `--')).map((l) => {
    const cells = l.split('|').map((c) => c.trim());
    return {
      row: l,
      flags: [...cells[1].matchAll(/`(--[a-z0-9-]+)/g)].map((m) => m[1]),
      env: cells[2].replace(/`/g, ''),
      def: cells[3],
    };
  });
}

describe('docs/prompt-cache.md configuration table', () => {
  const help = helpEntries();
  const rows = guideRows();

  it('every row matches --help (flag, variable, default)', () => {
    assert.ok(rows.length >= 15, `only ${rows.length} rows found in ${GUIDE}`);
    for (const row of rows) {
      const entry = help.find((e) => row.flags.some((f) => e.names.includes(f)));
      assert.ok(entry, `${row.flags.join(' / ')} is in the guide but not in --help`);
      for (const f of row.flags) assert.ok(entry.names.includes(f), `${f}: not a name of ${entry.names.join(',')}`);
      assert.equal(row.env, entry.env, `${row.flags[0]}: variable`);
      assert.equal(row.def, entry.def, `${row.flags[0]}: default`);
    }
  });

  it('every cache, lineage, metrics, connection and key flag of --help has a row', () => {
    const covered = /cache|lineage|metrics|http|api-key|max-uri|max-header|max-body|max-tools|max-messages|max-content|max-prompt|memory-trim/;
    for (const e of help.filter((x) => x.names.some((n) => covered.test(n)))) {
      assert.ok(rows.some((r) => r.flags.some((f) => e.names.includes(f))),
        `${e.names.join(',')} [env ${e.env}; default ${e.def}] is missing from ${GUIDE}`);
    }
  });
});
