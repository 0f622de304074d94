"""hoist.safetensors.torch: safetensors.torch (0.8) with its loads read through hoist.

Every name of safetensors 0.8's torch.py is here, public and private, since third-party code
imports the private ones too (accelerate load_model, diffusers _to_ndarray). load_file and
load_model read through hoist's engine: onto a GPU at the link's rate, onto the CPU into pinned
memory when a GPU is present (so the caller's own copy to the GPU is a DMA at the link's rate).
load, save and save_file work on bytes as safetensors does: the same header, the same order (by
dtype, widest first, then by name), the same padding. save_file writes a temporary file and
renames it over the target, as 0.8 does.

The saving helpers (_find_shared_tensors ... _flatten_as_ptr), save_model and load_model follow
safetensors' own torch.py (Apache-2.0, huggingface/safetensors, bindings/python/py_src/
safetensors/torch.py at 0.8.0) so that they behave alike; LICENSE-THIRD-PARTY.md.
"""
import os
import sys
from collections import defaultdict
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import torch

from .._engine import _TORCH_DTYPES
from . import (SafetensorError, TensorSpec, _check_backend, _serialize, _tensors_of_bytes,
               _write_replacing, deserialize, safe_open, serialize, serialize_file)

__all__ = ["load_file", "load", "save_file", "save", "load_model", "save_model", "safe_open",
           "TensorSpec", "serialize", "serialize_file", "deserialize", "storage_ptr",
           "storage_size"]


def storage_ptr(tensor: torch.Tensor) -> int:
    """Where the tensor's storage starts (0 for none)."""
    try:
        return tensor.untyped_storage().data_ptr()
    except Exception:  # torch 1.10 has no untyped_storage
        try:
            return tensor.storage().data_ptr()
        except NotImplementedError:  # meta storage
            return 0


def _end_ptr(tensor: torch.Tensor) -> int:
    if tensor.nelement():
        return tensor.view(-1)[-1].data_ptr() + _SIZE[tensor.dtype]
    return tensor.data_ptr()


def storage_size(tensor: torch.Tensor) -> int:
    """The tensor's storage's size in bytes."""
    try:
        return tensor.untyped_storage().nbytes()
    except AttributeError:  # torch 1.10
        try:
            return tensor.storage().size() * _SIZE[tensor.dtype]
        except NotImplementedError:  # meta storage: on torch >= 2.0 the tensor's size
            return tensor.nelement() * _SIZE[tensor.dtype]


def _filter_shared_not_shared(tensors: List[Set[str]],
                              state_dict: Dict[str, torch.Tensor]) -> List[Set[str]]:
    """Splits each set of names sharing a storage into the groups that really overlap."""
    filtered = []
    for shared in tensors:
        if len(shared) < 2:
            filtered.append(shared)
            continue
        areas = sorted((state_dict[n].data_ptr(), _end_ptr(state_dict[n]), n) for n in shared)
        _, last_stop, last_name = areas[0]
        filtered.append({last_name})
        for start, stop, name in areas[1:]:
            if start >= last_stop:
                filtered.append({name})
            else:
                filtered[-1].add(name)
            last_stop = stop
    return filtered


def _find_shared_tensors(state_dict: Dict[str, torch.Tensor]) -> List[Set[str]]:
    """Sets of names whose tensors overlap in one storage."""
    tensors = defaultdict(set)
    for k, v in state_dict.items():
        if v.device != torch.device("meta") and storage_ptr(v) != 0 and storage_size(v) != 0:
            tensors[(v.device, storage_ptr(v), storage_size(v))].add(k)  # device: several GPUs
    return _filter_shared_not_shared(list(sorted(tensors.values())), state_dict)


def _is_complete(tensor: torch.Tensor) -> bool:
    return (tensor.data_ptr() == storage_ptr(tensor)
            and tensor.nelement() * _SIZE[tensor.dtype] == storage_size(tensor))


