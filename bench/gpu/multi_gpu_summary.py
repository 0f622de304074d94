"""Summarises bench/gpu/multi_gpu.sh's results: one table of GB/s per mode against the
one-GPU load and the ceilings of the same run. Usage: python3 multi_gpu_summary.py OUT_DIR

Rates are of the model's bytes (each file byte once): for a replicated load the bytes landed
are that times the GPUs, and its figure to compare is its time against the one-GPU load's.
"""
import json
import os
import statistics
import sys

out = sys.argv[1]


def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            text = f.read().strip()
        return json.loads(text.splitlines()[-1]) if text else {}
    except (OSError, ValueError) as e:
        return {"error": str(e)}


c1, c2 = load("ceiling-h2d-1.json"), load("ceiling-h2d-all.json")
read, direct = load("ceiling-read.json"), load("ceiling-direct.json")
gpus = len([n for n in os.listdir(out) if n.startswith("independent-")]) or 2
print(f"ceilings: pinned H2D one GPU {c1.get('gbps', 0):.2f} GB/s, all {gpus} at once "
      f"{c2.get('gbps', 0):.2f}; page-cache read {read.get('gbps', 0):.2f}; O_DIRECT read "
      f"{direct.get('gbps', 0):.2f}")
one = [load(f"one-{r}.json") for r in (1, 2, 3)]
model_bytes = next((j["bytes"] for j in one + [load("cold-one.json")] if "bytes" in j), 0)
one_wall = statistics.median([j["wall_s"] for j in one if "wall_s" in j] or [0])
print(f"model: {model_bytes / 2**30:.2f} GiB; one-GPU load median {one_wall:.3f} s")
print(f"{'mode':<10} {'warm GB/s (model bytes / wall), 3 rounds':<44} {'x ceiling':>9} "
      f"{'time / one-GPU':>14}  per GPU (stream GB/s of its bytes)")
for mode in ("one", "layer", "tensor", "replicate"):
    runs = [load(f"{mode}-{r}.json") for r in (1, 2, 3)]
    ok = [j for j in runs if "wall_s" in j]
    if not ok:
        print(f"{mode:<10} {runs}")
        continue
    rates = [model_bytes / j["wall_s"] / 1e9 for j in ok]
    best = max(ok, key=lambda j: model_bytes / j["wall_s"])
    ceiling = c1.get("gbps", 0) if mode == "one" else c2.get("gbps", 0)
    per = ", ".join(f"{d['device']} {d['bytes'] / 2**30:.2f} GiB {d['stream_gbps']:.1f}"
                    for d in best.get("devices", []))
    wall = statistics.median([j["wall_s"] for j in ok])
    print(f"{mode:<10} {', '.join(f'{r:.2f}' for r in rates):<44} "
          f"{max(rates) / ceiling if ceiling else 0:>9.3f} {wall / one_wall if one_wall else 0:>14.3f}  {per}"
          f"{'  fallbacks: ' + '; '.join(best['fallbacks']) if best.get('fallbacks') else ''}")
for mode in ("layer", "tensor", "replicate"):
    j = load(f"verify-{mode}.json")
    print(f"verify {mode}: verified={j.get('verified')} mismatches={len(j.get('mismatches', []))} "
          f"parts={j.get('tensor_count')}")
ind = [load(f"independent-{g}.json") for g in range(gpus)]
if all("wall_s" in j for j in ind):
    wall = max(j["wall_s"] for j in ind)
    rates = ", ".join("%.2f" % j["gbps"] for j in ind)
    print(f"peer: {gpus} independent hoist processes: {rates} GB/s, "
          f"all done in {wall:.3f} s ({gpus * model_bytes / wall / 1e9:.2f} GB/s landed)")
tp = load("peer-safetensors-tp.json")
if "wall_s" in tp:
    print(f"peer: safetensors get_slice per rank, {gpus} processes: {tp['wall_s']:.3f} s, "
          f"{model_bytes / tp['wall_s'] / 1e9:.2f} GB/s of model bytes")
try:
    with open(os.path.join(out, "rank-mode.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            print(f"rank mode {r['split']} round {r['round']}: {r['gbps']:.2f} GB/s of model bytes "
                  f"over {r['wall_s']:.3f} s on {r['ranks']} ranks"
                  + (f", mismatches={r['mismatches']}" if r["checked"] else ""))
except (OSError, ValueError) as e:
    print(f"rank mode: {e}")
for mode in ("one", "layer", "tensor", "replicate"):
    j = load(f"cold-{mode}.json")
    if "wall_s" in j:
        rate = model_bytes / j["wall_s"] / 1e9
        print(f"cold {mode}: {rate:.2f} GB/s, {rate / direct.get('gbps', 1):.3f} of the O_DIRECT read")
