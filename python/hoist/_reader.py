"""What hoist.safetensors.safe_open and hoist.gguf.open share: a model file's tensors by name,
read through the engine in batches that grow while the caller keeps taking what was read ahead,
and slices of them."""
import os

from . import HoistError, Model, load_file as _hoist_load_file

_FRAMEWORKS = ("pt", "torch", "np", "numpy")
# A batch of get_tensor reads starts this large and doubles while the caller keeps taking the
# tensors read ahead, up to the largest: one load per batch keeps the link busy, and the bound
# keeps what is read ahead (and not yet asked for) small.
_FIRST_BATCH_BYTES = 64 << 20
_LARGEST_BATCH_BYTES = 2 << 30
# Slices cut the same way are read ahead from this size on: a caller that slices one tensor
# slices the others alike (a rank's part of every weight), and loads below this spend a
# tenth or more of their time starting and finishing (run 37, docs/PYTHON.md).
_FIRST_REGION_BATCH_BYTES = 512 << 20


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
        return list(self._owner._model.load_shape(self._name))

    def get_dtype(self):
        return self._info.dtype

    def __getitem__(self, index):
        if not self._owner._on_host():
            return self._owner._region(self._name, index)
        if not isinstance(index, tuple):
            index = (index,)
        if any(i is Ellipsis for i in index) or not index:
            rows = slice(None)
        else:
            rows = index[0]
        shape = self._owner._model.load_shape(self._name)
        if not shape:  # a scalar: its one value, indexed as asked (`...`, `()`)
            return self._owner._read_rows(self._name, 0, 1)[index]
        count = shape[0]
        if isinstance(rows, int):
            at = rows + count if rows < 0 else rows
            if not 0 <= at < count:
                raise self._owner.Error(f"index {rows} is out of range for dimension 0 of "
                                      f"'{self._name}', of size {count}")
            first, last = at, at + 1
            rest = (0,) + tuple(index[1:])
        elif isinstance(rows, slice):
            start, stop, step = rows.indices(count)
            if step != 1:
                raise self._owner.Error("slices with a step are not supported")
            first, last = start, max(start, stop)
            rest = (slice(None),) + tuple(index[1:]) if index[0] is not Ellipsis else index
        else:
            raise self._owner.Error(f"cannot index '{self._name}' with {type(rows).__name__}")
        part = self._owner._read_rows(self._name, first, last)
        return part[rest]