def _remove_duplicate_names(state_dict: Dict[str, torch.Tensor], *,
                            preferred_names: Optional[List[str]] = None,
                            discard_names: Optional[List[str]] = None) -> Dict[str, List[str]]:
    """{name kept: [names sharing its storage, to drop]}, as safetensors chooses them."""
    preferred_names = set(preferred_names or [])
    discard_names = set(discard_names or [])
    to_remove = defaultdict(list)
    for shared in _find_shared_tensors(state_dict):
        complete_names = {name for name in shared if _is_complete(state_dict[name])}
        if not complete_names:
            raise RuntimeError(
                "Error while trying to find names to remove to save state dict, but found no "
                f"suitable name to keep for saving amongst: {shared}. None is covering the entire "
                "storage.Refusing to save/load the model since you could be storing much more "
                "memory than needed. Please refer to "
                "https://huggingface.co/docs/safetensors/torch_shared_tensors for more "
                "information. Or open an issue.")
        keep_name = sorted(complete_names)[0]
        preferred = complete_names.difference(discard_names)
        if preferred:
            keep_name = sorted(preferred)[0]
        if preferred_names:
            preferred = preferred_names.intersection(complete_names)
            if preferred:
                keep_name = sorted(preferred)[0]
        for name in sorted(shared):
            if name != keep_name:
                to_remove[keep_name].append(name)
    return to_remove


def save_model(model: torch.nn.Module, filename: str, metadata: Optional[Dict[str, str]] = None,
               force_contiguous: bool = True):
    """Saves model's state dict to filename, dropping names that share a storage (each dropped
    name is recorded in metadata, pointing to the name kept)."""
    state_dict = model.state_dict()
    for kept_name, group in _remove_duplicate_names(state_dict).items():
        for name in group:
            if metadata is None:
                metadata = {}
            if name not in metadata:  # the caller's own entries stay
                metadata[name] = kept_name
            del state_dict[name]
    if force_contiguous:
        state_dict = {k: v.contiguous() for k, v in state_dict.items()}
    try:
        save_file(state_dict, filename, metadata=metadata)
    except ValueError as e:
        raise ValueError(str(e) + " Or use save_model(..., force_contiguous=True), read the docs "
                         "for potential caveats.") from e


def load_model(model: torch.nn.Module, filename: Union[str, os.PathLike], strict: bool = True,
               device: Union[str, int] = "cpu", *,
               backend: str = "mmap") -> Tuple[List[str], List[str]]:
    """Loads filename (read through hoist) into model; returns (missing, unexpected) names.
    strict: raise RuntimeError when either is not empty."""
    state_dict = load_file(filename, device=device, backend=backend)
    to_removes = _remove_duplicate_names(model.state_dict(), preferred_names=state_dict.keys())
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    missing = set(missing)
    for group in to_removes.values():
        for name in group:
            if name not in missing:
                unexpected.append(name)
            else:
                missing.remove(name)
    if strict and (missing or unexpected):
        error = f"Error(s) in loading state_dict for {model.__class__.__name__}:"
        if missing:
            error += "\n    Missing key(s) in state_dict: " + ", ".join(
                f'"{k}"' for k in sorted(missing))
        if unexpected:
            error += "\n    Unexpected key(s) in state_dict: " + ", ".join(
                f'"{k}"' for k in sorted(unexpected))
        raise RuntimeError(error)
    return missing, unexpected


