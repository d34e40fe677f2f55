#!/usr/bin/env bash
# One server process, two cold prefills of ~12k tokens (prefill-probe.mjs), perf record of the
# second; prints each prefill's tok/s and the process's voluntary context switches.
#   docs/benchmarks/qwen35-engine-restarts/prefill-processes.sh NAME lineage|llama OUTDIR
# Interleave processes (lineage, llama, lineage, ...) on a quiet machine: the machine's own
# speed drifts by 20-30% within minutes (docs/benchmarks/README.md "The ~12k cold prefill").
set -u
name=$1; kind=$2; outdir=$3
root=$(cd "$(dirname "$0")/../../.." && pwd)
port=$((18000 + RANDOM % 1000))
model=$root/build/models/bench-qwen35.gguf
mkdir -p "$outdir"
if [ "$kind" = lineage ]; then
  "${LINEAGE_SERVER:-$root/build/bin/lineage-server}" -m "$model" --host 127.0.0.1 --port $port --parallel 3 \
    --threads 2 --ctx-size 16384 --cache-ram-bytes 4294967296 --cache-disk=false >"$outdir/$name.log" 2>&1 &
else
  "${LLAMA_SERVER:?set LLAMA_SERVER to llama-server}" -m "$model" --host 127.0.0.1 --port $port --parallel 3 \
    --threads 2 -c 49152 --cache-ram 4096 --jinja >"$outdir/$name.log" 2>&1 &
fi
pid=$!
for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.5; done
a=$(node "$root/docs/benchmarks/qwen35-engine-restarts/prefill-probe.mjs" $port)
perf record -e cpu-clock -F 499 -g -p $pid -o "$outdir/$name.perf.data" >/dev/null 2>&1 &
perf_pid=$!
b=$(node "$root/docs/benchmarks/qwen35-engine-restarts/prefill-probe.mjs" $port)
kill -INT $perf_pid; wait $perf_pid 2>/dev/null
echo "$name $kind: $a | $b | vol_ctxt $(cat /proc/$pid/task/*/status | awk '/^voluntary/ {s+=$2} END {print s}')"
kill $pid; wait $pid 2>/dev/null
