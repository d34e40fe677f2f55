// Hostile traffic beside normal traffic: normal streaming chat requests in a loop
// (their TTFT measured) while other clients send the bodies that used to cost minutes and
// gigabytes (10,000 tools to /v1/chat/completions and /apply-template, 200,000 messages), and
// the server's RSS sampled every second. Reports the normal requests' TTFT p50/p99 and RSS over
// time, as JSON on stdout (progress on stderr). Against a running server:
//
//   node tools/bench/hostile.mjs --url http://127.0.0.1:8080 --pid PID [--seconds 30]
//        [--normal 2] [--hostile 1] [--no-hostile]
//
// --no-hostile runs the normal clients alone, the baseline to compare with.
import fs from 'node:fs';
import { parseArgs } from 'node:util';

const { values: o } = parseArgs({ options: {
  url: { type: 'string', default: 'http://127.0.0.1:8080' }, pid: { type: 'string' },
  seconds: { type: 'string', default: '30' }, normal: { type: 'string', default: '2' },
  hostile: { type: 'string', default: '1' }, 'no-hostile': { type: 'boolean', default: false },
} });
const rssMb = () => {
  if (!o.pid) return null;
  const m = fs.readFileSync(`/proc/${o.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
  return Math.round(Number(m[1]) / 1024);
};
const tool = (i) => ({ type: 'function', function: { name: `tool_${i}`, description: `Tool number ${i} does a thing`,
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } } });
const toolsBody = JSON.stringify({ model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }],
  tools: Array.from({ length: 10_000 }, (_, i) => tool(i)) });
const msgsBody = JSON.stringify({ model: 'm', max_tokens: 4, messages: Array.from({ length: 200_000 },
  (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `message ${i}` })) });
const hostileBodies = [['/v1/chat/completions', toolsBody], ['/apply-template', toolsBody], ['/v1/chat/completions', msgsBody]];
const post = (path, body, signal) => fetch(o.url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body, signal });

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

async function hostileClient() {
  for (let n = 0; Date.now() < end; ++n) {
    const [path, body] = hostileBodies[n % hostileBodies.length];
    const t0 = performance.now();
    try {
      const res = await post(path, body, AbortSignal.timeout(60_000));
      await res.text();
      hostile.statuses[res.status] = (hostile.statuses[res.status] ?? 0) + 1;
    } catch (e) {
      hostile.statuses[e.name] = (hostile.statuses[e.name] ?? 0) + 1;
    }
    hostile.ms.push(performance.now() - t0);
    hostile.sent++;
  }
}

const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : null; };
const rss = [{ s: 0, mb: rssMb() }];
const t0 = Date.now();
const sampler = setInterval(() => { rss.push({ s: Math.round((Date.now() - t0) / 1000), mb: rssMb() }); }, 1000);
const clients = Array.from({ length: Number(o.normal) }, (_, i) => normalClient(i));
if (!o['no-hostile']) for (let i = 0; i < Number(o.hostile); ++i) clients.push(hostileClient());
await Promise.all(clients);
clearInterval(sampler);
rss.push({ s: Math.round((Date.now() - t0) / 1000), mb: rssMb() });
const r = (x) => (x === null ? null : Math.round(x));
console.log(JSON.stringify({
  seconds: Number(o.seconds), normal_clients: Number(o.normal), hostile_clients: o['no-hostile'] ? 0 : Number(o.hostile),
  normal_requests: ttfts.length, ttft_ms: { p50: r(pct(ttfts, 0.5)), p99: r(pct(ttfts, 0.99)), max: r(pct(ttfts, 1)) },
  hostile: { sent: hostile.sent, statuses: hostile.statuses, ms_p50: r(pct(hostile.ms, 0.5)), ms_max: r(pct(hostile.ms, 1)) },
  rss_mb: { before: rss[0].mb, max: Math.max(...rss.map((x) => x.mb ?? 0)), end: rss.at(-1).mb, samples: rss },
}));
