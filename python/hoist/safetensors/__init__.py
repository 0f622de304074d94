"""hoist.safetensors: safetensors' Python API, reading through hoist's engine.

    from hoist.safetensors import safe_open
    with safe_open("model.safetensors", framework="pt", device="cuda:0") as f:
        weights = {k: f.get_tensor(k) for k in f.keys()}   # read ahead in large batches

    import hoist.safetensors; hoist.safetensors.patch()    # `import safetensors` now gives hoist's

`safe_open`, `SafetensorError`, `TensorSpec`, `serialize`, `serialize_file`, `deserialize`,
and in `hoist.safetensors.torch` and `hoist.safetensors.numpy` `load_file`, `load`, `save_file`
and `save` take the arguments safetensors' do and give the same results. Reads of whole tensors
go through the pinned pipeline; on the CPU `get_slice(name)[rows]` reads only the rows' bytes,
on a GPU a slice is a region read through the engine (columns staged by rows, only they sent to
the device). Files are read with hoist's checks: a malformed one raises SafetensorError naming
the byte offset and the rule.
"""
import builtins
import importlib.machinery
import importlib.util
import json
import os
import struct
import sys

from .._engine import _DTYPES, Model
from .._errors import HoistError
from .._reader import _OTHER_FRAMEWORKS, TensorReader

__all__ = ["safe_open", "SafetensorError", "TensorSpec", "serialize", "serialize_file",
           "deserialize", "patch", "unpatch", "__version__"]


def _installed_version():
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("safetensors")
    except (ImportError, PackageNotFoundError):
        return "0.8.0"  # the version whose surface this reproduces


# What code that checks safetensors' version reads: the installed safetensors' own, else the
# version this module reproduces.
__version__ = _installed_version()


class SafetensorError(Exception):
    """What safetensors raises for a malformed file, an unknown tensor or a bad argument."""


_BACKENDS = ("mmap", "pread")


def _check_backend(backend):
    """safetensors 0.8's backend argument: "mmap" or "pread" (hoist reads one way for both)."""
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a str, not {type(backend).__name__}")
    if backend not in _BACKENDS:
        raise SafetensorError(f'backend "{backend}" is invalid (expected one of: "mmap", '
                              f'"pread")')


_real_module = []


def _real_safetensors():
    """The installed safetensors' native module (for the frameworks hoist gives no tensors
    for: tf, flax, mlx, paddle), or None where safetensors is not installed."""
    if not _real_module:
        module = sys.modules.get("safetensors._safetensors_rust")
        if module is None:
            found = None
            for directory in _real_package_path():
                found = importlib.machinery.PathFinder.find_spec("_safetensors_rust", [directory])
                if found is not None:
                    break
            if found is not None:
                module = importlib.util.module_from_spec(found)
                found.loader.exec_module(module)
        _real_module.append(module)
    return _real_module[0]


def _real_package_path():
    """The installed safetensors package's directories, found on sys.path ([] if none)."""
    spec = importlib.machinery.PathFinder.find_spec("safetensors")
    if spec is None or not spec.submodule_search_locations:
        return []
    here = os.path.dirname(os.path.abspath(__file__))
    return [d for d in spec.submodule_search_locations if os.path.abspath(d) != here]


_ITEMSIZE = {code: row[2] / 8 for code, row in _DTYPES.items()}  # bytes per value (F4: 0.5)


class safe_open(TensorReader):  # noqa: N801 (safetensors' name)
    """A safetensors file opened for reading: keys(), offset_keys(), metadata(),
    get_tensor(name), get_slice(name); a context manager. device: "cpu", "cuda", "cuda:N", an
    int, or hoist's "sim[...]". backend: "mmap" or "pread", as safetensors 0.8 takes it; hoist
    reads through its own engine for both. On the CPU, tensors are read ahead (in the order the
    requests follow) into pinned memory when a GPU is present; any thread may use the handle.
    framework tf, flax, mlx or paddle opens the file with the installed safetensors, where
    there is one."""

    Error = SafetensorError
    FORMAT = "safetensors"
    MISSING_IS_FILE_NOT_FOUND = True  # as safetensors raises

    def __new__(cls, filename, framework, device="cpu", *, backend="mmap"):
        _check_backend(backend)
        if framework in _OTHER_FRAMEWORKS:
            real = _real_safetensors()
            if real is not None:
                return real.safe_open(filename, framework, device, backend=backend)
        return super().__new__(cls)

    def __init__(self, filename, framework, device="cpu", *, backend="mmap"):
        super().__init__(filename, framework, device)


