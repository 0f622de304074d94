"""transformers 5.17's safetensors calls in from_pretrained, replayed without transformers, timed:
per shard safe_open(framework="pt", device="cpu", backend="mmap"), get_slice for every key, the
keys of all shards in natural order handed to four workers that each take `[...]` and copy it to
cuda:0. Prints one JSON line: seconds, GB/s, the time the copies to the GPU took (summed over
threads), and for hoist each handle's read-ahead counts (the engine's reader).
    python3 replay_transformers.py DIR plain|patch      (environment: HOIST_AHEAD_MIB, HOIST_PIN, ...)
"""
import os, sys, time, json, threading, concurrent.futures
import torch
torch.zeros(1, device="cuda")
mode = sys.argv[2]
d = sys.argv[1]
shards = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".safetensors"))
stats = {"to_s": 0.0}
lock = threading.Lock()
if mode != "plain":
    import hoist.safetensors
    hoist.safetensors.patch()
from safetensors import safe_open
def key(s): return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in s.split(".")]
t0 = time.perf_counter()
handles, slices = [], {}
for p in shards:
    f = safe_open(p, framework="pt", device="cpu", backend="mmap"); handles.append(f)
    for k in f.keys(): slices[k] = f.get_slice(k)
def mat(s):
    t = s[...]
    a = time.perf_counter(); r = t.to(device="cuda:0", dtype=torch.bfloat16)
    with lock: stats["to_s"] += time.perf_counter() - a
    return r
with concurrent.futures.ThreadPoolExecutor(4) as pool:
    futs = [pool.submit(mat, slices[k]) for k in sorted(slices, key=key)]
    out = [f.result() for f in futs]
torch.cuda.synchronize()
secs = time.perf_counter() - t0
n = sum(t.numel() * t.element_size() for t in out)
if mode != "plain":
    stats["ahead"] = [h._host.stats for h in handles]
for f in handles: f.__exit__(None, None, None)
print(json.dumps({"mode": mode, "env": {k: v for k, v in os.environ.items() if k.startswith(("HOIST_", "PYTORCH_CUDA"))}, "s": round(secs, 3), "gbps": round(n / secs / 1e9, 2), **{k: (round(v, 3) if isinstance(v, float) else v) for k, v in stats.items()}}))
