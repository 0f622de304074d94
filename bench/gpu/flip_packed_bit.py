#!/usr/bin/env python3
"""Flips one bit of a packed model (.hoistpack) in place, in a named place, and says what a
load must then report. Flipping the same place again restores the file.

Usage: flip_packed_bit.py FILE PLACE
PLACE: coded-first, coded-last, kept-first, kept-last (a coded tensor's coded stream or kept
bits, in its first or last block), checksum-last (that block's recorded checksum), unit-bits
(a unit length of block 1), group-start (block 1's start), table (the code lengths), raw (a
tensor stored as it is).
Prints one line: "TENSOR BLOCK OFFSET", BLOCK "-" where the error names no block.
"""
import json
import struct
import sys

GROUP_VALUES = 512 * 64


def main():
    path, place = sys.argv[1], sys.argv[2]
    with open(path, "r+b") as f:
        magic, at, n = struct.unpack("<8sQQ", f.read(24))
        if magic != b"HOISTPK1":
            sys.exit(f"{path}: not a packed model")
        f.seek(at)
        tensors = json.loads(f.read(n))["tensors"]
        coded = [t for t in tensors if t["stored"] == "exponent-huffman" and t["values"] > 2 * GROUP_VALUES]
        raw = [t for t in tensors if t["stored"] == "raw" and t["nbytes"] > 0]
        if not coded or (place == "raw" and not raw):
            sys.exit(f"{path}: no tensor to flip a bit of for {place}")
        t = coded[0]
        s = t["sections"]
        groups = (t["values"] + GROUP_VALUES - 1) // GROUP_VALUES
        last = groups - 1
        kept_bytes = t["value_bytes"] - 1

        def start_bit(g):
            f.seek(s["group_start_bits"][0] + 8 * g)
            return struct.unpack("<Q", f.read(8))[0]

        block = "-"
        if place in ("coded-first", "coded-last"):
            block = 0 if place == "coded-first" else last
            where = s["coded"][0] + start_bit(block) // 8 + 40
            bit = 0x10
        elif place in ("kept-first", "kept-last"):
            block = 0 if place == "kept-first" else last
            where = s["rest"][0] + block * GROUP_VALUES * kept_bytes + 1001
            bit = 0x20
        elif place == "checksum-last":
            block = last
            where = s["group_checksums"][0] + 8 * last + 3
            bit = 0x01
        elif place == "unit-bits":
            block = 1
            where = s["unit_bits"][0] + 2 * (64 + 1)  # block 1's second unit: one bit longer
            bit = 0x01
        elif place == "group-start":
            block = 1
            where = s["group_start_bits"][0] + 8 * 1
            bit = 0x08  # 8 bits later
        elif place == "table":
            f.seek(s["code_lengths"][0])
            lengths = f.read(256)
            symbol = max(range(256), key=lambda i: lengths[i])  # the longest code, made longer
            where = s["code_lengths"][0] + symbol
            bit = 0x01
        elif place == "raw":
            t = raw[0]
            where = t["data"][0] + t["nbytes"] // 2
            bit = 0x04
        else:
            sys.exit(f"unknown place {place}")
        f.seek(where)
        b = f.read(1)[0]
        f.seek(where)
        f.write(bytes([b ^ bit]))
    print(t["name"], block, where)


if __name__ == "__main__":
    main()
