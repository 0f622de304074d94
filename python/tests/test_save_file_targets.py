"""hoist.safetensors' save_file writes through a temporary file renamed over the target, except
where the target is not a regular file: a device node stays a device node (a rename would have
put a regular file in its place: run as root, that once replaced a test machine's /dev/full), and
a link is replaced where it leads, as safetensors' own save_file writes through it."""
import os
import stat
import tempfile
import unittest

import torch

from hoist.safetensors.torch import load_file, save_file


class SaveFileTargetsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.tensors = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4)}

    def tearDown(self):
        self.tmp.cleanup()

    def test_a_device_node_is_written_to_and_stays_a_device_node(self):
        if not stat.S_ISCHR(os.stat("/dev/null").st_mode):
            self.skipTest("/dev/null is not a character device here")
        save_file(self.tensors, "/dev/null")
        self.assertTrue(stat.S_ISCHR(os.stat("/dev/null").st_mode))

    def test_a_link_is_replaced_where_it_leads(self):
        real = os.path.join(self.tmp.name, "real.safetensors")
        link = os.path.join(self.tmp.name, "link.safetensors")
        os.symlink(real, link)
        save_file(self.tensors, link)
        self.assertTrue(os.path.islink(link))
        self.assertTrue(torch.equal(load_file(real)["w"], self.tensors["w"]))
        self.assertEqual(sorted(os.listdir(self.tmp.name)), ["link.safetensors", "real.safetensors"])


if __name__ == "__main__":
    unittest.main()
