#!/usr/bin/env node
// First sight of a system prompt (issue 54; docs/benchmarks/README.md "Ladder jobs"): how long the
// first request on each of the trace's personas takes to prefill, lineage-server with its defaults
// against the same build splitting at its ladder rungs (--cache-ladder-defer=false), the same build
// with no split at all (--lineage=false: exact mode, whole-prompt snapshots only) and llama-server.
// Each request is the persona's system text and tools (tools/bench/personas.mjs) and a short user
// message, max_tokens 1, on an empty cache (POST /v1/cache/reset before each on lineage-server;
// cache_prompt false on llama-server), the personas in turn, --repeats rounds; the servers are
// started one at a time (the others stopped), --parallel 1.
//
//   node tools/bench/first_sight.mjs [--out build/bench/first-sight] [--repeats 3] [--threads 2]
//     [--model build/models/bench-qwen35.gguf] [--server build/bin/lineage-server]
//     [--llama-server PATH (default: the engine build's, when present)]
//     [--configs lineage,lineage-split-rungs,lineage-no-split,llama-server (the default; also
//      lineage-repack, lineage-no-split-repack and llama-server-no-repack: llama.cpp's extra CPU
//      buffer types, on by default in both servers since 208249f, so that lineage-repack is now
//      lineage with its defaults; before, lineage-server left them off)]
//
// Prints, per configuration, the median of the server's prefill time (timings.prompt_ms) and of
// the client's time to the reply, the passes and splits of lineage-server's prefill
// (timings.prefill_passes, prefill_splits), and each median as a ratio to the no-split build's
// and to llama-server's; writes OUT/first_sight.json with every run.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

