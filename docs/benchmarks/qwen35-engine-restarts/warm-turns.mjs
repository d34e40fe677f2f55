// The one-off probe as run for docs/benchmarks/README.md "Where the last TTFT and prefill gaps
// come from" (kept as the record of those figures; the maintained trace is tools/bench/run.mjs).
// usage: node warm-turns.mjs PORT TURNS USERWORDS   (the figures: 10 turns, 40 words)
const port = process.argv[2], turns = +process.argv[3], userWords = +process.argv[4];
const words = "alpha beta gamma delta river stone cloud paper tiger window garden silver orange market engine letter basket yellow purple forest mountain ocean planet rocket simple".split(" ");
let seed = 7; const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
const text = n => Array.from({length: n}, () => words[Math.floor(rnd() * words.length)]).join(" ");
const sys = "You are a helpful coding agent.\n" + text(2200);
const msgs = [{role: "system", content: sys}, {role: "user", content: text(userWords)}];
async function one() {
  const t0 = performance.now();
  const r = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {method: "POST", headers: {"content-type": "application/json"},
    body: JSON.stringify({messages: msgs, max_tokens: 8, stream: true, temperature: 0, stream_options: {include_usage: true}})});
  const rd = r.body.getReader(); const dec = new TextDecoder(); let buf = "", ttft = null, content = "", timings = null, usage = null;
  for (;;) { const {done, value} = await rd.read(); if (done) break; buf += dec.decode(value, {stream: true});
    let i; while ((i = buf.indexOf("\n\n")) >= 0) { const ev = buf.slice(0, i); buf = buf.slice(i + 2);
      if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue; const j = JSON.parse(ev.slice(6));
      if (j.timings) timings = j.timings; if (j.usage) usage = j.usage;
      const d = j.choices?.[0]?.delta; if (d && (d.content || d.reasoning_content) && ttft === null) ttft = performance.now() - t0;
      if (d?.content) content += d.content; } }
  return {ttft, total: performance.now() - t0, content, timings, usage};
}
const out = [];
for (let t = 0; t < turns; t++) {
  const r = await one();
  out.push(r);
  console.log(`turn ${t} ttft ${r.ttft?.toFixed(0)} total ${r.total.toFixed(0)} prompt_n ${r.timings?.prompt_n} prompt_ms ${r.timings?.prompt_ms?.toFixed(0)} passes ${r.timings?.prefill_passes ?? '-'} cached ${r.usage?.prompt_tokens_details?.cached_tokens}`);
  msgs.push({role: "assistant", content: r.content}); msgs.push({role: "user", content: text(userWords)});
}
const w = out.slice(1).map(r => r.ttft).sort((a, b) => a - b);
console.log("warm ttft median", w[Math.floor(w.length / 2)].toFixed(0), "mean", (w.reduce((a, b) => a + b) / w.length).toFixed(0));