class _safe_open_handle(safe_open):  # noqa: N801 (safetensors' name)
    """safe_open over an open file object (its name is opened), as safetensors 0.8 has it."""

    def __new__(cls, f, framework, device="cpu", *, backend="mmap"):
        return super().__new__(cls, _handle_name(f), framework, device, backend=backend)

    def __init__(self, f, framework, device="cpu", *, backend="mmap"):
        super().__init__(_handle_name(f), framework, device, backend=backend)


def _handle_name(f):
    if not hasattr(f, "fileno") or not hasattr(f, "name"):
        raise AttributeError(f"{type(f).__name__} object has no attribute 'fileno' or 'name': "
                             f"_safe_open_handle takes an open file")
    return f.name


# safetensors' Dtype order (it sorts tensors by dtype, last first, then by name).
_DTYPE_ORDER = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3",
                "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32",
                "U32", "F32", "C64", "F64", "I64", "U64"]
# TensorSpec's dtype names (torch's and numpy's spelling) and the header's codes.
_DTYPE_CODES = {row[0]: code for code, row in _DTYPES.items()}


class TensorSpec:
    """One tensor to serialize, as safetensors' TensorSpec: its dtype by name ("float32"), its
    shape, and data_len bytes at the address data_ptr, which must stay valid while serialize
    runs. dtype reads back as the header's code ("F32"); a float4_e2m1fn_x2 shape's last
    dimension is doubled, as the header counts F4 values."""

    __slots__ = ("_dtype", "_shape", "_data_ptr", "_data_len")

    def __init__(self, *, dtype, shape, data_ptr, data_len):
        if dtype not in _DTYPE_CODES:
            raise SafetensorError(f"Unknown dtype {dtype!r}. Supported dtypes: "
                                  f"{', '.join(_DTYPE_CODES)}")
        shape = [int(d) for d in shape]
        if any(d < 0 for d in shape) or int(data_ptr) < 0 or int(data_len) < 0:
            raise SafetensorError("shape, data_ptr and data_len take no negative values")
        if _DTYPE_CODES[dtype] == "F4" and shape:
            shape[-1] *= 2
        self._dtype = _DTYPE_CODES[dtype]
        self._shape = shape
        self._data_ptr = int(data_ptr)
        self._data_len = int(data_len)

    dtype = property(lambda self: self._dtype)
    shape = property(lambda self: list(self._shape))
    data_ptr = property(lambda self: self._data_ptr)
    data_len = property(lambda self: self._data_len)

    def __repr__(self):
        return (f"TensorSpec(dtype='{self._dtype}', shape={self._shape}, "
                f"data_ptr={self._data_ptr}, data_len={self._data_len})")


def _serialize(entries, metadata):
    """The bytes of a safetensors file: entries [(name, dtype code, shape, raw bytes)] in
    safetensors' order (by dtype, widest first, then by name), a compact header with
    __metadata__ first, padded with spaces to 8 bytes."""
    if metadata is not None and (not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise TypeError("metadata must be a dict of str to str")
    rank = {d: i for i, d in enumerate(_DTYPE_ORDER)}
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    payloads, offset = [], 0
    for name, dtype, shape, raw in sorted(entries, key=lambda e: (-rank[e[1]], e[0])):
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(raw)]}
        payloads.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(payloads)


def serialize(tensor_dict, metadata=None):
    """The bytes of a safetensors file holding tensor_dict ({name: TensorSpec})."""
    import ctypes
    if not isinstance(tensor_dict, dict):
        raise TypeError(f"tensor_dict must be a dict of str to TensorSpec, not "
                        f"{type(tensor_dict).__name__}")
    entries = []
    for name, spec in tensor_dict.items():
        if not isinstance(name, str) or not isinstance(spec, TensorSpec):
            raise TypeError(f"tensor_dict must map str to TensorSpec; '{name}' holds "
                            f"{type(spec).__name__}")
        count = 1
        for d in spec.shape:
            count *= d
        if spec.data_len != int(count * _ITEMSIZE[spec.dtype]):
            raise SafetensorError(f"Error while serializing: tensor '{name}' of {count} "
                                  f"{spec.dtype} values has {spec.data_len} bytes")
        raw = ctypes.string_at(spec.data_ptr, spec.data_len) if spec.data_len else b""
        entries.append((name, spec.dtype, spec.shape, raw))
    return _serialize(entries, metadata)


