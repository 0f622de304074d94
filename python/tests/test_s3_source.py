"""Models in S3 from Python: hoist.load_file and hoist.safetensors.safe_open take an s3:// name
wherever they take a path, the credentials and endpoint from the AWS variables. The server is
the one the C++ tests use (tests/reference/s3_server.mjs: s3rver, every signature checked by
AWS's own signer); AWS's command-line client uploads the model."""
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import torch

import hoist
import hoist.safetensors as st
from hoist.safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "..", "..", "tests", "reference")
SERVER = os.path.join(REFERENCE, "s3_server.mjs")
AWS = "/usr/bin/aws" if os.path.exists("/usr/bin/aws") else shutil.which("aws")
NODE = shutil.which("node")
READY = (AWS is not None and NODE is not None and
         os.path.isdir(os.path.join(REFERENCE, "node_modules", "s3rver")))


def same_bytes(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and \
        a.contiguous().view(-1).view(torch.uint8).equal(b.contiguous().view(-1).view(torch.uint8))


@unittest.skipUnless(READY, "node, aws or tests/reference/node_modules missing "
                            "(scripts/install-deps.sh installs them)")
class S3SourceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        out = open(os.path.join(cls.tmp.name, "server.out"), "w+")
        cls.server = subprocess.Popen([NODE, SERVER, os.path.join(cls.tmp.name, "objects"),
                                       "models"], stdout=out)
        port = None
        for _ in range(300):
            out.seek(0)
            words = out.read().split()
            if len(words) >= 2 and words[0] == "port":
                port = int(words[1])
                break
            time.sleep(0.05)  # a pacing loop: the port is written to a file, polled
        if port is None:
            raise RuntimeError("the S3 server did not start")
        cls.env = {"AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": "S3RVER",
                   "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
                   "AWS_CONFIG_FILE": os.path.join(cls.tmp.name, "none"),
                   "AWS_SHARED_CREDENTIALS_FILE": os.path.join(cls.tmp.name, "none")}
        cls.saved = {k: os.environ.get(k) for k in cls.env}
        os.environ.update(cls.env)
        g = torch.Generator().manual_seed(11)
        cls.tensors = {f"layers.{i}.weight": torch.randn(64, 48, generator=g).to(torch.bfloat16)
                       for i in range(4)}
        cls.tensors["norm.weight"] = torch.randn(48, generator=g)
        local = os.path.join(cls.tmp.name, "model.safetensors")
        save_file(cls.tensors, local)
        subprocess.run([AWS, "--endpoint-url", cls.env["AWS_ENDPOINT_URL"], "s3", "cp",
                        "--only-show-errors", local, "s3://models/m/model.safetensors"],
                       check=True)
        cls.name = "s3://models/m/model.safetensors"

    @classmethod
    def tearDownClass(cls):
        for k, v in cls.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        cls.server.send_signal(signal.SIGTERM)
        cls.server.wait()
        cls.tmp.cleanup()

    def test_load_file_and_safe_open_read_an_s3_name_as_the_file(self):
        for name in (self.name, "s3://models/m/"):
            loaded = hoist.load_file(name, device="cpu")
            self.assertEqual(set(loaded), set(self.tensors))
            for key, tensor in self.tensors.items():
                self.assertTrue(same_bytes(loaded[key], tensor), key)
        with st.safe_open(self.name, framework="pt") as f:
            for key in f.keys():
                self.assertTrue(same_bytes(f.get_tensor(key), self.tensors[key]), key)

    def test_a_missing_object_is_an_error_naming_it(self):
        with self.assertRaises(hoist.HoistError) as caught:
            hoist.load_file("s3://models/gone.safetensors", device="cpu")
        self.assertEqual(str(caught.exception),
                         "s3://models/gone.safetensors: no such object, nor objects under it")


if __name__ == "__main__":
    unittest.main()
