"""hoist.safetensors.numpy: safetensors.numpy's save, save_file, load and load_file.

save and save_file write safetensors' bytes (big-endian arrays are written little-endian);
load_file reads through hoist's engine into host memory.
"""
import os

import numpy as np

from .._engine import _DTYPES
from . import (SafetensorError, TensorSpec, _check_backend, deserialize, safe_open, serialize,
               serialize_file)

__all__ = ["save", "save_file", "load", "load_file"]

# numpy has no bfloat16 or float8: files holding them load through hoist.safetensors.torch.
_TYPES = {code: bool if code == "BOOL" else getattr(np, row[1])
          for code, row in _DTYPES.items() if row[0] == row[1]}


def _flatten(tensor_dict, keep_alive_buffer):
    if not isinstance(tensor_dict, dict):
        raise TypeError(f"tensor_dict must be a dict of str to numpy arrays, not "
                        f"{type(tensor_dict).__name__}")
    specs = {}
    for name, array in tensor_dict.items():
        if not isinstance(array, np.ndarray):
            raise TypeError(f"'{name}' is a {type(array).__name__}, not a numpy array")
        if array.dtype.byteorder == ">" or (array.dtype.byteorder == "=" and
                                             np.little_endian is False):
            array = array.byteswap().view(array.dtype.newbyteorder("<"))
        array = np.ascontiguousarray(array)
        keep_alive_buffer.append(array)  # the bytes stay valid while serialize reads them
        specs[name] = TensorSpec(dtype=array.dtype.name, shape=array.shape,
                                 data_ptr=array.ctypes.data, data_len=array.nbytes)
    return specs


def save(tensor_dict, metadata=None):
    """The bytes of a safetensors file holding tensor_dict ({name: np.ndarray})."""
    keep_alive = []
    return serialize(_flatten(tensor_dict, keep_alive), metadata=metadata)


def save_file(tensor_dict, filename, metadata=None):
    """Writes save(tensor_dict, metadata) to filename."""
    keep_alive = []
    serialize_file(_flatten(tensor_dict, keep_alive), filename, metadata=metadata)


def load(data):
    """{name: np.ndarray} from the bytes of a safetensors file."""
    return _view2np(deserialize(data))


def _getdtype(dtype_str):
    """The numpy dtype of a header's dtype code (little-endian)."""
    dtype = _TYPES.get(dtype_str)
    if dtype is None:
        raise SafetensorError(f"dtype {dtype_str} has no numpy dtype")
    return np.dtype(dtype).newbyteorder("<")


def _view2np(safeview):
    """{name: np.ndarray} of deserialize()'s [(name, {"dtype", "shape", "data"})]."""
    out = {}
    for name, item in safeview:
        try:
            dtype = _getdtype(item["dtype"])
        except SafetensorError:
            raise SafetensorError(f"tensor '{name}' is {item['dtype']}, which numpy has no "
                                  f"dtype for") from None
        out[name] = np.frombuffer(item["data"], dtype=dtype).reshape(item["shape"])
    return out


def _is_little_endian(tensor):
    """Whether the array's bytes are little-endian (as a safetensors file holds them)."""
    byteorder = tensor.dtype.byteorder
    if byteorder == "=":
        return np.little_endian
    if byteorder in ("|", "<"):
        return True
    if byteorder == ">":
        return False
    raise ValueError(f"Unexpected byte order {byteorder}")


def load_file(filename, *, backend="mmap"):
    """{name: np.ndarray} of every tensor in the file, in file order, read through hoist's
    engine in one load (backend "mmap" or "pread" is checked as safetensors does; hoist reads
    one way)."""
    _check_backend(backend)
    path = os.fspath(filename)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No such file or directory: {path}")
    with safe_open(path, framework="np") as f:
        return f._read_all()
