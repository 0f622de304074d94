"""hoist.safetensors against safetensors' documented behaviour: the file layout save writes,
safe_open's keys, metadata, get_tensor (read ahead in batches) and get_slice, load_file and
load, the errors, and patch() for programs that import safetensors unchanged."""
import json
import os
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import unittest
from unittest import mock

import torch

import hoist
import hoist.safetensors
from hoist.safetensors import SafetensorError, safe_open
from hoist.safetensors.torch import load, load_file, save, save_file


def sample():
    g = torch.Generator().manual_seed(7)
    return {
        "b.weight": torch.randn(64, 48, generator=g),
        "a.bias": torch.randn(48, generator=g).to(torch.float16),
        "emb": torch.randint(0, 100, (10, 3), generator=g, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
        "half": torch.randn(5, 7, generator=g).to(torch.bfloat16),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
    }


def same(a, b):
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and torch.equal(a.cpu(), b.cpu())


class SaveTest(unittest.TestCase):
    def test_layout_is_safetensors_own(self):
        tensors = {"z": torch.ones(2, dtype=torch.float32), "a": torch.ones(3, dtype=torch.uint8),
                   "m": torch.zeros(1, dtype=torch.float64)}
        data = save(tensors, metadata={"format": "pt"})
        (n,) = struct.unpack("<Q", data[:8])
        self.assertEqual(n % 8, 0)
        text = data[8:8 + n].decode().rstrip(" ")
        # Widest dtype first, then by name; compact JSON; metadata first.
        self.assertEqual(text, '{"__metadata__":{"format":"pt"},'
                               '"m":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},'
                               '"z":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},'
                               '"a":{"dtype":"U8","shape":[3],"data_offsets":[16,19]}}')
        self.assertEqual(len(data), 8 + n + 19)

    def test_round_trip_through_bytes_files_and_hoist(self):
        tensors = sample()
        back = load(save(tensors))
        self.assertEqual(list(back), sorted(tensors))  # load(bytes): by name
        for k, t in tensors.items():
            self.assertTrue(same(back[k], t), k)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.safetensors")
            save_file(tensors, path, metadata={"k": "v"})
            model = hoist.open(path)  # hoist's own reader accepts every byte of it
            self.assertEqual(set(model.tensors), set(tensors))
            loaded = load_file(path)
            # File order, as safetensors 0.8's load_file (get_tensors over offset_keys) gives it.
            self.assertEqual(list(loaded), sorted(model.tensors,
                                                  key=lambda n: model.tensors[n].offset))
            for k, t in tensors.items():
                self.assertTrue(same(loaded[k], t), k)

    def test_refuses_what_safetensors_refuses(self):
        base = torch.zeros(4, 4)
        with self.assertRaises(ValueError):
            save({"t": base.t()})  # not contiguous
        with self.assertRaises(RuntimeError):
            save({"a": base, "b": base[1]})  # shares memory
        with self.assertRaises(TypeError):
            save({"a": base}, metadata={"k": 1})


class SafeOpenTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "m.safetensors")
        self.tensors = sample()
        save_file(self.tensors, self.path, metadata={"format": "pt", "who": "test"})

    def tearDown(self):
        self.tmp.cleanup()

    def test_keys_metadata_and_every_tensor(self):
        with safe_open(self.path, framework="pt", device="cpu") as f:
            self.assertEqual(f.keys(), sorted(self.tensors))
            self.assertEqual(f.metadata(), {"format": "pt", "who": "test"})
            got = {k: f.get_tensor(k) for k in f.keys()}
            self.assertEqual(f._ahead, {})  # nothing read ahead is left behind
        for k, t in self.tensors.items():
            self.assertTrue(same(got[k], t), k)

    def test_reads_one_tensor_first_then_ahead_and_any_order_works(self):
        with safe_open(self.path, framework="pt") as f:
            order = f.offset_keys()
            first = f.get_tensor(order[0])
            self.assertTrue(same(first, self.tensors[order[0]]))
            self.assertEqual(f._host.stats["misses"], 1)  # the first request: that tensor alone
            self.assertEqual(f._host.stats["batches"], 0)
            for k in reversed(order[1:]):
                self.assertTrue(same(f.get_tensor(k), self.tensors[k]), k)
            self.assertTrue(same(f.get_tensor(order[0]), first))  # asked again: read again

    def test_get_slice_reads_rows_and_indexes_like_torch(self):
        full = self.tensors["b.weight"]
        with safe_open(self.path, framework="pt") as f:
            s = f.get_slice("b.weight")
            self.assertEqual(s.get_shape(), [64, 48])
            self.assertEqual(s.get_dtype(), "F32")
            for index in [slice(3, 17), (slice(None), slice(5, 20)), 5, -1, (slice(10, 12), 3),
                          Ellipsis, (Ellipsis, 0), slice(60, 64), (), []]:
                self.assertTrue(torch.equal(s[index], full[index]), index)
            with self.assertRaises(SafetensorError) as caught:
                s[64]
            self.assertEqual(str(caught.exception), "Error during slicing [64] with shape "
                             "[64, 48]: index 64 out of bounds for tensor dimension #0 of size 64")
            # torch's indexing, as safetensors 0.8's pt framework gives it: stops clamped,
            # steps and lists taken.
            for index in [slice(60, 100), (slice(None), slice(40, 99)), slice(None, None, 2),
                          (slice(1, 9, 3), slice(None, None, 5)), [0, 2, 63], (Ellipsis, 3)]:
                self.assertTrue(torch.equal(s[index], full[index]), index)
            self.assertTrue(torch.equal(f.get_slice("scalar")[...], self.tensors["scalar"]))

    def test_get_slice_on_a_device_reads_only_the_region(self):
        # "sim" is a device, as a GPU is: a slice of two or more dimensions is a region read
        # through the engine (rows as one range, columns staged by rows); nothing whole is read.
        full = self.tensors["b.weight"]
        with safe_open(self.path, framework="pt", device="sim") as f:
            s = f.get_slice("b.weight")
            for index in [slice(3, 17), (slice(None), slice(5, 20)), 5, -1, (slice(10, 12), 3),
                          (slice(None), slice(-10, None)), (2, slice(4, 9)), slice(60, 64),
                          (slice(1, 2), slice(47, 48))]:
                got = s[index]
                self.assertTrue(same(got, full[index]), index)
            self.assertEqual(f._ahead, {})
            with self.assertRaises(SafetensorError):
                s[64]
            with self.assertRaises(SafetensorError):
                s[:, 48]
            # What a region cannot cut (an ellipsis, a step, one dimension) comes from the whole.
            self.assertTrue(same(s[..., 0], full[..., 0]))
            self.assertTrue(same(f.get_slice("a.bias")[3:9], self.tensors["a.bias"][3:9]))
            self.assertTrue(same(f.get_tensor("emb"), self.tensors["emb"]))

    def test_slices_cut_the_same_way_are_read_ahead_in_file_order(self):
        # A framework narrowing every weight for its rank: the same proportion of each tensor
        # ([:, :half] here) is read ahead with the first, in one load, whatever the shapes.
        g = torch.Generator().manual_seed(5)
        weights = {f"w{i}": torch.randn(4 * (i + 1), 8 << (i % 3), generator=g) for i in range(6)}
        path = os.path.join(self.tmp.name, "w.safetensors")
        save_file(weights, path)
        with safe_open(path, framework="pt", device="sim") as f:
            order = f.offset_keys()
            half = lambda k: (slice(None), slice(0, weights[k].shape[1] // 2))  # noqa: E731
            first = f.get_slice(order[0])[half(order[0])]
            self.assertTrue(same(first, weights[order[0]][half(order[0])]))
            self.assertEqual(sorted(k[0] for k in f._ahead_regions), sorted(order[1:]))
            for k in reversed(order[1:]):
                self.assertTrue(same(f.get_slice(k)[half(k)], weights[k][half(k)]), k)
            self.assertEqual(f._ahead_regions, {})
            # A cut that is no proportion of the others is read as asked, and is right.
            self.assertTrue(same(f.get_slice("w1")[1:3, 1:2], weights["w1"][1:3, 1:2]))

    def test_batches_are_read_ahead_in_the_background_on_a_device(self):
        # Small batches, so that a file of a few KiB takes many: every tensor and slice comes
        # back right, and some batches were read on the background thread while the caller took
        # the ones before.
        g = torch.Generator().manual_seed(9)
        weights = {f"w{i:02d}": torch.randn(8, 16, generator=g) for i in range(24)}
        path = os.path.join(self.tmp.name, "many.safetensors")
        save_file(weights, path)
        with mock.patch.multiple("hoist._reader", _FIRST_BATCH_BYTES=1024,
                                 _FIRST_REGION_BATCH_BYTES=512, _LARGEST_BATCH_BYTES=2048):
            for cut in (None, (slice(None), slice(0, 8))):
                threads = []
                with safe_open(path, framework="pt", device="sim") as f:
                    load = f._load

                    def watched(batch):
                        threads.append(threading.current_thread().name)
                        return load(batch)

                    f._load = watched
                    for k in f.keys():
                        got = f.get_tensor(k) if cut is None else f.get_slice(k)[cut]
                        want = weights[k] if cut is None else weights[k][cut]
                        self.assertTrue(same(got, want), (k, cut))
                self.assertGreater(len(threads), 3, cut)
                self.assertTrue(any(t.startswith("hoist-ahead") for t in threads), threads)

    def test_numpy_framework(self):
        with safe_open(self.path, framework="np") as f:
            a = f.get_slice("b.weight")[2:4]
            self.assertEqual(a.shape, (2, 48))
            self.assertTrue((a == self.tensors["b.weight"][2:4].numpy()).all())

    def test_errors(self):
        with safe_open(self.path, framework="pt") as f:
            with self.assertRaises(SafetensorError):
                f.get_tensor("nope")
            with self.assertRaises(SafetensorError):
                f.get_slice("nope")
        with self.assertRaises(SafetensorError):
            safe_open(self.path, framework="tf")
        bad = os.path.join(self.tmp.name, "bad.safetensors")
        with open(bad, "wb") as out:
            out.write(struct.pack("<Q", 1000) + b"{}")
        with self.assertRaises(SafetensorError) as caught:
            safe_open(bad, framework="pt")
        self.assertIn("bad.safetensors", str(caught.exception))
        with self.assertRaises(SafetensorError):
            load(b"\x05\x00")
        self.assertEqual(load(struct.pack("<Q", 2) + b"{}"), {})  # no tensors is a valid file
        with self.assertRaises(SafetensorError):
            header = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}})
            load(struct.pack("<Q", len(header)) + header.encode() + b"\0" * 8)


