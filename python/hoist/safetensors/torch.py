"""hoist.safetensors.torch: safetensors.torch's load_file, load, save_file and save.

load_file reads through hoist's engine (the whole file in one load, every tensor at the link);
load, save and save_file work on bytes as safetensors does: the same header, the same order
(by dtype, widest first, then by name), the same padding.
"""
import json
import os
import struct

from .. import HoistError, _TORCH_DTYPES, load_file as _hoist_load_file
from . import SafetensorError, _from_bytes, _parse, _ITEMSIZE

__all__ = ["load_file", "load", "save_file", "save"]

# safetensors' Dtype order (it sorts tensors by dtype, last first, then by name).
_DTYPE_ORDER = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3",
                "F8_E8M0", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64", "F64",
                "I64", "U64"]


def load_file(filename, device="cpu"):
    """{name: tensor} of every tensor in the file, on device, keys sorted by name."""
    path = os.fspath(filename)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No such file or directory: {path!r}")
    try:
        loaded = _hoist_load_file(path, device=device)
    except HoistError as e:
        raise SafetensorError(str(e)) from e
    return {name: loaded[name] for name in sorted(loaded)}


def load(data):
    """{name: tensor} on the CPU from the bytes of a safetensors file."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes, not {type(data).__name__}")
    header, start = _parse(data, "safetensors bytes")
    body = len(data) - start
    out = {}
    for name in sorted(k for k in header if k != "__metadata__"):
        entry = header[name]
        try:
            dtype, shape, (begin, end) = entry["dtype"], list(entry["shape"]), entry["data_offsets"]
        except (KeyError, TypeError, ValueError) as e:
            raise SafetensorError(f"tensor '{name}': malformed header entry {entry!r}") from e
        if dtype not in _ITEMSIZE:
            raise SafetensorError(f"tensor '{name}': unknown dtype {dtype!r}")
        count = 1
        for d in shape:
            count *= d
        if not 0 <= begin <= end <= body or end - begin != count * _ITEMSIZE[dtype]:
            raise SafetensorError(f"tensor '{name}': data_offsets [{begin}, {end}] do not hold "
                                  f"{count} {dtype} values inside {body} bytes")
        out[name] = _from_bytes(bytearray(data[start + begin:start + end]), dtype, shape, "cpu",
                                False)
    return out


def _dtype_name(tensor):
    import torch
    for name, attr in _TORCH_DTYPES.items():
        if getattr(torch, attr, None) == tensor.dtype:
            return name
    raise ValueError(f"dtype {tensor.dtype} cannot be saved in safetensors")


def save(tensors, metadata=None):
    """The bytes of a safetensors file holding tensors ({name: tensor}) and metadata."""
    import torch
    if not isinstance(tensors, dict):
        raise TypeError(f"tensors must be a dict of name to tensor, not {type(tensors).__name__}")
    if metadata is not None and (not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise TypeError("metadata must be a dict of str to str")
    spans = []
    for name, t in tensors.items():
        if not isinstance(name, str) or not isinstance(t, torch.Tensor):
            raise TypeError(f"tensors must map str to torch.Tensor; '{name}' is "
                            f"{type(t).__name__}")
        if t.layout != torch.strided:
            raise ValueError(f"You are trying to save a sparse tensor: `{name}` which this "
                             f"library does not support.")
        if not t.is_contiguous():
            raise ValueError(f"You are trying to save a non contiguous tensor: `{name}` which is "
                             f"not allowed. It either means you are trying to save tensors which "
                             f"are reference of each other in which case it's recommended to save "
                             f"only the full tensors, and reslice at load time, or simply call "
                             f"`.contiguous()` on your tensor to pack it before saving.")
        if t.numel() > 0:
            start = t.data_ptr()
            spans.append((start, start + t.numel() * t.element_size(), name))
    spans.sort()
    for (a_start, a_end, a), (b_start, _, b) in zip(spans, spans[1:]):
        if b_start < a_end:
            raise RuntimeError(f"Some tensors share memory, this will lead to duplicate memory on "
                               f"disk and potential differences when loading them again: "
                               f"[{a!r}, {b!r}].")
    rank = {d: i for i, d in enumerate(_DTYPE_ORDER)}
    order = sorted(tensors, key=lambda n: (-rank[_dtype_name(tensors[n])], n))
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    payloads, offset = [], 0
    for name in order:
        t = tensors[name].detach().cpu()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _dtype_name(t), "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        payloads.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(payloads)


def save_file(tensors, filename, metadata=None):
    """Writes save(tensors, metadata) to filename."""
    data = save(tensors, metadata)
    with open(os.fspath(filename), "wb") as f:
        f.write(data)
