"""On the GPU machine: where the time of column slices goes. One load_regions of every 2-D
tensor's [:, :half] (the rows' range staged once, only the columns sent), the same cut as rows
([:rows/2], one file range each), and whole tensors, each timed warm after a warm-up, plus the
page-cache read of the same file with hoist's readers (hoist_ceilings) for the read bound.

Usage: python3 scripts/device/slice_probe.py MODEL.safetensors [--device cuda:0] [--out F]
       [--threads N] [--no-loop]
"""
import argparse
import json
import time

import torch

import hoist
import hoist.safetensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--out")
    ap.add_argument("--threads", type=int, default=0,
                    help="readers of every load, the get_slice loop's too (0: hoist's choice)")
    ap.add_argument("--no-loop", action="store_true", help="only the region loads, not the get_slice loop")
    a = ap.parse_args()
    model = hoist.open(a.path)
    dev = torch.device(a.device)
    mats = [n for n, t in model.tensors.items() if len(t.shape) == 2]

    def regions(cut):
        out, keep, nbytes = [], [], 0
        for n in mats:
            shape = model.load_shape(n)
            row_bytes = model.tensors[n].nbytes // shape[0]
            elem = row_bytes // shape[1]
            if cut == "columns":
                r = (0, shape[0], 0, shape[1] // 2 * elem)
                t = torch.empty((shape[0], shape[1] // 2), dtype=hoist.torch_dtype(model, n), device=dev)
            elif cut == "rows":
                r = (0, shape[0] // 2, 0, row_bytes)
                t = torch.empty((shape[0] // 2, shape[1]), dtype=hoist.torch_dtype(model, n), device=dev)
            else:
                r = (0, shape[0], 0, row_bytes)
                t = torch.empty(shape, dtype=hoist.torch_dtype(model, n), device=dev)
            out.append((model._indices[n], row_bytes) + r + (t.data_ptr(),))
            keep.append(t)
            nbytes += t.numel() * t.element_size()
        return out, keep, nbytes

    results = []
    for cut in ("columns", "rows", "whole", "columns"):
        regs, keep, nbytes = regions(cut)
        hoist_name = f"cuda:{dev.index or 0}"
        model._native.load_regions(regs, hoist_name, threads=a.threads)  # warm-up
        torch.cuda.synchronize()
        times = []
        for _ in range(3):
            start = time.perf_counter()
            report = json.loads(model._native.load_regions(regs, hoist_name, threads=a.threads))
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        best = min(times)
        row = dict(cut=cut, bytes=nbytes, read_bytes=report.get("read_bytes"), seconds=times,
                   gbps=nbytes / best / 1e9,
                   file_gbps=(report.get("read_bytes") or nbytes) / best / 1e9,
                   threads=report.get("threads"), gathered_bytes=report.get("gathered_bytes"))
        results.append(row)
        print(f"{cut:8s} {row['gbps']:6.2f} GB/s of slice bytes, {row['file_gbps']:6.2f} GB/s of "
              f"file bytes, best of {[round(t, 3) for t in times]} s, threads {row['threads']}, "
              f"rows gathered by columns {(row['gathered_bytes'] or 0) / 2**30:.2f} GiB",
              flush=True)
        del keep
        torch.cuda.empty_cache()
    # hoist.safetensors' get_slice[:, :half] of every 2-D tensor (keys in sorted order, as
    # safetensors users iterate), with each load_regions call it made timed.
    class Timed:
        def __init__(self, inner):
            self.inner, self.calls = inner, []

        def load_regions(self, regions, device, **kw):
            if a.threads:
                kw["threads"] = a.threads
            start = time.perf_counter()
            out = self.inner.load_regions(regions, device, **kw)
            self.calls.append((len(regions), time.perf_counter() - start,
                               json.loads(out)["bytes"]))
            return out

        def __getattr__(self, k):
            return getattr(self.inner, k)

    # Twice dropping each slice as it comes, then twice keeping them all as a framework keeps
    # its weights (each keeping run starts from an emptied allocator: fresh device memory).
    for run, keep in [] if a.no_loop else [(0, False), (1, False), (0, True), (1, True)]:
        kept = []
        if keep:
            torch.cuda.empty_cache()
        torch.cuda.synchronize()
        start = time.perf_counter()
        nbytes = 0
        with hoist.safetensors.safe_open(a.path, framework="pt", device=a.device) as f:
            timed = Timed(f._model._native)
            f._model._native = timed
            for k in f.keys():
                s = f.get_slice(k)
                shape = s.get_shape()
                if len(shape) == 2:
                    x = s[:, : shape[1] // 2]
                    nbytes += x.numel() * x.element_size()
                    if keep:
                        kept.append(x)
        torch.cuda.synchronize()
        total = time.perf_counter() - start
        in_loads = sum(c[1] for c in timed.calls)
        del kept
        row = dict(cut="get_slice loop" + (" keeping every slice" if keep else ""), run=run,
                   bytes=nbytes, seconds=total,
                   gbps=nbytes / total / 1e9, loads=len(timed.calls), seconds_in_loads=in_loads,
                   loads_gbps=sum(c[2] for c in timed.calls) / in_loads / 1e9,
                   calls=[(c[0], round(c[1], 4), c[2]) for c in timed.calls])
        results.append(row)
        print(f"{row['cut']} {row['gbps']:6.2f} GB/s, {row['loads']} loads taking "
              f"{in_loads:.3f} of {total:.3f} s ({row['loads_gbps']:.2f} GB/s within them)",
              flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