def save(tensors: Dict[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding tensors ({name: tensor}) and metadata."""
    _evaluate_tensors_for_save(tensors)
    entries = []
    for name, tensor in tensors.items():
        _check_contiguous(name, tensor)
        t = tensor.detach().cpu()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        dtype = _dtype_code(t)
        shape = list(t.shape)
        if dtype == "F4" and shape:
            shape[-1] *= 2  # the header counts F4 values, two per byte of float4_e2m1fn_x2
        entries.append((name, dtype, shape, raw))
    return _serialize(entries, metadata)


def save_file(tensors: Dict[str, torch.Tensor], filename: Union[str, os.PathLike],
              metadata: Optional[Dict[str, str]] = None):
    """Writes save(tensors, metadata) to filename, through a temporary file renamed over it."""
    _write_replacing(os.fspath(filename), save(tensors, metadata))


def load_file(filename: Union[str, os.PathLike], device: Union[str, int] = "cpu", *,
              backend: str = "mmap") -> Dict[str, torch.Tensor]:
    """{name: tensor} of every tensor in the file, on device, in file order (as 0.8 gives
    them). One load through hoist's engine; on the CPU into pinned memory where a GPU is."""
    _check_backend(backend)
    path = os.fspath(filename)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No such file or directory: {path!r}")
    with safe_open(path, framework="pt", device=device) as f:
        return f._read_all()


def load(data: bytes) -> Dict[str, torch.Tensor]:
    """{name: tensor} on the CPU from the bytes of a safetensors file, in name order."""
    out = {}
    tensors = _tensors_of_bytes(data, "safetensors bytes")
    for name, dtype, shape, view in sorted(tensors, key=lambda t: t[0]):
        if dtype == "F4" and shape:
            shape = shape[:-1] + [shape[-1] // 2]  # float4_e2m1fn_x2: two values per element
        out[name] = _from_bytes(bytearray(view), dtype, shape)
    return out


def _from_bytes(data, dtype, shape):
    """A CPU tensor of the header's `dtype` and `shape` over `data` (a bytearray)."""
    attr = _TORCH_DTYPES.get(dtype)
    if attr is None or not hasattr(torch, attr):
        raise SafetensorError(f"dtype {dtype} has no torch dtype in torch {torch.__version__}")
    if not data:
        return torch.empty(shape, dtype=getattr(torch, attr))
    return torch.frombuffer(data, dtype=getattr(torch, attr)).reshape(shape)


# torch.float8 formats need torch 2.1; float4 2.8.
_float8_e4m3fn = getattr(torch, "float8_e4m3fn", None)
_float8_e4m3fnuz = getattr(torch, "float8_e4m3fnuz", None)
_float8_e5m2 = getattr(torch, "float8_e5m2", None)
_float8_e5m2fnuz = getattr(torch, "float8_e5m2fnuz", None)
_float8_e8m0 = getattr(torch, "float8_e8m0fnu", None)
_float4_e2m1_x2 = getattr(torch, "float4_e2m1fn_x2", None)

_SIZE = {
    torch.int64: 8, torch.float32: 4, torch.int32: 4, torch.bfloat16: 2, torch.float16: 2,
    torch.int16: 2, torch.uint8: 1, torch.int8: 1, torch.bool: 1, torch.float64: 8,
    torch.complex64: 8, _float8_e4m3fn: 1, _float8_e4m3fnuz: 1, _float8_e5m2: 1,
    _float8_e5m2fnuz: 1, _float8_e8m0: 1, _float4_e2m1_x2: 1,
}
if hasattr(torch, "uint64"):  # torch 2.3
    _SIZE.update({torch.uint64: 8, torch.uint32: 4, torch.uint16: 2})

_TYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool, "F8_E4M3": _float8_e4m3fn,
    "F8_E4M3FNUZ": _float8_e4m3fnuz, "F8_E5M2": _float8_e5m2, "F8_E5M2FNUZ": _float8_e5m2fnuz,
    "C64": torch.complex64,
}
if hasattr(torch, "uint64"):
    _TYPES.update({"U64": torch.uint64, "U32": torch.uint32, "U16": torch.uint16})


def _getdtype(dtype_str: str) -> torch.dtype:
    return _TYPES[dtype_str]


def _view2torch(safeview) -> Dict[str, torch.Tensor]:
    """{name: tensor} of deserialize()'s [(name, {"dtype", "shape", "data"})]."""
    result = {}
    for k, v in safeview:
        dtype = _getdtype(v["dtype"])
        if len(v["data"]) == 0:  # frombuffer takes no empty buffer
            arr = torch.empty(v["shape"], dtype=dtype)
        else:
            arr = torch.frombuffer(v["data"], dtype=dtype).reshape(v["shape"])
        if sys.byteorder == "big":
            arr = torch.from_numpy(arr.numpy().byteswap(inplace=False))
        result[k] = arr
    return result


def _to_ndarray(tensor: torch.Tensor):
    """(a uint8 numpy view of the tensor's bytes, the CPU tensor it views): the view is valid
    while that tensor lives."""
    import ctypes

    import numpy as np
    if tensor.device.type != "cpu":
        tensor = tensor.to("cpu")
    length = int(np.prod(tensor.shape).item())
    total_bytes = length * _SIZE[tensor.dtype]
    ptr = tensor.data_ptr()
    if ptr == 0:
        return np.empty(0), 0
    data = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_ubyte)), (total_bytes,))
    if sys.byteorder == "big":
        widths = {8: np.int64, 4: np.int32, 2: np.int16, 1: np.uint8}
        data = data.view(widths[_SIZE[tensor.dtype]]).byteswap(inplace=False)
    return data, tensor


