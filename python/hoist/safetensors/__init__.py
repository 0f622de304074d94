"""hoist.safetensors: safetensors' Python API, reading through hoist's engine.

    from hoist.safetensors import safe_open
    with safe_open("model.safetensors", framework="pt", device="cuda:0") as f:
        weights = {k: f.get_tensor(k) for k in f.keys()}   # read ahead in large batches

    import hoist.safetensors; hoist.safetensors.patch()    # `import safetensors` now gives hoist's

`safe_open`, `SafetensorError`, and in `hoist.safetensors.torch` `load_file`, `load`,
`save_file` and `save` take the arguments safetensors' do and give the same results. Reads of
whole tensors go through the pinned pipeline; `get_slice(name)[rows]` reads only the rows'
bytes. Files are read with hoist's checks: a malformed one raises SafetensorError naming the
byte offset and the rule.
"""
import json
import os
import struct
import sys

from .. import HoistError, Model, load_file as _hoist_load_file

__all__ = ["safe_open", "SafetensorError", "patch", "unpatch"]


class SafetensorError(Exception):
    """What safetensors raises for a malformed file, an unknown tensor or a bad argument."""


_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2,
             "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8,
             "U64": 8}
_FRAMEWORKS = ("pt", "torch", "np", "numpy")
# A batch of get_tensor reads starts this large and doubles while the caller keeps taking the
# tensors read ahead, up to the largest: one load per batch keeps the link busy, and the bound
# keeps what is read ahead (and not yet asked for) small.
_FIRST_BATCH_BYTES = 64 << 20
_LARGEST_BATCH_BYTES = 2 << 30


def _torch():
    import torch
    return torch


class _Slice:
    """safetensors' PySafeSlice: a tensor's shape and dtype, and the parts of it asked for by
    indexing, reading only the rows the index covers."""

    def __init__(self, owner, name):
        self._owner = owner
        self._name = name
        self._info = owner._model.tensors[name]

    def get_shape(self):
        return list(self._info.shape)

    def get_dtype(self):
        return self._info.dtype

    def __getitem__(self, index):
        if not self._owner._on_host():
            # On a GPU: the whole tensor through the engine (read ahead with the tensors after
            # it), indexed there; the slice is copied out so the whole tensor's memory goes.
            return self._owner._whole(self._name)[index].clone()
        if not isinstance(index, tuple):
            index = (index,)
        if any(i is Ellipsis for i in index) or not index:
            rows = slice(None)
        else:
            rows = index[0]
        shape = self._info.shape
        if not shape:
            return self._owner._read_rows(self._name, 0, 1)[index] if index else \
                self._owner._read_rows(self._name, 0, 1)
        count = shape[0]
        if isinstance(rows, int):
            at = rows + count if rows < 0 else rows
            if not 0 <= at < count:
                raise SafetensorError(f"index {rows} is out of range for dimension 0 of "
                                      f"'{self._name}', of size {count}")
            first, last = at, at + 1
            rest = (0,) + tuple(index[1:])
        elif isinstance(rows, slice):
            start, stop, step = rows.indices(count)
            if step != 1:
                raise SafetensorError("slices with a step are not supported")
            first, last = start, max(start, stop)
            rest = (slice(None),) + tuple(index[1:]) if index[0] is not Ellipsis else index
        else:
            raise SafetensorError(f"cannot index '{self._name}' with {type(rows).__name__}")
        part = self._owner._read_rows(self._name, first, last)
        return part[rest]


