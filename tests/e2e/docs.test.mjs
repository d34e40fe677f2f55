// docs/prompt-cache.md "Configuration" and "Security and failure model" against
// `lineage-server --help`: every row of their tables names a flag that --help lists with the
// same environment variable and default, and every cache, lineage, metrics, connection (http,
// max-uri/header/body), per-request work limit (max-tools/messages/content-parts/prompt-bytes,
// memory-trim) and API-key flag of --help has a row. So the operator guide cannot drift from
// the binary. And its table of llama-server's flags: every lineage flag of a row is in --help,
// every llama-server name of a row is accepted with the row's value (or refused, naming the
// flag, where the row says so). Needs only the binary (no model: an accepted command line gets
// as far as loading a model file that does not exist).
//
//   cd tests/e2e && node --test docs.test.mjs
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
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
    .map((h) => text.split(h)[1].split('\n## ')[0].split("\n### llama-server's flags")[0]).join('\n');
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

/** Rows of the guide's llama-server table: {llama: ['-np', '--parallel'], lineage: [...], value, refused}. */
function llamaRows() {
  const text = fs.readFileSync(GUIDE, 'utf8');
  const section = text.split("\n### llama-server's flags")[1].split('\n### ')[0];
  return section.split('\n').filter((l) => /^\| `-/.test(l)).map((l) => {
    const cells = l.split('|').map((c) => c.trim());
    const names = (cell) => [...cell.matchAll(/`(-[a-z0-9-]+)`/g)].map((m) => m[1]);
    const value = cells[3].match(/^`([^`]*)`$/)?.[1];
    return { row: l, llama: names(cells[1]), lineage: names(cells[2]), value, refused: /\*\*refused\*\*/.test(cells[4]) };
  });
}

describe("docs/prompt-cache.md llama-server's flags table", () => {
  const help = helpEntries();
  const rows = llamaRows();
  const MISSING = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'lineage-docs-')), 'missing.gguf');

  it('every lineage flag of the table is in --help', () => {
    assert.ok(rows.length >= 25, `only ${rows.length} rows found`);
    for (const r of rows) {
      assert.ok(r.lineage.length > 0, `no lineage flag in ${r.row}`);
      for (const f of r.lineage) assert.ok(help.some((e) => e.names.includes(f)), `${f} (${r.row}) is not in --help`);
    }
  });

  it('every llama-server name is accepted with its value, or refused naming it where the row says so', () => {
    for (const r of rows) {
      for (const name of r.llama) {
        const given = r.value === undefined ? [name] : [name, r.value];
        const model = name === '-m' || name === '--model' ? [] : ['-m', MISSING];
        const run = spawnSync(SERVER_BIN, [...model, ...given, '--cache-disk=false'], { encoding: 'utf8', timeout: 30_000 });
        const out = `${run.stdout}${run.stderr}`;
        const where = `${given.join(' ')} (${r.row})`;
        assert.equal(run.status, 1, `${where}: exit ${run.status} ${run.signal ?? ''}\n${out}`);
        if (r.refused) {
          assert.match(out, /run with --help for the list of flags/, `${where}: not refused at parse:\n${out}`);
          assert.ok(out.includes(name.replace(/^--no-/, '--')), `${where}: the refusal does not name ${name}:\n${out}`);
        } else {
          assert.doesNotMatch(out, /run with --help for the list of flags/, `${where}: refused:\n${out}`);
          assert.match(out, /model file not found/, `${where}: did not get as far as the model:\n${out}`);
        }
      }
    }
  });
});
