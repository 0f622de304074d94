"""On the GPU machine: hoist's Python module against safetensors on one file, in one run.

  1. hoist.load_file(path, device) and safetensors.torch.load_file(path, device) give the same
     keys, dtypes, shapes and bits (torch.equal on same-width integer views, tensor by tensor);
  2. both timed warm (page cache) and cold (page cache dropped before each run);
  3. hoist.torch.load_into fills a transformer built from the file's shapes in place, with
     torch.cuda.max_memory_allocated before and after (the weights must not exist twice).

Usage: python3 bench/python/vs_safetensors.py MODEL.safetensors [--device cuda:0]
       [--out results.json]. Prints a summary; writes every figure to --out, with "peers" rows
that bench/gpu/merge_bench_peers.py adds to `hoist bench`'s table.
"""
import argparse
import json
import os
import statistics
import subprocess
import time

import torch
from safetensors import safe_open
from safetensors.torch import load_file

import hoist
import hoist.torch


def drop_caches(path):
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return "drop_caches"
    except OSError as e:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        return f"posix_fadvise DONTNEED ({e})"


_SAME_WIDTH_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bit_equal(a, b):
    """Same dtype, shape and bits. (torch.equal on the floats themselves is False wherever a
    value is NaN, and the sample model's pseudo-random weights hold many NaN patterns.)"""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    as_int = _SAME_WIDTH_INT[a.element_size()]
    return torch.equal(a.reshape(-1).view(as_int), b.reshape(-1).view(as_int))


def timed(fn):
    torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    torch.cuda.synchronize()
    return result, time.perf_counter() - start


