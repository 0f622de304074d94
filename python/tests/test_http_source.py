"""Models over HTTP from Python: hoist.load_file, hoist.safetensors.safe_open and hoist.Model
take a URL wherever they take a path, and every tensor equals the local file's, byte for byte.
The server is a real one (nginx on loopback), as in the C++ tests of the HTTP source."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import torch

import hoist
import hoist.safetensors as st
from hoist.safetensors.torch import save_file

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def same_bytes(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and \
        a.contiguous().view(-1).view(torch.uint8).equal(b.contiguous().view(-1).view(torch.uint8))


@unittest.skipIf(NGINX is None, "nginx is not installed (scripts/install-deps.sh installs it)")
class HttpSourceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        os.chmod(cls.tmp.name, 0o755)  # nginx's workers (nobody, under root) read the files
        root = os.path.join(cls.tmp.name, "root")
        os.makedirs(os.path.join(cls.tmp.name, "tmp"))
        os.makedirs(root)
        g = torch.Generator().manual_seed(7)
        cls.tensors = {f"layers.{i}.weight": torch.randn(64, 48, generator=g).to(torch.bfloat16)
                       for i in range(6)}
        cls.tensors["norm.weight"] = torch.randn(48, generator=g)
        cls.local = os.path.join(root, "model.safetensors")
        save_file(cls.tensors, cls.local)
        os.chmod(cls.local, 0o644)  # written through a private temporary file
        port = free_port()
        conf = os.path.join(cls.tmp.name, "nginx.conf")
        temps = "".join(f"  {t}_temp_path {cls.tmp.name}/tmp;\n"
                        for t in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        with open(conf, "w") as f:
            f.write(f"daemon off;\npid {cls.tmp.name}/nginx.pid;\nerror_log {cls.tmp.name}/e.log;\n"
                    f"events {{}}\nhttp {{\n  access_log off;\n{temps}"
                    f"  server {{ listen 127.0.0.1:{port}; root {root}; }}\n}}\n")
        cls.server = subprocess.Popen([NGINX, "-c", conf, "-p", cls.tmp.name,
                                       "-e", f"{cls.tmp.name}/e.log"])
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)  # a pacing loop: nginx says nothing when it listens
        cls.url = f"http://127.0.0.1:{port}/model.safetensors"

    @classmethod
    def tearDownClass(cls):
        cls.server.send_signal(signal.SIGTERM)
        cls.server.wait()
        cls.tmp.cleanup()

    def test_load_file_reads_a_url_as_it_reads_the_file(self):
        loaded = hoist.load_file(self.url, device="cpu")
        self.assertEqual(set(loaded), set(self.tensors))
        for name, tensor in self.tensors.items():
            self.assertTrue(same_bytes(loaded[name], tensor), name)

    def test_safe_open_and_model_take_a_url(self):
        with st.safe_open(self.url, framework="pt") as f:
            self.assertEqual(sorted(f.keys()), sorted(self.tensors))
            for name in f.keys():
                self.assertTrue(same_bytes(f.get_tensor(name), self.tensors[name]), name)
        model = hoist.Model(self.url)
        self.assertEqual(model.format, "safetensors")
        self.assertEqual(model.tensors["norm.weight"].shape, (48,))

    def test_a_missing_url_is_a_not_found_error_naming_it(self):
        missing = self.url.replace("model.safetensors", "gone.safetensors")
        with self.assertRaises(hoist.HoistError) as caught:
            hoist.load_file(missing, device="cpu")
        self.assertEqual(str(caught.exception), f"{missing}: 404 Not Found")


def swapping_server(first, then, after):
    """A server of one file that is replaced by another (another layout, another ETag) once its
    first `after` ranged GETs (the header's) are answered. Returns (server, url); serve_forever runs on a
    thread of its own."""
    import http.server
    import threading
    state = {"ranged": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def current(self):
            return (first, '"first"') if state["ranged"] < after else (then, '"then"')

        def do_HEAD(self):
            data, etag = self.current()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("ETag", etag)
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()

        def do_GET(self):
            data, etag = self.current()
            spec = self.headers.get("Range", "bytes=0-").split("=", 1)[1]
            begin, _, end = spec.partition("-")
            begin, end = int(begin), min(int(end or len(data) - 1), len(data) - 1)
            body = data[begin:end + 1]
            state["ranged"] += 1
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {begin}-{end}/{len(data)}")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", etag)
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/model.safetensors"


class ReplacedUrlTest(unittest.TestCase):
    def test_a_file_replaced_after_its_header_is_refused(self):
        # Another model's bytes under the same URL after the header was read: load_file raises
        # FileChangedError (the CLI's exit 6), never tensors cut from the other file.
        g = torch.Generator().manual_seed(3)
        with tempfile.TemporaryDirectory() as tmp:
            first, then = os.path.join(tmp, "a"), os.path.join(tmp, "b")
            save_file({"w": torch.randn(64, 32, generator=g)}, first)
            save_file({"v": torch.randn(32, 64, generator=g), "u": torch.randn(7)}, then)
            with open(first, "rb") as f, open(then, "rb") as t:
                server, url = swapping_server(f.read(), t.read(), after=2)
        try:
            with self.assertRaises(hoist.HoistError) as caught:
                hoist.load_file(url, device="cpu")
            self.assertEqual(caught.exception.status, "model changed")
            self.assertIn("model.safetensors: written to (its size went from", str(caught.exception))
        finally:
            server.shutdown()
            server.server_close()


if __name__ == "__main__":
    unittest.main()
