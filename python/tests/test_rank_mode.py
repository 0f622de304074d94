"""Rank mode: hoist.load_file(..., process_group=pg) in a job of 2 to 4 processes (gloo on
CPUs): each rank gets its slice of every cut weight, equal to narrow() of the tensor written, and
every whole tensor, equal to the one written, its bytes read 1/N by each rank and all-gathered."""
import os
import tempfile
import unittest

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import hoist
from hoist.safetensors.torch import save_file


def tensors():
    g = torch.Generator().manual_seed(5)
    out = {"model.embed_tokens.weight": torch.randn(24, 8, generator=g),
           "model.norm.weight": torch.randn(8, generator=g),
           "lm_head.weight": torch.randn(24, 8, generator=g).to(torch.bfloat16)}
    for layer in range(3):
        out[f"model.layers.{layer}.self_attn.q_proj.weight"] = torch.randn(12, 8, generator=g)
        out[f"model.layers.{layer}.self_attn.q_proj.bias"] = torch.randn(12, generator=g)
        out[f"model.layers.{layer}.self_attn.o_proj.weight"] = torch.randn(
            8, 12, generator=g).to(torch.bfloat16)
        out[f"model.layers.{layer}.input_layernorm.weight"] = torch.randn(8, generator=g)
    return out


def expected_part(name, whole, rank, world):
    parts = name.split(".")
    if "o_proj" in parts and parts[-1] == "weight":
        dim = 1
    elif any(p in parts for p in ("q_proj", "embed_tokens", "lm_head")):
        dim = 0
    else:
        return whole
    n = whole.shape[dim]
    begin, end = round(n * rank / world), round(n * (rank + 1) / world)
    return whole.narrow(dim, begin, end - begin)


def rank_main(rank, world, init_file, path, split, results):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        got = hoist.load_file(path, device="cpu", split=split, process_group=dist.group.WORLD)
        written = tensors()
        bad = []
        if sorted(got) != sorted(written):
            bad.append(f"keys {sorted(got)}")
        for name, whole in written.items():
            want = whole if split == "replicate" else expected_part(name, whole, rank, world)
            if name not in got or got[name].shape != want.shape or not torch.equal(got[name], want):
                bad.append(name)
        results.put((rank, bad))
    finally:
        dist.destroy_process_group()


class RankModeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "model.safetensors")
        save_file(tensors(), self.path)

    def tearDown(self):
        self.tmp.cleanup()

    def run_job(self, world, split):
        ctx = mp.get_context("spawn")
        results = ctx.Queue()
        init_file = os.path.join(self.tmp.name, f"init-{world}-{split}")
        procs = [ctx.Process(target=rank_main,
                             args=(r, world, init_file, self.path, split, results))
                 for r in range(world)]
        for p in procs:
            p.start()
        got = dict(results.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(timeout=60)
            self.assertEqual(p.exitcode, 0)
        for rank in range(world):
            self.assertEqual(got[rank], [], f"rank {rank} of {world}")

    def test_each_rank_gets_its_slices_and_every_whole_tensor(self):
        for world in (2, 3):
            with self.subTest(world=world):
                self.run_job(world, "tensor")

    def test_replicas_are_gathered_whole_on_every_rank(self):
        self.run_job(4, "replicate")

    def test_rank_mode_refuses_a_layer_split(self):
        with self.assertRaises(hoist.HoistError) as caught:
            hoist.load_file(self.path, device="cpu", split="layer", process_group=object())
        self.assertIn("rank mode takes split 'tensor' or 'replicate'", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
