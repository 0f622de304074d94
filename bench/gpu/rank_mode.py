"""On a GPU machine, under torchrun: hoist's rank mode against the one-process figures (one
GPU: --nproc-per-node 1, a job of one rank, checks the engine's block and the polled NCCL
all-gather; the process exits 1 if any part is not bit-equal).
Each rank loads its part of the model with hoist.load_file(..., process_group=WORLD) (NCCL),
split by tensor and replicated, warm, three rounds each; the first round of each is checked
tensor by tensor against safetensors' get_slice of the same cut (bit-equal). Rank 0 prints one
JSON line per round: the wall time until every rank is done and the model's bytes per second.

Usage: torchrun --nproc-per-node 2 bench/gpu/rank_mode.py MODEL.safetensors
RANK_MODE_BACKEND=gloo: the job over gloo, every rank on the GPUs there are (two ranks on one
GPU: the engine's checks before and after the gather through gloo's CUDA all-gather).
RANK_MODE_REFUSE=1: the last rank refuses its load (shares that do not fit the job); every other
rank must fail at once naming it (the process exits 1 if any rank returns tensors).
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import hoist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))
from tp_safetensors_peer import cut  # noqa: E402  the same built-in rules


def expected(f, name, rank, world, split):
    s = f.get_slice(name)
    shape = s.get_shape()
    how = "replicate" if split == "replicate" else cut(name)
    if how == "rows" and shape and shape[0] >= world:
        n = shape[0]
        return s[n * rank // world:n * (rank + 1) // world]
    if how == "columns" and len(shape) == 2 and shape[1] >= world:
        n = shape[1]
        return s[:, n * rank // world:n * (rank + 1) // world]
    return s[:]


def same_bits(a, b):
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8),
                                              b.contiguous().view(torch.uint8))


def refused(path, rank, world):
    """The last rank asks for world + 1 shares: every rank must end with an error, the others
    naming it. Returns whether this rank's outcome is as expected (printed as a JSON line)."""
    start = time.perf_counter()
    shares = [1] * (world + 1) if rank == world - 1 else None
    try:
        hoist.load_file(path, device="cuda", split="tensor", tensor_split=shares,
                        process_group=dist.group.WORLD, stall_timeout=20)
        outcome, ok = "loaded", False
    except hoist.HoistError as e:
        outcome = str(e)
        ok = rank == world - 1 or f"rank {world - 1} of {world} failed its load" in outcome
    print(json.dumps({"refuse": True, "rank": rank, "ok": ok, "seconds": time.perf_counter() - start,
                      "outcome": outcome[:300]}), flush=True)
    return ok


def main():
    path = sys.argv[1]
    dist.init_process_group(os.environ.get("RANK_MODE_BACKEND", "nccl"))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    if os.environ.get("RANK_MODE_REFUSE"):
        ok = refused(path, rank, world)
        os._exit(0 if ok else 1)  # the group is left as the failed load left it
    model_bytes = sum(t.nbytes for t in hoist.Model(path).tensors.values())
    failed = False  # a part not bit-equal to safetensors' get_slice of the same cut
    for split in ("tensor", "replicate"):
        for round_ in range(3):
            dist.barrier()
            torch.cuda.synchronize()
            start = time.perf_counter()
            got = hoist.load_file(path, device="cuda", split=split, process_group=dist.group.WORLD)
            torch.cuda.synchronize()
            dist.barrier()
            wall = time.perf_counter() - start
            mismatches = 0
            if round_ == 0:
                from safetensors import safe_open
                device = f"cuda:{torch.cuda.current_device()}"
                with safe_open(path, framework="pt", device=device) as f:
                    for name in f.keys():
                        if not same_bits(got[name], expected(f, name, rank, world, split)):
                            mismatches += 1
            count = torch.tensor([mismatches], device="cuda")
            dist.all_reduce(count)
            held = sum(t.numel() * t.element_size() for t in got.values())
            del got
            torch.cuda.empty_cache()
            failed = failed or int(count.item()) != 0
            if rank == 0:
                print(json.dumps({"split": split, "round": round_ + 1, "ranks": world,
                                  "wall_s": wall, "gbps": model_bytes / wall / 1e9,
                                  "rank0_bytes": held, "mismatches": int(count.item()),
                                  "checked": round_ == 0}), flush=True)
    dist.destroy_process_group()
    return failed


if __name__ == "__main__":
    sys.exit(1 if main() else 0)
