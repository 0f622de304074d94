#!/usr/bin/env bash
# The HTTP source on loopback against its ceiling: nginx (or, where there is none, the Python
# range server beside this script) serves a sample model; as many curl processes as hoist has
# readers fetch the same 4 MiB byte ranges to /dev/null (the ceiling: what this machine's HTTP
# stack and server deliver); hoist loads the URL onto a device, and the
# same file from its local path (the page cache). The best of ROUNDS of each and the ratios.
# Usage: bench/http/loopback.sh [HOIST] [SIZE] [DEVICE]   (defaults: build/hoist 1GiB host)
# Environment: ROUNDS (3); THREADS (hoist's --threads and curl's requests in flight; default:
# what hoist chooses for the device); MODEL (a safetensors file to serve instead of a sample);
# TLS=1: HTTPS with a self-signed certificate that hoist and curl trust; NO_NGINX=1: the Python
# range server even where nginx is; MIN_RATIO: exit 1 when the best URL/curl ratio is below it.
set -euo pipefail
hoist=${1:-build/hoist}
size=${2:-1GiB}
device=${3:-host}
nginx=$(command -v nginx || { [ -x /usr/sbin/nginx ] && echo /usr/sbin/nginx; } || true)
[ "${NO_NGINX:-0}" = 1 ] && nginx=
work=$(mktemp -d)
chmod 755 "$work"
trap 'kill "$(cat "$work/nginx.pid" 2>/dev/null)" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/root" "$work/tmp"
if [ -n "${MODEL:-}" ]; then
  ln -s "$(realpath "$MODEL")" "$work/root/m.safetensors"
else
  "$hoist" make-sample "$work/root/m.safetensors" --format safetensors --size "$size" >/dev/null
fi
scheme=http
tls=()
if [ "${TLS:-0}" = 1 ]; then
  scheme=https
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$work/key.pem" \
    -out "$work/cert.pem" -days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2>/dev/null
  tls=("$work/cert.pem" "$work/key.pem")
  export CURL_CA_BUNDLE="$work/cert.pem"  # hoist's trust; curl's below
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$work/nginx.conf" <<CONF
pid $work/nginx.pid;
worker_processes 4;
error_log $work/error.log;
events { worker_connections 1024; }
http {
  access_log off; sendfile on; tcp_nopush on; keepalive_requests 100000;
  client_body_temp_path $work/tmp; proxy_temp_path $work/tmp; fastcgi_temp_path $work/tmp;
  uwsgi_temp_path $work/tmp; scgi_temp_path $work/tmp;
  server { listen 127.0.0.1:$port $([ $scheme = https ] && echo ssl); root $work/root;
    $([ $scheme = https ] && echo "ssl_certificate $work/cert.pem; ssl_certificate_key $work/key.pem;") }
}
CONF
if [ -n "$nginx" ]; then
  "$nginx" -c "$work/nginx.conf" -p "$work" -e "$work/error.log"
  echo "server: nginx"
else
  python3 "$(dirname "$0")/range_server.py" "$work/root" "$port" "${tls[@]}" >/dev/null &
  echo $! >"$work/nginx.pid"
  echo "server: bench/http/range_server.py (no nginx here)"
fi
sleep 0.5
cat "$work/root/m.safetensors" >/dev/null  # both read from the page cache
HOIST="$hoist" URL="$scheme://127.0.0.1:$port/m.safetensors" LOCAL="$work/root/m.safetensors" DEVICE="$device" \
  BYTES=$(stat -L -c %s "$work/root/m.safetensors") python3 - <<'PY'
import json, os, subprocess, time
hoist, url, device, size = os.environ["HOIST"], os.environ["URL"], os.environ["DEVICE"], int(os.environ["BYTES"])
rounds = int(os.environ.get("ROUNDS", "3"))
extra = ["--threads", os.environ["THREADS"]] if os.environ.get("THREADS") else []
def load(name=url, more=()):
    out = subprocess.run([hoist, "load", name, "--device", device, "--json", "--quiet"] + extra + list(more),
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)
threads = load()["threads"]
chunk = 4 << 20
# The ceiling: `threads` curl processes at once, each fetching its share of the ranges in order
# on one kept-alive connection (--next), to /dev/null, each writing its byte counts.
shares = [[] for _ in range(threads)]
for i, at in enumerate(range(0, size, chunk)):
    shares[i % threads] += (["--cacert", os.environ["CURL_CA_BUNDLE"]] if url.startswith("https") else []) + ["-s", "-r", f"{at}-{min(at + chunk, size) - 1}", "-o", "/dev/null",
                            "-w", "%{size_download}\n", url, "--next"]
def fetch():
    procs = [subprocess.Popen(["curl"] + share[:-1], stdout=subprocess.PIPE, text=True)
             for share in shares if share]
    return sum(int(x) for p in procs for x in p.communicate()[0].split())
print(f"model: {size / 1e9:.2f} GB over {url}; {threads} requests in flight, 4 MiB ranges")
best_curl = best_hoist = best_local = 0
for r in range(1, rounds + 1):
    start = time.monotonic()
    got = fetch()
    curl_s = time.monotonic() - start
    assert got == size, f"curl fetched {got} of {size} bytes"
    report = load()
    local = load(os.environ["LOCAL"])
    curl_gbs, hoist_gbs, local_gbs = size / curl_s / 1e9, report["gbps"], local["gbps"]
    print(f"round {r}: curl {curl_gbs:.2f} GB/s, hoist URL onto {device} {hoist_gbs:.2f} GB/s, "
          f"hoist local file {local_gbs:.2f} GB/s")
    best_curl, best_hoist = max(best_curl, curl_gbs), max(best_hoist, hoist_gbs)
    best_local = max(best_local, local_gbs)
# Each tensor as loaded from the URL against the local file's (XXH3 over the staged bytes).
sums = [[(t["name"], t["xxh3"]) for t in load(n, ["--checksum"])["tensors"]] for n in (url, os.environ["LOCAL"])]
assert sums[0] == sums[1] and sums[0], "the URL's tensors differ from the local file's"
print(f"every tensor of the URL equal to the local file's ({len(sums[0])} tensors, XXH3)")
print(f"best: curl {best_curl:.2f} GB/s, hoist URL {best_hoist:.2f} GB/s, local {best_local:.2f} "
      f"GB/s; URL/curl {best_hoist / best_curl:.2f}, URL/local {best_hoist / best_local:.2f}")
if os.environ.get("MIN_RATIO"):
    floor = float(os.environ["MIN_RATIO"])
    held = best_hoist / best_curl >= floor
    print(f"expected URL/curl >= {floor:.2f}: {'holds' if held else 'FAILS'}")
    raise SystemExit(0 if held else 1)
PY