class TensorReader:
    """One model file's tensors by name on a device: get_tensor, get_slice, keys, metadata; a
    context manager. Subclasses say which format they read and which error they raise."""

    Error = HoistError
    FORMAT = None  # the format this reader opens; None: any

    def __init__(self, filename, framework, device="cpu"):
        if framework not in _FRAMEWORKS:
            raise self.Error(f"framework {framework!r} is not supported: pt or np")
        self._numpy = framework in ("np", "numpy")
        self._path = os.fspath(filename)
        try:
            self._model = Model(self._path)
        except HoistError as e:
            raise self.Error(str(e)) from e
        if self._model.format != self.FORMAT or not os.path.isfile(self._path) or \
                self._path.endswith(".json"):
            raise self.Error(f"{self._path}: not a {self.FORMAT} file (this reads one file; "
                             f"hoist.load_file reads indexes, directories and split sets)")
        self._device = "cpu" if self._numpy else device
        # Names in file order: the order batches read in.
        self._by_offset = sorted(self._model.tensors,
                                 key=lambda n: (self._model.tensors[n].file,
                                                self._model.tensors[n].offset))
        self._position = {n: i for i, n in enumerate(self._by_offset)}
        self._ahead = {}    # read ahead, not yet asked for
        self._ahead_regions = {}  # (name, r0, r1, c0, c1) -> slice read ahead
        self._taken = set()  # handed out: a batch does not read them again
        self._batch_bytes = _FIRST_BATCH_BYTES
        self._region_batch_bytes = _FIRST_REGION_BATCH_BYTES

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._ahead.clear()
        self._ahead_regions.clear()
        self._taken.clear()
        return False

    def keys(self):
        return sorted(self._model.tensors)

    def offset_keys(self):
        return list(self._by_offset)

    def metadata(self):
        """{key: value} of the file's metadata (safetensors: the __metadata__ strings; GGUF:
        typed values, lists for arrays), or None when it has none."""
        return dict(self._model.metadata) or None

    def info(self, name):
        """The tensor's hoist.TensorInfo: its dtype in the format's spelling ("Q4_K") and its
        own shape (get_shape gives the shape it loads with)."""
        self._check(name)
        return self._model.tensors[name]

    def _check(self, name):
        if name not in self._model.tensors:
            raise self.Error(f"File does not contain tensor {name}")

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
            raise self.Error(str(e)) from e
        result = loaded.pop(name)
        self._ahead.update(loaded)
        return result

    def get_slice(self, name):
        self._check(name)
        return _Slice(self, name)

    def _region(self, name, index):
        """Tensor `name` indexed by `index`, on the device: its first two dimensions' ranges
        read through the engine as a region (rows as one file range; columns staged by rows and
        only they copied to the device), the rest of the index applied there. Consecutive
        slices taken the same way are read ahead together, as get_tensor's batches are."""
        region = _region_of(self._model, name, index, self.Error)
        if region is None:  # fewer than two dimensions, or an index this cannot cut
            return self._whole(name)[index].clone()
        key = (name,) + region[0]
        self._taken.add(name)
        if key in self._ahead_regions:
            self._region_batch_bytes = min(2 * self._region_batch_bytes, _LARGEST_BATCH_BYTES)
            return _finish(self._ahead_regions.pop(key), region[1])
        # A miss: this region and the same cut of the tensors after it, in file order.
        batch = [(name, region[0])]
        size = _region_bytes(self._model, name, region[0])
        for other in self._by_offset[self._position[name] + 1:]:
            if other in self._taken:
                continue
            guess = _like(self._model, name, region[0], other)
            if guess is None:
                try:
                    found = _region_of(self._model, other, index, self.Error)
                except (self.Error, IndexError, TypeError):
                    found = None
                guess = found[0] if found is not None else None
            if guess is None or (other,) + guess in self._ahead_regions:
                continue
            nbytes = _region_bytes(self._model, other, guess)
            if size + nbytes > self._region_batch_bytes:
                break
            batch.append((other, guess))
            size += nbytes
        from . import _torch as torch_module, hoist_device, torch_dtype
        torch = torch_module()
        hoist_name, torch_device = hoist_device(self._device)
        tensors, regions = [], []
        for other, (r0, r1, c0, c1) in batch:
            shape = self._model.load_shape(other)
            out = torch.empty([r1 - r0, c1 - c0] + list(shape[2:]),
                              dtype=torch_dtype(self._model, other), device=torch_device)
            row_bytes = self._model.tensors[other].nbytes // shape[0]
            column_bytes = row_bytes // shape[1]
            regions.append((self._model._indices[other], row_bytes, r0, r1, c0 * column_bytes,
                            c1 * column_bytes, out.data_ptr()))
            tensors.append(out)
        if torch_device.type == "cuda":
            torch.cuda.current_stream(torch_device).synchronize()
        try:
            self._model._native.load_regions(regions, hoist_name)
        except HoistError as e:
            raise self.Error(str(e)) from e
        for (other, cut), out in zip(batch[1:], tensors[1:]):
            self._ahead_regions[(other,) + cut] = out
        return _finish(tensors[0], region[1])

    def _read_rows(self, name, first, last):
        """Rows [first, last) of the tensor (as loaded: a block-quantized one is uint8
        [rows, bytes_per_row]), read from the file alone, on the device."""
        info = self._model.tensors[name]
        quantized = self._model.is_quantized(name)
        shape = list(self._model.load_shape(name)) or [1]
        row_bytes = info.nbytes // shape[0] if shape[0] else 0
        with open(self._path, "rb") as f:
            f.seek(info.offset + first * row_bytes)
            data = f.read((last - first) * row_bytes)
        if len(data) != (last - first) * row_bytes:
            raise self.Error(f"{self._path}: the file ends inside tensor '{name}'")
        shape = [last - first] + shape[1:] if info.shape else []
        return _from_bytes(bytearray(data), "U8" if quantized else info.dtype, shape,
                           self._device, self._numpy)


