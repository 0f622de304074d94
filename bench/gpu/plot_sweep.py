"""Plots hoist's warm load rate over reader threads x chunk size from sweep.jsonl (lines of
`hoist load --json` with "threads" and "chunk_mib" added). Usage:
python3 bench/gpu/plot_sweep.py sweep.jsonl out.svg [--ceiling GBPS]"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("sweep")
    parser.add_argument("out")
    parser.add_argument("--ceiling", type=float)
    args = parser.parse_args()
    rows = [json.loads(line) for line in open(args.sweep) if line.strip()]
    by_threads = {}
    for r in rows:
        by_threads.setdefault(r["threads"], []).append((r["chunk_mib"], r["gbps"]))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for threads, points in sorted(by_threads.items()):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"{threads} readers")
    if args.ceiling:
        ax.axhline(args.ceiling, color="gray", linestyle="--", label=f"pinned H2D ceiling {args.ceiling:.1f} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("chunk size (MiB)")
    ax.set_ylabel("warm load, GB/s (open to teardown)")
    ax.set_title("hoist on one H200: reader threads x chunk size (staging: 2 chunks per reader)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(args.out)


if __name__ == "__main__":
    main()
