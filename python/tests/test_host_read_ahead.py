"""safe_open(device="cpu") reading ahead for the threads that share a handle (hoist/_ahead.py):
the first request reads one tensor, the order is learnt from the requests, what is read ahead
stays within its bound, a request outside it is served at once, pinned memory the callers keep
is bounded; and transformers 5.17's exact call sequence under patch(), byte-exact."""
import concurrent.futures
import os
import random
import tempfile
import threading
import unittest
from unittest import mock

import torch

import hoist._ahead
import hoist.safetensors
from hoist._ahead import ReadAhead, natural_key
from hoist.safetensors import safe_open
from hoist.safetensors.torch import save_file


class FakeRead:
    """A read function for ReadAhead that records each batch (from which thread) and returns
    a tensor per name (its bytes: the name's length, for checking)."""

    def __init__(self, delay=0.0, fail=()):
        self.batches = []
        self.lock = threading.Lock()
        self.delay = delay
        self.fail = set(fail)

    def __call__(self, names):
        with self.lock:
            self.batches.append((threading.current_thread().name, list(names)))
        if self.delay:
            threading.Event().wait(self.delay)
        if self.fail & set(names):
            raise RuntimeError(f"cannot read {sorted(self.fail & set(names))}")
        return {n: torch.full((2,), len(n)) for n in names}

    def ahead_batches(self):
        with self.lock:
            return [b for who, b in self.batches if who == "hoist-read-ahead"]


