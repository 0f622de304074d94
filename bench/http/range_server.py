"""A static file server with byte ranges and ETags, for measuring hoist's HTTP source on a
machine without nginx (the GPU machine): HEAD and GET, "Range: bytes=a-b" answered 206 with
os.sendfile from the page cache (over TLS, reads and writes: TLS cannot send a file), one
thread per connection, keep-alive.
Usage: python3 bench/http/range_server.py ROOT PORT [CERT KEY]   (with CERT and KEY: HTTPS;
prints "ready" once it listens)"""
import email.utils
import http.server
import os
import socketserver
import ssl
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root = "."

    def log_message(self, *args):
        pass

    def _file(self):
        path = os.path.normpath(os.path.join(self.root, self.path.lstrip("/").split("?")[0]))
        if not path.startswith(os.path.abspath(self.root)) or not os.path.isfile(path):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None, None
        return path, os.stat(path)

    def _headers(self, status, st, length, first=None):
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.send_header("ETag", f'"{st.st_mtime_ns:x}-{st.st_size:x}"')
        self.send_header("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))
        self.send_header("Accept-Ranges", "bytes")
        if first is not None:
            self.send_header("Content-Range", f"bytes {first}-{first + length - 1}/{st.st_size}")
        self.end_headers()

    def do_HEAD(self):
        path, st = self._file()
        if path:
            self._headers(200, st, st.st_size)

    def do_GET(self):
        path, st = self._file()
        if not path:
            return
        first, last = 0, st.st_size - 1
        ranged = self.headers.get("Range", "").startswith("bytes=")
        if ranged:
            a, b = self.headers["Range"][6:].split("-")
            first, last = int(a), min(int(b) if b else st.st_size - 1, st.st_size - 1)
        length = last - first + 1
        self._headers(206 if ranged else 200, st, length, first if ranged else None)
        with open(path, "rb") as f:
            if isinstance(self.connection, ssl.SSLSocket):
                f.seek(first)
                left = length
                while left > 0:
                    block = f.read(min(left, 1 << 20))
                    if not block:
                        break
                    self.wfile.write(block)
                    left -= len(block)
                return
            sent = 0
            while sent < length:
                n = os.sendfile(self.connection.fileno(), f.fileno(), first + sent, length - sent)
                if n == 0:
                    break
                sent += n


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 256


if __name__ == "__main__":
    Handler.root = os.path.abspath(sys.argv[1])
    server = Server(("127.0.0.1", int(sys.argv[2])), Handler)
    if len(sys.argv) > 4:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(sys.argv[3], sys.argv[4])
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print("ready", flush=True)
    server.serve_forever()
