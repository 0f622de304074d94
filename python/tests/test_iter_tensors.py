"""hoist.iter_tensors: every tensor once, in file order, equal to load_file's; the memory read
ahead stays within its bound; early exit and errors; progress through tqdm."""
import gc
import importlib.util
import io
import os
import tempfile
import unittest
import weakref
from unittest import mock

import torch

import hoist
from hoist.safetensors.torch import save_file


def watching_allocations(alive):
    """torch.empty patched to append a weak reference to every tensor it makes to `alive`."""
    made = torch.empty

    def watched(*args, **kwargs):
        out = made(*args, **kwargs)
        alive.append(weakref.ref(out))
        return out

    return mock.patch.object(torch, "empty", watched)


class IterTensorsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        g = torch.Generator().manual_seed(3)
        # Two shards of 24 tensors of 64 KiB each (16384 float32).
        self.paths, self.tensors = [], {}
        for shard in range(2):
            part = {f"layers.{shard * 24 + i}.w": torch.randn(128, 128, generator=g)
                    for i in range(24)}
            path = os.path.join(self.tmp.name, f"model-{shard}.safetensors")
            save_file(part, path)
            self.paths.append(path)
            self.tensors.update(part)

    def tearDown(self):
        self.tmp.cleanup()

    def test_every_tensor_once_in_file_order_equal_to_load_file(self):
        seen = []
        for name, tensor in hoist.iter_tensors(self.paths, ahead_mib=0.25):
            self.assertTrue(torch.equal(tensor, self.tensors[name]), name)
            seen.append(name)
        self.assertEqual(sorted(seen), sorted(self.tensors))
        expected = []
        for path in self.paths:
            m = hoist.open(path)
            expected += sorted(m.tensors, key=lambda n: m.tensors[n].offset)
        self.assertEqual(seen, expected)

    def test_what_is_held_beyond_the_yielded_tensors_stays_within_the_bound(self):
        ahead = 256 << 10  # four 64 KiB tensors
        alive = []  # weak references to every tensor the stream allocated
        with watching_allocations(alive):
            peak = 0
            for _name, tensor in hoist.iter_tensors(self.paths, ahead_mib=ahead / (1 << 20)):
                yielded = id(tensor)  # the one yielded: the iterator holds it until the next
                del tensor  # a consumer that only takes each tensor
                gc.collect()
                held = sum(1 for r in alive if r() is not None and id(r()) != yielded)
                peak = max(peak, held)
        self.assertEqual(len(alive), len(self.tensors))
        self.assertGreater(peak, 0)
        self.assertLessEqual(peak * (64 << 10), ahead)

    def test_a_bound_below_one_tensor_still_streams_one_at_a_time(self):
        got = dict(hoist.iter_tensors(self.paths, ahead_mib=0.001, threads=4, chunk_mib=0.004))
        self.assertEqual(sorted(got), sorted(self.tensors))
        for name, tensor in got.items():
            self.assertTrue(torch.equal(tensor, self.tensors[name]), name)

    def test_closing_early_frees_what_was_not_yielded(self):
        alive = []
        with watching_allocations(alive):
            it = hoist.iter_tensors(self.paths, ahead_mib=0.5)
            name, first = next(it)
            it.close()  # cancels the load; what it had handed out is dropped
        gc.collect()
        self.assertGreater(len(alive), 1)
        survivors = [r() for r in alive if r() is not None]
        self.assertEqual(len(survivors), 1)
        self.assertIs(survivors[0], first)
        self.assertTrue(torch.equal(first, self.tensors[name]))

    def test_names_and_early_exit(self):
        names = ["layers.3.w", "layers.30.w"]
        got = dict(hoist.iter_tensors(self.paths, names=names))
        self.assertEqual(sorted(got), names)
        it = hoist.iter_tensors(self.paths, ahead_mib=0.25)
        next(it)
        it.close()  # cancels the load; nothing hangs or leaks
        with self.assertRaises(hoist.TensorNotFoundError):
            list(hoist.iter_tensors(self.paths, names=["nope"]))
        with self.assertRaises(hoist.HoistError):
            list(hoist.iter_tensors(self.paths, ahead_mib=-1))

    def test_progress_through_tqdm(self):
        if importlib.util.find_spec("tqdm") is None:
            self.skipTest("tqdm is not installed")
        class Terminal(io.StringIO):
            def isatty(self):
                return True
        for err, drawn in ((Terminal(), True), (io.StringIO(), False)):  # a pipe: no bar
            with mock.patch("sys.stderr", err):
                n = sum(1 for _ in hoist.iter_tensors(self.paths, progress=True))
            self.assertEqual(n, len(self.tensors))
            self.assertEqual("hoist" in err.getvalue(), drawn)
        calls = []
        list(hoist.iter_tensors(self.paths, progress=lambda d, t: calls.append((d, t))))
        self.assertEqual(calls[-1][0], calls[-1][1])
        self.assertEqual(calls[-1][1], sum(t.numel() * 4 for t in self.tensors.values()))


if __name__ == "__main__":
    unittest.main()