import { ServerProc, freePort, postJson } from './cluster.mjs';
import { PERSONAS, personaPrompt } from './personas.mjs';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');
const { values: opt } = parseArgs({
  options: {
    out: { type: 'string', default: path.join(ROOT, 'build/bench/first-sight') },
    repeats: { type: 'string', default: '3' },
    threads: { type: 'string', default: '2' },
    model: { type: 'string', default: path.join(ROOT, 'build/models/bench-qwen35.gguf') },
    server: { type: 'string', default: path.join(ROOT, 'build/bin/lineage-server') },
    'llama-server': { type: 'string' },
    configs: { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});
if (opt.help) {
  process.stdout.write(fs.readFileSync(new URL(import.meta.url), 'utf8').split('\nimport ')[0]
    .split('\n').filter((l) => l.startsWith('//')).map((l) => l.replace(/^\/\/ ?/, '')).join('\n') + '\n');
  process.exit(0);
}
const engineLlama = () => {
  const dir = path.join(os.homedir(), '.cache/lineage');
  for (const d of fs.existsSync(dir) ? fs.readdirSync(dir).filter((x) => x.startsWith('engine-')) : []) {
    const p = path.join(dir, d, 'build/bin/llama-server');
    if (fs.existsSync(p)) return p;
  }
  return null;
};
const llama = opt['llama-server'] ?? engineLlama();
const repeats = Number(opt.repeats);
fs.mkdirSync(opt.out, { recursive: true });

const common = ['-m', opt.model, '--host', '127.0.0.1', '--threads', opt.threads, '--parallel', '1'];
const configs = [
  { name: 'lineage', lineage: true, argv: [opt.server, ...common, '--cache-disk=false'] },
  { name: 'lineage-split-rungs', lineage: true, argv: [opt.server, ...common, '--cache-disk=false', '--cache-ladder-defer=false'] },
  { name: 'lineage-no-split', lineage: true, argv: [opt.server, ...common, '--cache-disk=false', '--lineage=false'] },
  { name: 'lineage-repack', lineage: true, argv: [opt.server, ...common, '--cache-disk=false', '--repack'] },
  { name: 'lineage-no-split-repack', lineage: true, argv: [opt.server, ...common, '--cache-disk=false', '--lineage=false', '--repack'] },
];
if (llama) {
  configs.push({ name: 'llama-server', lineage: false, argv: [llama, ...common, '-c', '16384', '--jinja'] });
  configs.push({ name: 'llama-server-no-repack', lineage: false, argv: [llama, ...common, '-c', '16384', '--jinja', '--no-repack'] });
}
const wanted = (opt.configs ?? 'lineage,lineage-split-rungs,lineage-no-split,llama-server').split(',');
for (const w of wanted) if (!configs.some((c) => c.name === w)) throw new Error(`unknown configuration ${w}`);
configs.splice(0, configs.length, ...configs.filter((c) => wanted.includes(c.name)));

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? null : s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

const results = {};
for (const c of configs) {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const srv = new ServerProc([...c.argv, '--port', String(port)], path.join(opt.out, `${c.name}.server.log`), { base });
  await srv.start(300_000);
  const runs = [];
  for (let r = 0; r < repeats; r++) {
    for (const [i, persona] of PERSONAS.entries()) {
      const { system, tools } = personaPrompt(persona, r);
      if (c.lineage) await postJson(base, '/v1/cache/reset', {}, 60_000);
      const body = { model: 'bench', max_tokens: 1, temperature: 0, tools,
        messages: [{ role: 'system', content: system }, { role: 'user', content: `Round ${r}, request ${i}: what is next?` }],
        ...(c.lineage ? {} : { cache_prompt: false }) };
      const t0 = performance.now();
      const res = await postJson(base, '/v1/chat/completions', body, 600_000);
      const wall = performance.now() - t0;
      const t = res.timings ?? {};
      runs.push({ persona, round: r, prompt_tokens: res.usage?.prompt_tokens, cached: res.usage?.prompt_tokens_details?.cached_tokens ?? 0,
        prompt_ms: t.prompt_ms, wall_ms: wall, passes: t.prefill_passes ?? null, splits: t.prefill_splits ?? null });
      process.stderr.write(`[first-sight] ${c.name} ${persona} round ${r}: ${res.usage?.prompt_tokens} tokens, prefill ` +
        `${t.prompt_ms?.toFixed(0)} ms${t.prefill_passes !== undefined ? ` in ${t.prefill_passes} passes (${t.prefill_splits} split)` : ''}, ` +
        `reply after ${wall.toFixed(0)} ms\n`);
    }
  }
  await srv.stop();
  results[c.name] = { argv: c.argv, runs, prompt_ms: median(runs.map((x) => x.prompt_ms)), wall_ms: median(runs.map((x) => x.wall_ms)),
    passes: median(runs.map((x) => x.passes).filter((x) => x !== null)), splits: median(runs.map((x) => x.splits).filter((x) => x !== null)) };
}
fs.writeFileSync(path.join(opt.out, 'first_sight.json'), JSON.stringify(results, null, 2));

const ref = results['lineage-no-split'];
const ls = results['llama-server'];
const ratio = (a, b) => (a && b ? (a / b).toFixed(2) : '-');
const lines = ['| configuration | prefill ms (median) | reply after ms (median) | passes (splits) | prefill vs no split | prefill vs llama-server |',
  '|---|---:|---:|---:|---:|---:|'];
for (const [name, r] of Object.entries(results)) {
  lines.push(`| ${name} | ${r.prompt_ms?.toFixed(0)} | ${r.wall_ms?.toFixed(0)} | ${r.passes ?? '-'}${r.splits !== null && r.splits !== undefined ? ` (${r.splits})` : ''} | ` +
    `${ratio(r.prompt_ms, ref?.prompt_ms)} | ${ratio(r.prompt_ms, ls?.prompt_ms)} |`);
}
const text = `First sight of each persona (${PERSONAS.join(', ')}), ${repeats} rounds, model ${path.basename(opt.model)}, ` +
  `--threads ${opt.threads}:\n\n${lines.join('\n')}\n`;
fs.writeFileSync(path.join(opt.out, 'first_sight.md'), text);
process.stdout.write(text);
