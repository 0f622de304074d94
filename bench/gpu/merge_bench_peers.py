"""Adds the peers measured in the same run (python_vs_safetensors.py's "peers") to
`hoist bench --json`'s results, each with its ratio to the same ceiling, and prints the table.

Usage: python3 bench/gpu/merge_bench_peers.py BENCH.json PEERS.json [--out MERGED.json]
"""
import argparse
import json


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bench")
    parser.add_argument("peers")
    parser.add_argument("--out")
    args = parser.parse_args()
    with open(args.bench) as f:
        bench = json.load(f)
    with open(args.peers) as f:
        peers = json.load(f)
    c = bench["ceilings"]
    warm_ceiling = min(c["h2d_pinned_gbps"], c["page_cache_read_gbps"])
    cold_ceiling = min(c["h2d_pinned_gbps"], c["direct_read_gbps"] or warm_ceiling)
    for p in peers.get("peers", []):
        ceiling = warm_ceiling if p["mode"] == "warm" else cold_ceiling
        bench["results"].append({"strategy": p["strategy"], "mode": p["mode"], "gbps": p["gbps"],
                                 "ceiling_gbps": ceiling, "ratio_to_ceiling": p["gbps"] / ceiling,
                                 "peak_host_bytes": None,
                                 "verified": not peers.get("unequal_tensors"), "peer": True})
    print(f"ceilings: h2d pinned {c['h2d_pinned_gbps']:.2f} GB/s, page cache read "
          f"{c['page_cache_read_gbps']:.2f} GB/s, direct read {c['direct_read_gbps'] or 0:.2f} GB/s")
    print("| strategy | mode | GB/s | ratio to ceiling | peak host MiB | verified |")
    print("|---|---|---:|---:|---:|---|")
    for r in bench["results"]:
        host = "" if r.get("peak_host_bytes") is None else f"{r['peak_host_bytes'] / 2**20:.0f}"
        print(f"| {r['strategy']} | {r['mode']} | {r['gbps']:.2f} | {100 * r['ratio_to_ceiling']:.0f}% | "
              f"{host} | {'yes' if r['verified'] else 'NO'} |")
    by = {(r["strategy"], r["mode"]): r["gbps"] for r in bench["results"]}
    for mode in ("warm", "cold"):
        h = by.get(("hoist", mode))
        st = by.get(("safetensors.torch.load_file", mode))
        if h and st:
            print(f"hoist {mode} / safetensors.torch.load_file {mode}: {h / st:.1f}x")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(bench, f, indent=2)


if __name__ == "__main__":
    main()
