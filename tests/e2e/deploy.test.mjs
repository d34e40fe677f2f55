// deploy/: the Grafana dashboard and the Prometheus alert rules against a live GET /metrics.
//  - the dashboard is a Grafana dashboard JSON model (the fields Grafana's import reads: title,
//    uid, schemaVersion, templating with a Prometheus data source variable, panels with unique
//    ids, a type, a gridPos inside the 24-column grid and targets with unique refIds and a query)
//  - `promtool check rules` accepts the alert rules
//  - every series a panel, the instance variable or a rule queries is served by a live server
//    (histograms through their _bucket/_sum/_count), every label they group by is on that
//    series, and every label value they select on is a value the server exports
// So a renamed or removed metric breaks this test instead of a dashboard in production.
//
//   cd tests/e2e && node --test deploy.test.mjs
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { ARCHS, REPO_ROOT, modelPath, startServer } from './lib/server.mjs';

const DASHBOARD = path.join(REPO_ROOT, 'deploy/grafana/lineage-dashboard.json');
const RULES = path.join(REPO_ROOT, 'deploy/prometheus/lineage-alerts.yml');

/** Every PromQL expression of the dashboard (panels' targets and the instance variable). */
function dashboardExprs(d) {
  const exprs = [];
  for (const p of d.panels) for (const t of p.targets ?? []) exprs.push(t.expr);
  for (const v of d.templating.list) if (v.type === 'query') exprs.push(v.query.query ?? v.query);
  return exprs;
}

/** The `expr:` of every rule (block scalars included) of the rules file. */
function ruleExprs(text) {
  const exprs = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const m = lines[i].match(/^(\s*)expr:\s*(.*)$/);
    if (!m) continue;
    if (m[2] !== '|') {
      exprs.push(m[2]);
      continue;
    }
    const body = [];
    while (i + 1 < lines.length && (lines[i + 1].trim() === '' || lines[i + 1].search(/\S/) > m[1].length)) body.push(lines[++i]);
    exprs.push(body.join('\n'));
  }
  return exprs;
}

