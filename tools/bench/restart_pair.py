#!/usr/bin/env python3
"""The first two requests after a restart, sent together: a long one and a short one, both
restored from the disk tier (docs/architecture.md "Prefill order", the read hold).

  python3 tools/bench/restart_pair.py --server BUILD/bin/lineage-server --model MODEL.gguf [--runs 3]
  python3 tools/bench/restart_pair.py --server OLD --server NEW --model MODEL.gguf   # alternating

Each run: a fresh --cache-dir; conversation A (a ~1.5k-word system text, a ~1.2k-word user message)
and conversation B (~0.9k and ~0.8k words) each answered once (8 tokens); SIGTERM (the disk tier
writes its entries); the same server started again; then, 10 ms apart, A with its user message
replaced (an edit: ~900 words to prefill after the restored system text) and B's next turn ("go
on": a few tokens after the restored history). Prints each request's client TTFT (ms, to the
first streamed text) and the server's request log lines, and per server the median over runs.
Both requests are chat completions at temperature 0; the words are drawn from a fixed list by a
seeded generator, so every run sends the same text."""
import argparse
import http.client
import json
import random
import signal
import statistics
import subprocess
import tempfile
import threading
import time

WORDS = ('alpha river stone window seven quick table market signal orange thread engine garden silver number '
         'planet copper winter camera pocket').split()


def text(seed, n):
    r = random.Random(seed)
    return ' '.join(r.choice(WORDS) for _ in range(n))


def start(binary, model, port, cache_dir, log):
    p = subprocess.Popen([binary, '-m', model, '--host', '127.0.0.1', '--port', str(port), '--parallel', '3',
                          '--threads', '2', '--ctx-size', '16384', '--cache-dir', cache_dir],
                         stdout=open(log, 'w'), stderr=subprocess.STDOUT)
    for _ in range(1500):
        try:
            c = http.client.HTTPConnection('127.0.0.1', port, timeout=2)
            c.request('GET', '/health')
            if c.getresponse().status == 200:
                return p
        except OSError:
            pass
        if p.poll() is not None:
            raise SystemExit(f'{binary} exited with {p.returncode}; see {log}')
        time.sleep(0.2)
    raise SystemExit(f'{binary} not ready after 300 s; see {log}')


def chat(port, messages):
    """Streams one chat completion; returns (TTFT seconds, the reply's content)."""
    t0 = time.time()
    ttft = None
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=600)
    c.request('POST', '/v1/chat/completions',
              json.dumps({'model': 'default', 'messages': messages, 'max_tokens': 8, 'temperature': 0, 'stream': True}),
              {'content-type': 'application/json'})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f'chat -> {r.status}: {r.read()[:300]!r}')
    content = ''
    for line in r:
        if not line.startswith(b'data:') or b'[DONE]' in line:
            continue
        for ch in json.loads(line[5:]).get('choices', []):
            d = ch.get('delta', {})
            if ttft is None and ((d.get('content') or '') + (d.get('reasoning_content') or '')):
                ttft = time.time() - t0
            content += d.get('content') or ''
    return ttft if ttft is not None else time.time() - t0, content


def run_once(binary, model, port, log_prefix):
    cache_dir = tempfile.mkdtemp(prefix='lineage-restart-pair.')
    a = [{'role': 'system', 'content': 'You are agent A. ' + text(1, 1500)}, {'role': 'user', 'content': text(2, 1200)}]
    b = [{'role': 'system', 'content': 'You are agent B. ' + text(3, 900)}, {'role': 'user', 'content': text(4, 800)}]
    p = start(binary, model, port, cache_dir, f'{log_prefix}.1.log')
    chat(port, a)
    _, reply_b = chat(port, b)
    p.send_signal(signal.SIGTERM)
    p.wait()
    p = start(binary, model, port, cache_dir, f'{log_prefix}.2.log')
    a2 = [a[0], {'role': 'user', 'content': text(6, 900)}]
    b2 = b + [{'role': 'assistant', 'content': reply_b}, {'role': 'user', 'content': 'go on'}]
    out = {}
    ta = threading.Thread(target=lambda: out.__setitem__('long', chat(port, a2)[0]))
    tb = threading.Thread(target=lambda: out.__setitem__('short', chat(port, b2)[0]))
    ta.start()
    time.sleep(0.01)
    tb.start()
    ta.join()
    tb.join()
    p.send_signal(signal.SIGTERM)
    p.wait()
    lines = [ln.split('info  ', 1)[-1].strip() for ln in open(f'{log_prefix}.2.log')
             if ' request ' in ln and '| TTFT' in ln]
    return out, lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--server', action='append', required=True, help='lineage-server binary (repeat to alternate)')
    ap.add_argument('--model', required=True)
    ap.add_argument('--runs', type=int, default=3)
    ap.add_argument('--port', type=int, default=8433)
    ap.add_argument('--logs', default=tempfile.gettempdir(), help='folder for the servers\' logs')
    opt = ap.parse_args()
    got = {s: [] for s in opt.server}
    for k in range(opt.runs):
        for i, s in enumerate(opt.server):
            out, lines = run_once(s, opt.model, opt.port, f'{opt.logs}/restart-pair.{i}.{k}')
            got[s].append(out)
            print(f'{s} run {k + 1}: short {out["short"] * 1e3:.0f} ms, long {out["long"] * 1e3:.0f} ms')
            for ln in lines:
                print(f'  {ln}')
    for s, outs in got.items():
        print(f'{s}: median TTFT short {statistics.median(o["short"] for o in outs) * 1e3:.0f} ms, '
              f'long {statistics.median(o["long"] for o in outs) * 1e3:.0f} ms ({len(outs)} runs)')


if __name__ == '__main__':
    main()