def _region_of(model, name, index, error):
    """((r0, r1, c0, c1), rest): the ranges of the tensor's first two dimensions (in elements)
    that `index` covers, and what is left to apply to a tensor of those ranges (integers
    become 0 there); None for a tensor of fewer than two dimensions or an index with an
    ellipsis or a step. Out-of-range integers raise `error` as safetensors does."""
    shape = model.load_shape(name)
    if len(shape) < 2 or 0 in shape:
        return None
    if not isinstance(index, tuple):
        index = (index,)
    if any(i is Ellipsis or i is None for i in index) or len(index) > len(shape):
        return None
    ranges, rest = [], []
    for dim in range(2):
        item = index[dim] if dim < len(index) else slice(None)
        size = shape[dim]
        if isinstance(item, bool) or not isinstance(item, (int, slice)):
            return None
        if isinstance(item, int):
            at = item + size if item < 0 else item
            if not 0 <= at < size:
                raise error(f"index {item} is out of range for dimension {dim} of '{name}', "
                            f"of size {size}")
            ranges.append((at, at + 1))
            rest.append(0)
        else:
            start, stop, step = item.indices(size)
            if step != 1 or stop <= start:
                return None
            ranges.append((start, stop))
            rest.append(slice(None))
    rest.extend(index[2:])
    return (ranges[0][0], ranges[0][1], ranges[1][0], ranges[1][1]), tuple(rest)


def _like(model, name, cut, other):
    """The cut of tensor `other` in the same proportion as `cut` of `name` ([:, :half] of
    every tensor, or rank r's 1/N of each, as a framework narrows them for its rank), or None
    where the proportion does not fall on whole elements."""
    shape, other_shape = model.load_shape(name), model.load_shape(other)
    if len(other_shape) < 2 or 0 in other_shape:
        return None
    out = []
    for (start, stop), size, other_size in zip(((cut[0], cut[1]), (cut[2], cut[3])), shape[:2],
                                                other_shape[:2]):
        if (start * other_size) % size or (stop * other_size) % size:
            return None
        out += [start * other_size // size, stop * other_size // size]
    return tuple(out) if out[0] < out[1] and out[2] < out[3] else None


def _region_bytes(model, name, cut):
    shape = model.load_shape(name)
    r0, r1, c0, c1 = cut
    return model.tensors[name].nbytes // shape[0] // shape[1] * (r1 - r0) * (c1 - c0)


def _finish(tensor, rest):
    """A region's tensor with the rest of the index applied, owning its memory."""
    if all(isinstance(r, slice) and r == slice(None) for r in rest):
        return tensor
    return tensor[rest].clone()


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
    from . import _TORCH_DTYPES, hoist_device
    attr = _TORCH_DTYPES.get(dtype)
    if attr is None or not hasattr(torch, attr):
        raise HoistError(f"dtype {dtype} has no torch dtype in torch {torch.__version__}",
                         "invalid argument")
    if not data:
        tensor = torch.empty(shape, dtype=getattr(torch, attr))
    else:
        tensor = torch.frombuffer(data, dtype=getattr(torch, attr)).reshape(shape)
    _, torch_device = hoist_device(device)
    return tensor.to(torch_device)


_NUMPY_NAMES = {"I8": "i1", "U8": "u1", "I16": "i2", "U16": "u2", "F16": "f2", "I32": "i4", "C64": "c8",
                "U32": "u4", "F32": "f4", "F64": "f8", "I64": "i8", "U64": "u8"}
