"""One request, three front ends: the command line (hoist inspect / verify), the C API (what
hoist.placement calls through the native module) and Python's hoist.load_file all go through
one façade, so for every split, with and without a plan file, they place a model the same way
and load the same bytes (on hoist's simulated devices). A model handed in as bytes loads as its
file does."""
import json
import os
import subprocess
import tempfile
import unittest

import torch

import hoist
from hoist.safetensors.torch import save_file

HOIST_CLI = os.environ.get("HOIST_CLI", "hoist")
DEVICES = ["sim:bandwidth=4GB/s", "sim:bandwidth=2GB/s"]


class FrontEndsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        g = torch.Generator().manual_seed(5)
        self.tensors = {"model.embed_tokens.weight": torch.randn(32, 16, generator=g),
                        "lm_head.weight": torch.randn(32, 16, generator=g),
                        "model.norm.weight": torch.randn(16, generator=g)}
        for layer in range(4):
            for part in ("self_attn.q_proj", "self_attn.o_proj", "mlp.down_proj"):
                self.tensors[f"model.layers.{layer}.{part}.weight"] = torch.randn(
                    16, 24, generator=g).to(torch.bfloat16)
        self.path = os.path.join(self.tmp.name, "model.safetensors")
        save_file(self.tensors, self.path)
        # A plan that turns the built-in cuts around: q_proj by columns, o_proj by rows,
        # down_proj whole on the second device.
        self.plan = os.path.join(self.tmp.name, "plan.json")
        with open(self.plan, "w") as f:
            json.dump({"*.q_proj.weight": "columns", "*.o_proj.weight": "rows",
                       "*.down_proj.weight": 1}, f)

    def tearDown(self):
        self.tmp.cleanup()

    def cli(self, *args):
        return subprocess.run([HOIST_CLI, *args], capture_output=True, text=True, timeout=120)

    def cli_placement(self, split, plan):
        args = ["inspect", self.path, "--json", "--device", ",".join(DEVICES), "--split", split]
        if plan:
            args += ["--split-plan", plan]
        run = self.cli(*args)
        self.assertEqual(run.returncode, 0, run.stderr)
        return json.loads(run.stdout)["placement"]

    def expected_part(self, name, rows, columns, row_bytes):
        """The bytes a part holds: rows [r0, r1) and bytes [c0, c1) of each row of `name`."""
        raw = self.tensors[name].contiguous().view(torch.uint8).reshape(-1)
        table = raw.reshape(-1, row_bytes)
        return table[rows[0]:rows[1], columns[0]:columns[1]].reshape(-1)

    def test_every_split_places_and_loads_alike_through_every_front_end(self):
        names = list(hoist.Model(self.path).tensors)
        for split, plan in (("layer", None), ("tensor", None), ("tensor", self.plan),
                            ("replicate", None)):
            with self.subTest(split=split, plan=plan):
                cli = self.cli_placement(split, plan)
                python = hoist.placement(self.path, DEVICES, split=split, split_plan=plan)
                if split == "layer":
                    self.assertEqual({n: DEVICES[d] for n, d in zip(names, cli["device_of"])},
                                     python)
                    loaded = hoist.load_file(self.path, device=DEVICES, split=split)
                    for name, tensor in loaded.items():
                        self.assertTrue(torch.equal(tensor, self.tensors[name]), name)
                else:
                    on = {}
                    for part in cli["parts"]:
                        on.setdefault(part["tensor"], []).append(DEVICES[part["device"]])
                    self.assertEqual(on, {n: d for n, d in python.items() if d})
                    per_device = hoist.load_file(self.path, device=DEVICES, split=split,
                                                 split_plan=plan)
                    for part in cli["parts"]:
                        got = per_device[part["device"]][part["tensor"]]
                        want = self.expected_part(part["tensor"], part["rows"], part["bytes"],
                                                  part["row_bytes"])
                        self.assertTrue(torch.equal(got.contiguous().view(torch.uint8)
                                                    .reshape(-1), want), part)
                args = ["verify", self.path, "--quiet", "--device", ",".join(DEVICES),
                        "--split", split]
                run = self.cli(*(args + (["--split-plan", plan] if plan else [])))
                self.assertEqual(run.returncode, 0, run.stderr)

    def test_the_plan_changes_the_cuts_the_same_way_everywhere(self):
        cli = self.cli_placement("tensor", self.plan)
        down = [p for p in cli["parts"] if p["tensor"] == "model.layers.0.mlp.down_proj.weight"]
        self.assertEqual([p["device"] for p in down], [1])  # whole on the second device
        q = [p for p in cli["parts"] if p["tensor"] == "model.layers.0.self_attn.q_proj.weight"]
        self.assertEqual([p["rows"] for p in q], [[0, 16], [0, 16]])  # columns: every row
        python = hoist.placement(self.path, DEVICES, split="tensor", split_plan=self.plan)
        self.assertEqual(python["model.layers.0.mlp.down_proj.weight"], [DEVICES[1]])

    def test_a_plan_is_refused_alike_where_it_does_not_apply(self):
        run = self.cli("inspect", self.path, "--device", ",".join(DEVICES), "--split",
                       "layer", "--split-plan", self.plan)
        self.assertEqual(run.returncode, 1)
        self.assertIn("--split-plan is for --split tensor", run.stderr)
        with self.assertRaises(hoist.HoistError) as caught:
            hoist.load_file(self.path, device=DEVICES, split="layer", split_plan=self.plan)
        self.assertEqual(str(caught.exception), "split_plan is for split tensor")
        self.assertEqual(caught.exception.status, "invalid argument")

    def test_a_model_in_memory_loads_as_its_file_does(self):
        with open(self.path, "rb") as f:
            data = f.read()
        model = hoist.Model.from_bytes(data, "in-memory.safetensors")
        self.assertEqual(model.tensors.keys(), hoist.Model(self.path).tensors.keys())
        for device in ("cpu", DEVICES[0], DEVICES):
            with self.subTest(device=device):
                got = hoist.load_file(model, device=device)
                for name, tensor in got.items():
                    self.assertTrue(torch.equal(tensor, self.tensors[name]), name)
        with self.assertRaises(hoist.InvalidModelError) as caught:
            hoist.Model.from_bytes(data[:100], "cut.safetensors")
        self.assertTrue(str(caught.exception).startswith("cut.safetensors: "), caught.exception)


if __name__ == "__main__":
    unittest.main()
