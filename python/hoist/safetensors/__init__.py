"""hoist.safetensors: safetensors' Python API, reading through hoist's engine.

    from hoist.safetensors import safe_open
    with safe_open("model.safetensors", framework="pt", device="cuda:0") as f:
        weights = {k: f.get_tensor(k) for k in f.keys()}   # read ahead in large batches

    import hoist.safetensors; hoist.safetensors.patch()    # `import safetensors` now gives hoist's

`safe_open`, `SafetensorError`, and in `hoist.safetensors.torch` `load_file`, `load`,
`save_file` and `save` take the arguments safetensors' do and give the same results. Reads of
whole tensors go through the pinned pipeline; on the CPU `get_slice(name)[rows]` reads only the
rows' bytes, on a GPU it slices the whole tensor read through the engine. Files are read with
hoist's checks: a malformed one raises SafetensorError naming the byte offset and the rule.
"""
import json
import struct
import sys

from .._reader import TensorReader

__all__ = ["safe_open", "SafetensorError", "patch", "unpatch"]


class SafetensorError(Exception):
    """What safetensors raises for a malformed file, an unknown tensor or a bad argument."""


_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2,
             "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8,
             "U64": 8, "C64": 8, "F8_E4M3FNUZ": 1, "F8_E5M2FNUZ": 1, "F4": 0.5}


class safe_open(TensorReader):  # noqa: N801 (safetensors' name)
    """A safetensors file opened for reading: keys(), offset_keys(), metadata(),
    get_tensor(name), get_slice(name); a context manager. device: "cpu", "cuda", "cuda:N", an
    int, or hoist's "sim[...]"."""

    Error = SafetensorError
    FORMAT = "safetensors"


def _parse(data, where):
    """Header and data offset of safetensors bytes, with safetensors' checks."""
    if len(data) < 8:
        raise SafetensorError(f"{where}: {len(data)} bytes hold no header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8 or n > 100_000_000:
        raise SafetensorError(f"{where}: header of {n} bytes does not fit in {len(data)} bytes")
    try:
        header = json.loads(bytes(data[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorError(f"{where}: header is not valid JSON: {e}") from e
    if not isinstance(header, dict):
        raise SafetensorError(f"{where}: header is not a JSON object")
    return header, 8 + n


_saved_modules = None


def patch():
    """Makes `import safetensors` and `import safetensors.torch` give hoist's modules, for
    programs that cannot be changed. Code that imported safetensors before keeps what it has."""
    global _saved_modules
    from . import torch as torch_module
    if _saved_modules is None:
        _saved_modules = {k: sys.modules.get(k) for k in ("safetensors", "safetensors.torch")}
    sys.modules["safetensors"] = sys.modules[__name__]
    sys.modules["safetensors.torch"] = torch_module


def unpatch():
    """Undoes patch()."""
    global _saved_modules
    if _saved_modules is None:
        return
    for name, module in _saved_modules.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module
    _saved_modules = None
