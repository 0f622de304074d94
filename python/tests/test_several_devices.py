"""hoist.load_file onto several devices in one load: placed by layers (by shares or free
memory), each tensor on its device and equal to the file's; hoist.placement says where first."""
import os
import tempfile
import unittest

import torch

import hoist
from hoist.safetensors.torch import save_file


class SeveralDevicesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        g = torch.Generator().manual_seed(11)
        self.tensors = {"model.embed_tokens.weight": torch.randn(32, 16, generator=g),
                        "lm_head.weight": torch.randn(32, 16, generator=g),
                        "model.norm.weight": torch.randn(16, generator=g)}
        for layer in range(8):
            for part in ("self_attn.q_proj", "mlp.up_proj"):
                self.tensors[f"model.layers.{layer}.{part}.weight"] = torch.randn(
                    16, 16, generator=g).to(torch.bfloat16)
        self.path = os.path.join(self.tmp.name, "model.safetensors")
        save_file(self.tensors, self.path)

    def tearDown(self):
        self.tmp.cleanup()

    @staticmethod
    def layer(name):
        parts = name.split(".")
        return int(parts[2]) if parts[1] == "layers" else None

    def test_layers_split_by_shares_each_tensor_on_its_device(self):
        devices = ["sim", "cpu"]  # hoist's simulated DMA engine, and host memory
        where = hoist.placement(self.path, devices, tensor_split=[1, 3])
        self.assertEqual(where["model.embed_tokens.weight"], "sim")
        self.assertEqual(where["lm_head.weight"], "cpu")
        first = sorted({self.layer(n) for n, d in where.items() if d == "sim"} - {None})
        second = sorted({self.layer(n) for n, d in where.items() if d == "cpu"} - {None})
        self.assertTrue(first and second)
        self.assertLess(max(first), min(second))  # consecutive layers per device
        self.assertLess(len(first), len(second))  # a quarter of the model on the first
        got = hoist.load_file(self.path, device=devices, tensor_split=[1, 3])
        self.assertEqual(sorted(got), sorted(self.tensors))
        for name, tensor in got.items():
            self.assertTrue(torch.equal(tensor, self.tensors[name]), name)

    def test_unknown_split_and_share_counts_are_refused(self):
        with self.assertRaises(hoist.HoistError):
            hoist.load_file(self.path, device=["sim", "cpu"], split="tensor")
        with self.assertRaises(hoist.HoistError) as caught:
            hoist.load_file(self.path, device=["sim", "cpu"], tensor_split=[1, 1, 1])
        self.assertIn("3 shares for 2 devices", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
