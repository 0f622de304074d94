"""Real trained weights for the packing tests, from a package registry: the fp16 segmentation
model (ISNet, 44 M weights) that the npm package @imgly/background-removal-data ships as ONNX
in content-addressed chunks. Writes its float16 initializers as safetensors twice: as they are
(F16) and rounded to bfloat16 (BF16, round to nearest even), the dtype LLMs ship in.

Usage: python3 real_weights.py PACKAGE_DIR OUT_DIR   (PACKAGE_DIR: the package's folder in
node_modules). Needs numpy; reads ONNX's protobuf by hand (the five fields it needs)."""
import json
import os
import struct
import sys

import numpy as np

FLOAT16 = 10


def varint(buf, at):
    value = shift = 0
    while True:
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def fields(buf):
    """(field number, wire type, value) of a protobuf message; value: int or memoryview."""
    at = 0
    while at < len(buf):
        key, at = varint(buf, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(buf, at)
        elif wire == 1:
            value, at = buf[at:at + 8], at + 8
        elif wire == 2:
            length, at = varint(buf, at)
            value, at = buf[at:at + length], at + length
        elif wire == 5:
            value, at = buf[at:at + 4], at + 4
        else:
            raise ValueError(f"protobuf wire type {wire} at byte {at}")
        yield number, wire, value


def initializers(model):
    """(name, dims, data_type, raw bytes) of every initializer of an ONNX ModelProto."""
    for number, _, graph in fields(model):
        if number != 7:  # ModelProto.graph
            continue
        for gnumber, _, tensor in fields(graph):
            if gnumber != 5:  # GraphProto.initializer
                continue
            name, dims, dtype, raw, int32s = "", [], 0, None, []
            for tnumber, wire, value in fields(tensor):
                if tnumber == 1:  # dims: packed or one by one
                    if wire == 2:
                        at = 0
                        while at < len(value):
                            d, at = varint(value, at)
                            dims.append(d)
                    else:
                        dims.append(value)
                elif tnumber == 2:
                    dtype = value
                elif tnumber == 8:
                    name = bytes(value).decode()
                elif tnumber == 9:
                    raw = bytes(value)
                elif tnumber == 5 and wire == 2:  # int32_data, where fp16 may live
                    at = 0
                    while at < len(value):
                        v, at = varint(value, at)
                        int32s.append(v)
            if raw is None and dtype == FLOAT16:
                raw = struct.pack(f"<{len(int32s)}H", *int32s)
            yield name, dims, dtype, raw


def bf16_of_f16(raw):
    x = np.frombuffer(raw, dtype="<f2").astype("<f4").view("<u4").astype(np.uint64)
    finite = (x & 0x7F800000) != 0x7F800000
    rounded = np.where(finite, x + 0x7FFF + ((x >> 16) & 1), x)  # to nearest even
    return ((rounded >> 16) & 0xFFFF).astype("<u2").tobytes()


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, dtype, dims, raw in tensors:
        header[name] = {"dtype": dtype, "shape": dims, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path + ".partial", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for blob in blobs:
            f.write(blob)
    os.replace(path + ".partial", path)


def main():
    package, out = sys.argv[1], sys.argv[2]
    resources = json.load(open(os.path.join(package, "dist", "resources.json")))
    entry = resources["/models/medium"]  # the fp16 model
    model = bytearray()
    for chunk in entry["chunks"]:
        with open(os.path.join(package, "dist", chunk["hash"]), "rb") as f:
            model += f.read()
    if len(model) != entry["size"]:
        raise SystemExit(f"the model's chunks hold {len(model)} bytes, not {entry['size']}")
    f16 = [(name, "F16", dims, raw) for name, dims, dtype, raw in initializers(memoryview(model))
           if dtype == FLOAT16 and raw]
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "isnet-f16.safetensors"), f16)
    write_safetensors(os.path.join(out, "isnet-bf16.safetensors"),
                      [(name, "BF16", dims, bf16_of_f16(raw)) for name, _, dims, raw in f16])
    print(f"{len(f16)} tensors, {sum(len(t[3]) for t in f16) // 2} weights")


if __name__ == "__main__":
    main()
