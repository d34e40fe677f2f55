// The one-off probe as run for docs/benchmarks/README.md "Where the last TTFT and prefill gaps
// come from": one cache_prompt:false completion of 11,890 tokens. The maintained measure of the
// same thing is tools/bench/engine.mjs --prefill 12000. usage: node prefill-probe.mjs PORT
const port=process.argv[2]; const words="alpha beta gamma delta river stone cloud paper tiger window".split(" ");
const p=Array.from({length:2600},(_, i)=>words[(i*7)%10]+i).join(" ");
const r=await fetch(`http://127.0.0.1:${port}/v1/completions`,{method:"POST",headers:{"content-type":"application/json"},body:JSON.stringify({prompt:p,max_tokens:1,cache_prompt:false})});
const j=await r.json(); console.log("prompt tok/s", (j.timings.prompt_n/j.timings.prompt_ms*1000).toFixed(0), j.timings.prompt_n);
