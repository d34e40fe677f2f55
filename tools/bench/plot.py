#!/usr/bin/env python3
"""Plots of a benchmark directory (tools/bench/run.mjs output), one panel per configuration:
  DIR/ttft.png               TTFT of every request over the trace (send order), by request kind
  DIR/prefill_vs_oracle.png  prefill tokens computed against the oracle's, by request kind (dropped
                             streams left out, as in the report)

  python3 tools/bench/plot.py DIR [--order name1,name2,...]
Needs matplotlib (Debian: python3-matplotlib)."""
import argparse
import glob
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

KINDS = [
    ("warm", "warm next turn", "#1f77b4"),
    ("new_session", "new session", "#2ca02c"),
    ("sibling", "sibling persona", "#17becf"),
    ("edit", "edit", "#ff7f0e"),
    ("regenerate", "regenerate", "#9467bd"),
    ("retry", "retry after drop", "#8c564b"),
    ("after_restart", "after restart", "#d62728"),
    ("cold", "cold", "#7f7f7f"),
    ("dropped", "dropped stream", "#bcbd22"),
    ("side", "side call", "#e377c2"),
]


def load(d, order):
    names = sorted(os.path.basename(p)[: -len(".summary.json")] for p in glob.glob(os.path.join(d, "*.summary.json")))
    ordered = [n for n in order if n in names] + [n for n in names if n not in order]
    runs = []
    for n in ordered:
        with open(os.path.join(d, n + ".jsonl")) as f:
            runs.append((n, [json.loads(line) for line in f if line.strip()]))
    return runs


def grid(n):
    cols = 2 if n > 1 else 1
    rows = (n + cols - 1) // cols
    return rows, cols


def plot_ttft(runs, path):
    rows, cols = grid(len(runs))
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 3.6 * rows), sharey=True, squeeze=False)
    for ax, (name, recs) in zip(axes.flat, runs):
        restart = next((r["i"] for r in recs if r.get("after_restart")), None)
        for kind, label, color in KINDS:
            xs = [r["i"] for r in recs if r["kind"] == kind and r.get("ttft_ms") is not None]
            ys = [r["ttft_ms"] / 1000 for r in recs if r["kind"] == kind and r.get("ttft_ms") is not None]
            if xs:
                ax.scatter(xs, ys, s=14, color=color, label=label, alpha=0.85)
        if restart is not None:
            ax.axvline(restart - 0.5, color="#d62728", linestyle="--", linewidth=1)
        ax.set_title(name)
        ax.set_yscale("log")
        ax.set_xlabel("request (send order)")
        ax.set_ylabel("TTFT (s)")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(runs):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=8)
    fig.suptitle("TTFT per request over the trace (dashed: server restart)")
    fig.tight_layout(rect=(0, 0.09, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_prefill(runs, path):
    rows, cols = grid(len(runs))
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 5 * rows), squeeze=False)
    hi = max((max(r.get("computed") or 1, r.get("oracle") or 1) for _, recs in runs for r in recs), default=10)
    for ax, (name, recs) in zip(axes.flat, runs):
        for kind, label, color in KINDS:
            sel = [r for r in recs if r["kind"] == kind and not r.get("dropped") and r.get("computed") is not None
                   and r.get("oracle")]
            if sel:
                ax.scatter([r["oracle"] for r in sel], [max(r["computed"], 1) for r in sel], s=14, color=color,
                           label=label, alpha=0.85)
        ax.plot([1, hi * 1.2], [1, hi * 1.2], color="black", linewidth=0.8, linestyle=":")
        ok = [r for r in recs if not r.get("dropped") and r.get("computed") is not None and r.get("oracle")]
        c = sum(r["computed"] for r in ok)
        o = sum(r["oracle"] for r in ok)
        ax.set_title(f"{name}: computed / oracle = {c / o:.2f}" if o else name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(0.8, hi * 1.3)
        ax.set_ylim(0.8, hi * 1.3)
        ax.set_xlabel("oracle: tokens never seen before")
        ax.set_ylabel("prefill tokens computed")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(runs):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=8)
    fig.suptitle("Prefill tokens computed against the oracle (dotted: computed = oracle)")
    fig.tight_layout(rect=(0, 0.09, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--order", default="")
    a = ap.parse_args()
    runs = load(a.dir, [n for n in a.order.split(",") if n])
    if not runs:
        raise SystemExit(f"no runs in {a.dir}")
    plot_ttft(runs, os.path.join(a.dir, "ttft.png"))
    plot_prefill(runs, os.path.join(a.dir, "prefill_vs_oracle.png"))
    print(f"wrote {a.dir}/ttft.png and {a.dir}/prefill_vs_oracle.png")


if __name__ == "__main__":
    main()
