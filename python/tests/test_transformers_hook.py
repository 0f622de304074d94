"""hoist.transformers against a stand-in for transformers 5.17's loading code (CI has no
transformers): the same _load_pretrained_model signature and the same calls on the state dict's
values (get_dtype, natural key order, four workers each `value[...]` then `.to(device, dtype)`).
Checks that the hook streams the checkpoint through hoist byte-exact, and that it steps aside,
with one warning saying why, where it does not apply. The real transformers runs on the GPU
machine (bench/frameworks/run_from_pretrained.sh MODES=transformers)."""
import os
import sys
import tempfile
import textwrap
import unittest
import warnings

import torch

from hoist.safetensors.torch import save_file

FAKE_MODELING_UTILS = textwrap.dedent('''
    import concurrent.futures
    from hoist.safetensors import safe_open

    def natural(name):
        return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in name.split(".")]

    class PreTrainedModel:
        calls = []

        @staticmethod
        def _load_pretrained_model(model, state_dict, checkpoint_files, load_config,
                                   expected_keys=None):
            pointers = []
            if state_dict is None:  # transformers 5.17: lazy slices of every shard
                state_dict = {}
                for f in checkpoint_files:
                    p = safe_open(f, framework="pt", device="cpu", backend="mmap")
                    pointers.append(p)
                    state_dict.update({k: p.get_slice(k) for k in p.keys()})
            PreTrainedModel.calls.append({k: type(v).__name__ for k, v in state_dict.items()})
            device_map = load_config.device_map or {"": "cpu"}

            def device_for(key):  # accelerate's get_device: the longest prefix in the map
                while key not in device_map and key:
                    key = key.rpartition(".")[0]
                return device_map.get(key, "cpu")

            def materialize(key, value, dtype):
                assert value.get_dtype().startswith(("F", "BF", "I"))
                tensor = value[...]
                return tensor.to(device=device_for(key), dtype=dtype)
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                futures = {k: pool.submit(materialize, k, state_dict[k], load_config.dtype)
                           for k in sorted(state_dict, key=natural)}
                out = {k: f.result() for k, f in futures.items()}
            for p in pointers:
                p.__exit__(None, None, None)
            return out
''')


class Config:
    def __init__(self, device_map=None, dtype=None, hf_quantizer=None):
        self.device_map = device_map
        self.dtype = dtype
        self.hf_quantizer = hf_quantizer
        self.device_mesh = None


class TransformersHookTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        package = os.path.join(self.tmp.name, "fake", "transformers")
        os.makedirs(os.path.join(package, "integrations"))
        with open(os.path.join(package, "__init__.py"), "w") as f:
            f.write("__version__ = '5.17.0-stand-in'\n")
        with open(os.path.join(package, "modeling_utils.py"), "w") as f:
            f.write(FAKE_MODELING_UTILS)
        with open(os.path.join(package, "integrations", "__init__.py"), "w") as f:
            f.write("")
        with open(os.path.join(package, "integrations", "deepspeed.py"), "w") as f:
            f.write("def is_deepspeed_zero3_enabled():\n    return False\n")
        self.saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] == "transformers"}
        for k in self.saved:
            del sys.modules[k]
        sys.path.insert(0, os.path.dirname(package))
        self.addCleanup(self.restore)
        import hoist.transformers
        self.hook = hoist.transformers
        from transformers import modeling_utils
        self.modeling_utils = modeling_utils
        g = torch.Generator().manual_seed(23)
        self.tensors = {}
        for i in range(12):
            for part, shape in (("q_proj", (64, 32)), ("norm", (32,))):
                dtype = torch.float32 if part == "norm" else torch.bfloat16
                self.tensors[f"model.layers.{i}.{part}.weight"] = torch.randn(
                    *shape, generator=g).to(dtype)
        self.tensors["lm_head.weight"] = torch.randn(100, 32, generator=g).to(torch.bfloat16)
        names = sorted(self.tensors)
        self.files = []
        for s in range(3):
            path = os.path.join(self.tmp.name, f"model-0000{s + 1}-of-00003.safetensors")
            save_file({n: self.tensors[n] for n in names[s::3]}, path)
            self.files.append(path)

    def restore(self):
        self.hook.disable()
        sys.path.remove(os.path.join(self.tmp.name, "fake"))
        for k in [k for k in sys.modules if k.split(".")[0] == "transformers"]:
            del sys.modules[k]
        sys.modules.update(self.saved)

    def load(self, config):
        return self.modeling_utils.PreTrainedModel._load_pretrained_model(
            None, None, self.files, config)

    def test_the_checkpoint_streams_through_hoist_byte_exact(self):
        self.hook.enable()
        self.hook.enable()  # idempotent
        self.assertTrue(self.hook.enabled())
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no fallback warning
            out = self.load(Config(device_map={"": "cpu"}))
        self.assertEqual(set(self.modeling_utils.PreTrainedModel.calls[-1].values()), {"_Pending"})
        self.assertEqual(set(out), set(self.tensors))
        for k, t in self.tensors.items():
            self.assertEqual(out[k].dtype, t.dtype, k)
            self.assertTrue(torch.equal(out[k], t), k)
        # A dtype transformers asks for is its own cast of hoist's tensor.
        cast = self.load(Config(device_map={"": "cpu"}, dtype=torch.float32))
        self.assertTrue(torch.equal(cast["lm_head.weight"], self.tensors["lm_head.weight"].float()))

    def test_where_it_does_not_apply_transformers_loads_itself_and_says_why(self):
        self.hook.enable()
        cases = [(Config(device_map={"a": "cpu", "b": "disk"}), "the device_map offloads to disk"),
                 (Config(device_map={"": "meta"}),
                  "the device_map keeps part of the model on meta"),
                 (Config(device_map={"model": "cpu", "lm_head": "mps"}),
                  "hoist does not load onto mps"),
                 (Config(hf_quantizer=object()), "a quantizer converts the weights")]
        for config, reason in cases:
            if "mps" in reason or "meta" in reason:  # torch here has neither: just the decision
                self.assertEqual(self.hook._applies({"checkpoint_files": self.files,
                                                     "load_config": config})[0], reason)
                continue
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = self.load(config)
            self.assertEqual([str(w.message) for w in caught],
                             [f"hoist.transformers: {reason}; transformers loads it itself"])
            self.assertEqual(set(self.modeling_utils.PreTrainedModel.calls[-1].values()),
                             {"_Slice"})
            self.assertTrue(all(torch.equal(out[k], t) for k, t in self.tensors.items()))
        self.hook.disable()
        self.assertFalse(self.hook.enabled())
        self.load(Config())
        self.assertEqual(set(self.modeling_utils.PreTrainedModel.calls[-1].values()), {"_Slice"})

    def test_a_device_map_over_several_devices_streams_each_key_to_its_device(self):
        device_map = {"model.layers.1": "cuda:1", "model.layers": 0, "lm_head": "cpu",
                      "model.norm": "cuda"}
        reason, resolved = self.hook._applies({"checkpoint_files": self.files,
                                               "load_config": Config(device_map=device_map)})
        self.assertIsNone(reason)
        self.assertEqual(resolved, {"model.layers.1": "cuda:1", "model.layers": "cuda:0",
                                    "lm_head": "cpu", "model.norm": "cuda:0"})
        where = {k: self.hook.device_of(resolved, k) for k in (
            "model.layers.1.q_proj.weight", "model.layers.10.q_proj.weight", "lm_head.weight",
            "model.norm.weight", "model.embed_tokens.weight")}
        self.assertEqual(where, {"model.layers.1.q_proj.weight": "cuda:1",
                                 "model.layers.10.q_proj.weight": "cuda:0",
                                 "lm_head.weight": "cpu", "model.norm.weight": "cuda:0",
                                 # no entry covers it: where most of the map's entries are
                                 "model.embed_tokens.weight": "cuda:0"})
        # Two streams at once (CI has no GPU: "cpu" and hoist's "host" are two targets here).
        stream = self.hook._CheckpointStream(
            self.files, lambda k: "host" if k.startswith("lm_head") or "1." in k else "cpu")
        self.assertEqual(len(stream._groups), 2)
        lazy = stream.lazy_state_dict()
        import concurrent.futures
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            out = dict(zip(lazy, pool.map(lambda k: lazy[k][...], lazy)))
        stream.close()
        self.assertEqual(set(out), set(self.tensors))
        for k, t in self.tensors.items():
            self.assertTrue(torch.equal(out[k], t), k)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            self.hook.enable()
            out = self.load(Config(device_map={"model": "cpu", "lm_head": "cpu"}))
        self.assertEqual(set(self.modeling_utils.PreTrainedModel.calls[-1].values()), {"_Pending"})
        self.assertTrue(all(torch.equal(out[k], t) for k, t in self.tensors.items()))

    def test_a_checkpoint_hoist_serve_holds_is_attached_from_its_holder(self):
        import signal
        import subprocess
        runtime = os.path.join(self.tmp.name, "run")
        os.mkdir(runtime, 0o700)
        saved = os.environ.get("XDG_RUNTIME_DIR")
        os.environ["XDG_RUNTIME_DIR"] = runtime
        self.addCleanup(lambda: os.environ.pop("XDG_RUNTIME_DIR") if saved is None else
                        os.environ.__setitem__("XDG_RUNTIME_DIR", saved))
        shards = os.path.join(self.tmp.name, "shards")
        os.mkdir(shards)
        for f in self.files:
            os.rename(f, os.path.join(shards, os.path.basename(f)))
        self.files = [os.path.join(shards, os.path.basename(f)) for f in self.files]
        holder = subprocess.Popen([os.environ.get("HOIST_CLI", "hoist"), "serve", shards,
                                   "--device", "host", "--json"], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
        self.addCleanup(holder.stdout.close)
        self.addCleanup(holder.wait)
        self.addCleanup(holder.kill)
        self.assertIn('"ready":true', holder.stdout.readline())

        def refuse(*args):
            raise AssertionError("the checkpoint was streamed from its files, not attached")
        self.hook._CheckpointStream, streamed = refuse, self.hook._CheckpointStream
        self.addCleanup(setattr, self.hook, "_CheckpointStream", streamed)
        self.hook.enable()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = self.load(Config(device_map={"": "cpu"}))
        holder.send_signal(signal.SIGTERM)  # what was attached stays
        self.assertEqual(holder.wait(10), 0)
        self.assertEqual(set(out), set(self.tensors))
        for k, t in self.tensors.items():
            self.assertEqual(out[k].dtype, t.dtype, k)
            self.assertTrue(torch.equal(out[k], t), k)

    def test_patch_enables_it_quietly_when_transformers_is_imported(self):
        import hoist.safetensors
        del sys.modules["transformers.modeling_utils"]  # as if not imported yet
        del sys.modules["transformers"].modeling_utils
        hoist.safetensors.patch()
        self.addCleanup(hoist.safetensors.unpatch)
        self.assertFalse(self.hook.enabled())
        from transformers import modeling_utils
        self.modeling_utils = modeling_utils
        self.assertTrue(self.hook.enabled())
        out = self.load(Config(device_map={"": "cpu"}))
        self.assertEqual(set(modeling_utils.PreTrainedModel.calls[-1].values()), {"_Pending"})
        self.assertTrue(all(torch.equal(out[k], t) for k, t in self.tensors.items()))
        with warnings.catch_warnings():  # where it does not apply, patch()'s safetensors loads
            warnings.simplefilter("error")
            out = self.load(Config(device_map={"a": "cpu", "b": "disk"}))
        self.assertEqual(set(modeling_utils.PreTrainedModel.calls[-1].values()), {"_Slice"})
        self.assertTrue(all(torch.equal(out[k], t) for k, t in self.tensors.items()))
        hoist.safetensors.unpatch()
        self.assertFalse(self.hook.enabled())
        hoist.safetensors.patch(transformers=False)
        self.assertFalse(self.hook.enabled())
        hoist.safetensors.unpatch()
        hoist.safetensors.patch()  # transformers already imported: enabled at once
        self.assertTrue(self.hook.enabled())

    def test_an_error_in_the_stream_reaches_the_worker_that_waits(self):
        import hoist
        stream = self.hook._CheckpointStream(self.files, lambda key: "cpu")
        lazy = stream.lazy_state_dict()
        with open(self.files[2], "r+b") as f:  # the last shard is cut short after it was opened
            f.truncate(os.path.getsize(self.files[2]) - 64)
        last = [k for k in lazy if k in set(hoist.open(self.files[0]).tensors)][0]
        self.assertTrue(torch.equal(lazy[last][...], self.tensors[last]))
        with self.assertRaises(hoist.HoistError) as caught:
            for name in lazy:
                if name != last:  # each tensor is handed over once
                    lazy[name][...]
        self.assertIn(self.files[2], str(caught.exception))
        stream.close()
        with self.assertRaises(hoist.HoistError) as caught:  # handed over, not kept
            stream.take(last)
        self.assertIn("was asked for twice", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
