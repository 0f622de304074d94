"""On the GPU machine: hoist.safetensors.safe_open and hoist.iter_tensors against safetensors'
safe_open on one file, in one run, warm (the file in the page cache), every tensor compared
bit for bit with safetensors'.

  1. safe_open(device=D) and {k: f.get_tensor(k) for k in f.keys()}: safetensors', then hoist's;
  2. hoist.iter_tensors(path, D) with a consumer that only takes each tensor: GB/s, and the
     device memory held beyond the yielded tensors (torch's peak allocation over the run);
  3. get_slice(k)[:, :half] of every 2-D tensor: GB/s of slice bytes, both.

Usage: python3 bench/python/stream.py MODEL.safetensors [--device cuda:0] [--out F]
"""
import argparse
import json
import time

import torch
from safetensors import safe_open as reference_open

import hoist
import hoist.safetensors


def timed(fn):
    torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    torch.cuda.synchronize()
    return result, time.perf_counter() - start


def bits(t):
    return t.contiguous().view(torch.uint8) if t.numel() else t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--out")
    a = ap.parse_args()
    out = {"path": a.path, "device": a.device, "runs": []}
    total = sum(t.nbytes for t in hoist.open(a.path).tensors.values())
    out["bytes"] = total
    with open(a.path, "rb") as f:  # warm the page cache
        while f.read(1 << 26):
            pass

    def get_all(opener):
        with opener(a.path, framework="pt", device=a.device) as f:
            return {k: f.get_tensor(k) for k in f.keys()}

    reference, ref_s = timed(lambda: get_all(reference_open))
    row = lambda what, seconds, nbytes, **kw: out["runs"].append(  # noqa: E731
        dict(what=what, seconds=seconds, gbps=nbytes / seconds / 1e9, **kw))
    row("safetensors safe_open get_tensor (all keys)", ref_s, total)
    for run in range(2):
        got, s = timed(lambda: get_all(hoist.safetensors.safe_open))
        equal = all(torch.equal(bits(got[k]), bits(reference[k])) for k in reference)
        row("hoist.safetensors safe_open get_tensor (all keys)", s, total, run=run,
            bit_equal=equal)
        del got
    torch.cuda.empty_cache()
    for run in range(2):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        mismatches = 0

        def consume():
            nonlocal mismatches
            n = 0
            for name, t in hoist.iter_tensors(a.path, device=a.device):
                n += 1
                del t
            return n

        count, s = timed(consume)
        peak = torch.cuda.max_memory_allocated() - base
        row("hoist.iter_tensors (consumer takes each)", s, total, run=run, tensors=count,
            peak_beyond_yielded_bytes=peak)
    # Other bounds on what is read ahead.
    for ahead in (256, 2048):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        count, s = timed(lambda: sum(1 for _ in hoist.iter_tensors(a.path, device=a.device,
                                                                    ahead_mib=ahead)))
        row(f"hoist.iter_tensors ahead_mib={ahead}", s, total,
            peak_beyond_yielded_bytes=torch.cuda.max_memory_allocated() - base)
    # Bits of iter_tensors' tensors (a separate pass: the comparison is not timed).
    mismatches = sum(0 if torch.equal(bits(t), bits(reference[n])) else 1
                     for n, t in hoist.iter_tensors(a.path, device=a.device))
    out["iter_tensors_mismatches"] = mismatches

    def slices(opener):
        got, nbytes = {}, 0
        with opener(a.path, framework="pt", device=a.device) as f:
            for k in f.keys():
                s = f.get_slice(k)
                shape = s.get_shape()
                if len(shape) == 2:
                    got[k] = s[:, : shape[1] // 2]
                    nbytes += got[k].numel() * got[k].element_size()
        return got, nbytes

    (ref_slices, nbytes), s = timed(lambda: slices(reference_open))
    row("safetensors get_slice[:, :half] (2-D tensors)", s, nbytes)
    (mine, nbytes), s = timed(lambda: slices(hoist.safetensors.safe_open))
    row("hoist.safetensors get_slice[:, :half] (2-D tensors)", s, nbytes,
        bit_equal=all(torch.equal(bits(mine[k]), bits(ref_slices[k])) for k in ref_slices))
    for r in out["runs"]:
        extra = {k: v for k, v in r.items() if k not in ("what", "seconds", "gbps")}
        print(f"{r['what']:55s} {r['gbps']:7.2f} GB/s  {r['seconds']:7.3f} s  {extra}")
    print(f"iter_tensors mismatches against safetensors: {mismatches}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
