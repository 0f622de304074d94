"""What hoist.safetensors.safe_open and hoist.gguf.open share: a model file's tensors by name,
read through the engine in batches that grow while the caller keeps taking what was read ahead,
and slices of them."""
import os
import threading

from . import _native
from ._engine import _NUMPY_DTYPES, Model, address_of, hoist_device, new_tensor, settle
from ._engine import load_file as _hoist_load_file
from ._errors import HoistError

_FRAMEWORKS = ("pt", "torch", "pytorch", "np", "numpy")
# What safetensors 0.8 also accepts but hoist gives no tensors for.
_OTHER_FRAMEWORKS = ("tf", "tensorflow", "jax", "flax", "mlx", "paddle")
# A batch of get_tensor reads starts this large and doubles while the caller keeps taking the
# tensors read ahead, up to the largest: one load per batch keeps the link busy, and the bound
# keeps what is read ahead (and not yet asked for) small.
_FIRST_BATCH_BYTES = 64 << 20
_LARGEST_BATCH_BYTES = 2 << 30
# Slices cut the same way are read ahead from this size on: a caller that slices one tensor
# slices the others alike (a rank's part of every weight), and loads below this spend a
# tenth or more of their time starting and finishing (run 37, docs/PYTHON.md).
_FIRST_REGION_BATCH_BYTES = 512 << 20


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
        owner = self._owner
        shape = list(owner._model.load_shape(self._name))
        _check_index(index, shape, owner.Error, torch_semantics=not owner._numpy)
        if not owner._on_host():
            with owner._lock:
                return owner._region(self._name, index)
        if _whole_index(index, len(shape)):
            return owner._whole(self._name)  # the tensor itself: nothing copied
        region = None if owner._numpy else _region_of(owner._model, self._name, index, owner.Error)
        if region is not None:
            return _finish(owner._load_one_region(self._name, region[0]), region[1])
        # Steps, lists, an ellipsis, fewer than two dimensions: indexed as torch or numpy does.
        part = owner._whole(self._name)[index]
        return part.copy() if owner._numpy else part.clone()


