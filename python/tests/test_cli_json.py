"""Every --json document of the hoist command validates against its schema in docs/schemas
(load, verify, inspect with and without a placement, bench to stdout and to a file, doctor):
one JSON style, snake_case keys, numbers in bytes, seconds and GB/s, a schema_version.
HOIST_CLI names the hoist executable."""
import json
import os
import subprocess
import tempfile
import unittest

import jsonschema

HOIST_CLI = os.environ.get("HOIST_CLI", "hoist")
SCHEMAS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "schemas")


def schema(name):
    with open(os.path.join(SCHEMAS, f"{name}.schema.json")) as f:
        loaded = json.load(f)
    jsonschema.Draft202012Validator.check_schema(loaded)
    return loaded


class CliJsonTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = os.path.join(cls.tmp.name, "m.gguf")
        subprocess.run([HOIST_CLI, "make-sample", cls.model, "--size", "8MiB"], check=True,
                       capture_output=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_json(self, *args):
        done = subprocess.run([HOIST_CLI, *args], capture_output=True, text=True, check=False)
        self.assertEqual(done.returncode, 0, done.stderr)
        return json.loads(done.stdout)  # stdout is the one document, nothing else

    def valid(self, document, name):
        jsonschema.validate(document, schema(name), cls=jsonschema.Draft202012Validator)
        self.assertEqual(document["schema_version"], 1)

    def test_load_and_verify(self):
        self.valid(self.run_json("load", self.model, "--device", "host", "--json", "--quiet",
                                 "--checksum"), "load")
        verified = self.run_json("verify", self.model, "--device", "sim,host", "--json",
                                 "--quiet")
        self.valid(verified, "load")
        self.assertTrue(verified["verified"])
        self.assertEqual(len(verified["devices"]), 2)

    def test_inspect(self):
        self.valid(self.run_json("inspect", self.model, "--json"), "inspect")
        placed = self.run_json("inspect", self.model, "--json", "--device", "sim,sim")
        self.valid(placed, "inspect")
        self.assertEqual(placed["placement"]["split"], "layer")
        cut = self.run_json("inspect", self.model, "--json", "--device", "sim,sim", "--split",
                            "tensor")
        self.valid(cut, "inspect")
        self.assertTrue(cut["placement"]["parts"])

    def test_bench_to_stdout_and_to_a_file(self):
        args = ["bench", self.model, "--device", "host", "--repeat", "1", "--strategies", "none"]
        self.valid(self.run_json(*args, "--json"), "bench")
        path = os.path.join(self.tmp.name, "bench.json")
        done = subprocess.run([HOIST_CLI, *args, "--json", path], capture_output=True, text=True,
                              check=True)
        self.assertIn("strategy", done.stdout)  # the table, with the file beside it
        with open(path) as f:
            self.valid(json.load(f), "bench")

    def test_doctor(self):
        self.valid(self.run_json("doctor", self.model, "--device", "sim", "--json"), "doctor")

    def test_serve_and_attach(self):
        runtime = os.path.join(self.tmp.name, "run")
        os.makedirs(runtime, mode=0o700, exist_ok=True)
        env = dict(os.environ, XDG_RUNTIME_DIR=runtime)
        holder = subprocess.Popen([HOIST_CLI, "serve", self.model, "--device", "host", "--name",
                                   "m", "--json"], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, env=env)
        try:
            self.valid(json.loads(holder.stdout.readline()), "serve")
            for args in (["serve", "--list", "--json"], ["attach", "m", "--verify", "--json"]):
                done = subprocess.run([HOIST_CLI, *args], capture_output=True, text=True,
                                      env=env, check=False)
                self.assertEqual(done.returncode, 0, done.stderr)
                self.valid(json.loads(done.stdout), "serve")
        finally:
            holder.terminate()
            holder.wait()
            holder.stdout.close()

    def test_a_document_that_breaks_the_style_fails(self):
        document = self.run_json("doctor", "--device", "sim", "--json")
        document["ceilings"]["host-to-device, pinned 64 MiB copies"] = 1.0  # a display key
        with self.assertRaises(jsonschema.ValidationError):
            self.valid(document, "doctor")
        document = self.run_json("load", self.model, "--device", "host", "--json", "--quiet")
        document["chunk_bytes"] = "4.00 MiB"  # a display value
        with self.assertRaises(jsonschema.ValidationError):
            self.valid(document, "load")


if __name__ == "__main__":
    unittest.main()
