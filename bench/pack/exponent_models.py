"""How small the BF16 weights of a safetensors file could pack under each exponent model.

`hoist pack` stores a BF16 value's sign and mantissa as they are (8 bits) and Huffman-codes its
8 exponent bits with one code per tensor. This prints, for the file's BF16 tensors, the
entropy of the exponents under other models, as bits per value and as the ratio they bound
(8 + bits) / 16, before any coder's and container's overhead (on the test suite's real
weights `hoist pack` writes 68.2% against the per-tensor bound of 67.6%):

  tensor     one distribution per tensor (what `hoist pack` codes)
  block      one per block of 32768 values (the decoder's group)
  row        one per row (a bound only: a table per row costs more than it saves on short rows)
  row class  rows grouped by their largest exponent, one distribution per group, plus each
             row's group (log2 of the tensor's group count, in bits) in the cost

Usage: python3 bench/pack/exponent_models.py FILE.safetensors  (needs numpy)
The BF16 copy of the test suite's real weights: python3 tests/reference/real_weights.py
tests/reference/node_modules/@imgly/background-removal-data DIR, then DIR/isnet-bf16.safetensors.
"""
import json
import struct
import sys

import numpy as np

BLOCK = 32768


def entropy_bits(values):
    """Total bits of the values under their own empirical distribution."""
    counts = np.bincount(values, minlength=256)
    counts = counts[counts > 0].astype(float)
    return float(-(counts * np.log2(counts / counts.sum())).sum())


def models(exponents, shape):
    """Bits of one tensor's exponents under each model."""
    bits = {"tensor": entropy_bits(exponents)}
    bits["block"] = sum(entropy_bits(exponents[i:i + BLOCK])
                        for i in range(0, exponents.size, BLOCK))
    if len(shape) < 2 or shape[0] < 2:
        bits["row"] = bits["row class"] = bits["tensor"]
        return bits
    rows = exponents.reshape(shape[0], -1)
    bits["row"] = sum(entropy_bits(r) for r in rows)
    key = rows.max(axis=1)
    classes = np.unique(key)
    bits["row class"] = sum(entropy_bits(rows[key == k].ravel()) for k in classes)
    bits["row class"] += len(key) * np.log2(max(2, len(classes)))
    return bits


def main(path):
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    base = 8 + header_len
    values, totals = 0, {}
    for name, entry in header.items():
        if name == "__metadata__" or entry["dtype"] != "BF16":
            continue
        begin, end = entry["data_offsets"]
        words = np.frombuffer(data[base + begin:base + end], dtype="<u2")
        values += words.size
        for model, bits in models(((words >> 7) & 0xFF).astype(np.int64), entry["shape"]).items():
            totals[model] = totals.get(model, 0.0) + bits
    if values == 0:
        raise SystemExit(f"{path}: no BF16 tensors")
    print(f"{path}: {values} BF16 values")
    for model, bits in totals.items():
        per_value = bits / values
        print(f"{model:10s} exponent {per_value:.3f} bits/value, ratio bound {(8 + per_value) / 16:.2%}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
