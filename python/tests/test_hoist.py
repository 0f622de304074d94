"""Tests of the Python module: every corpus file and generated models of every dtype load with
the right keys, dtypes, shapes and bytes; load_into fills a module in place; errors, cancel
and Ctrl-C behave. Run: PYTHONPATH=build/python python3 -m unittest discover -s python/tests
(HOIST_CORPUS_DIR and HOIST_CLI name the corpus and the hoist executable)."""
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import numpy
import torch
import xxhash

import hoist
import hoist.torch

CORPUS = os.environ.get("HOIST_CORPUS_DIR", os.path.join(os.path.dirname(__file__), "../../tests/corpus"))
HOIST_CLI = os.environ.get("HOIST_CLI", "hoist")

ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
            "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}


def raw_bytes(t):
    """A tensor's bytes, whatever its dtype."""
    flat = t.detach().contiguous().reshape(-1)
    if flat.numel() == 0:
        return b""
    return flat.view(torch.uint8).cpu().numpy().tobytes()


def write_safetensors(path, tensors, metadata=None):
    """tensors: [(name, dtype, shape, bytes)] → a safetensors file, data in the given order."""
    header, data, offset = {}, b"", 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(payload)]}
        data += payload
        offset += len(payload)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def payload_for(dtype, count, seed):
    rng = numpy.random.default_rng(seed)
    if dtype == "BOOL":
        return rng.integers(0, 2, count, dtype=numpy.uint8).tobytes()
    if dtype in ("F32", "F64", "F16"):
        return rng.standard_normal(count).astype({"F32": "<f4", "F64": "<f8", "F16": "<f2"}[dtype]).tobytes()
    return rng.integers(0, 256, count * ITEMSIZE[dtype], dtype=numpy.uint8).tobytes()


class CorpusTest(unittest.TestCase):
    def test_every_corpus_file_matches_the_reference(self):
        with open(os.path.join(CORPUS, "reference.json")) as f:
            reference = json.load(f)
        self.assertGreater(len(reference), 0)
        for relative, ref in reference.items():
            with self.subTest(file=relative):
                path = os.path.join(CORPUS, relative)
                model = hoist.open(path)
                tensors = hoist.load_file(path)
                ref_tensors = {t["name"]: t for t in ref["tensors"]}
                self.assertEqual(set(tensors), set(ref_tensors))
                self.assertEqual(set(model.tensors), set(ref_tensors))
                for name, t in tensors.items():
                    r = ref_tensors[name]
                    self.assertEqual(model.tensors[name].dtype, r["dtype"], name)
                    self.assertEqual(list(model.tensors[name].shape), r["shape"], name)
                    self.assertEqual(t.shape, model.load_shape(name), name)
                    data = raw_bytes(t)
                    self.assertEqual(len(data), model.tensors[name].nbytes, name)
                    self.assertEqual(xxhash.xxh3_64_hexdigest(data), r["xxh3"], name)
                if "metadata_keys" in ref:  # GGUF
                    self.assertEqual(set(model.metadata), set(ref["metadata_keys"]))
                else:  # safetensors: __metadata__ as a dict of strings
                    self.assertEqual(model.metadata, ref["metadata"])


class DtypeTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def test_every_safetensors_dtype_this_torch_has(self):
        specs, expected = [], {}
        for i, (dtype, attr) in enumerate(hoist._engine._TORCH_DTYPES.items()):
            if not hasattr(torch, attr) or dtype not in ITEMSIZE:
                continue
            shape = (3, 5) if i % 2 else (7,)
            count = int(numpy.prod(shape))
            payload = payload_for(dtype, count, i)
            specs.append((f"t.{dtype}", dtype, shape, payload))
            expected[f"t.{dtype}"] = (getattr(torch, attr), shape, payload)
        specs.append(("empty", "F32", (0, 4), b""))
        expected["empty"] = (torch.float32, (0, 4), b"")
        path = os.path.join(self.dir.name, "all.safetensors")
        write_safetensors(path, specs, {"format": "pt"})
        for device in ("cpu", "sim", "sim:bandwidth=2GB/s,engines=3", "sim"):
            with self.subTest(device=device):
                hoist.release_cached_memory()  # between loads, whatever the device kept
                tensors = hoist.load_file(path, device=device)
                self.assertEqual(set(tensors), set(expected))
                for name, (dtype, shape, payload) in expected.items():
                    self.assertEqual(tensors[name].dtype, dtype, name)
                    self.assertEqual(tuple(tensors[name].shape), shape, name)
                    self.assertEqual(raw_bytes(tensors[name]), payload, name)
        self.assertGreaterEqual(len(expected), 11)
        self.assertEqual(hoist.open(path).metadata, {"format": "pt"})

    def test_gguf_plain_and_quantized_types(self):
        path = os.path.join(self.dir.name, "m.gguf")
        dtypes = "F32,F16,BF16,Q8_0,Q4_K,Q6_K,IQ4_NL"
        subprocess.run([HOIST_CLI, "make-sample", path, "--size", "4MiB", "--dtypes", dtypes],
                       check=True, capture_output=True)
        model = hoist.open(path)
        tensors = hoist.load_file(path)
        seen = set()
        with open(path, "rb") as f:
            for name, info in model.tensors.items():
                t = tensors[name]
                seen.add(info.dtype)
                f.seek(info.offset)
                self.assertEqual(raw_bytes(t), f.read(info.nbytes), name)
                if info.dtype in ("F32", "F16", "BF16"):
                    self.assertEqual(t.dtype, getattr(torch, hoist._engine._TORCH_DTYPES[info.dtype]))
                    self.assertEqual(tuple(t.shape), info.shape)
                else:
                    rows = int(numpy.prod(info.shape[:-1]))
                    self.assertEqual(t.dtype, torch.uint8, name)
                    self.assertEqual(tuple(t.shape), (rows, info.nbytes // rows), name)
                    self.assertTrue(model.is_quantized(name))
        self.assertTrue({"F32", "Q8_0", "Q4_K"} <= seen, seen)

    def test_names_selects_tensors(self):
        path = os.path.join(CORPUS, "gguf/llama-2-tiny-random.gguf")
        tensors = hoist.load_file(path, names=["output_norm.weight"])
        self.assertEqual(list(tensors), ["output_norm.weight"])
        with self.assertRaises(KeyError):
            hoist.load_file(path, names=["nope"])


class LoadIntoTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        torch.manual_seed(0)
        self.source = self.make_module()
        self.path = os.path.join(self.dir.name, "module.safetensors")
        specs = [(k, {torch.float32: "F32", torch.float16: "F16", torch.int64: "I64"}[v.dtype],
                  tuple(v.shape), raw_bytes(v)) for k, v in self.source.state_dict().items()]
        write_safetensors(self.path, specs)

    def tearDown(self):
        self.dir.cleanup()

    @staticmethod
    def make_module(hidden=16):
        module = torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.LayerNorm(hidden),
                                     torch.nn.Linear(hidden, 4).half())
        module.register_buffer("steps", torch.arange(5, dtype=torch.int64))
        return module

    def test_fills_parameters_in_place(self):
        target = self.make_module()
        before = {k: v.data_ptr() for k, v in target.state_dict().items()}
        for v in target.state_dict().values():
            v.data.zero_()
        result = hoist.torch.load_into(target, self.path)
        self.assertEqual(sorted(result.loaded), sorted(self.source.state_dict()))
        self.assertEqual((result.missing_keys, result.unexpected_keys, result.mismatched), ([], [], []))
        for k, v in target.state_dict().items():
            self.assertEqual(v.data_ptr(), before[k], k)  # the same storage, filled in place
            self.assertTrue(torch.equal(v, self.source.state_dict()[k]), k)

    def test_strict_reports_every_difference_before_copying(self):
        target = self.make_module(hidden=12)
        target.register_buffer("extra", torch.zeros(2))
        weight = target[0].weight.detach().clone()
        with self.assertRaises(hoist.HoistError) as caught:
            hoist.torch.load_into(target, self.path)
        message = str(caught.exception)
        self.assertIn("missing from the file: 'extra'", message)
        self.assertIn("mismatched '0.weight': file has F32 [16, 8], module has float32 [12, 8]", message)
        self.assertTrue(torch.equal(target[0].weight, weight))  # nothing copied

    def test_non_strict_fills_what_matches_and_lists_the_rest(self):
        target = self.make_module()
        target[1] = torch.nn.Identity()  # LayerNorm gone: its tensors are unexpected
        target.register_buffer("extra", torch.zeros(2))
        result = hoist.torch.load_into(target, self.path, strict=False)
        self.assertEqual(result.missing_keys, ["extra"])
        self.assertEqual(sorted(result.unexpected_keys), ["1.bias", "1.weight"])
        self.assertTrue(torch.equal(target[0].weight, self.source[0].weight))
        self.assertTrue(torch.equal(target[2].weight, self.source[2].weight))

    def test_state_dict_target(self):
        state = {k: torch.empty_like(v) for k, v in self.source.state_dict().items()}
        hoist.torch.load_into(state, self.path)
        for k, v in state.items():
            self.assertTrue(torch.equal(v, self.source.state_dict()[k]), k)


class ErrorTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def test_invalid_model_names_file_offset_and_rule(self):
        path = os.path.join(self.dir.name, "bad.gguf")
        with open(path, "wb") as f:
            f.write(b"GGUF" + struct.pack("<IQQ", 9, 0, 0))
        with self.assertRaises(hoist.InvalidModelError) as caught:
            hoist.load_file(path)
        self.assertEqual(str(caught.exception),
                         f"{path}: unsupported GGUF version 9 (only versions 2 and 3) at byte 4")
        self.assertEqual(caught.exception.status, "invalid model")

    def test_missing_file(self):
        with self.assertRaises(FileNotFoundError) as caught:
            hoist.open(os.path.join(self.dir.name, "none.safetensors"))
        self.assertIsInstance(caught.exception, hoist.HoistError)

    def test_bad_device(self):
        with self.assertRaises((hoist.HoistError, RuntimeError)):
            hoist.load_file(os.path.join(CORPUS, "gguf/dummy-10-tensors.gguf"), device="meta")

    def test_cuda_without_a_gpu_is_a_hoist_error(self):
        if torch.cuda.is_available():
            self.skipTest("this torch has a GPU")
        path = os.path.join(CORPUS, "gguf/dummy-10-tensors.gguf")
        for device in ("cuda:0", "cuda", 0):
            with self.assertRaises(hoist.UnavailableError) as caught:
                hoist.load_file(path, device=device)
            self.assertIn("no usable CUDA device", str(caught.exception))
            self.assertEqual(caught.exception.status, "unavailable")

    def test_names_missing_or_of_the_wrong_type(self):
        path = os.path.join(CORPUS, "gguf/llama-2-tiny-random.gguf")
        with self.assertRaises(hoist.TensorNotFoundError) as caught:
            hoist.load_file(path, names=["nope"])
        self.assertIsInstance(caught.exception, KeyError)  # as a dict lookup would raise
        self.assertIsInstance(caught.exception, hoist.HoistError)
        self.assertEqual(str(caught.exception), f"{path}: no tensor named 'nope'")
        with self.assertRaisesRegex(TypeError, "names must be a list of tensor names, not a str"):
            hoist.load_file(path, names="output_norm.weight")
        with self.assertRaisesRegex(TypeError, "names must hold strings, not int"):
            hoist.load_file(path, names=[1])

    def test_options_out_of_bounds_are_refused(self):
        path = os.path.join(CORPUS, "gguf/dummy-10-tensors.gguf")
        for options, text in (({"chunk_mib": float("nan")}, "chunk_mib takes a number of MiB"),
                              ({"staging_mib": -1}, "staging_mib takes a number of MiB"),
                              ({"staging_mib": float("inf")}, "staging_mib takes a number of MiB"),
                              ({"stall_timeout": float("nan")}, "stall timeout of nan"),
                              ({"threads": 100000}, "threads is 100000"),
                              ({"chunk_mib": 0.001}, "chunk of 1049 bytes")):
            with self.assertRaises(hoist.HoistError) as caught:
                hoist.load_file(path, **options)
            self.assertIn(text, str(caught.exception))
            self.assertEqual(caught.exception.status, "invalid argument")
        with self.assertRaisesRegex(TypeError, "unknown option.*chunk_mb"):
            hoist.load_file(path, chunk_mb=8)
        with self.assertRaisesRegex(TypeError, "chunk_mib must be a number"):
            hoist.load_file(path, chunk_mib="8")

    def test_a_fifo_is_refused_at_once(self):
        fifo = os.path.join(self.dir.name, "f.safetensors")
        os.mkfifo(fifo)
        script = textwrap.dedent(f"""
            import hoist
            try:
                hoist.load_file({fifo!r})
            except hoist.HoistError as e:
                print("error:", e)
            """)
        # Without the fix the open waits for a writer forever: the timeout is the bound.
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=30, env=dict(os.environ))
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn(f"error: {fifo}: is a FIFO (named pipe); a model is read from regular files",
                      run.stdout)

    def test_file_replaced_after_open_is_model_changed(self):
        path = os.path.join(self.dir.name, "m.safetensors")
        other = os.path.join(self.dir.name, "other.safetensors")
        write_safetensors(path, [("x", "U8", (4096,), bytes(4096))])
        write_safetensors(other, [("x", "U8", (4096,), bytes([1]) * 4096)])
        model = hoist.open(path)
        os.replace(other, path)
        with self.assertRaises(hoist.ModelChangedError) as caught:
            hoist.load_file(model)
        self.assertIn("replaced by another file since the model was opened", str(caught.exception))
        self.assertEqual(caught.exception.status, "model changed")

    def test_progress_callable_sees_bytes_and_cancels(self):
        path = os.path.join(self.dir.name, "m.safetensors")
        write_safetensors(path, [("x", "U8", (8 << 20,), bytes(8 << 20))])
        seen = []

        def stop(done, total):
            seen.append((done, total))
            return False
        with self.assertRaises(hoist.CancelledError):
            hoist.load_file(path, device="sim:bandwidth=20MB/s", progress=stop)
        self.assertTrue(seen and seen[0][1] == 8 << 20, seen)
        calls = []
        hoist.load_file(path, device="sim:bandwidth=200MB/s", progress=lambda d, t: calls.append(d))
        self.assertEqual(calls[-1], 8 << 20)

    def test_exception_in_progress_callback_propagates(self):
        path = os.path.join(self.dir.name, "m.safetensors")
        write_safetensors(path, [("x", "U8", (4 << 20,), bytes(4 << 20))])

        def boom(done, total):
            raise ValueError("from the callback")
        with self.assertRaisesRegex(ValueError, "from the callback"):
            hoist.load_file(path, device="sim:bandwidth=20MB/s", progress=boom)

    def test_ctrl_c_raises_keyboard_interrupt_promptly(self):
        path = os.path.join(self.dir.name, "m.safetensors")
        write_safetensors(path, [("x", "U8", (64 << 20,), bytes(64 << 20))])
        # The signal comes from this process once the first bytes of a load of 6.4 s landed (the
        # child's progress callback says so), and the child says when it saw it
        # (CLOCK_MONOTONIC is the machine's).
        # The child takes Python's own SIGINT handler back: a test run from a background job
        # inherits SIGINT ignored, and Python then leaves it ignored.
        script = textwrap.dedent(f"""
            import signal, time, hoist, torch
            signal.signal(signal.SIGINT, signal.default_int_handler)
            print("ready", flush=True)
            start = time.monotonic()
            said = []
            def progress(done, total):
                if done > 0 and not said:
                    said.append(print("landing", flush=True))
            try:
                hoist.load_file({path!r}, device="sim:bandwidth=10MB/s", progress=progress)
                print("finished after %.2f s" % (time.monotonic() - start))  # for a failure
            except KeyboardInterrupt:
                print("interrupted at %.6f" % time.monotonic())
            t = hoist.load_file({path!r}, device="cpu")  # hoist is usable afterwards
            print("reloaded", t["x"].numel())
            """)
        start = time.monotonic()
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=dict(os.environ))
        try:
            self.assertEqual(child.stdout.readline().strip(), "ready")
            self.assertEqual(child.stdout.readline().strip(), "landing")
            sent = time.monotonic()
            child.send_signal(signal.SIGINT)
            out, err = child.communicate(timeout=60)
        finally:
            child.kill()
            child.wait()
        self.assertEqual(child.returncode, 0, err)
        self.assertIn("interrupted at", out)
        self.assertIn(f"reloaded {64 << 20}", out)
        delay = float(out.split("interrupted at ")[1].split()[0]) - sent
        self.assertLess(delay, 1.0 * float(os.environ.get("HOIST_TEST_TIME_SCALE", "1")))
        self.assertLess(time.monotonic() - start, 30)


class NumpyFallbackTest(unittest.TestCase):
    def test_without_torch_host_loads_return_numpy(self):
        path = os.path.join(CORPUS, "gguf/llama-2-tiny-random.gguf")
        script = textwrap.dedent(f"""
            import sys
            sys.modules["torch"] = None  # as if torch were not installed
            import hoist, xxhash
            t = hoist.load_file({path!r})
            a = t["token_embd.weight"]
            print(type(a).__module__, a.dtype, a.shape, xxhash.xxh3_64_hexdigest(a.tobytes()))
            try:
                hoist.load_file({path!r}, device="cuda:0")
            except hoist.HoistError as e:
                print("error:", e)
            """)
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=60, env=dict(os.environ))
        self.assertEqual(run.returncode, 0, run.stderr)
        with open(os.path.join(CORPUS, "reference.json")) as f:
            ref = {t["name"]: t for t in json.load(f)["gguf/llama-2-tiny-random.gguf"]["tensors"]}
        self.assertIn(f"numpy float16 (32000, 8) {ref['token_embd.weight']['xxh3']}", run.stdout)
        self.assertIn("error: device 'cuda:0' needs torch", run.stdout)


if __name__ == "__main__":
    unittest.main()