/** /metrics text -> {types: name -> type, samples: name -> [{labels}]}. */
function parseExposition(text) {
  const types = new Map();
  const samples = new Map();
  for (const line of text.split('\n')) {
    const t = line.match(/^# TYPE (\S+) (\S+)$/);
    if (t) types.set(t[1], t[2]);
    const s = line.match(/^([a-z_:][a-z0-9_:]*)(?:\{(.*)\})? \S+$/);
    if (s) {
      const labels = Object.fromEntries([...(s[2] ?? '').matchAll(/([a-z_]+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]));
      samples.set(s[1], [...(samples.get(s[1]) ?? []), labels]);
    }
  }
  return { types, samples };
}

/** The family a queried series belongs to (a histogram's _bucket/_sum/_count). */
function family(name, types) {
  if (types.has(name)) return name;
  const base = name.replace(/_(bucket|sum|count)$/, '');
  return types.get(base) === 'histogram' ? base : null;
}

describe('deploy/: Grafana dashboard and Prometheus alert rules', { timeout: 120_000 }, () => {
  let srv;
  let live;
  before(async () => {
    srv = await startServer({ model: modelPath(ARCHS[0]), name: 'deploy', args: ['--metrics'] });
    // One request, so that the per-request series have samples too.
    const r = await srv.post('/v1/chat/completions', { messages: [{ role: 'user', content: 'Hello there.' }], max_tokens: 2 });
    assert.equal(r.status, 200, r.text);
    const m = await srv.get('/metrics');
    assert.equal(m.status, 200, m.text);
    live = parseExposition(m.text);
  });
  after(async () => { await srv?.stopGracefully(); });

  it('the dashboard is a Grafana dashboard JSON model', () => {
    const d = JSON.parse(fs.readFileSync(DASHBOARD, 'utf8'));
    assert.equal(typeof d.title, 'string');
    assert.match(d.uid, /^[a-zA-Z0-9_-]{1,40}$/);
    assert.ok(Number.isInteger(d.schemaVersion) && d.schemaVersion >= 36, `schemaVersion ${d.schemaVersion}`);
    const ds = d.templating.list.find((v) => v.type === 'datasource');
    assert.equal(ds?.query, 'prometheus', 'a Prometheus data source variable');
    const ids = new Set();
    const refPanels = d.panels.filter((p) => p.type !== 'row');
    assert.ok(refPanels.length >= 10, `${refPanels.length} panels`);
    for (const p of d.panels) {
      assert.ok(Number.isInteger(p.id) && !ids.has(p.id), `panel id ${p.id} unique`);
      ids.add(p.id);
      assert.ok(['row', 'timeseries', 'stat'].includes(p.type), `${p.title}: type ${p.type}`);
      const g = p.gridPos;
      for (const k of ['h', 'w', 'x', 'y']) assert.ok(Number.isInteger(g[k]) && g[k] >= 0, `${p.title}: gridPos.${k}`);
      assert.ok(g.x + g.w <= 24, `${p.title}: inside the 24-column grid`);
      if (p.type === 'row') continue;
      assert.equal(p.datasource.uid, `\${${ds.name}}`, `${p.title}: queries the data source variable`);
      assert.ok(p.targets.length >= 1, `${p.title}: has a query`);
      const refs = p.targets.map((t) => t.refId);
      assert.equal(new Set(refs).size, refs.length, `${p.title}: refIds unique`);
      for (const t of p.targets) assert.ok(t.expr.includes('lineage_'), `${p.title}: ${t.expr}`);
    }
    // No two panels overlap on the grid.
    const cells = new Set();
    for (const p of d.panels) {
      for (let x = p.gridPos.x; x < p.gridPos.x + p.gridPos.w; x++) {
        for (let y = p.gridPos.y; y < p.gridPos.y + p.gridPos.h; y++) {
          assert.ok(!cells.has(`${x},${y}`), `${p.title} overlaps another panel at ${x},${y}`);
          cells.add(`${x},${y}`);
        }
      }
    }
  });

  it('promtool check rules accepts the alert rules', () => {
    const r = spawnSync('promtool', ['check', 'rules', RULES], { encoding: 'utf8' });
    if (r.error?.code === 'ENOENT') throw new Error('promtool not found: install the Debian package prometheus (scripts/bootstrap does)');
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /SUCCESS: \d+ rules found/);
  });

  it('every series, grouping label and label value queried is one the server exports', () => {
    const d = JSON.parse(fs.readFileSync(DASHBOARD, 'utf8'));
    const exprs = [...dashboardExprs(d), ...ruleExprs(fs.readFileSync(RULES, 'utf8'))];
    assert.ok(exprs.length >= 30, `${exprs.length} queries found`);
    const queried = new Set();
    for (const e of exprs) {
      for (const [name] of e.matchAll(/lineage_[a-z0-9_]+/g)) {
        const fam = family(name, live.types);
        assert.ok(fam, `${name} (in ${e.trim().slice(0, 80)}...) is not served by GET /metrics`);
        queried.add(fam);
      }
      // sum by (L, ...) (f(series...)): the series carries each grouping label.
      for (const m of e.matchAll(/by \(([a-z_, ]+)\)\s*\((?:[a-z_]+\()*\s*(lineage_[a-z0-9_]+)/g)) {
        const rows = live.samples.get(m[2]) ?? [];
        for (const label of m[1].split(',').map((x) => x.trim())) {
          if (label === 'instance') continue;  // added by the scrape
          assert.ok(rows.some((l) => label in l), `${m[2]} has no label ${label}`);
        }
      }
      // series{label="value"}: a value the server exports.
      for (const m of e.matchAll(/(lineage_[a-z0-9_]+)\{([^}]*)\}/g)) {
        for (const [, label, value] of m[2].matchAll(/([a-z_]+)="([^"$]*)"/g)) {
          const rows = live.samples.get(m[1]) ?? live.samples.get(`${m[1]}`) ?? [];
          assert.ok(rows.some((l) => l[label] === value), `${m[1]}{${label}="${value}"} is not exported`);
        }
      }
    }
    // The dashboard covers what an operator watches: hits, misses by cause, TTFT, completion
    // tokens, tier bytes against the RAM budget, evictions, damaged disk files, Redis write
    // failures, warm-ups.
    for (const name of ['lineage_prompt_cache_hits_total', 'lineage_prompt_cache_misses_by_cause_total',
      'lineage_time_to_first_token_seconds', 'lineage_completion_tokens_total', 'lineage_prompt_cache_tier_bytes',
      'lineage_prompt_cache_ram_budget_bytes', 'lineage_prompt_cache_evictions_total',
      'lineage_prompt_cache_disk_damaged_total', 'lineage_prompt_cache_redis_write_failures_total',
      'lineage_prompt_cache_warmups_total']) {
      assert.ok(queried.has(name), `nothing queries ${name}`);
    }
  });
});
