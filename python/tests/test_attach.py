"""hoist.attach: a model `hoist serve` holds, taken by another process as tensors equal to a
load of its file (a private copy, and the held memory itself), still whole after its holder is
killed; and the refusals. HOIST_CLI names the hoist executable."""
import os
import signal
import subprocess
import tempfile
import time
import unittest

import hoist

try:
    import torch
except ImportError:  # hoist.attach gives numpy arrays then; this test compares tensors
    raise unittest.SkipTest("needs torch")

HOIST_CLI = os.environ.get("HOIST_CLI", "hoist")


def raw(tensor):
    """A tensor's bytes, as uint8."""
    return tensor.reshape(-1).view(torch.uint8)


class AttachTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.model = os.path.join(self.tmp.name, "m.gguf")
        subprocess.run([HOIST_CLI, "make-sample", self.model, "--size", "4MiB"], check=True,
                       capture_output=True)
        self.runtime = os.path.join(self.tmp.name, "run")
        os.mkdir(self.runtime, 0o700)
        self.saved = os.environ.get("XDG_RUNTIME_DIR")
        os.environ["XDG_RUNTIME_DIR"] = self.runtime
        self.holders = []

    def tearDown(self):
        for holder in self.holders:
            if holder.poll() is None:
                holder.kill()
            holder.wait()
            holder.stdout.close()
        if self.saved is None:
            os.environ.pop("XDG_RUNTIME_DIR", None)
        else:
            os.environ["XDG_RUNTIME_DIR"] = self.saved
        self.tmp.cleanup()

    def serve(self, name, device="host"):
        holder = subprocess.Popen([HOIST_CLI, "serve", self.model, "--device", device, "--name",
                                   name, "--json"], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
        self.holders.append(holder)
        line = holder.stdout.readline()  # one JSON line once the model is held
        self.assertIn('"ready":true', line)
        return holder

    def expect_equal(self, attached, loaded):
        self.assertEqual(sorted(attached), sorted(loaded))
        for name, tensor in loaded.items():
            self.assertEqual(attached[name].dtype, tensor.dtype, name)
            self.assertEqual(tuple(attached[name].shape), tuple(tensor.shape), name)
            self.assertTrue(torch.equal(raw(attached[name]), raw(tensor)), name)

    def test_private_and_shared_equal_the_file(self):
        for device in ("host", "sim"):
            holder = self.serve("m", device)
            loaded = hoist.load_file(self.model, device="cpu")
            for share in (False, True):
                self.expect_equal(hoist.attach("m", share=share), loaded)
            holder.send_signal(signal.SIGTERM)
            self.assertEqual(holder.wait(10), 0)
            self.assertFalse(os.path.exists(os.path.join(self.runtime, "hoist", "m.sock")))

    def test_tensors_outlive_a_holder_killed(self):
        holder = self.serve("m")
        loaded = hoist.load_file(self.model, device="cpu")
        private = hoist.attach("m")
        shared = hoist.attach("m", share=True)
        holder.kill()
        holder.wait(10)
        time.sleep(0.1)
        self.expect_equal(private, loaded)
        self.expect_equal(shared, loaded)

    def test_a_shared_tensor_written_in_place_is_the_writers_own(self):
        # An in-place op on a share=True tensor on the host: before, SIGSEGV in the writer.
        holder = self.serve("m")
        loaded = hoist.load_file(self.model, device="cpu")
        shared = hoist.attach("m", share=True)
        written = [name for name, t in shared.items() if t.numel()]
        for name in written:
            raw(shared[name]).fill_(0xA5)
        for name in written:
            self.assertTrue(bool((raw(shared[name]) == 0xA5).all()), name)
        self.expect_equal(hoist.attach("m", share=True), loaded)
        self.expect_equal(hoist.attach("m"), loaded)
        self.assertIsNone(holder.poll())

    def test_refusals(self):
        with self.assertRaises(hoist.NotFoundError) as no_holder:
            hoist.attach("nobody-holds-this")
        self.assertIn("no model is held under 'nobody-holds-this'", str(no_holder.exception))
        self.serve("m")
        with self.assertRaises(hoist.HoistError) as wrong_device:
            hoist.attach("m", device="sim")
        self.assertIn("'m' is held on host, not sim", str(wrong_device.exception))
        with self.assertRaises(hoist.HoistError):
            hoist.attach("../m")


if __name__ == "__main__":
    unittest.main()
