"""transformers' from_pretrained, unchanged, with plain safetensors and through hoist: one load
per process, timed around the call alone, every parameter fingerprinted for a bit-for-bit
comparison between modes.

    python3 from_pretrained.py make DIR [--layers 32]        # a llama-shaped bf16 checkpoint
    python3 from_pretrained.py load DIR --mode plain|patch|patch-safetensors|transformers [--device-map MAP]
                                      [--fingerprint FILE]  # one JSON line: seconds, GB/s, peak
    python3 from_pretrained.py compare A.json B.json         # exit 1 unless every parameter equal

Modes: plain (the installed safetensors), patch (hoist.safetensors.patch() before transformers
is imported, which enables hoist.transformers too), patch-safetensors (patch(transformers=False):
transformers reads through hoist's safetensors), transformers (hoist.transformers.enable()). MAP: cuda:0 (default), or auto-cpu:
device_map="auto" with max_memory leaving about a quarter of the model on the CPU; half-cpu: a
dict putting the second half of the layers and the head on the CPU. Parameters accelerate keeps
off the GPU are fingerprinted from its hooks' weights.
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
    if tensor.device.type == "meta":  # no value anywhere: compared as such
        return ["meta"]
    data = tensor.detach().contiguous().view(-1).view(torch.uint8)
    plain = weighted = 0
    step = 1 << 26
    for start in range(0, data.numel(), step):
        chunk = data[start:start + step]
        if torch.cuda.is_available():  # the CPU would take seconds per GB
            chunk = chunk.to("cuda")
        chunk = chunk.to(torch.int64)
        weights = torch.arange(start, start + chunk.numel(), device=chunk.device,
                               dtype=torch.int64) % 1000003 + 1
        plain += int(chunk.sum())
        weighted += int((chunk * weights).sum())
    return [plain, weighted]


def offloaded(model):
    """{parameter name: its CPU tensor} for the parameters accelerate's hooks keep off the GPU
    (on meta in the model, their values in the hook's weights_map)."""
    out = {}
    for prefix, module in model.named_modules():
        hook = getattr(module, "_hf_hook", None)
        weights = getattr(hook, "weights_map", None)
        if weights is None:
            continue
        for name, p in module.named_parameters(recurse=False):
            if p.device.type == "meta" and name in weights:
                out[f"{prefix}.{name}" if prefix else name] = weights[name]
    return out


def half_cpu_map(directory):
    """A two-device device_map: the first half of the layers and the embeddings on cuda:0, the
    rest, the final norm and the head on the CPU."""
    with open(os.path.join(directory, "config.json")) as f:
        layers = json.load(f)["num_hidden_layers"]
    device_map = {"model.embed_tokens": 0, "model.rotary_emb": 0}
    device_map.update({f"model.layers.{i}": 0 if i < layers // 2 else "cpu" for i in range(layers)})
    device_map.update({"model.norm": "cpu", "lm_head": "cpu"})
    return device_map


def load(directory, mode, device_map, fingerprint_file, tag):
    import torch
    torch.zeros(1, device="cuda")  # CUDA initialised before the clock, in every mode
    if mode in ("patch", "patch-safetensors"):
        import hoist.safetensors
        hoist.safetensors.patch(transformers=mode == "patch")
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
    elif device_map == "half-cpu":
        kwargs["device_map"] = half_cpu_map(directory)
    else:
        kwargs["device_map"] = device_map
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(directory, **kwargs)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / 1e9
    state = model.state_dict()
    state.update(offloaded(model))
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    devices = sorted({str(t.device) for t in state.values()})
    record = {"tag": tag or mode, "mode": mode, "device_map": device_map, "seconds": round(seconds, 3),
              "gb": round(nbytes / 1e9, 3), "gbps": round(nbytes / seconds / 1e9, 2),
              "peak_gpu_gb": round(peak, 2), "devices": devices,
              "transformers": transformers.__version__}
    if fingerprint_file:
        prints = {name: [str(t.dtype), list(t.shape)] + fingerprint(t)
                  for name, t in state.items()}
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
    p.add_argument("--mode", choices=["plain", "patch", "patch-safetensors", "transformers"], required=True)
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
