"""transformers' from_pretrained, unchanged, with plain safetensors and through hoist: one load
per process, timed around the call alone, every parameter fingerprinted for a bit-for-bit
comparison between modes.

    python3 from_pretrained.py make DIR [--layers 32]        # a llama-shaped bf16 checkpoint
    python3 from_pretrained.py load DIR --mode plain|patch|transformers [--device-map MAP]
                                      [--fingerprint FILE]  # one JSON line: seconds, GB/s, peak
    python3 from_pretrained.py compare A.json B.json         # exit 1 unless every parameter equal

Modes: plain (the installed safetensors), patch (hoist.safetensors.patch() before transformers
is imported), transformers (hoist.transformers.enable()). MAP: cuda:0 (default), or auto-cpu:
device_map="auto" with max_memory leaving about a quarter of the model on the CPU.
"""
import argparse
import json
import os
import sys
import time


def make(directory, layers):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers,
                         num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                         max_position_embeddings=8192, rope_theta=500000.0,
                         tie_word_embeddings=False, torch_dtype="bfloat16")
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():  # trained-like values: no zeros, no repeated constants
            p.normal_(0.0, 0.02)
    model.save_pretrained(directory, max_shard_size="5GB")
    size = sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory)
               if f.endswith(".safetensors"))
    print(json.dumps({"made": directory, "bytes": size, "layers": layers}))


def fingerprint(tensor):
    """Two sums over the tensor's bytes (plain and position-weighted), exact in Python ints:
    equal bytes give equal fingerprints, a changed or moved byte almost surely does not."""
    import torch
    if tensor.device.type == "meta":  # offloaded by accelerate's hooks: not compared here
        return ["meta"]
    data = tensor.detach().contiguous().view(-1).view(torch.uint8)
    plain = weighted = 0
    step = 1 << 26
    for start in range(0, data.numel(), step):
        chunk = data[start:start + step].to(torch.int64)
        weights = torch.arange(start, start + chunk.numel(), device=chunk.device,
                               dtype=torch.int64) % 1000003 + 1
        plain += int(chunk.sum())
        weighted += int((chunk * weights).sum())
    return [plain, weighted]


def load(directory, mode, device_map, fingerprint_file, tag):
    import torch
    torch.zeros(1, device="cuda")  # CUDA initialised before the clock, in every mode
    if mode == "patch":
        import hoist.safetensors
        hoist.safetensors.patch()
    import transformers
    from transformers import AutoModelForCausalLM
    if mode == "transformers":
        import hoist.transformers
        hoist.transformers.enable()
    kwargs = {"dtype": torch.bfloat16}
    if device_map == "auto-cpu":
        size = sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory)
                   if f.endswith(".safetensors"))
        kwargs["device_map"] = "auto"
        kwargs["max_memory"] = {0: int(size * 0.75), "cpu": 4 * size}
    else:
        kwargs["device_map"] = device_map
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(directory, **kwargs)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / 1e9
    nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    devices = sorted({str(t.device) for t in model.state_dict().values()})
    record = {"tag": tag or mode, "mode": mode, "device_map": device_map, "seconds": round(seconds, 3),
              "gb": round(nbytes / 1e9, 3), "gbps": round(nbytes / seconds / 1e9, 2),
              "peak_gpu_gb": round(peak, 2), "devices": devices,
              "transformers": transformers.__version__}
    if fingerprint_file:
        prints = {name: [str(t.dtype), list(t.shape)] + fingerprint(t)
                  for name, t in model.state_dict().items()}
        with open(fingerprint_file, "w") as f:
            json.dump(prints, f)
    print(json.dumps(record), flush=True)


def compare(a, b):
    with open(a) as f:
        first = json.load(f)
    with open(b) as f:
        second = json.load(f)
    differ = sorted(k for k in set(first) | set(second) if first.get(k) != second.get(k))
    print(json.dumps({"compared": len(first), "differ": len(differ), "first_differ": differ[:5],
                      "a": a, "b": b}))
    return 1 if differ or not first else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("make")
    p.add_argument("directory")
    p.add_argument("--layers", type=int, default=32)
    p = sub.add_parser("load")
    p.add_argument("directory")
    p.add_argument("--mode", choices=["plain", "patch", "transformers"], required=True)
    p.add_argument("--device-map", default="cuda:0")
    p.add_argument("--fingerprint")
    p.add_argument("--tag")
    p = sub.add_parser("compare")
    p.add_argument("a")
    p.add_argument("b")
    args = parser.parse_args()
    if args.command == "make":
        make(args.directory, args.layers)
    elif args.command == "load":
        load(args.directory, args.mode, args.device_map, args.fingerprint, args.tag)
    else:
        sys.exit(compare(args.a, args.b))


if __name__ == "__main__":
    main()