class TensorReader:
    """One model file's tensors by name on a device: get_tensor, get_slice, keys, metadata; a
    context manager. Subclasses say which format they read and which error they raise."""

    Error = HoistError
    FORMAT = None  # the format this reader opens; None: any
    MISSING_IS_FILE_NOT_FOUND = False  # a missing file: FileNotFoundError, else Error

    def __init__(self, filename, framework, device="cpu"):
        if framework in _OTHER_FRAMEWORKS:
            raise self.Error(f"framework {framework} is not supported by hoist: pt (torch, "
                             f"pytorch) or np (numpy)")
        if framework not in _FRAMEWORKS:
            raise self.Error(f"framework {framework} is invalid")
        self._numpy = framework in ("np", "numpy")
        self._path = os.fspath(filename)
        self._closed = False
        remote = _native.is_remote(self._path)
        if self.MISSING_IS_FILE_NOT_FOUND and not remote and not os.path.exists(self._path):
            raise FileNotFoundError(f"No such file or directory: {self._path}")
        try:
            self._model = Model(self._path)
        except HoistError as e:
            raise self.Error(str(e)) from e
        if self._model.format != self.FORMAT or self._path.endswith(".json") or \
                (not os.path.isfile(self._path) if not remote else
                 any(t.file for t in self._model.tensors.values())):
            raise self.Error(f"{self._path}: not a {self.FORMAT} file (this reads one file; "
                             f"hoist.load_file reads indexes, directories and split sets)")
        # "cuda" is the first GPU, as safetensors takes it (torch's would be the current one).
        self._device = "cpu" if self._numpy else ("cuda:0" if device == "cuda" else device)
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
        self._pattern = None  # the last request's cut: (name, cut, index), or None (whole)
        self._frontier = 0    # file position up to which batches were planned
        self._pending = None  # (future, keys, store) of the batch read in the background
        self._pool = None
        self._lock = threading.RLock()  # a device handle's read-ahead state, for any thread
        # On the host, the engine's consumer-ordered reader (its read-ahead and pinned slabs).
        self._host = None
        if self._on_host():
            try:
                self._host = self._model._host_reader(self._by_offset, numpy=self._numpy)
            except HoistError as e:
                raise self.Error(str(e)) from e

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._closed = True
        if self._host is not None:
            self._host.close()
        with self._lock:
            if self._pending is not None:
                self._settle(required=False)
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None
            self._ahead.clear()
            self._ahead_regions.clear()
            self._taken.clear()
        return False

    def __del__(self):
        host = getattr(self, "_host", None)
        if host is not None:
            host.close()

    def _open(self):
        if self._closed:
            raise self.Error("File is closed")

    def keys(self):
        self._open()
        return sorted(self._model.tensors)

    def offset_keys(self):
        self._open()
        return list(self._by_offset)

    def metadata(self):
        """{key: value} of the file's metadata (safetensors: the __metadata__ strings; GGUF:
        typed values, lists for arrays), or None when it has none."""
        self._open()
        return dict(self._model.metadata) or None

    def info(self, name):
        """The tensor's hoist.TensorInfo: its dtype in the format's spelling ("Q4_K") and its
        own shape (get_shape gives the shape it loads with)."""
        self._check(name)
        return self._model.tensors[name]

    def _check(self, name):
        self._open()
        if name not in self._model.tensors:
            raise self.Error(f"File does not contain tensor {name}")

    def get_tensor(self, name):
        self._check(name)
        return self._whole(name)

    def get_tensors(self):
        """{name: tensor} of every tensor, in offset_keys() order (safetensors 0.8's)."""
        return {name: self.get_tensor(name) for name in self.offset_keys()}

    def _read_all(self):
        """{name: tensor} of every tensor, in offset_keys() order, in one load (load_file)."""
        self._open()
        if self._host is not None:
            return {name: self._whole(name) for name in self._by_offset}
        try:
            loaded = _hoist_load_file(self._model, device=self._device)
        except HoistError as e:
            raise self.Error(str(e)) from e
        return {name: loaded[name] for name in self._by_offset}

    def _on_host(self):
        return self._numpy or str(self._device) == "cpu"

    def get_slice(self, name):
        self._check(name)
        return _Slice(self, name)

    # Read-ahead. A key is a tensor's name (the whole tensor) or (name, r0, r1, c0, c1) (a
    # region of it); what was read and not yet asked for waits in _ahead / _ahead_regions. A hit
    # doubles the next batch (to 2 GiB); on a device, once what waits falls below half a batch,
    # the next batch in file order is read on a background thread while the caller takes what
    # waits, so no load starts and ends with the link idle. At most two batches are held.

    def _whole(self, name):
        """Tensor `name`: on the host from the shared read-ahead, else from what was read ahead
        or in a new batch from it on."""
        if self._host is not None:
            try:
                return self._host.take(name)
            except HoistError as e:
                raise self.Error(str(e)) from e
        with self._lock:
            return self._device_whole(name)

    def _device_whole(self, name):
        self._taken.add(name)
        self._pattern = None
        hit = self._take(self._ahead, name)
        if hit is not None:
            self._batch_bytes = min(2 * self._batch_bytes, _LARGEST_BATCH_BYTES)
            self._prefetch()
            return hit
        # A miss: read a batch from this tensor on, in file order, skipping what is read ahead
        # or was handed out already.
        batch, end = self._next_batch(self._position[name] + 1,
                                      self._batch_bytes - self._model.tensors[name].nbytes)
        result = self._load([(name, None)] + batch)
        self._frontier = max(self._frontier, end)
        tensor = result.pop(name)
        self._ahead.update(result)
        self._prefetch()
        return tensor

    def _region(self, name, index):
        """Tensor `name` indexed by `index`, on the device: its first two dimensions' ranges
        read through the engine as a region (rows as one file range; columns staged by rows and
        only they copied to the device), the rest of the index applied there. The same cut of
        the following tensors (in proportion, else as asked) is read ahead with it."""
        region = _region_of(self._model, name, index, self.Error)
        if region is None:  # fewer than two dimensions, or an index this cannot cut
            return self._whole(name)[index].clone()
        key = (name,) + region[0]
        self._taken.add(name)
        self._pattern = (name, region[0], index)
        hit = self._take(self._ahead_regions, key)
        if hit is not None:
            self._region_batch_bytes = min(2 * self._region_batch_bytes, _LARGEST_BATCH_BYTES)
            self._prefetch()
            return _finish(hit, region[1])
        batch, end = self._next_batch(
            self._position[name] + 1,
            self._region_batch_bytes - _region_bytes(self._model, name, region[0]))
        result = self._load([(name, region[0])] + batch)
        self._frontier = max(self._frontier, end)
        tensor = result.pop(key)
        self._ahead_regions.update(result)
        self._prefetch()
        return _finish(tensor, region[1])

    def _take(self, store, key):
        """The tensor under key from what waits, or from the batch being read (waiting for it);
        None when neither has it. A batch being read that does not have it is settled first, so
        that the caller's own load does not run beside it."""
        if key not in store and self._pending is not None:
            self._settle(required=key in self._pending[1])
        return store.pop(key, None)

    def _settle(self, required):
        future, _keys, store = self._pending
        self._pending = None
        try:
            store.update(future.result())
        except self.Error:
            if required:  # the tensor asked for was in it: its error is the caller's
                raise

    def _next_batch(self, start, budget, at_least_one=False):
        """[(name, cut)] following file position `start` that are not taken or waiting, cut as
        the last request was (whole tensors, or regions in its proportion), up to budget bytes
        (and one, whatever its size, when at_least_one); and the position after the last one
        considered."""
        batch, size, at = [], 0, start
        for at in range(start, len(self._by_offset)):
            other = self._by_offset[at]
            if other in self._taken or other in self._ahead:
                continue
            if self._pattern is None:
                cut, nbytes = None, self._model.tensors[other].nbytes
            else:
                cut = self._guess(other)
                if cut is None or (other,) + cut in self._ahead_regions:
                    continue
                nbytes = _region_bytes(self._model, other, cut)
            if size + nbytes > budget and (batch or not at_least_one):
                return batch, at
            batch.append((other, cut))
            size += nbytes
        return batch, len(self._by_offset)

    def _guess(self, other):
        name, cut, index = self._pattern
        guess = _like(self._model, name, cut, other)
        if guess is None:
            try:
                found = _region_of(self._model, other, index, self.Error)
            except (self.Error, IndexError, TypeError):
                found = None
            guess = found[0] if found is not None else None
        return guess

    def _prefetch(self):
        if self._pending is not None or self._on_host():
            return
        regions = self._pattern is not None
        store = self._ahead_regions if regions else self._ahead
        budget = self._region_batch_bytes if regions else self._batch_bytes
        waiting = sum(t.numel() * t.element_size() for t in store.values())
        if waiting > budget // 2:
            return
        batch, end = self._next_batch(self._frontier, budget, at_least_one=True)
        if not batch:
            return
        self._frontier = end
        if self._pool is None:
            import concurrent.futures
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                               thread_name_prefix="hoist-ahead")
        keys = {n if cut is None else (n,) + cut for n, cut in batch}
        self._pending = (self._pool.submit(self._load, batch), keys, store)

    def _load(self, batch):
        """{key: tensor} for [(name, cut)] (all whole or all regions), in one load."""
        if batch[0][1] is None:
            try:
                return _hoist_load_file(self._model, device=self._device,
                                        names=[n for n, _ in batch])
            except HoistError as e:
                raise self.Error(str(e)) from e
        hoist_name, torch_device = hoist_device(self._device)
        out, regions = {}, []
        for other, cut in batch:
            tensor = new_tensor(self._model, other, torch_device,
                                _region_shape(self._model, other, cut), "part of tensor")
            regions.append(_region_tuple(self._model, other, cut, address_of(tensor)))
            out[(other,) + cut] = tensor
        settle([torch_device])
        self._load_regions(regions, hoist_name)
        return out

    def _load_regions(self, regions, hoist_name):
        try:
            self._model._load_regions(regions, hoist_name)
        except HoistError as e:
            raise self.Error(str(e)) from e

    def _host_tensor(self, shape, name):
        """Memory on the host for (part of) tensor `name`: a torch tensor or a numpy array;
        and its address."""
        if self._numpy:
            import numpy
            dtype = ("uint8" if self._model.is_quantized(name)
                     else _NUMPY_DTYPES[self._model.tensors[name].dtype])
            array = numpy.empty(shape, dtype=dtype)
            return array, array.ctypes.data
        tensor = new_tensor(self._model, name, "cpu", list(shape), "part of tensor")
        return tensor, tensor.data_ptr()

    def _load_one_region(self, name, cut):
        """Rows r0:r1, columns c0:c1 of tensor `name` (cut), read alone into host memory."""
        tensor, address = self._host_tensor(_region_shape(self._model, name, cut), name)
        self._load_regions([_region_tuple(self._model, name, cut, address)], "host")
        return tensor


