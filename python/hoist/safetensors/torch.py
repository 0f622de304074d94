"""hoist.safetensors.torch: safetensors.torch's load_file, load, save_file and save.

load_file reads through hoist's engine (the whole file in one load, every tensor at the link);
load, save and save_file work on bytes as safetensors does: the same header, the same order
(by dtype, widest first, then by name), the same padding.
"""
import os

from .. import HoistError, _TORCH_DTYPES, load_file as _hoist_load_file
from .._reader import _from_bytes
from . import SafetensorError, _parse, _serialize, _ITEMSIZE

__all__ = ["load_file", "load", "save_file", "save", "storage_ptr", "storage_size"]

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
        if not 0 <= begin <= end <= body or end - begin != int(count * _ITEMSIZE[dtype]):
            raise SafetensorError(f"tensor '{name}': data_offsets [{begin}, {end}] do not hold "
                                  f"{count} {dtype} values inside {body} bytes")
        if dtype == "F4" and shape:
            shape = shape[:-1] + [shape[-1] // 2]  # float4_e2m1fn_x2: two values per element
        out[name] = _from_bytes(bytearray(data[start + begin:start + end]), dtype, shape, "cpu",
                                False)
    return out


def _dtype_name(tensor):
    import torch
    for name, attr in _TORCH_DTYPES.items():
        if getattr(torch, attr, None) == tensor.dtype:
            return name
    raise ValueError(f"dtype {tensor.dtype} cannot be saved in safetensors")


def storage_ptr(tensor):
    """Where the tensor's storage starts (0 for none), as safetensors.torch.storage_ptr."""
    try:
        return tensor.untyped_storage().data_ptr()
    except (AttributeError, NotImplementedError):
        try:
            return tensor.storage().data_ptr()
        except NotImplementedError:
            return 0  # sparse tensors have no storage


def storage_size(tensor):
    """The tensor's storage's size in bytes, as safetensors.torch.storage_size."""
    try:
        return tensor.untyped_storage().nbytes()
    except (AttributeError, NotImplementedError):
        try:
            return tensor.storage().size() * tensor.element_size()
        except NotImplementedError:
            return 0


def _find_shared_tensors(state_dict):
    """Sets of names whose tensors overlap in one storage, as safetensors.torch finds them:
    disjoint views of one storage are not shared."""
    import collections
    import torch
    groups = collections.defaultdict(set)
    for name, t in state_dict.items():
        if t.device != torch.device("meta") and storage_ptr(t) != 0 and storage_size(t) != 0:
            groups[(t.device, storage_ptr(t), storage_size(t))].add(name)
    shared = []
    for names in groups.values():
        areas = sorted((state_dict[n].data_ptr(),
                        state_dict[n].data_ptr() + state_dict[n].numel() *
                        state_dict[n].element_size(), n) for n in names)
        _, last_stop, first = areas[0]
        shared.append({first})
        for start, stop, name in areas[1:]:
            if start >= last_stop:
                shared.append({name})
            else:
                shared[-1].add(name)
            last_stop = stop
    return shared


def _check_for_save(tensors):
    """safetensors' checks before saving, with its errors and messages."""
    import torch
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    sparse = []
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"Key `{name}` is invalid, expected torch.Tensor but received "
                             f"{type(t)}")
        if t.layout != torch.strided:
            sparse.append(name)
    if sparse:
        raise ValueError(f"You are trying to save a sparse tensors: `{sparse}` which this library "
                         f"does not support. You can make it a dense tensor before saving with "
                         f"`.to_dense()` but be aware this might make a much larger file than "
                         f"needed.")
    failing = [names for names in _find_shared_tensors(tensors) if len(names) > 1]
    if failing:
        raise RuntimeError(f"Some tensors share memory, this will lead to duplicate memory on "
                           f"disk and potential differences when loading them again: {failing}.")
    for name, t in tensors.items():
        if not t.is_contiguous():
            raise ValueError(f"You are trying to save a non contiguous tensor: `{name}` which is "
                             f"not allowed. It either means you are trying to save tensors which "
                             f"are reference of each other in which case it's recommended to save "
                             f"only the full tensors, and reslice at load time, or simply call "
                             f"`.contiguous()` on your tensor to pack it before saving.")


def save(tensors, metadata=None):
    """The bytes of a safetensors file holding tensors ({name: tensor}) and metadata."""
    import torch
    _check_for_save(tensors)
    entries = []
    for name, tensor in tensors.items():
        t = tensor.detach().cpu()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        dtype = _dtype_name(t)
        shape = list(t.shape)
        if dtype == "F4" and shape:
            shape[-1] *= 2  # the header counts F4 values, two per byte of float4_e2m1fn_x2
        entries.append((name, dtype, shape, raw))
    return _serialize(entries, metadata)


def save_file(tensors, filename, metadata=None):
    """Writes save(tensors, metadata) to filename."""
    data = save(tensors, metadata)
    with open(os.fspath(filename), "wb") as f:
        f.write(data)