def layer_names(layers):
    names = ["lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"]
    for i in range(layers):
        for part in ("input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "mlp.up_proj"):
            names.append(f"model.layers.{i}.{part}.weight")
    return names


def wait_for(condition, seconds=10):
    deadline = threading.Event()
    for _ in range(int(seconds * 100)):
        if condition():
            return True
        deadline.wait(0.01)
    return condition()


class ReadAheadTest(unittest.TestCase):
    def make(self, names, nbytes=1 << 20, ahead=8 << 20, **read_args):
        read = FakeRead(**read_args)
        engine = ReadAhead(names, {n: nbytes for n in names}, read, ahead_bytes=ahead)
        self.addCleanup(engine.close)
        return engine, read

    def test_the_first_request_reads_only_its_tensor(self):
        names = layer_names(4)
        engine, read = self.make(sorted(names))  # file order: lexicographic
        engine.get("model.layers.2.mlp.up_proj.weight")
        engine.close()  # an open, one tensor, a close: accelerate's disk offload
        self.assertEqual(read.batches, [("MainThread", ["model.layers.2.mlp.up_proj.weight"])])

    def test_natural_order_is_learnt_and_read_ahead_in_it(self):
        names = layer_names(12)
        offset_order = sorted(names)  # "layers.10" before "layers.2" in the file
        natural = sorted(names, key=natural_key)
        engine, read = self.make(offset_order, ahead=6 << 20, delay=0.001)
        for name in natural:
            threading.Event().wait(0.004)  # the consumer's own work between requests
            got = engine.get(name)
            self.assertTrue(torch.equal(got, torch.full((2,), len(name))), name)
        ahead = [n for batch in read.ahead_batches() for n in batch]
        self.assertGreater(len(ahead), len(names) // 2)  # most came from the read-ahead
        # Read ahead in natural order: each batch follows the requests, never the file order.
        self.assertEqual(ahead, [n for n in natural if n in set(ahead)])
        self.assertEqual(engine.stats["hits"] + engine.stats["waits"] + engine.stats["misses"],
                         len(names))

    def test_what_is_read_ahead_stays_within_the_bound(self):
        names = [f"t{i:03d}" for i in range(64)]
        engine, read = self.make(names, ahead=5 << 20, delay=0.002)
        engine.get(names[0])
        engine.get(names[1])
        # The consumer stops asking: the window fills to its bound and stays there.
        self.assertTrue(wait_for(lambda: engine._ahead >= 5 << 20))
        threading.Event().wait(0.3)
        with engine._cv:
            self.assertEqual(engine._ahead, 5 << 20)
        self.assertEqual(sum(len(b) for b in read.ahead_batches()), 5)
        engine.get(names[2])  # one taken: room for one more
        self.assertTrue(wait_for(lambda: sum(len(b) for b in read.ahead_batches()) == 6))

    def test_a_request_outside_the_window_is_read_at_once_by_its_thread(self):
        names = [f"t{i:03d}" for i in range(40)]
        engine, read = self.make(names, ahead=4 << 20, delay=0.05)
        engine.get("t000")
        engine.get("t001")
        engine.get("t030")  # a jump: not waited for behind the read-ahead
        self.assertIn(("MainThread", ["t030"]), read.batches)

    def test_a_failed_batch_is_reported_by_the_request_that_wants_it(self):
        names = [f"t{i}" for i in range(8)]
        engine, read = self.make(names, fail=["t4"])
        engine.get("t0")
        engine.get("t1")
        self.assertTrue(wait_for(lambda: engine._stopped))  # the batch with t4 failed
        self.assertTrue(torch.equal(engine.get("t2"), torch.full((2,), 2)))
        with self.assertRaisesRegex(RuntimeError, r"cannot read \['t4'\]"):
            engine.get("t4")  # read again by the asking thread: its own error
        self.assertTrue(torch.equal(engine.get("t5"), torch.full((2,), 2)))

    def test_eight_threads_share_one_engine(self):
        names = [f"w{i:03d}" for i in range(200)]
        engine, read = self.make(names, ahead=16 << 20)
        order = list(names)
        random.Random(4).shuffle(order)
        errors = []

        def take(part):
            for name in part:
                try:
                    got = engine.get(name)
                    if not torch.equal(got, torch.full((2,), len(name))):
                        errors.append(name)
                except Exception as e:  # noqa: BLE001 (collected and reported)
                    errors.append(repr(e))
        threads = [threading.Thread(target=take, args=(order[i::8],)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        read_names = [n for _, batch in read.batches for n in batch]
        self.assertEqual(sorted(read_names), sorted(names))  # each read exactly once


class PinnedPoolTest(unittest.TestCase):
    """The pool on a CPU torch: registration (cudaHostRegister) is replaced by a recorder."""

    def setUp(self):
        self.registered = []
        patches = [mock.patch.object(hoist._ahead, "_register",
                                     lambda a, n: self.registered.append(n) or True),
                   mock.patch.object(hoist._ahead, "_settle_devices", lambda: None)]
        for p in patches:
            p.start()
            self.addCleanup(p.stop)
        self.pool = hoist._ahead.PinnedPool()
        self.pool.limit = 3 * hoist._ahead._SLAB

    def test_slabs_are_pinned_once_and_reused_after_every_view_is_freed(self):
        with mock.patch.object(hoist._ahead, "POOL", self.pool):
            specs = [([1000], torch.float32), ([3, 5], torch.bfloat16), ([0], torch.int8)]
            first = hoist._ahead.host_tensors(specs, True)
            self.assertEqual([tuple(t.shape) for t in first], [(1000,), (3, 5), (0,)])
            self.assertEqual(first[1].data_ptr() - first[0].data_ptr(), 4096)  # 256-aligned
            first[0].fill_(1.5)
            first[1].fill_(2)
            self.assertTrue(torch.all(first[0] == 1.5))  # the views do not overlap
            self.assertEqual(self.registered, [hoist._ahead._SLAB])
            kept = first[1][1:]  # a view of a view keeps the slab
            del first
            again = hoist._ahead.host_tensor([10], torch.uint8, True)
            self.assertEqual(len(self.registered), 2)  # the first slab is still held
            del kept, again
            hoist._ahead.host_tensor([10], torch.uint8, True)
            self.assertEqual(len(self.registered), 2)  # reused, not pinned again

    def test_past_the_bound_tensors_are_pageable(self):
        with mock.patch.object(hoist._ahead, "POOL", self.pool):
            kept = [hoist._ahead.host_tensor([8], torch.uint8, True) for _ in range(3)]
            self.assertEqual(self.pool.pinned_bytes, 3 * hoist._ahead._SLAB)
            pageable = hoist._ahead.host_tensor([8], torch.uint8, True)
            self.assertEqual(len(self.registered), 3)
            self.assertTrue(torch.equal(pageable.fill_(7), torch.full((8,), 7, dtype=torch.uint8)))
            large = self.pool.take(2 * hoist._ahead._SLAB + 1)
            self.assertIsNone(large)  # a slab that does not fit under the bound
            del kept


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
            engine = f._host
            self.assertIsNotNone(engine._thread)
            thread = engine._thread
            del f
            gc.collect()
            thread.join(timeout=10)
            self.assertFalse(thread.is_alive())

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
