#!/usr/bin/env python3
"""Plot of a soak run (tools/bench/soak.mjs output): DIR/soak.png, three panels over time:
  memory   the server's RSS, the cache's bytes in RAM, and the RSS budget (RSS before the first
           request + the cache's RAM budget) with budget + 10%, the warm-up shaded
  disk     the cache's bytes on disk (tier 2) and its number of files
  requests latency p50 / p95 of the requests that ended in each interval, and their errors

  python3 tools/bench/soak_plot.py DIR
Needs matplotlib (Debian: python3-matplotlib)."""
import argparse
import csv
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def column(rows, name):
    return [float(r[name]) if r[name] != "" else float("nan") for r in rows]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    args = ap.parse_args()
    with open(os.path.join(args.dir, "soak.csv")) as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(args.dir, "summary.json")) as f:
        summary = json.load(f)
    t = [x / 60 for x in column(rows, "t_s")]
    fig, (mem, disk, req) = plt.subplots(3, 1, figsize=(10, 10), sharex=True)
    warm = summary["warmup_s"] / 60
    for ax in (mem, disk, req):
        ax.axvspan(0, warm, color="#eeeeee", label="warm-up" if ax is mem else None)
        ax.grid(alpha=0.3)
    mem.plot(t, column(rows, "rss_mib"), label="RSS", color="#1f77b4")
    mem.plot(t, column(rows, "cache_ram_mib"), label="cache bytes in RAM", color="#2ca02c")
    budget = summary["rss_budget_mib"]
    mem.axhline(budget, color="#d62728", linestyle="--", label=f"budget {budget:.0f} MiB")
    mem.axhline(budget * 1.1, color="#d62728", linestyle=":", label="budget + 10%")
    mem.set_ylabel("MiB")
    mem.set_ylim(bottom=0)
    mem.legend(loc="lower right", fontsize=8)
    mem.set_title(f"soak: {summary['minutes']:g} min, {summary['requests']} requests, {summary['errors']} errors")
    disk.plot(t, column(rows, "cache_disk_mib"), label="cache bytes on disk", color="#9467bd")
    disk.set_ylabel("MiB")
    disk.set_ylim(bottom=0)
    files = disk.twinx()
    files.plot(t, column(rows, "disk_files"), label="disk files", color="#8c564b", linestyle="--")
    files.set_ylabel("files")
    files.set_ylim(bottom=0)
    disk.legend(loc="upper left", fontsize=8)
    files.legend(loc="lower right", fontsize=8)
    req.plot(t, [x / 1000 for x in column(rows, "p50_ms")], "o-", ms=3, label="latency p50", color="#1f77b4")
    req.plot(t, [x / 1000 for x in column(rows, "p95_ms")], "o-", ms=3, label="latency p95", color="#ff7f0e")
    req.set_ylabel("seconds")
    req.set_ylim(bottom=0)
    errs = req.twinx()
    errs.bar(t, column(rows, "errors"), width=0.1, color="#d62728", alpha=0.6, label="errors")
    errs.set_ylabel("errors / interval")
    errs.set_ylim(bottom=0, top=max(1.0, max(column(rows, "errors")) * 1.2))
    req.legend(loc="upper left", fontsize=8)
    errs.legend(loc="upper right", fontsize=8)
    req.set_xlabel("minutes")
    fig.tight_layout()
    out = os.path.join(args.dir, "soak.png")
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
