"""The rate at which hoist reads a checkpoint into host memory, the path hoist.safetensors'
device="cpu" handles take: one shard loaded whole with hoist.load_file(device="cpu") (pinned
when a GPU is present, and with HOIST_PIN=off), against safetensors.torch.load_file of the same
shard, warm (each timed after one untimed pass). Prints one JSON line per way.
    python3 host_reads.py SHARD [--rounds 3]
"""
import argparse
import json
import os
import subprocess
import sys
import time


def one(shard, way, rounds):
    import torch
    if way == "safetensors":
        from safetensors.torch import load_file
    else:
        from hoist import load_file
    times = []
    for i in range(rounds + 1):
        start = time.perf_counter()
        tensors = load_file(shard, device="cpu")
        elapsed = time.perf_counter() - start
        nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
        pinned = next(iter(tensors.values())).is_pinned() if torch.cuda.is_available() else False
        del tensors
        if i:
            times.append(elapsed)
    print(json.dumps({"way": way, "pin": os.environ.get("HOIST_PIN", "auto"), "pinned": pinned,
                      "gb": round(nbytes / 1e9, 3),
                      "gbps": [round(nbytes / t / 1e9, 2) for t in times]}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("shard")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--way")
    args = parser.parse_args()
    if args.way:
        return one(args.shard, args.way, args.rounds)
    for way, pin in (("safetensors", "auto"), ("hoist", "auto"), ("hoist", "off")):
        env = dict(os.environ, HOIST_PIN=pin)
        subprocess.run([sys.executable, __file__, args.shard, "--rounds", str(args.rounds),
                        "--way", way], env=env, check=False)


if __name__ == "__main__":
    main()