def serialize_file(tensor_dict, filename, metadata=None):
    """Writes serialize(tensor_dict, metadata) to filename, through a temporary file renamed
    over it: a reader that has the old file open never sees a half-written one."""
    _write_replacing(os.fspath(filename), serialize(tensor_dict, metadata))


def _write_replacing(path, data):
    """Writes data to path through a temporary file in the same directory, renamed over it.

    A path that is a link is replaced where it leads; one that exists and is not a regular
    file (/dev/null, a FIFO) is written to as it is, as safetensors writes it: a rename would
    put a regular file where the device node was."""
    import stat
    import tempfile
    path = os.path.realpath(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        with open(path, "wb") as f:
            f.write(data)
        return
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def deserialize(bytes):  # noqa: A002 (safetensors' parameter name)
    """[(name, {"shape", "dtype", "data": bytearray})] of safetensors bytes, in file order."""
    data = bytes
    return [(name, {"shape": list(shape), "dtype": dtype, "data": bytearray(view)})
            for name, dtype, shape, view in _tensors_of_bytes(data, "Error while deserializing")]


def _tensors_of_bytes(data, where):
    """(name, dtype, header shape, memoryview of its bytes) per tensor of safetensors bytes,
    in file order, the header read and checked by hoist's own reader (hoist.Model.from_bytes),
    as a file's is."""
    if not isinstance(data, (builtins.bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes, not {type(data).__name__}")
    view = memoryview(data).cast("B")
    try:
        model = Model.from_bytes(view, "safetensors bytes")
    except HoistError as e:
        raise SafetensorError(f"{where}: {e}") from e
    if model.format != "safetensors":
        raise SafetensorError(f"{where}: the bytes are {model.format}, not safetensors")
    return [(t.name, t.dtype, list(t.shape), view[t.offset:t.offset + t.nbytes])
            for t in sorted(model.tensors.values(), key=lambda t: (t.offset, t.name))]


_saved_modules = None
_saved_path = None


def patch(transformers=True):
    """Makes `import safetensors` (with .torch and .numpy) give hoist's modules, for
    programs that cannot be changed. Code that imported safetensors before keeps what it has.
    Where safetensors is installed, its other submodules (flax, tensorflow, paddle, mlx) stay
    importable and open files through the installed safetensors.

    With transformers=True, transformers' from_pretrained also streams its checkpoint straight
    to the device_map's devices (hoist.transformers, enabled quietly when transformers is
    imported); where that does not apply, transformers reads through these modules."""
    global _saved_modules, _saved_path
    if transformers:
        from .. import transformers as hook
        hook._install_import_hook()
    try:
        from . import torch as torch_module
    except ImportError:  # no torch here: safetensors.torch could not be used either
        torch_module = None
    try:
        from . import numpy as numpy_module
    except ImportError:  # no numpy here: safetensors.numpy could not be used either
        numpy_module = None
    if _saved_modules is None:
        _saved_modules = {k: sys.modules.get(k)
                          for k in ("safetensors", "safetensors.torch", "safetensors.numpy")}
        _saved_path = list(__path__)
        __path__.extend(d for d in _real_package_path() if d not in __path__)
    sys.modules["safetensors"] = sys.modules[__name__]
    if torch_module is not None:
        sys.modules["safetensors.torch"] = torch_module
    if numpy_module is not None:
        sys.modules["safetensors.numpy"] = numpy_module


def unpatch():
    """Undoes patch()."""
    global _saved_modules, _saved_path
    from .. import transformers as hook
    hook._undo_patch()
    if _saved_modules is None:
        return
    for name, module in _saved_modules.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module
    __path__[:] = _saved_path
    _saved_modules = _saved_path = None
