"""Packing real trained weights that no one here wrote: the npm package
@imgly/background-removal-data's fp16 ISNet model (44 M weights), as F16 and rounded to BF16
(tests/reference/real_weights.py). Each packs, round-trips byte for byte (`hoist pack --check`),
loads and verifies on the host and the sim; the BF16 copy packs to at most 72% of its bytes.

Usage: python3 real_weights_test.py HOIST PACKAGE_DIR"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_BF16_RATIO = 0.72


def run(*args):
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def main():
    hoist, package = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        run(sys.executable, os.path.join(HERE, "..", "reference", "real_weights.py"), package, tmp)
        ratios = {}
        for dtype in ("f16", "bf16"):
            original = os.path.join(tmp, f"isnet-{dtype}.safetensors")
            packed = os.path.join(tmp, f"isnet-{dtype}.hoistpack")
            out = run(hoist, "pack", original, "-o", packed, "--check")
            assert "check: every tensor of" in out, out
            inspected = json.loads(run(hoist, "inspect", packed, "--json"))
            ratios[dtype] = inspected["stored_bytes"] / inspected["total_bytes"]
            for device in ("host", "sim"):
                run(hoist, "verify", packed, "--device", device, "--quiet")
            print(f"{dtype}: {inspected['total_bytes']} bytes of weights pack to "
                  f"{inspected['stored_bytes']} ({100 * ratios[dtype]:.1f}%); "
                  f"round trip, load and verify byte-exact")
        if ratios["bf16"] > MAX_BF16_RATIO:
            raise SystemExit(f"the BF16 weights pack to {100 * ratios['bf16']:.1f}%, more than "
                             f"{100 * MAX_BF16_RATIO:.0f}%")


if __name__ == "__main__":
    main()