class PatchTest(unittest.TestCase):
    def test_an_unchanged_script_loads_through_hoist(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.safetensors")
            save_file({"w": torch.arange(6, dtype=torch.float32)}, path)
            script = os.path.join(tmp, "script.py")
            with open(script, "w") as f:
                f.write(textwrap.dedent(f"""
                    from safetensors.torch import load_file
                    from safetensors import safe_open
                    import safetensors
                    print(safetensors.__name__, load_file({path!r})["w"].tolist())
                    with safe_open({path!r}, framework="pt") as f:
                        print(f.keys())
                """))
            run = subprocess.run([sys.executable, "-c",
                                  "import hoist.safetensors, runpy; hoist.safetensors.patch(); "
                                  f"runpy.run_path({script!r}, run_name='__main__')"],
                                 capture_output=True, text=True, timeout=120)
            self.assertEqual(run.returncode, 0, run.stderr)
            self.assertEqual(run.stdout.splitlines(),
                             ["hoist.safetensors [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]", "['w']"])

    def test_unpatch_restores(self):
        before = sys.modules.get("safetensors")
        hoist.safetensors.patch()
        self.assertIs(sys.modules["safetensors"], hoist.safetensors)
        hoist.safetensors.unpatch()
        self.assertIs(sys.modules.get("safetensors"), before)


if __name__ == "__main__":
    unittest.main()