def _whole_index(index, ndim):
    """Whether `index` selects the whole tensor as it is (`...`, `:`, `()`, `[:, :]`)."""
    items = index if isinstance(index, tuple) else (index,)
    if any(i is Ellipsis for i in items):
        return sum(i is Ellipsis for i in items) == 1 and all(
            i is Ellipsis or (isinstance(i, slice) and i == slice(None)) for i in items)
    return len(items) <= ndim and all(isinstance(i, slice) and i == slice(None) for i in items)


def _index_text(index):
    def one(item):
        if isinstance(item, slice):
            text = ("" if item.start is None else str(item.start)) + ":" + \
                ("" if item.stop is None else str(item.stop))
            return text + (":" + str(item.step) if item.step is not None else "")
        return "..." if item is Ellipsis else str(item)
    return "[" + ", ".join(one(i) for i in index) + "]"


def _check_index(index, shape, error, torch_semantics):
    """safetensors' checks of a slice's index, with its messages: integers inside their
    dimension; for numpy (torch_semantics False) also stops inside it and lists empty, while
    torch's indexing (safetensors 0.8's pt framework) clamps stops and takes lists."""
    items = index if isinstance(index, tuple) else (index,)
    for dim, item in enumerate(items):
        if item is Ellipsis:
            return  # what follows counts from the end
        if isinstance(item, list) and item and not torch_semantics:
            raise error("Non empty lists are not implemented")
        if dim >= len(shape):
            continue
        size = shape[dim]
        if isinstance(item, slice) and item.stop is not None and item.stop > size and \
                not torch_semantics:
            # numpy would clamp; safetensors refuses, naming the last index asked for
            raise error(f"Error during slicing {_index_text(items)} with shape {list(shape)}: "
                        f"index {item.stop - 1} out of bounds for tensor dimension #{dim} of "
                        f"size {size}")
        if isinstance(item, bool) or not isinstance(item, int):
            continue
        if item < -size:
            raise error(f"Invalid index {item} for dimension {dim} of size {size}")
        if item >= size:
            raise error(f"Error during slicing {_index_text(items)} with shape {list(shape)}: "
                        f"index {item} out of bounds for tensor dimension #{dim} of size {size}")


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


def _region_shape(model, name, cut):
    """The shape of rows r0:r1, columns c0:c1 (cut) of tensor `name`."""
    r0, r1, c0, c1 = cut
    return [r1 - r0, c1 - c0] + list(model.load_shape(name)[2:])


def _region_tuple(model, name, cut, address):
    """The native region (tensor index, row bytes, r0, r1, first and end column byte, address)
    of cut of tensor `name`, landing at address."""
    r0, r1, c0, c1 = cut
    shape = model.load_shape(name)
    row_bytes = model.tensors[name].nbytes // shape[0]
    column_bytes = row_bytes // shape[1]
    return (model._indices[name], row_bytes, r0, r1, c0 * column_bytes, c1 * column_bytes,
            address)


def _region_bytes(model, name, cut):
    shape = model.load_shape(name)
    r0, r1, c0, c1 = cut
    return model.tensors[name].nbytes // shape[0] // shape[1] * (r1 - r0) * (c1 - c0)


def _finish(tensor, rest):
    """A region's tensor with the rest of the index applied, owning its memory."""
    if all(isinstance(r, slice) and r == slice(None) for r in rest):
        return tensor
    return tensor[rest].clone()
