"""On the GPU machine: the default tensor-parallel load of vLLM and SGLang, as a peer for
`hoist load --split tensor`: one process per GPU, each opening the whole file with safetensors
and taking its slice of every weight (get_slice, the same cut as hoist's built-in rules) to its
GPU. Prints one JSON line: the wall time until both ranks are done and the bytes each holds.

Usage: python3 bench/peers/tp_safetensors_peer.py MODEL.safetensors [--ranks 2]
"""
import argparse
import json
import multiprocessing as mp
import time

ROWS = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "embed_tokens", "lm_head")
COLUMNS = ("o_proj", "down_proj")


def cut(name):
    parts = name.split(".")
    if any(p in ROWS for p in parts):
        return "rows"
    if any(p in COLUMNS for p in parts):
        return "replicate" if parts[-1] == "bias" else "columns"
    return "replicate"


def rank_main(path, rank, ranks, start, results):
    import torch
    from safetensors import safe_open

    device = f"cuda:{rank}"
    torch.cuda.set_device(rank)
    torch.cuda.synchronize()
    start.wait()
    t0 = time.perf_counter()
    held = 0
    with safe_open(path, framework="pt", device=device) as f:
        for name in f.keys():
            s = f.get_slice(name)
            shape = s.get_shape()
            how = cut(name)
            if how == "rows" and len(shape) >= 1 and shape[0] >= ranks:
                n = shape[0]
                t = s[n * rank // ranks:n * (rank + 1) // ranks]
            elif how == "columns" and len(shape) == 2 and shape[1] >= ranks:
                n = shape[1]
                t = s[:, n * rank // ranks:n * (rank + 1) // ranks]
            else:
                t = s[:]
            held += t.numel() * t.element_size()
    torch.cuda.synchronize()
    results.put((rank, time.perf_counter() - t0, held))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--ranks", type=int, default=2)
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(args.ranks)
    results = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(args.model, r, args.ranks, start, results))
             for r in range(args.ranks)]
    for p in procs:
        p.start()
    got = [results.get() for _ in procs]
    for p in procs:
        p.join()
    wall = max(s for _, s, _ in got)
    held = sum(b for _, _, b in got)
    print(json.dumps({"peer": "safetensors get_slice per rank", "ranks": args.ranks,
                      "wall_s": wall, "bytes": held, "gbps": held / wall / 1e9,
                      "per_rank_s": sorted((r, s) for r, s, _ in got)}))


if __name__ == "__main__":
    main()
