// Hostile traffic beside normal traffic: normal streaming chat requests in a loop
// (their TTFT measured) while other clients send the bodies that used to cost minutes and
// gigabytes or stall the engine thread for everyone: 10,000 tools to /v1/chat/completions and
// /apply-template, 200,000 messages, grammars of 500, 5,000 and 20,000 alternatives, a JSON
// Schema enum of 20,000 values and one of 1,000 properties, 151,936 logit_bias entries, and
// 330,000 special tokens to /tokenize; the server's RSS sampled every second. Reports the normal
// requests' TTFT p50/p99 and RSS over time, as JSON on stdout (progress on stderr). Against a
// running server:
//
//   node tools/bench/hostile.mjs --url http://127.0.0.1:8080 --pid PID [--seconds 30]
//        [--normal 2] [--hostile 1] [--no-hostile] [--compare] [--bodies all|constraints|sizes]
//
// --no-hostile runs the normal clients alone, the baseline to compare with. --compare runs the
// baseline, then the same seconds with hostile clients, and adds ttft_ratio (p50 and p99 beside
// the hostile bodies over alone: the target is at most 2).
import fs from 'node:fs';
import { parseArgs } from 'node:util';

import { hostileBodies, hostileClient } from './hostile_bodies.mjs';

const { values: o } = parseArgs({ options: {
  url: { type: 'string', default: 'http://127.0.0.1:8080' }, pid: { type: 'string' },
  seconds: { type: 'string', default: '30' }, normal: { type: 'string', default: '2' },
  hostile: { type: 'string', default: '1' }, 'no-hostile': { type: 'boolean', default: false },
  compare: { type: 'boolean', default: false }, bodies: { type: 'string', default: 'all' },
} });
const rssMb = () => {
  if (!o.pid) return null;
  const m = fs.readFileSync(`/proc/${o.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
  return Math.round(Number(m[1]) / 1024);
};
const bodies = hostileBodies(o.bodies);
const post = (path, body, signal) => fetch(o.url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body, signal });

async function run(withHostile) {
  const end = Date.now() + Number(o.seconds) * 1000;
  const ttfts = [];
  const hostile = { sent: 0, statuses: {}, ms: [] };

  async function normalClient(id) {
    for (let n = 0; Date.now() < end; ++n) {
      const words = Array.from({ length: 150 }, (_, i) => `w${(i * 7 + n + id * 1000) % 500}`).join(' ');
      const t0 = performance.now();
      const res = await post('/v1/chat/completions', JSON.stringify({ model: 'm', stream: true, max_tokens: 8, temperature: 0,
        messages: [{ role: 'user', content: words }] }));
      let first = null;
      for await (const chunk of res.body) {
        if (first === null && new TextDecoder().decode(chunk).includes('"choices"')) first = performance.now() - t0;
      }
      if (first !== null) ttfts.push(first);
    }
  }

  const rss = [{ s: 0, mb: rssMb() }];
  const t0 = Date.now();
  const sampler = setInterval(() => { rss.push({ s: Math.round((Date.now() - t0) / 1000), mb: rssMb() }); }, 1000);
  const clients = Array.from({ length: Number(o.normal) }, (_, i) => normalClient(i));
  if (withHostile) for (let i = 0; i < Number(o.hostile); ++i) clients.push(hostileClient(o.url, bodies, i, () => Date.now() >= end, hostile));
  await Promise.all(clients);
  clearInterval(sampler);
  rss.push({ s: Math.round((Date.now() - t0) / 1000), mb: rssMb() });
  return {
    seconds: Number(o.seconds), normal_clients: Number(o.normal), hostile_clients: withHostile ? Number(o.hostile) : 0,
    bodies: withHostile ? o.bodies : null,
    normal_requests: ttfts.length, ttft_ms: { p50: r(pct(ttfts, 0.5)), p99: r(pct(ttfts, 0.99)), max: r(pct(ttfts, 1)) },
    hostile: { sent: hostile.sent, statuses: hostile.statuses, ms_p50: r(pct(hostile.ms, 0.5)), ms_max: r(pct(hostile.ms, 1)) },
    rss_mb: { before: rss[0].mb, max: Math.max(...rss.map((x) => x.mb ?? 0)), end: rss.at(-1).mb, samples: rss },
  };
}

const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : null; };
const r = (x) => (x === null ? null : Math.round(x));
if (o.compare) {
  console.error('hostile: the baseline (normal clients alone)...');
  const alone = await run(false);
  console.error(`hostile: TTFT p50 ${alone.ttft_ms.p50} ms alone; now beside hostile bodies (${o.bodies})...`);
  const beside = await run(true);
  const ratio = (k) => (alone.ttft_ms[k] ? Math.round((beside.ttft_ms[k] / alone.ttft_ms[k]) * 100) / 100 : null);
  console.error(`hostile: TTFT p50 ${beside.ttft_ms.p50} ms beside them: ${ratio('p50')}x (p99 ${ratio('p99')}x)`);
  console.log(JSON.stringify({ alone, beside, ttft_ratio: { p50: ratio('p50'), p99: ratio('p99') } }));
} else {
  console.log(JSON.stringify(await run(!o['no-hostile'])));
}
