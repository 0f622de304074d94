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
            device = (load_config.device_map or {"": "cpu"}).get("", "cpu")

            def materialize(value, dtype):
                assert value.get_dtype().startswith(("F", "BF", "I"))
                tensor = value[...]
                return tensor.to(device=device, dtype=dtype)
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                futures = {k: pool.submit(materialize, state_dict[k], load_config.dtype)
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
                 (Config(device_map={"a": "cuda:0", "b": "cpu"}),
                  "the device_map spreads the model over ['cpu', 'cuda:0']"),
                 (Config(hf_quantizer=object()), "a quantizer converts the weights")]
        for config, reason in cases:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = self.load(config) if "spreads" not in reason else None
                if out is None:  # the stand-in puts everything on "" only: just the decision
                    from hoist.transformers import _applies
                    self.assertEqual(_applies({"checkpoint_files": self.files,
                                               "load_config": config})[0], reason)
                    continue
            self.assertEqual([str(w.message) for w in caught],
                             [f"hoist.transformers: {reason}; transformers loads it itself"])
            self.assertEqual(set(self.modeling_utils.PreTrainedModel.calls[-1].values()),
                             {"_Slice"})
            self.assertTrue(all(torch.equal(out[k], t) for k, t in self.tensors.items()))
        self.hook.disable()
        self.assertFalse(self.hook.enabled())
        self.load(Config())
        self.assertEqual(set(self.modeling_utils.PreTrainedModel.calls[-1].values()), {"_Slice"})

    def test_an_error_in_the_stream_reaches_the_worker_that_waits(self):
        import hoist
        stream = self.hook._CheckpointStream(self.files, "cpu")
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