class safe_open:  # noqa: N801 (safetensors' name)
    """A safetensors file opened for reading: keys(), metadata(), get_tensor(name),
    get_slice(name); a context manager. device: "cpu", "cuda", "cuda:N", an int, or hoist's
    "sim[...]"."""

    def __init__(self, filename, framework, device="cpu"):
        if framework not in _FRAMEWORKS:
            raise SafetensorError(f"framework {framework!r} is not supported: pt or np")
        self._numpy = framework in ("np", "numpy")
        self._path = os.fspath(filename)
        try:
            self._model = Model(self._path)
        except HoistError as e:
            raise SafetensorError(str(e)) from e
        if self._model.format != "safetensors" or not os.path.isfile(self._path) or \
                self._path.endswith(".json"):
            raise SafetensorError(f"{self._path}: not a safetensors file (safe_open reads one "
                                  f"file; hoist.load_file reads indexes and directories)")
        self._device = "cpu" if self._numpy else device
        # Names in file order: the order batches read in.
        self._by_offset = sorted(self._model.tensors,
                                 key=lambda n: (self._model.tensors[n].file,
                                                self._model.tensors[n].offset))
        self._position = {n: i for i, n in enumerate(self._by_offset)}
        self._ahead = {}    # read ahead, not yet asked for
        self._taken = set()  # handed out: a batch does not read them again
        self._batch_bytes = _FIRST_BATCH_BYTES

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._ahead.clear()
        self._taken.clear()
        return False

    def keys(self):
        return sorted(self._model.tensors)

    def offset_keys(self):
        return list(self._by_offset)

    def metadata(self):
        values = {k: v for k, v in self._model.metadata.items()}
        return values or None

    def _check(self, name):
        if name not in self._model.tensors:
            raise SafetensorError(f"File does not contain tensor {name}")

    def get_tensor(self, name):
        self._check(name)
        return self._whole(name)

    def _on_host(self):
        return self._numpy or str(self._device) == "cpu"

    def _whole(self, name):
        """Tensor `name`, from what was read ahead or in a new batch from it on."""
        self._taken.add(name)
        if name in self._ahead:
            self._batch_bytes = min(2 * self._batch_bytes, _LARGEST_BATCH_BYTES)
            return self._ahead.pop(name)
        # A miss: read a batch from this tensor on, in file order, skipping what is read ahead
        # or was handed out already.
        batch, size = [name], self._model.tensors[name].nbytes
        for other in self._by_offset[self._position[name] + 1:]:
            if other in self._ahead or other in self._taken:
                continue
            nbytes = self._model.tensors[other].nbytes
            if size + nbytes > self._batch_bytes:
                break
            batch.append(other)
            size += nbytes
        try:
            loaded = _hoist_load_file(self._model, device=self._device, names=batch)
        except HoistError as e:
            raise SafetensorError(str(e)) from e
        result = loaded.pop(name)
        self._ahead.update(loaded)
        return result

    def get_slice(self, name):
        self._check(name)
        return _Slice(self, name)

    def _read_rows(self, name, first, last):
        """Rows [first, last) of the tensor, read from the file alone, on the device."""
        info = self._model.tensors[name]
        shape = list(info.shape) or [1]
        row_bytes = info.nbytes // shape[0] if shape[0] else 0
        with open(self._path, "rb") as f:
            f.seek(info.offset + first * row_bytes)
            data = f.read((last - first) * row_bytes)
        if len(data) != (last - first) * row_bytes:
            raise SafetensorError(f"{self._path}: the file ends inside tensor '{name}'")
        shape = [last - first] + shape[1:] if info.shape else []
        return _from_bytes(bytearray(data), info.dtype, shape, self._device, self._numpy)


def _from_bytes(data, dtype, shape, device, as_numpy):
    """A tensor of `dtype` and `shape` over `data` (a bytearray), on device."""
    if as_numpy:
        import numpy
        np_dtype = {"BF16": "<u2", "F8_E5M2": "u1", "F8_E4M3": "u1", "F8_E8M0": "u1",
                    "BOOL": "?"}.get(dtype)
        if np_dtype is None:
            np_dtype = numpy.dtype(_NUMPY_NAMES[dtype]).newbyteorder("<")
        return numpy.frombuffer(data, dtype=np_dtype).reshape(shape).copy()
    torch = _torch()
    from .. import _TORCH_DTYPES, hoist_device
    attr = _TORCH_DTYPES.get(dtype)
    if attr is None or not hasattr(torch, attr):
        raise SafetensorError(f"dtype {dtype} has no torch dtype in torch {torch.__version__}")
    if not data:
        tensor = torch.empty(shape, dtype=getattr(torch, attr))
    else:
        tensor = torch.frombuffer(data, dtype=getattr(torch, attr)).reshape(shape)
    _, torch_device = hoist_device(device)
    return tensor.to(torch_device)


_NUMPY_NAMES = {"I8": "i1", "U8": "u1", "I16": "i2", "U16": "u2", "F16": "f2", "I32": "i4",
                "U32": "u4", "F32": "f4", "F64": "f8", "I64": "i8", "U64": "u8"}


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
