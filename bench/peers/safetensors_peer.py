"""Times safetensors' own loaders on a file, for the side-by-side table with hoist.

Usage: python3 bench/peers/safetensors_peer.py FILE [--device cuda:0] [--mode load_file|safe_open]
Prints one JSON object: {"strategy", "seconds", "bytes", "gbps", "tensors", "peak_rss_bytes"}.
The caller drops the page cache first for a cold figure.
"""
import argparse
import json
import resource
import time

import torch
from safetensors import safe_open
from safetensors.torch import load_file


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--mode", choices=["load_file", "safe_open"], default="load_file")
    args = parser.parse_args()
    torch.cuda.init()
    torch.zeros(1, device=args.device)  # CUDA context outside the timing, as hoist's device open is
    torch.cuda.synchronize()
    start = time.perf_counter()
    if args.mode == "load_file":
        tensors = load_file(args.path, device=args.device)
    else:
        tensors = {}
        with safe_open(args.path, framework="pt") as f:
            for name in f.keys():
                tensors[name] = f.get_tensor(name).to(args.device)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    print(json.dumps({
        "strategy": "safetensors." + ("torch.load_file" if args.mode == "load_file" else "safe_open+to"),
        "seconds": seconds, "bytes": total, "gbps": total / seconds / 1e9, "tensors": len(tensors),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }))


if __name__ == "__main__":
    main()
