"""hoist.safetensors has every name of safetensors 0.8.0's Python surface, public and private,
with the parameters 0.8 takes (the list, safetensors_reference/surface-0.8.0.json, was taken
from 0.8.0's __init__.pyi, torch.py and numpy.py); and what unchanged consumers do with them
under patch(): import, open with backend=, frameworks they name, save and load models."""
import inspect
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

import torch

import hoist.safetensors
import hoist.safetensors.numpy
import hoist.safetensors.torch
from hoist.safetensors import SafetensorError, safe_open
from hoist.safetensors.torch import load_file, load_model, save_file, save_model

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "safetensors_reference", "surface-0.8.0.json")) as _f:
    SURFACE = json.load(_f)


def parameters(callable_):
    """(positional names, keyword-only names) a callable accepts."""
    signature = inspect.signature(callable_)
    positional = [p.name for p in signature.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword = [p.name for p in signature.parameters.values() if p.kind == p.KEYWORD_ONLY]
    return positional, keyword


def problems(module, theirs):
    """What `module` lacks of `theirs` (0.8's entries for one module): missing names, methods,
    positional parameters in 0.8's order, keyword parameters."""
    found = []
    for name, entry in theirs.items():
        if not hasattr(module, name):
            found.append(f"{name} is missing")
            continue
        value = getattr(module, name)
        if entry["kind"] == "function":
            positional, keyword = parameters(value)
            if positional[:len(entry["args"])] != entry["args"]:
                found.append(f"{name}{tuple(positional)}: 0.8 takes {tuple(entry['args'])}")
            found += [f"{name} takes no {kw}=" for kw in entry["kwonly"]
                      if kw not in positional + keyword]
        elif entry["kind"] == "class":
            for method, spec in entry["methods"].items():
                if not hasattr(value, method):
                    found.append(f"{name}.{method} is missing")
                elif method == "__init__" and spec["args"]:
                    positional, keyword = parameters(value.__init__)
                    if positional[1:1 + len(spec["args"])] != spec["args"]:
                        found.append(f"{name}{tuple(positional[1:])}: 0.8 takes "
                                     f"{tuple(spec['args'])}")
                    found += [f"{name} takes no {kw}=" for kw in spec["kwonly"]
                              if kw not in keyword]
    return found


MODULES = {"safetensors": hoist.safetensors, "safetensors.torch": hoist.safetensors.torch,
           "safetensors.numpy": hoist.safetensors.numpy}


class NamesParityTest(unittest.TestCase):
    def test_every_name_of_0_8_0_is_here_with_its_parameters(self):
        for name, module in MODULES.items():
            self.assertGreater(len(SURFACE[name]), 5, name)
            self.assertEqual(problems(module, SURFACE[name]), [], name)

    def test_the_check_finds_what_is_missing(self):
        self.assertEqual(problems(hoist.safetensors.torch, {
            "load_everything": {"kind": "function", "args": [], "kwonly": []},
            "load_file": {"kind": "function", "args": ["filename", "device"],
                          "kwonly": ["backend", "prefetch"]},
            "safe_open": {"kind": "class", "methods": {"get_everything": {}}}}),
            ["load_everything is missing", "load_file takes no prefetch=",
             "safe_open.get_everything is missing"])

    def test_version_is_a_version_string(self):
        parts = hoist.safetensors.__version__.split(".")
        self.assertGreaterEqual(len(parts), 2)
        self.assertTrue(parts[0].isdigit())


class CallsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "m.safetensors")
        g = torch.Generator().manual_seed(3)
        self.tensors = {"b": torch.randn(32, 8, generator=g), "a": torch.arange(10),
                        "c": torch.randn(4, generator=g).to(torch.bfloat16)}
        save_file(self.tensors, self.path, metadata={"format": "pt"})

    def tearDown(self):
        self.tmp.cleanup()

    def test_backend_is_taken_and_checked_as_0_8_does(self):
        for backend in ("mmap", "pread"):
            with safe_open(self.path, framework="pt", device="cpu", backend=backend) as f:
                self.assertTrue(torch.equal(f.get_tensor("b"), self.tensors["b"]))
            self.assertEqual(list(load_file(self.path, backend=backend)),
                             list(safe_open(self.path, "pt").offset_keys()))
            self.assertEqual(set(hoist.safetensors.numpy.load_file(self.path, backend=backend)),
                             set(self.tensors))
        with self.assertRaises(SafetensorError) as caught:
            safe_open(self.path, framework="pt", backend="odirect")
        self.assertEqual(str(caught.exception),
                         'backend "odirect" is invalid (expected one of: "mmap", "pread")')
        with self.assertRaises(TypeError):
            safe_open(self.path, "pt", "cpu", "mmap")  # keyword-only, as in 0.8

    def test_frameworks_named_as_0_8_names_them(self):
        for framework in ("pt", "torch", "pytorch"):
            with safe_open(self.path, framework=framework) as f:
                self.assertTrue(torch.equal(f.get_slice("b")[2:5], self.tensors["b"][2:5]))
        with self.assertRaises(SafetensorError) as caught:
            safe_open(self.path, framework="pandas")
        self.assertEqual(str(caught.exception), "framework pandas is invalid")

    def test_load_file_gives_file_order_as_0_8(self):
        loaded = load_file(self.path)
        with safe_open(self.path, "pt") as f:
            self.assertEqual(list(loaded), f.offset_keys())
            self.assertEqual(list(f.get_tensors()), f.offset_keys())
        for k, t in self.tensors.items():
            self.assertTrue(torch.equal(loaded[k], t), k)

    def test_safe_open_handle_opens_the_file_object(self):
        with open(self.path, "rb") as raw:
            with hoist.safetensors._safe_open_handle(raw, "pt", device="cpu",
                                                     backend="mmap") as f:
                self.assertEqual(f.keys(), sorted(self.tensors))
                self.assertTrue(torch.equal(f.get_tensor("a"), self.tensors["a"]))
        with self.assertRaises(AttributeError):
            hoist.safetensors._safe_open_handle(self.path, "pt")

    def test_save_model_and_load_model_as_0_8(self):
        model = torch.nn.Linear(4, 3)
        model.weight = torch.nn.Parameter(torch.randn(4, 3).t())  # not contiguous
        path = os.path.join(self.tmp.name, "model.safetensors")
        with self.assertRaises(ValueError) as caught:
            save_model(model, path, force_contiguous=False)
        self.assertIn("Or use save_model(..., force_contiguous=True)", str(caught.exception))
        save_model(model, path)  # made contiguous
        self.assertTrue(torch.equal(load_file(path)["weight"], model.weight.detach()))
        tied = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Linear(4, 5, bias=False))
        tied[1].weight = tied[0].weight
        save_model(tied, path)
        with safe_open(path, "pt") as f:
            self.assertEqual(f.keys(), ["0.weight"])
            self.assertEqual(f.metadata(), {"1.weight": "0.weight"})
        fresh = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Linear(4, 5, bias=False))
        fresh[1].weight = fresh[0].weight
        missing, unexpected = load_model(fresh, path, backend="pread")
        self.assertEqual((set(missing), unexpected), (set(), []))
        self.assertTrue(torch.equal(fresh[0].weight, tied[0].weight))
        other = torch.nn.Linear(4, 5)
        with self.assertRaises(RuntimeError) as caught:
            load_model(other, path)
        self.assertIn('Missing key(s) in state_dict: "bias", "weight"', str(caught.exception))
        self.assertIn('Unexpected key(s) in state_dict: "0.weight"', str(caught.exception))

    def test_save_file_replaces_the_file_by_rename(self):
        before = os.stat(self.path).st_ino
        save_file({"x": torch.ones(3)}, self.path)
        self.assertNotEqual(os.stat(self.path).st_ino, before)
        self.assertEqual([n for n in os.listdir(self.tmp.name) if n.endswith(".tmp")], [])
        self.assertEqual(list(load_file(self.path)), ["x"])

    def test_private_helpers_third_party_code_uses(self):
        t = torch.arange(6, dtype=torch.int16)
        array, ref = hoist.safetensors.torch._to_ndarray(t)
        self.assertEqual(array.tobytes(), t.numpy().tobytes())
        self.assertIs(hoist.safetensors.torch._getdtype("BF16"), torch.bfloat16)
        flat = hoist.safetensors.torch._flatten_as_ptr({"t": t}, [])
        self.assertEqual(flat["t"].dtype, "I16")
        data = hoist.safetensors.torch.save({"t": t})
        self.assertTrue(torch.equal(
            hoist.safetensors.torch._view2torch(hoist.safetensors.deserialize(data))["t"], t))


class PatchedImportsTest(unittest.TestCase):
    def run_python(self, code):
        env = dict(os.environ)
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                              capture_output=True, text=True, timeout=120)

    def test_what_consumers_import_after_patch(self):
        # accelerate, vLLM, SGLang, diffusers: the names each imports from safetensors.torch.
        result = self.run_python("""
            import hoist.safetensors; hoist.safetensors.patch()
            from safetensors.torch import load_model, save_model, load, load_file, safe_open, save_file
            from safetensors.torch import _to_ndarray, _remove_duplicate_names, storage_ptr
            from safetensors import SafetensorError, safe_open as so, _safe_open_handle
            import safetensors, safetensors.torch
            assert safetensors.torch.safe_open is so
            print("ok", safetensors.__version__)
        """)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(result.stdout.startswith("ok "), result.stdout)


if __name__ == "__main__":
    unittest.main()
