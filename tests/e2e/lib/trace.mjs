// What the server's log says about one request, for tests that need the exact restore and
// capture points of the prompt cache. Start the server with `--log-level debug`; then
//
//   const mark = logMark(srv);
//   const res = await srv.openai.chat.completions.create(...);
//   const t = await traceOf(srv, mark, usageOf(res));
//
// t = { id, hit, restore, captures: [{kind, n}], rollbacks: [n], anchors: [n],
//       hints: {prompt, anchor, history}, toolsAnchor, lines }
//   restore   the decision line ("restore turn at 269/288 from entry 2 (device, ...)" or "miss")
//   captures  checkpoints captured during the prefill, in the order taken (ascending n)
//   rollbacks the points of those taken by rolling the recurrent state back after the prefill
//             (--cache-guard-rollback) instead of splitting it
//   anchors   lengths of the anchors pinned by this request
//   hints     what the HTTP layer computed: the prompt length, the anchor hint (tokens the prompt
//             shares with the render of its system messages + tools) and the history boundary
//             (prompt minus its generation prompt); -1 when unknown or when the cache is bypassed
//   toolsAnchor  the tools-anchor hint (tokens the prompt shares with the tools rendered alone;
//             -1 without tools or a system message)
//   lines     every log line of the request, for failure messages
//
// The log lines read (src/scheduler/scheduler.cpp, src/server/dialects/chat/chat_handler.cpp):
//   info  request N: <finish> | prompt P tokens, cached C (<kind>), completion ...
//   debug req N format=... prompt=P anchor=A history=H tools_anchor=T last_user=L session=... bucket=...
//   debug request N: restore <kind> at n/P from entry ... | miss ...
//   debug request N: captured <kind> checkpoint at n tokens [by rollback ](b bytes)
//   debug request N: pinned anchor at n tokens (b bytes)

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The current end of the server's log; pass it to traceOf() after the request. */
export function logMark(srv) {
  return srv.log().length;
}

/** Waits (up to `timeoutMs`: the log pipe may lag the HTTP response) for the summary line of
 *  the request with these usage numbers, logged after `mark`, and parses the request's lines. */
export async function traceOf(srv, mark, { prompt, cached }, timeoutMs = 10_000) {
  const re = new RegExp(`request (\\d+): \\w+ \\| prompt ${prompt} tokens, cached ${cached} \\((\\w+)\\)`);
  const t0 = Date.now();
  for (;;) {
    const text = srv.log().slice(mark);
    const m = re.exec(text);
    if (m) return parseTrace(text, Number(m[1]), m[2]);
    if (Date.now() - t0 > timeoutMs) {
      throw new Error(`${srv.name}: no log line "request N: ... prompt ${prompt} tokens, cached ${cached}" ` +
        `after ${timeoutMs} ms (is the server at --log-level debug?); log since the request:\n${text}`);
    }
    await sleep(15);
  }
}

function parseTrace(text, id, hit) {
  const t = { id, hit, restore: null, captures: [], rollbacks: [], anchors: [], reply: null, hints: null, toolsAnchor: null,
    lines: [] };
  const mine = new RegExp(`\\b(request ${id}:|req ${id} )`);
  for (const line of text.split('\n')) {
    if (!mine.test(line)) continue;
    t.lines.push(line);
    let m;
    if ((m = new RegExp(`req ${id} .*\\bprompt=(\\d+) anchor=(-?\\d+) history=(-?\\d+)(?: tools_anchor=(-?\\d+))?(?: last_user=(-?\\d+))?`).exec(line))) {
      t.hints = { prompt: Number(m[1]), anchor: Number(m[2]), history: Number(m[3]) };
      t.toolsAnchor = m[4] === undefined ? null : Number(m[4]);
      t.lastUser = m[5] === undefined ? null : Number(m[5]);
    } else if ((m = /captured (\w+) checkpoint at (\d+) tokens/.exec(line))) {
      t.captures.push({ kind: m[1], n: Number(m[2]) });
      if (/ tokens by rollback/.test(line)) t.rollbacks.push(Number(m[2]));
    } else if ((m = /kept the reply checkpoints at \[([\d ]*)\]/.exec(line))) {
      t.reply = m[1] ? m[1].split(' ').map(Number) : [];
    } else if ((m = /pinned anchor at (\d+) tokens/.exec(line))) {
      t.anchors.push(Number(m[1]));
    } else if ((m = new RegExp(`request ${id}: ((restore|miss|cache bypassed).*)$`).exec(line))) {
      t.restore = m[1];
    }
  }
  return t;
}

/** Counts of restore kinds, to compare with the deltas of GET /v1/cache/stats. */
export class HitTally {
  constructor(stats) {
    this.base = { hits: { ...stats.hits }, misses: stats.misses, lookups: stats.lookups };
    this.hits = {};
    this.misses = 0;
  }

  /** One cached lookup that restored `kind` ("miss" for none). */
  add(kind) {
    if (kind === 'miss') this.misses++;
    else this.hits[kind] = (this.hits[kind] ?? 0) + 1;
  }

  /** The hits by kind, misses and lookups the stats gained since the tally began. */
  delta(stats) {
    const hits = {};
    for (const [k, v] of Object.entries(stats.hits)) {
      const d = v - (this.base.hits[k] ?? 0);
      if (d !== 0) hits[k] = d;
    }
    return { hits, misses: stats.misses - this.base.misses, lookups: stats.lookups - this.base.lookups };
  }

  expected() {
    const n = Object.values(this.hits).reduce((a, b) => a + b, 0) + this.misses;
    return { hits: { ...this.hits }, misses: this.misses, lookups: n };
  }
}