def build_transformer(model, device):
    """A llama-shaped module whose state_dict names and dtypes are the file's (blk.N.*)."""
    nn = torch.nn
    info = model.tensors
    dtype = lambda name: hoist.torch_dtype(model, name)  # noqa: E731
    vocab, h = info["token_embd.weight"].shape
    ff = info["blk.0.ffn_gate.weight"].shape[0]
    layers = 1 + max(int(n.split(".")[1]) for n in info if n.startswith("blk."))

    class Norm(nn.Module):
        def __init__(self, name):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(h, dtype=dtype(name + ".weight")))

    def linear(name, n_in, n_out):
        return nn.Linear(n_in, n_out, bias=False, dtype=dtype(name + ".weight"))

    class Block(nn.Module):
        def __init__(self, i):
            super().__init__()
            p = f"blk.{i}."
            self.attn_norm = Norm(p + "attn_norm")
            self.attn_q = linear(p + "attn_q", h, h)
            self.attn_k = linear(p + "attn_k", h, h)
            self.attn_v = linear(p + "attn_v", h, h)
            self.attn_output = linear(p + "attn_output", h, h)
            self.ffn_norm = Norm(p + "ffn_norm")
            self.ffn_gate = linear(p + "ffn_gate", h, ff)
            self.ffn_up = linear(p + "ffn_up", h, ff)
            self.ffn_down = linear(p + "ffn_down", ff, h)

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.token_embd = nn.Embedding(vocab, h, dtype=dtype("token_embd.weight"))
            self.blk = nn.ModuleList(Block(i) for i in range(layers))
            self.output_norm = Norm("output_norm")
            self.output = linear("output", h, vocab)

    with torch.device("meta"):
        module = Transformer()
    return module.to_empty(device=device), {"vocab": vocab, "hidden": h, "ffn": ff, "layers": layers}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--out", default="python_vs_safetensors.json")
    args = parser.parse_args()
    dev = torch.device(args.device)
    torch.zeros(1, device=dev)  # the CUDA context, outside every timing
    model = hoist.open(args.path)
    nbytes = sum(t.nbytes for t in model.tensors.values())
    gb = nbytes / 1e9
    out = {"path": args.path, "bytes": nbytes, "tensors": len(model.tensors), "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(dev), "hoist": hoist.__version__}
    print(f"model: {args.path}: {len(model.tensors)} tensors, {nbytes / 2**30:.2f} GiB; torch {torch.__version__}",
          flush=True)

    # Warm: the first hoist load fills the page cache and is not counted.
    hoist.load_file(args.path, device=dev)
    torch.cuda.empty_cache()
    warm = {"hoist.load_file": [], "hoist.load_file, staging pinned afresh": [],
            "safetensors.torch.load_file": [], "safetensors safe_open+.to": []}
    for _ in range(3):
        t, s = timed(lambda: hoist.load_file(args.path, device=dev))
        warm["hoist.load_file"].append(gb / s)
        del t
    for _ in range(2):  # as the first load in a process: no staging memory kept from before
        hoist.release_cached_memory()
        t, s = timed(lambda: hoist.load_file(args.path, device=dev))
        warm["hoist.load_file, staging pinned afresh"].append(gb / s)
        del t
    for _ in range(2):
        t, s = timed(lambda: load_file(args.path, device=args.device))
        warm["safetensors.torch.load_file"].append(gb / s)
        del t

    def safe_open_to():
        result = {}
        with safe_open(args.path, framework="pt") as f:
            for name in f.keys():
                result[name] = f.get_tensor(name).to(dev)
        return result
    t, s = timed(safe_open_to)
    warm["safetensors safe_open+.to"].append(gb / s)
    del t
    torch.cuda.empty_cache()
    out["warm_gbps"] = {k: {"median": statistics.median(v), "runs": v} for k, v in warm.items()}
    for k, v in warm.items():
        print(f"warm {k:30s} {statistics.median(v):7.2f} GB/s (runs {', '.join(f'{x:.2f}' for x in v)})", flush=True)

    # Equality, tensor by tensor.
    ours = hoist.load_file(args.path, device=dev)
    theirs = load_file(args.path, device=args.device)
    assert set(ours) == set(theirs), "different keys"
    unequal = [k for k in theirs if not bit_equal(ours[k], theirs[k])]
    out["equal_tensors"] = len(theirs) - len(unequal)
    out["unequal_tensors"] = unequal
    print(f"equal: {len(theirs) - len(unequal)} of {len(theirs)} tensors bit-equal to safetensors' "
          "(dtype, shape, torch.equal on same-width integer views)"
          + (f"; DIFFERENT: {unequal[:5]}" if unequal else ""), flush=True)
    del ours, theirs
    torch.cuda.empty_cache()

    # Cold: the page cache dropped before each run; first the disk's own rate, a raw parallel
    # O_DIRECT read of the file (hoist_ceilings, 8 threads x 64 MiB), in this same run.
    cold = {}
    ceilings = os.environ.get("HOIST_CEILINGS")
    if ceilings:
        drop_caches(args.path)
        raw = subprocess.run([ceilings, "read", args.path, "--threads", "8", "--chunk-mib", "64", "--direct"],
                             capture_output=True, text=True, check=True)
        out["raw_direct_read_gbps"] = json.loads(raw.stdout)["gbps"]
        print(f"cold raw O_DIRECT read (8 x 64 MiB)           {out['raw_direct_read_gbps']:7.2f} GB/s", flush=True)
    out["cold_drop"] = drop_caches(args.path)
    _, s = timed(lambda: load_file(args.path, device=args.device))
    cold["safetensors.torch.load_file"] = gb / s
    torch.cuda.empty_cache()
    drop_caches(args.path)
    t, s = timed(safe_open_to)
    cold["safetensors safe_open+.to"] = gb / s
    del t
    torch.cuda.empty_cache()
    drop_caches(args.path)
    _, s = timed(lambda: hoist.load_file(args.path, device=dev, direct_io=True))
    cold["hoist.load_file(direct_io=True)"] = gb / s
    torch.cuda.empty_cache()
    drop_caches(args.path)
    _, s = timed(lambda: hoist.load_file(args.path, device=dev))
    cold["hoist.load_file"] = gb / s
    torch.cuda.empty_cache()
    out["cold_gbps"] = cold
    print(f"cold (page cache dropped: {out['cold_drop']}):", flush=True)
    for k, v in cold.items():
        print(f"cold {k:33s} {v:7.2f} GB/s", flush=True)
    st_warm = out["warm_gbps"]["safetensors.torch.load_file"]["median"]
    out["speedup_warm"] = out["warm_gbps"]["hoist.load_file"]["median"] / st_warm
    out["speedup_cold"] = cold["hoist.load_file(direct_io=True)"] / cold["safetensors.torch.load_file"]
    print(f"hoist.load_file is {out['speedup_warm']:.1f}x safetensors warm, {out['speedup_cold']:.2f}x cold",
          flush=True)
    if "raw_direct_read_gbps" in out:
        out["cold_ratio_to_disk"] = cold["hoist.load_file(direct_io=True)"] / out["raw_direct_read_gbps"]
        print(f"hoist.load_file cold is {100 * out['cold_ratio_to_disk']:.0f}% of the raw disk read", flush=True)

    # load_into: a transformer built from the file, filled in place.
    module, config = build_transformer(model, dev)
    params = module.state_dict()
    param_bytes = sum(p.numel() * p.element_size() for p in params.values())
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats(dev)
    before = torch.cuda.memory_allocated(dev)
    free_before = torch.cuda.mem_get_info(dev)[0]
    # Warm the cache first so that this figure is the in-place copy, not the disk.
    with open(args.path, "rb") as f:
        while f.read(64 << 20):
            pass
    result, s = timed(lambda: hoist.torch.load_into(module, args.path))
    peak = torch.cuda.max_memory_allocated(dev)
    free_after = torch.cuda.mem_get_info(dev)[0]
    reference = load_file(args.path, device=args.device)
    mismatched = [k for k, v in module.state_dict().items() if not bit_equal(v, reference[k])]
    out["load_into"] = {
        "config": config, "parameters": len(params), "parameter_bytes": param_bytes,
        "allocated_before": before, "peak_allocated": peak, "peak_over_parameters": peak - before,
        "driver_free_before": free_before, "driver_free_after": free_after,
        "seconds": s, "gbps": gb / s, "loaded": len(result.loaded),
        "missing": result.missing_keys, "unexpected": result.unexpected_keys,
        "not_equal": mismatched,
    }
    print(f"load_into: {config}: {len(result.loaded)} parameters, {param_bytes / 2**30:.2f} GiB in {s:.2f} s "
          f"({gb / s:.2f} GB/s); torch peak allocated {peak / 2**30:.3f} GiB = parameters + "
          f"{(peak - before) / 2**20:.1f} MiB; driver free memory changed by "
          f"{(free_before - free_after) / 2**20:.1f} MiB; {len(mismatched)} not equal to safetensors'",
          flush=True)

    out["peers"] = [
        {"strategy": "safetensors.torch.load_file", "mode": "warm",
         "gbps": out["warm_gbps"]["safetensors.torch.load_file"]["median"]},
        {"strategy": "safetensors safe_open+.to", "mode": "warm",
         "gbps": out["warm_gbps"]["safetensors safe_open+.to"]["median"]},
        {"strategy": "hoist.load_file (Python)", "mode": "warm",
         "gbps": out["warm_gbps"]["hoist.load_file"]["median"]},
        {"strategy": "safetensors.torch.load_file", "mode": "cold", "gbps": cold["safetensors.torch.load_file"]},
        {"strategy": "safetensors safe_open+.to", "mode": "cold", "gbps": cold["safetensors safe_open+.to"]},
        {"strategy": "hoist.load_file (Python)", "mode": "cold", "gbps": cold["hoist.load_file(direct_io=True)"]},
    ]
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
