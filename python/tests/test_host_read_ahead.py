"""safe_open(device="cpu") through the engine's consumer-ordered reader (its rules are tested in
tests/pipeline/read_ahead_test.cpp): transformers 5.17's exact call sequence under patch(),
byte-exact; a handle dropped without closing ends its reader; eight threads on one handle; the
host tensors are pinned where a GPU is present and keep their memory while they live."""
import concurrent.futures
import os
import random
import tempfile
import threading
import unittest
from unittest import mock

import torch

import hoist.safetensors
from hoist.safetensors import safe_open
from hoist.safetensors.torch import save_file


def layer_names(layers):
    names = ["lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"]
    for i in range(layers):
        for part in ("input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "mlp.up_proj"):
            names.append(f"model.layers.{i}.{part}.weight")
    return names


def natural_key(name):
    """transformers' dot_natural_key: dot-separated parts, numbers compared as numbers."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in name.split(".")]


def transformers_5_17_load(shard_paths, device, dtype):
    """transformers 5.17's safetensors calls in from_pretrained, replayed: per shard
    safe_open(framework="pt", device="cpu", backend="mmap") (no `with`), get_slice for every
    key up front, the keys of all shards sorted by dot_natural_key and submitted to four
    workers, each `slice[...]` then `.to(device=..., dtype=...)`, then every handle's __exit__."""
    from safetensors import safe_open as patched_safe_open
    handles, slices = [], {}
    for path in shard_paths:
        f = patched_safe_open(path, framework="pt", device="cpu", backend="mmap")
        handles.append(f)
        for k in f.keys():
            slices[k] = f.get_slice(k)

    def materialize_copy(tensor, dev, dt):
        tensor = tensor[...]
        if dt is not None or dev is not None:
            tensor = tensor.to(device=dev, dtype=dt)
        return tensor
    out = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        futures = {k: pool.submit(materialize_copy, slices[k], device, dtype)
                   for k in sorted(slices, key=natural_key)}
        for k, fut in futures.items():
            out[k] = fut.result()
    for f in handles:
        f.__exit__(None, None, None)
    return out


class TransformersReplayTest(unittest.TestCase):
    def test_from_pretrained_call_sequence_is_byte_exact_under_patch(self):
        g = torch.Generator().manual_seed(17)
        names = layer_names(12)
        tensors = {}
        for n in names:
            shape = (64, 32) if "proj" in n else (32,)
            dtype = torch.float32 if "norm" in n else torch.bfloat16
            tensors[n] = torch.randn(*shape, generator=g).to(dtype)
        with tempfile.TemporaryDirectory() as tmp:
            shards = []
            ordered = sorted(names)
            for s in range(2):  # two shards, each lexicographic inside, as save_pretrained writes
                part = {n: tensors[n] for n in ordered[s::2]}
                shards.append(os.path.join(tmp, f"model-0000{s + 1}-of-00002.safetensors"))
                save_file(part, shards[-1], metadata={"format": "pt"})
            hoist.safetensors.patch()
            try:
                with mock.patch.dict(os.environ, {"HOIST_AHEAD_MIB": "0.02"}):  # several batches
                    got = transformers_5_17_load(shards, "cpu", None)
            finally:
                hoist.safetensors.unpatch()
        self.assertEqual(set(got), set(names))
        for n in names:
            self.assertEqual(got[n].dtype, tensors[n].dtype, n)
            self.assertTrue(torch.equal(got[n], tensors[n]), n)

    def test_a_handle_dropped_without_closing_ends_its_read_ahead(self):
        import gc
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.safetensors")
            save_file({f"w{i}": torch.full((64,), i) for i in range(8)}, path)
            f = safe_open(path, framework="pt")
            f.get_tensor("w0")
            f.get_tensor("w1")  # the read-ahead thread starts
            reader = f._host._native
            self.assertEqual(reader.take(2).nbytes, 64 * 8)
            del f
            gc.collect()
            with self.assertRaisesRegex(ValueError, "the reader is closed"):
                reader.take(3)  # closed (its threads joined) when the handle went

    def test_tensors_outlive_their_handle_and_bad_settings_are_refused(self):
        import gc
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.safetensors")
            tensors = {f"w{i}": torch.full((1000,), i, dtype=torch.int32) for i in range(16)}
            save_file(tensors, path)
            with safe_open(path, framework="pt") as f:
                got = {k: f.get_tensor(k) for k in f.keys()}
                pinned = f._host._native.take(0).pinned
            self.assertEqual(pinned, torch.cuda.is_available())
            gc.collect()
            for k, t in tensors.items():
                self.assertTrue(torch.equal(got[k], t), k)
            for variable, value in (("HOIST_AHEAD_MIB", "lots"), ("HOIST_PIN", "maybe")):
                with mock.patch.dict(os.environ, {variable: value}), \
                        self.assertRaisesRegex(hoist.safetensors.SafetensorError,
                                               f"{variable}='{value}': expected"):
                    safe_open(path, framework="pt")

    def test_eight_threads_on_one_cpu_and_one_device_handle(self):
        g = torch.Generator().manual_seed(2)
        tensors = {f"w{i:02d}": torch.randn(16, 8 + i, generator=g) for i in range(64)}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.safetensors")
            save_file(tensors, path)
            for device in ("cpu", "sim"):
                with safe_open(path, framework="pt", device=device) as f:
                    errors = []

                    def work(seed):
                        rng = random.Random(seed)
                        for _ in range(64):
                            k = rng.choice(list(tensors))
                            try:
                                if rng.random() < 0.5:
                                    ok = torch.equal(f.get_tensor(k), tensors[k])
                                else:
                                    ok = torch.equal(f.get_slice(k)[2:5], tensors[k][2:5])
                                if not ok:
                                    errors.append(f"{device} {k}: wrong bytes")
                            except Exception as e:  # noqa: BLE001 (collected and reported)
                                errors.append(f"{device} {k}: {e!r}")
                    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join()
                    self.assertEqual(errors, [])


if __name__ == "__main__":
    unittest.main()
