"""The Python surfaces under hostile input (docs/RELIABILITY.md): names that are not UTF-8, a
device list written as one string, a file replaced under an open cpu handle."""
import os
import struct
import tempfile
import unittest

import numpy

import hoist
import hoist.gguf
from hoist.safetensors import SafetensorError, safe_open
from hoist.safetensors.torch import save_file

import torch


def write_gguf(path, names):
    """A GGUF v3 file with one F32 tensor of 4 values per name (names as bytes), tensor i
    holding i, i+1, i+2, i+3."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(names), 0)
    for i, name in enumerate(names):
        head += struct.pack("<Q", len(name)) + name + struct.pack("<IQIQ", 1, 4, 0, i * 32)
    head += b"\0" * ((32 - len(head) % 32) % 32)
    data = b"".join(numpy.arange(i, i + 4, dtype="<f4").tobytes() + b"\0" * 16
                    for i in range(len(names)))
    with open(path, "wb") as f:
        f.write(head + data)


class HostileInputTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def test_a_name_that_is_not_utf8_loads_under_its_escaped_name(self):
        path = os.path.join(self.tmp.name, "names.gguf")
        write_gguf(path, [b"plain", b"bad\xff\xfe.weight", "é".encode()])
        model = hoist.open(path)
        bad = b"bad\xff\xfe.weight".decode("utf-8", "surrogateescape")
        self.assertEqual(sorted(model.tensors), sorted(["plain", bad, "é"]))
        loaded = hoist.load_file(path)
        for i, name in enumerate(["plain", bad, "é"]):
            self.assertTrue(torch.equal(loaded[name], torch.arange(i, i + 4, dtype=torch.float32)))
        self.assertEqual(list(hoist.load_file(path, names=[bad])), [bad])
        streamed = dict(hoist.iter_tensors(path))
        self.assertTrue(torch.equal(streamed[bad], loaded[bad]))
        with hoist.gguf.open(path) as f:
            self.assertTrue(torch.equal(f.get_tensor(bad), loaded[bad]))
            self.assertEqual(os.fsencode(bad), b"bad\xff\xfe.weight")

    def test_a_device_list_written_as_one_string_is_refused_clearly(self):
        path = os.path.join(self.tmp.name, "m.safetensors")
        save_file({"a": torch.ones(4, 4), "b": torch.zeros(2)}, path)
        for device in (["sim,sim"], "sim,sim"):
            with self.assertRaises(hoist.HoistError) as caught:
                hoist.load_file(path, device=device, split="tensor")
            self.assertEqual(str(caught.exception), "device 'sim,sim' names several devices: "
                                                    "give them as a list (device=['sim', 'sim'])")
        parts = hoist.load_file(path, device=["sim", "sim"], split="tensor")
        self.assertEqual(len(parts), 2)

    def test_device_names_as_the_cli_and_torch_write_them(self):
        path = os.path.join(self.tmp.name, "m.safetensors")
        save_file({"a": torch.arange(6.0)}, path)
        gpu = torch.cuda.is_available()
        for device, kind in (("cpu", "cpu"), ("host", "cpu"), ("auto", "cuda" if gpu else "cpu")):
            got = hoist.load_file(path, device=device)["a"]
            self.assertEqual(got.device.type, kind, device)
            self.assertTrue(torch.equal(got, torch.arange(6.0)))

    def test_progress_draws_nothing_into_a_pipe(self):
        import subprocess
        import sys
        path = os.path.join(self.tmp.name, "m.safetensors")
        save_file({"a": torch.ones(256, 256)}, path)
        code = f"import hoist; hoist.load_file({path!r}, progress=True)"
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120, env=dict(os.environ))
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stderr, "")

    def test_the_namespace_holds_the_api_not_the_imports(self):
        for name in ("os", "math", "NamedTuple", "Tuple"):
            self.assertNotIn(name, dir(hoist))

    def test_a_file_replaced_under_a_cpu_handle_is_an_error_not_its_bytes(self):
        path = os.path.join(self.tmp.name, "m.safetensors")
        first = {"w": torch.arange(64, dtype=torch.float32).reshape(8, 8)}
        save_file(first, path)
        for replace in ("rename", "in place"):
            with safe_open(path, framework="pt", device="cpu") as f:
                other = {"w": -torch.arange(64, dtype=torch.float32).reshape(8, 8)}
                if replace == "rename":
                    save_file(other, path)  # a temporary file renamed over it
                else:
                    with open(path, "r+b") as raw:
                        raw.seek(-4, os.SEEK_END)
                        raw.write(b"\1\2\3\4")
                for read in (lambda: f.get_slice("w")[2:5], lambda: f.get_slice("w")[:, 2:7],
                             lambda: f.get_slice("w")[7], lambda: f.get_tensor("w")):
                    with self.assertRaises(SafetensorError) as caught:
                        read()
                    self.assertIn(path, str(caught.exception))
            save_file(first, path)


if __name__ == "__main__":
    unittest.main()