def _evaluate_tensors_for_save(tensors: Dict[str, torch.Tensor]) -> None:
    """safetensors' checks before saving, with its errors and messages."""
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    sparse = []
    for k, v in tensors.items():
        if not isinstance(v, torch.Tensor):
            raise ValueError(f"Key `{k}` is invalid, expected torch.Tensor but received {type(v)}")
        if v.layout != torch.strided:
            sparse.append(k)
    if sparse:
        raise ValueError(f"You are trying to save a sparse tensors: `{sparse}` which this library "
                         f"does not support. You can make it a dense tensor before saving with "
                         f"`.to_dense()` but be aware this might make a much larger file than "
                         f"needed.")
    failing = [names for names in _find_shared_tensors(tensors) if len(names) > 1]
    if failing:
        raise RuntimeError(f"""
            Some tensors share memory, this will lead to duplicate memory on disk and potential differences when loading them again: {failing}.
            A potential way to correctly save your model is to use `save_model`.
            More information at https://huggingface.co/docs/safetensors/torch_shared_tensors
            """)


def _check_contiguous(name, tensor):
    if not tensor.is_contiguous():
        raise ValueError(f"You are trying to save a non contiguous tensor: `{name}` which is not "
                         f"allowed. It either means you are trying to save tensors which are "
                         f"reference of each other in which case it's recommended to save only "
                         f"the full tensors, and reslice at load time, or simply call "
                         f"`.contiguous()` on your tensor to pack it before saving.")


def _flatten_as_ptr(tensors: Dict[str, torch.Tensor],
                    keep_alive_buffer: List) -> Dict[str, Dict[str, Any]]:
    """{name: TensorSpec} over the tensors' bytes; keep_alive_buffer keeps what they point to."""
    _evaluate_tensors_for_save(tensors)
    flattened = {}
    for k, v in tensors.items():
        _check_contiguous(k, v)
        arr, tensor_ref = _to_ndarray(v)
        keep_alive_buffer.append((arr, tensor_ref))
        flattened[k] = TensorSpec(dtype=str(v.dtype).split(".")[-1], shape=v.shape,
                                  data_ptr=arr.ctypes.data, data_len=arr.nbytes)
    return flattened


def _dtype_code(tensor):
    """The header's dtype code of a tensor's dtype."""
    for code, dtype in list(_TYPES.items()) + [("F8_E8M0", _float8_e8m0),
                                               ("F4", _float4_e2m1_x2)]:
        if dtype is not None and dtype == tensor.dtype:
            return code
    raise ValueError(f"dtype {tensor.dtype} cannot be saved in safetensors")
