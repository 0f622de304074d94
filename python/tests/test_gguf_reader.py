"""hoist.gguf.open: a GGUF file through safe_open's front, quantized tensors as uint8 rows."""
import os
import subprocess
import tempfile
import unittest

import torch

import hoist
import hoist.gguf

HOIST_CLI = os.environ.get("HOIST_CLI", "hoist")


def same_bits(a, b):
    """Equal dtype, shape and bytes (sample weights are random bits: NaNs among them)."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


class GgufReaderTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "m.gguf")
        subprocess.run([HOIST_CLI, "make-sample", self.path, "--size", "4MiB", "--dtypes",
                        "F32,F16,Q8_0,Q4_K"], check=True, capture_output=True)
        self.reference = hoist.load_file(self.path)

    def tearDown(self):
        self.tmp.cleanup()

    def test_tensors_slices_and_info_match_load_file(self):
        for device in ("cpu", "sim"):
            with hoist.gguf.open(self.path, device=device) as f:
                self.assertEqual(f.keys(), sorted(self.reference))
                self.assertEqual(f.metadata()["general.name"], "hoist sample")
                dtypes = set()
                for name in f.offset_keys():
                    info = f.info(name)
                    dtypes.add(info.dtype)
                    want = self.reference[name]
                    s = f.get_slice(name)
                    self.assertEqual(s.get_dtype(), info.dtype)
                    self.assertEqual(s.get_shape(), list(want.shape))
                    if want.dim() == 2 and want.shape[0] > 3:
                        self.assertTrue(same_bits(s[1:3], want[1:3]), (device, name))
                    got = f.get_tensor(name)
                    self.assertTrue(same_bits(got, want), (device, name))
                    if info.dtype in ("Q8_0", "Q4_K"):
                        self.assertEqual(got.dtype, torch.uint8)
                self.assertTrue({"Q8_0", "Q4_K", "F32"} <= dtypes, dtypes)

    def test_errors(self):
        with self.assertRaises(hoist.HoistError):
            hoist.gguf.open(os.path.join(self.tmp.name, "none.gguf"))
        with hoist.gguf.open(self.path) as f:
            with self.assertRaises(hoist.HoistError):
                f.get_tensor("nope")


if __name__ == "__main__":
    unittest.main()


class DamagedGgufTest(unittest.TestCase):
    """A GGUF whose header bytes are damaged (strings no longer UTF-8, counts and types wrong)
    opens or fails with HoistError, never another exception (UnicodeDecodeError once)."""

    def test_every_damaged_header_byte_is_a_hoist_error_or_a_model(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.gguf")
            subprocess.run([HOIST_CLI, "make-sample", path, "--size", "1MiB", "--dtypes", "F32"],
                           check=True, capture_output=True)
            with open(path, "rb") as f:
                original = f.read()
            header_end = original.find(b"hoist sample") + 64  # past the strings that matter
            damaged = os.path.join(tmp, "d.gguf")
            outcomes = {"opened": 0, "refused": 0}
            for at in range(24, header_end, 3):
                for value in (0xFF, 0x80):
                    data = bytearray(original)
                    data[at] = value
                    with open(damaged, "wb") as f:
                        f.write(bytes(data))
                    try:
                        with hoist.gguf.open(damaged) as g:
                            g.metadata()
                            g.keys()
                        outcomes["opened"] += 1
                    except hoist.HoistError:
                        outcomes["refused"] += 1
            self.assertGreater(outcomes["refused"], 0, outcomes)
            self.assertGreater(outcomes["opened"], 0, outcomes)

    def test_a_refusal_that_quotes_bytes_not_utf8_is_a_hoist_error(self):
        # Two tensors named b"tensor_\xff": the refusal quotes the name, escaped.
        corpus = os.environ.get("HOIST_CORPUS_DIR", os.path.join(
            os.path.dirname(__file__), "..", "..", "tests", "corpus"))
        with open(os.path.join(corpus, "gguf", "dummy-10-tensors.gguf"), "rb") as f:
            data = bytearray(f.read())
        for name in (b"tensor_1", b"tensor_2"):
            data[data.find(name) + 7] = 0xFF
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "d.gguf")
            with open(path, "wb") as f:
                f.write(bytes(data))
            with self.assertRaises(hoist.HoistError) as caught:
                hoist.gguf.open(path)
            self.assertIn("duplicate tensor name 'tensor_\\xff' at byte ", str(caught.exception))

    def test_random_damage_to_the_header_is_a_hoist_error_or_a_model(self):
        import random
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.gguf")
            subprocess.run([HOIST_CLI, "make-sample", path, "--size", "1MiB", "--dtypes",
                            "F32,Q4_K"], check=True, capture_output=True)
            with open(path, "rb") as f:
                original = f.read()
            header_end = original.find(b"hoist sample") + 4096
            damaged = os.path.join(tmp, "d.gguf")
            for seed in range(200):
                rnd = random.Random(seed)
                data = bytearray(original)
                for _ in range(rnd.randint(1, 8)):
                    data[rnd.randrange(0, header_end)] ^= 1 << rnd.randrange(8)
                with open(damaged, "wb") as f:
                    f.write(bytes(data))
                try:
                    with hoist.gguf.open(damaged) as g:
                        g.metadata()
                        for name in g.keys():
                            g.info(name)
                except hoist.HoistError:
                    pass

