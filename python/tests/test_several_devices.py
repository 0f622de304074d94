"""hoist.load_file onto several devices in one load: placed by layers (by shares or free
memory), each tensor on its device and equal to the file's; hoist.placement says where first;
cut among them (tensor parallel), each device's part equal to narrow() of the tensor written;
or replicated, every device holding every tensor."""
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
            for part in ("self_attn.q_proj", "self_attn.o_proj", "mlp.up_proj"):
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

    def test_a_tensor_split_gives_each_device_its_rows_or_columns(self):
        for shares, devices in (([1, 1], ["sim", "sim"]), ([3, 1], ["sim", "cpu"]),
                                (None, ["sim", "sim", "cpu", "sim"])):
            with self.subTest(shares=shares, devices=devices):
                parts = hoist.load_file(self.path, device=devices, split="tensor",
                                        tensor_split=shares)
                self.assertEqual(len(parts), len(devices))
                weights = shares or [1] * len(devices)
                total = sum(weights)
                for name, whole in self.tensors.items():
                    dim = (1 if "o_proj" in name else
                           None if "norm" in name else 0)
                    begin = 0
                    for d, held in enumerate(parts):
                        got = held[name]
                        if dim is None:
                            self.assertTrue(torch.equal(got, whole), name)
                            continue
                        end = round(whole.shape[dim] * sum(weights[:d + 1]) / total)
                        want = whole.narrow(dim, begin, end - begin)
                        self.assertEqual(got.shape, want.shape, (name, d))
                        self.assertTrue(torch.equal(got, want), (name, d))
                        begin = end

    def test_placement_lists_the_devices_that_get_a_part(self):
        where = hoist.placement(self.path, ["sim", "cpu"], split="tensor")
        self.assertEqual(where["model.layers.0.self_attn.q_proj.weight"], ["sim", "cpu"])
        self.assertEqual(where["model.norm.weight"], ["sim", "cpu"])
        every = hoist.placement(self.path, ["sim", "cpu", "sim"], split="replicate")
        self.assertEqual(set(map(tuple, every.values())), {("sim", "cpu", "sim")})

    def test_replicas_put_every_tensor_on_every_device(self):
        parts = hoist.load_file(self.path, device=["sim", "cpu", "sim"], split="replicate",
                                names=["lm_head.weight", "model.layers.3.self_attn.o_proj.weight"])
        self.assertEqual(len(parts), 3)
        for held in parts:
            self.assertEqual(sorted(held), ["lm_head.weight", "model.layers.3.self_attn.o_proj.weight"])
            for name, tensor in held.items():
                self.assertTrue(torch.equal(tensor, self.tensors[name]), name)

    def test_unknown_split_and_share_counts_are_refused(self):
        with self.assertRaises(hoist.HoistError) as caught:
            hoist.load_file(self.path, device=["sim", "cpu"], split="diagonal")
        self.assertIn("split 'diagonal' is not a split: layer, tensor, replicate",
                      str(caught.exception))
        with self.assertRaises(hoist.HoistError):
            hoist.load_file(self.path, device=["sim", "cpu"], split="tensor", checksum=True)
        with self.assertRaises(hoist.HoistError) as caught:
            hoist.load_file(self.path, device=["sim", "cpu"], tensor_split=[1, 1, 1])
        self.assertIn("3 shares for 2 devices", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
