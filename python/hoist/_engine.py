"""hoist's engine as Python sees it: the only module that calls the native extension.

Every front end (load_file, placement, iter_tensors, hoist.safetensors, hoist.gguf,
hoist.torch, the transformers hook) reaches hoist's C++ engine through the functions here; they
allocate the destinations (torch or numpy) and hand their addresses to one native load, so
every load gets the engine's staging, deadlines and Ctrl-C. The option names, their spelling
into native arguments and the device mapping are written here once.
"""
import json as _json
import math as _math
import os as _os
from typing import NamedTuple as _NamedTuple, Tuple as _Tuple

from . import _native

from ._errors import DeviceError, HoistError, StalledError, TensorNotFoundError, UnavailableError
from ._progress import ProgressBar

VERSION = _native.version  # CMakeLists.txt's project(VERSION), through hoist_version()


# The one dtype table: per storage dtype code (safetensors' spelling; GGUF's F32/F16/BF16/F64/
# I8..I64 share it), torch's dtype by attribute name (a torch that lacks one cannot load that
# dtype), numpy's (raw unsigned integers of the width where numpy has no such type), and bits
# per value. Every other table in the package is derived from it.
_DTYPES = {
    "F64": ("float64", "float64", 64), "F32": ("float32", "float32", 32),
    "F16": ("float16", "float16", 16), "BF16": ("bfloat16", "uint16", 16),
    "I64": ("int64", "int64", 64), "I32": ("int32", "int32", 32), "I16": ("int16", "int16", 16),
    "I8": ("int8", "int8", 8), "U64": ("uint64", "uint64", 64), "U32": ("uint32", "uint32", 32),
    "U16": ("uint16", "uint16", 16), "U8": ("uint8", "uint8", 8), "BOOL": ("bool", "bool", 8),
    "F8_E4M3": ("float8_e4m3fn", "uint8", 8), "F8_E5M2": ("float8_e5m2", "uint8", 8),
    "F8_E8M0": ("float8_e8m0fnu", "uint8", 8), "C64": ("complex64", "complex64", 64),
    "F8_E4M3FNUZ": ("float8_e4m3fnuz", "uint8", 8), "F8_E5M2FNUZ": ("float8_e5m2fnuz", "uint8", 8),
    "F4": ("float4_e2m1fn_x2", "uint8", 4),
}
_TORCH_DTYPES = {code: row[0] for code, row in _DTYPES.items()}
_NUMPY_DTYPES = {code: row[1] for code, row in _DTYPES.items()}


class TensorInfo(_NamedTuple):
    name: str
    dtype: str              # the format's spelling: "BF16", "Q4_K"
    shape: _Tuple[int, ...]  # outermost dimension first
    nbytes: int
    file: int               # index into Model.files order of the model's files
    offset: int             # absolute byte offset in that file


def _is_quantized(format_name, dtype, block):
    """Whether a tensor of `dtype` (whose block is (values, bytes)) loads as raw uint8 rows."""
    if format_name == "gguf":
        return block[0] != 1  # ggml's quantized types pack many values a block
    return dtype not in _TORCH_DTYPES


def _load_shape(format_name, dtype, shape, nbytes, block):
    """The shape a tensor loads with: its own, or [rows, bytes_per_row] for a block format."""
    if dtype == "F4" and format_name == "safetensors" and shape:
        # Two F4 values per byte: torch's float4_e2m1fn_x2 has half the last dimension.
        return shape[:-1] + (shape[-1] // 2,)
    if not _is_quantized(format_name, dtype, block):
        return shape
    rows = 1
    for d in shape[:-1]:
        rows *= d
    return (rows, nbytes // rows if rows else 0)


class Model:
    """An opened model: its format, metadata and tensor directory. Opening reads and checks
    every header; no tensor data is read until a load."""

    def __init__(self, path):
        self.path = _os.fspath(path)
        self._adopt(_native.Model(self.path))

    @classmethod
    def from_bytes(cls, data, name="<memory>"):
        """A model over the bytes of one safetensors or GGUF file (bytes, bytearray, memoryview
        or any buffer), read in place with the same checks as a file: `data` must not change
        while the model is used. `name` stands for the file in messages."""
        model = cls.__new__(cls)
        model.path = name
        model._adopt(_native.Model.from_bytes(data, name))
        return model

    def _adopt(self, native):
        self._native = native
        self.format = self._native.format
        self.tensors = {t[0]: TensorInfo(t[0], t[1], tuple(t[2]), t[3], t[4], t[5])
                        for t in self._native.tensors()}
        self._indices = {name: i for i, name in enumerate(self.tensors)}  # directory order
        self._blocks = self._native.blocks()  # per tensor: (values, bytes) of its dtype's block
        self._metadata = None

    @property
    def metadata(self):
        """{key: value}; GGUF values keep their types (lists for arrays)."""
        if self._metadata is None:
            import json
            raw = json.loads(self._native.metadata_json)
            self._metadata = {k: v.get("value") for k, v in raw.items()}
        return self._metadata

    def __repr__(self):
        return f"hoist.Model({self.path!r}, format={self.format!r}, tensors={len(self.tensors)})"

    def block(self, name):
        """The tensor's dtype as blocks: (values, bytes) per block, e.g. (1, 4) for F32, (256,
        144) for Q4_K, (2, 1) for F4; (0, 0) for a dtype hoist has no geometry for."""
        return self._blocks[self._indices[name]]

    def is_quantized(self, name):
        """Whether the tensor's dtype is a block format (loaded as raw uint8 rows)."""
        return _is_quantized(self.format, self.tensors[name].dtype, self.block(name))

    def load_shape(self, name):
        """The shape the tensor is loaded with: its own, or [rows, bytes_per_row] for a block
        format."""
        info = self.tensors[name]
        return _load_shape(self.format, info.dtype, tuple(info.shape), info.nbytes,
                           self.block(name))

    # The native calls the other modules need; this module is the only caller of _native.
    def _load_regions(self, regions, device):
        """Loads regions [(tensor index, row_bytes, r0, r1, c0, c1, address)] onto `device`
        (hoist's name), into the memory at each address."""
        return self._native.load_regions(regions, device)

    def _host_reader(self, names, numpy=False, ahead_bytes=0):
        """The engine's consumer-ordered reader of tensors `names` into host memory it owns
        (pinned when a GPU is present, unless numpy): take(name) gives the tensor, the
        caller's; stats; close()."""
        return _HostReader(self, names, numpy, ahead_bytes)

    def _stream(self, names, device, **options):
        """A native stream of tensors `names` onto `device`: provide(destinations), next()
        (the index of a tensor that landed, None at the end), close()."""
        return self._native.stream(names, device, **options)


def _settle_devices():
    """Waits for every GPU's queued work: a consumer's non_blocking copy out of host memory
    that torch did not allocate (it records no event for it) must end before the engine hands
    that memory out again. The engine calls it, on a reader thread, before reusing a slab."""
    torch = _torch()
    if torch is not None and torch.cuda.is_initialized():
        for index in range(torch.cuda.device_count()):
            torch.cuda.synchronize(index)


_native.on_host_memory_reuse(_settle_devices)


class _HostReader:
    """Model._host_reader's reader: tensors as torch tensors (numpy arrays with numpy=True or
    without torch) viewing the engine's host memory, which each keeps while it lives."""

    def __init__(self, model, names, numpy, ahead_bytes):
        self._model = model
        self._numpy = numpy or _torch() is None
        self._native = model._native.reader([model._indices[n] for n in names],
                                            pinned=0 if self._numpy else -1,
                                            ahead_bytes=ahead_bytes)

    def take(self, name):
        model = self._model
        buffer = self._native.take(model._indices[name])
        shape = model.load_shape(name)
        if self._numpy:
            import numpy
            dtype = ("uint8" if model.is_quantized(name)
                     else _NUMPY_DTYPES[model.tensors[name].dtype])
            if not buffer.nbytes:
                return numpy.empty(shape, dtype=dtype)
            return numpy.frombuffer(buffer, dtype=numpy.uint8).view(dtype).reshape(shape)
        torch = _torch()
        dtype = torch_dtype(model, name)
        if not buffer.nbytes:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(buffer, dtype=torch.uint8).view(dtype).view(shape)

    @property
    def stats(self):
        """{hits, waits, misses, batches, read_bytes} of the requests so far."""
        return self._native.stats()

    def close(self):
        self._native.close()


def open(path):  # noqa: A001 (the module's verb, as in hoist.open)
    """Opens a model: a .gguf or .safetensors file, a GGUF split, an index.json or a directory."""
    return Model(path)


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def torch_dtype(model, name):
    """The torch dtype a tensor loads as (torch.uint8 for block formats)."""
    torch = _torch()
    if model.is_quantized(name):
        return torch.uint8
    dtype = model.tensors[name].dtype
    attr = _TORCH_DTYPES[dtype]
    if not hasattr(torch, attr):
        raise HoistError(f"{model.path}: tensor '{name}' is {dtype}, which this torch "
                         f"({torch.__version__}) has no dtype for", "invalid argument")
    return getattr(torch, attr)


def _device_names(text):
    """The devices a comma-joined string names, as hoist's native side splits it: a sim's
    options hold commas too ("sim:bandwidth=2GB/s,engines=3" is one device)."""
    names = []
    for piece in text.split(","):
        if names and "=" in piece and ":" not in piece and names[-1].startswith("sim:"):
            names[-1] += "," + piece
        else:
            names.append(piece)
    return names


def hoist_device(device):
    """Maps a torch device ("cpu", "cuda", "cuda:1", torch.device, int; hoist's "host" and
    "auto" too) to hoist's name, and returns (hoist_name, torch_device_or_string). "sim[:options]" loads through hoist's
    simulated DMA engine into host memory."""
    if device == "host":  # hoist's CLI name for the CPU
        device = "cpu"
    elif device == "auto":  # as the CLI: the first GPU when one is usable, else the CPU
        torch = _torch()
        device = "cuda:0" if torch is not None and torch.cuda.is_available() else "cpu"
    if isinstance(device, str) and len(_device_names(device)) > 1:
        raise HoistError(f"device {device!r} names several devices: give them as a list "
                         f"(device=[{', '.join(repr(d) for d in _device_names(device))}])",
                         "invalid argument")
    if isinstance(device, str) and device.startswith("sim"):
        # hoist's simulated DMA engine (fault injection for tests; docs/CLI.md): host memory.
        return device, "cpu" if _torch() is None else _torch().device("cpu")
    torch = _torch()
    if torch is not None:
        dev = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
        if dev.type == "cpu":
            return "host", dev
        if dev.type == "cuda":
            # Asked before torch is: without a usable GPU torch raises its own errors
            # (AssertionError, RuntimeError) from deep inside the first allocation.
            if not torch.cuda.is_available():
                raise UnavailableError(f"device '{device}': this torch ({torch.__version__}) has "
                                       f"no usable CUDA device here", "unavailable")
            index = dev.index if dev.index is not None else torch.cuda.current_device()
            if index >= torch.cuda.device_count():
                raise UnavailableError(f"device '{device}': there are "
                                       f"{torch.cuda.device_count()} CUDA devices here",
                                       "unavailable")
            # The vendor-neutral name: a ROCm torch calls its GPUs "cuda" too, and a HIP build
            # of hoist answers to "gpu:N" as a CUDA build does.
            return f"gpu:{index}", torch.device("cuda", index)
        raise HoistError(f"device '{device}' is not supported: cpu or cuda[:N]", "invalid argument")
    if str(device) != "cpu":
        raise HoistError(f"device '{device}' needs torch; without it hoist loads to 'cpu' only",
                         "invalid argument")
    return "host", "cpu"


def _progress_callback(progress):
    if progress is True:
        try:  # tqdm where it is installed (Debian: python3-tqdm), else hoist's own bar
            import tqdm.auto
        except ImportError:
            return ProgressBar()
        return _TqdmBar(tqdm.auto)
    if progress in (None, False):
        return None
    if callable(progress):
        return progress
    raise TypeError("progress must be None, a bool or a callable(done_bytes, total_bytes)")


class _TqdmBar:
    """progress=True through tqdm: bytes, rate and ETA as tqdm shows them."""

    def __init__(self, tqdm):
        # disable=None: no bar when stderr is no terminal (a pipe, a log file); tqdm.auto
        # draws a widget in a notebook.
        self._bar = tqdm.tqdm(total=0, unit="B", unit_scale=True, unit_divisor=1024,
                              desc="hoist", leave=False, disable=None)

    def __call__(self, done, total):
        if self._bar.total != total:
            self._bar.total = total
        self._bar.update(done - self._bar.n)
        return True

    def close(self):
        self._bar.close()


# The engine's options, as every front end takes them, and their one spelling into the native
# calls' arguments.
LOAD_OPTIONS = ("threads", "chunk_mib", "staging_mib", "stall_timeout", "direct_io")
_OPTIONS = LOAD_OPTIONS + ("checksum",)


def _mib_bytes(options, key):
    """A MiB option in bytes; hoist's native checks then bound it."""
    value = options.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{key} must be a number of MiB, not {type(value).__name__}")
    if not (_math.isfinite(value) and 0 <= value <= (1 << 30)):
        raise HoistError(f"{key} takes a number of MiB from 0 to {1 << 30}, not {value}",
                         "invalid argument")
    return int(round(value * (1 << 20)))


def native_options(options, takes=LOAD_OPTIONS):
    """The native calls' keyword arguments for `options` (threads, chunk_mib, staging_mib,
    stall_timeout in s, direct_io); TypeError names any option not in `takes`."""
    unknown = sorted(set(options) - set(takes))
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)}: expected {', '.join(takes)}")
    return dict(threads=options.get("threads", 0),
                chunk_bytes=_mib_bytes(options, "chunk_mib"),
                staging_bytes=_mib_bytes(options, "staging_mib"),
                stall_timeout_s=float(options.get("stall_timeout", 0.0)),
                direct_io=bool(options.get("direct_io", False)))


def new_tensor(model, name, device, shape=None, what="tensor"):
    """Memory for tensor `name` of `model` (or a part of it: `shape`) on `device` (a torch
    device; "cpu" without torch): a torch tensor, or a numpy array without torch. Block formats
    are uint8 rows. DeviceError names the tensor when the device has no room."""
    shape = model.load_shape(name) if shape is None else shape
    torch = _torch()
    if torch is None:
        import numpy
        dtype = "uint8" if model.is_quantized(name) else _NUMPY_DTYPES[model.tensors[name].dtype]
        return numpy.empty(shape, dtype=dtype)
    try:
        return torch.empty(shape, dtype=torch_dtype(model, name), device=device)
    except RuntimeError as e:  # torch.cuda.OutOfMemoryError among them
        raise DeviceError(f"{model.path}: cannot allocate {what} '{name}' on {device}: {e}",
                          "device error") from e


def address_of(tensor):
    """Where new_tensor's memory starts."""
    return tensor.ctypes.data if hasattr(tensor, "ctypes") else tensor.data_ptr()


def settle(devices):
    """Waits for the work queued on torch's current stream of each CUDA device among `devices`:
    memory the caching allocator hands out may still be in use by it, and hoist copies on its
    own streams. Call it after allocating destinations, before handing them to a load."""
    torch = _torch()
    if torch is None:
        return
    for dev in set(devices):
        if getattr(dev, "type", None) == "cuda":
            torch.cuda.current_stream(dev).synchronize()


# Destinations of loads that stalled: a read or copy into them that never returned may still
# write them (the native error says so), so they are never freed.
_STUCK_DESTINATIONS = []


def _keep_if_stalled(error, destinations):
    """Keeps `destinations` (the objects that own a load's memory) alive for good when `error`
    is a stall, which may leave a read or copy into them running."""
    if isinstance(error, StalledError):
        _STUCK_DESTINATIONS.append(destinations)


def fill(model, destinations, device, progress=None, placement=None, keep=None, **options):
    """Copies tensors into memory that the caller owns. `destinations`: [(name, address)],
    each with room for the tensor's nbytes on `device` (hoist's name; several joined by commas,
    with `placement`, per tensor index, saying which); `keep`: what owns that memory, kept
    alive for good if the load stalls. Returns the report."""
    checksum = bool(options.get("checksum", False))
    arguments = native_options({k: v for k, v in options.items() if k != "checksum"}, _OPTIONS)
    callback = _progress_callback(progress)
    try:
        return model._native.load_into(destinations, device, callback, checksum=checksum,
                                       placement=list(placement or []), **arguments)
    except HoistError as e:
        _keep_if_stalled(e, keep)
        raise
    finally:
        if isinstance(callback, (ProgressBar, _TqdmBar)):
            callback.close()


def load_file(path, device="cpu", names=None, progress=None, split="layer", tensor_split=None,
              process_group=None, split_plan=None, **options):
    """Loads a model's tensors: {name: torch.Tensor} (numpy arrays without torch) on `device`,
    with the keys, dtypes, shapes and values `safetensors.torch.load_file` gives. Block-
    quantized GGUF tensors come back as uint8 [rows, bytes_per_row].

    device may be a list (["cuda:0", "cuda:1"]): the model is placed across them in one load,
    split="layer" (consecutive layers per device, embeddings with the first, the head with the
    last) in proportion to tensor_split (one share per device) or to their free memory; each
    tensor comes back on its device. hoist.placement(path, devices) says where each would go.
    split="tensor" cuts each weight among the devices (tensor parallel: attention q/k/v, MLP
    gate/up, embeddings and head by rows; attention output and MLP down by columns; the rest
    whole on each), in proportion to tensor_split (default equal); split="replicate" puts every
    tensor on every device, each file byte read once. Both return one {name: tensor} per
    device, in the order given, each holding that device's part of every tensor (rows or
    columns of the weight, as narrow() would give them). split_plan (split="tensor"): the path
    of a JSON plan file of name pattern: cut ("*.q_proj.weight": "rows", "columns", "replicate"
    or a device index), tried in order before the built-in rules, as `hoist load --split-plan`.

    process_group (a torch.distributed group; rank mode, in a job that runs one process per
    device, torchrun's): this rank's part of split="tensor" (or every tensor, "replicate") on
    `device` ("cuda": the current GPU). The rank reads only its slices and 1/N of the tensors
    every rank holds whole, then the group all-gathers those (NCCL on GPUs, gloo on CPUs).
    Returns {name: tensor} of this rank's parts. Every rank must call it.

    names: the tensors to load (default all). progress: True for a bar on a terminal, or a
    callable(done_bytes, total_bytes) that returns False to cancel (CancelledError).
    options: threads, chunk_mib, staging_mib, stall_timeout (s), direct_io (bool: bypass the
    page cache), checksum. Ctrl-C raises KeyboardInterrupt and frees what the load allocated.
    """
    model = path if isinstance(path, Model) else Model(path)
    if isinstance(names, (str, bytes)):
        raise TypeError(f"names must be a list of tensor names, not a {type(names).__name__}")
    wanted = list(model.tensors) if names is None else list(names)
    for name in wanted:
        if not isinstance(name, str):
            raise TypeError(f"names must hold strings, not {type(name).__name__}")
        if name not in model.tensors:
            raise TensorNotFoundError(f"{model.path}: no tensor named '{name}'")
    placement = None
    if process_group is not None:
        return _load_rank(model, device, wanted, split, tensor_split, process_group, progress,
                          options, _plan_path(split_plan))
    if isinstance(device, (list, tuple)) and _native.split_places_parts(split):
        return _load_parts(model, device, wanted, split, tensor_split, progress, options,
                           _plan_path(split_plan))
    if isinstance(device, (list, tuple)):
        names_and_devices = [hoist_device(d) for d in device]
        hoist_name = ",".join(n for n, _ in names_and_devices)
        placement = _place(model, hoist_name, split, tensor_split, _plan_path(split_plan))
        torch_devices = [d for _, d in names_and_devices]
        device_of = {name: torch_devices[placement[model._indices[name]]] for name in wanted}
        torch_device = torch_devices[0]
    else:
        hoist_name, torch_device = hoist_device(device)
        device_of = {name: torch_device for name in wanted}
    out = {name: new_tensor(model, name, device_of[name]) for name in wanted}
    settle(device_of.values())
    address = {name: address_of(t) for name, t in out.items()}
    destinations = [(n, address[n]) for n in wanted if model.tensors[n].nbytes > 0]
    if destinations:
        fill(model, destinations, hoist_name, progress, placement, keep=out, **options)
    return out


def _part_shape(model, name, part):
    """The shape of a part (tensor, row_bytes, r0, r1, c0, c1, device) of tensor `name`: its
    rows of the load shape, or its columns in elements."""
    _, row_bytes, r0, r1, c0, c1, _ = part
    shape = list(model.load_shape(name))
    rows = r1 - r0
    if c1 - c0 == row_bytes and r0 == 0 and rows == model.tensors[name].nbytes // row_bytes:
        return tuple(shape)
    if not shape:
        return (c1 - c0,)
    element = row_bytes // shape[-1] if shape[-1] else 1
    if c1 - c0 != row_bytes:  # columns (of every row, or of a vector's one row)
        return tuple(shape[:-1] + [(c1 - c0) // element])
    inner = 1
    for d in shape[1:-1]:
        inner *= d
    if len(shape) >= 2 and r0 % inner == 0 and rows % inner == 0:
        return tuple([rows // inner] + shape[1:])
    return (rows, shape[-1])


def _plan_path(split_plan):
    """A plan file's path as the native calls take it ("" for none)."""
    if split_plan is None:
        return ""
    return _os.fspath(split_plan)


def _load_parts(model, devices, wanted, split, tensor_split, progress, options, split_plan):
    names_and_devices = [hoist_device(d) for d in devices]
    hoist_name = ",".join(n for n, _ in names_and_devices)
    torch_devices = [d for _, d in names_and_devices]
    shares = [] if tensor_split is None else [float(s) for s in tensor_split]
    names = list(model.tensors)
    keep = set(wanted)
    parts = [p for p in model._native.split(hoist_name, split, shares, split_plan)
             if names[p[0]] in keep]
    out = [{} for _ in devices]
    addresses = []
    for part in parts:
        name = names[part[0]]
        t = new_tensor(model, name, torch_devices[part[6]], _part_shape(model, name, part),
                       "part of tensor")
        out[part[6]][name] = t
        addresses.append((part, address_of(t)))
    for name in wanted:  # zero-byte tensors have no parts: empty on every device
        if model.tensors[name].nbytes == 0:
            for d, dev in enumerate(torch_devices):
                out[d][name] = new_tensor(model, name, dev)
    settle(torch_devices)
    _fill_parts(model, addresses, hoist_name, progress, options, f"split {split!r}")
    return out


def _parts_options(options, what):
    """native_options for a load of parts (`what`: "split 'tensor'", "rank mode"), which takes
    every option of a load but checksum: verify compares every part."""
    if options.get("checksum"):
        raise HoistError(f"{what} takes no checksum: verify compares every part",
                         "invalid argument")
    return native_options({k: v for k, v in options.items() if k != "checksum"}, _OPTIONS)


def _fill_parts(model, addresses, hoist_name, progress, options, what):
    """Loads parts [((tensor, row_bytes, r0, r1, c0, c1, device), address)] in one load."""
    arguments = _parts_options(options, what)
    if not addresses:
        return
    callback = _progress_callback(progress)
    try:
        model._native.load_parts(addresses, hoist_name, callback, **arguments)
    finally:
        if isinstance(callback, (ProgressBar, _TqdmBar)):
            callback.close()


class _HeldMemory:
    """`nbytes` bytes at `address` on `device` that a native load allocated and `owner` frees:
    torch's tensors over it (torch.as_tensor) hold this, so the memory lives while any does."""

    def __init__(self, owner, address, nbytes, device):
        self._owner = owner
        interface = {"shape": (nbytes,), "typestr": "|u1", "data": (address, False),
                     "version": 3, "strides": None}
        if getattr(device, "type", "cpu") == "cuda":
            self.__cuda_array_interface__ = dict(interface, stream=None)
        else:
            self.__array_interface__ = interface


def _held_tensor(owner, address, nbytes, device):
    """A uint8 tensor (numpy array without torch) over memory a native load allocated."""
    memory = _HeldMemory(owner, address, nbytes, device)
    torch = _torch()
    if torch is not None and getattr(device, "type", "cpu") == "cuda":
        return torch.as_tensor(memory, device=device)
    import numpy
    array = numpy.asarray(memory)
    return torch.from_numpy(array) if torch is not None else array


def _load_rank(model, device, wanted, split, tensor_split, group, progress, options, split_plan):
    """Rank mode through the engine's rank load: this rank's slices and its 1/N of the whole
    tensors read in one load into one block the engine allocates, the whole tensors then
    all-gathered through the group, the engine waiting for it under the stall timeout and
    Ctrl-C. Every tensor returned is a view of that block, which lives while any does."""
    torch = _torch()
    if torch is None:
        raise HoistError("rank mode needs torch (torch.distributed)", "invalid argument")
    import torch.distributed as dist
    if not _native.split_places_parts(split):
        raise HoistError(f"rank mode takes a split that places parts (tensor, replicate), not "
                         f"{split!r}", "invalid argument")
    if isinstance(device, (list, tuple)):
        raise TypeError("rank mode loads onto one device per process: give it as a string")
    if device == "cuda":
        device = f"cuda:{torch.cuda.current_device()}"
    hoist_name, torch_device = hoist_device(device)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    if rank < 0:
        raise HoistError(f"this process (rank {dist.get_rank()} of the job) is not in the process "
                         f"group given: rank mode loads each member's part, and every member "
                         f"calls load_file with the group", "invalid argument")
    arguments = _parts_options(options, "rank mode")
    shares = [] if tensor_split is None else [float(s) for s in tensor_split]

    def start(block, chunk):
        flat = _held_tensor(None, block, chunk * world, torch_device)  # the engine holds it
        chunks = list(flat.split(chunk))
        if dist.get_backend(group) != "gloo" and hasattr(dist, "all_gather_into_tensor"):
            return dist.all_gather_into_tensor(flat, chunks[rank], group=group, async_op=True)
        # gloo gathers into a list, from a buffer of its own
        return dist.all_gather(chunks, chunks[rank].clone(), group=group, async_op=True)

    def poll(work):
        if not work.is_completed():
            return False
        # A collective that completed may have failed (a peer gone, the group aborted or timed
        # out): wait() raises its error, where is_completed() alone would count it as done.
        work.wait()
        return True

    callback = _progress_callback(progress)
    names_option = [] if len(wanted) == len(model.tensors) else wanted
    try:
        loaded = model._native.load_rank(split, rank, world, hoist_name, shares, split_plan,
                                         start, poll, callback, names=names_option, **arguments)
    except (HoistError, KeyboardInterrupt):
        raise
    except Exception as e:  # the group's own error (gloo, NCCL): no tensor comes of it
        raise DeviceError(f"rank {rank} of {world}: the exchange through the process group "
                          f"failed ({type(e).__name__}: {e}); no rank returns tensors from it",
                          "device error") from e
    finally:
        if isinstance(callback, (ProgressBar, _TqdmBar)):
            callback.close()
    names = list(model.tensors)
    out = {}
    for part, address in loaded.parts():
        name = names[part[0]]
        nbytes = (part[3] - part[2]) * (part[5] - part[4])
        if nbytes == 0:
            continue
        view = _held_tensor(loaded, address, nbytes, torch_device)
        out[name] = view.view(torch_dtype(model, name)).view(_part_shape(model, name, part))
    for name in wanted:
        if model.tensors[name].nbytes == 0:
            out[name] = new_tensor(model, name, torch_device)
    return out


def _place(model, hoist_names, split, tensor_split, split_plan):
    if _native.split_places_parts(split):
        raise HoistError(f"split {split!r} places parts, not whole tensors", "invalid argument")
    shares = [] if tensor_split is None else [float(s) for s in tensor_split]
    return model._native.place(hoist_names, shares, split_plan)


def placement(path, devices, split="layer", tensor_split=None, split_plan=None):
    """Where load_file(path, device=devices, split=..., tensor_split=..., split_plan=...) would
    put each tensor; nothing is allocated. split="layer": {name: device}; "tensor" or
    "replicate": {name: [device, ...]}, the devices that get a part of it, in order."""
    model = path if isinstance(path, Model) else Model(path)
    names = [hoist_device(d)[0] for d in devices]
    if _native.split_places_parts(split):
        shares = [] if tensor_split is None else [float(s) for s in tensor_split]
        tensors = list(model.tensors)
        out = {name: [] for name in tensors}
        for part in model._native.split(",".join(names), split, shares, _plan_path(split_plan)):
            out[tensors[part[0]]].append(devices[part[6]])
        return out
    device_of = _place(model, ",".join(names), split, tensor_split, _plan_path(split_plan))
    return {name: devices[device_of[i]] for i, name in enumerate(model.tensors)}


def attach(name, device=None, share=False, timeout=10.0):
    """The tensors of a model `hoist serve` holds: {name: tensor} on the holder's device(s),
    bit-equal to a load of its file, in milliseconds. name: the name it is held under (hoist
    serve --list), or its holder's socket path. By default each process gets a private copy,
    made within the device from the held memory; share=True gives the held memory itself (one
    copy for every process attached): on the host a write lands in this process's own pages,
    on a GPU the memory is read-only and a kernel that writes it fails. device: one of the holder's
    devices (default all). What is attached stays valid after the holder exits; its memory goes
    with the last tensor. Block-quantized GGUF tensors come back as their bytes (uint8)."""
    return attach_with_dtypes(name, device, share, timeout)[0]


def attach_with_dtypes(name, device=None, share=False, timeout=10.0):
    """attach's tensors, and {name: the format's dtype ("BF16")} of each."""
    if not isinstance(name, str) or not name:
        raise TypeError("name must be the name a model is held under, or its socket path")
    hoist_name = "" if device is None else hoist_device(device)[0]
    attached = _native.Attached(name, hoist_name, bool(share), float(timeout))
    device_names = _json.loads(attached.report).get("device", "").split(", ")
    torch_devices = [_torch_device_of(n) for n in device_names]
    torch = _torch()
    # Tensors on a device not asked for are not attached (device index -1).
    listed = [(t, b) for t, b in zip(attached.tensors(), attached.blocks()) if t[5] >= 0]
    # One tensor over each device's memory and views of it: one wrapping per tensor would cost
    # more than the attach itself (tens of microseconds each, hundreds of tensors).
    spans = {}
    for (_, _, _, nbytes, address, index), _ in listed:
        if nbytes:
            low, high = spans.get(index, (address, address + nbytes))
            spans[index] = (min(low, address), max(high, address + nbytes))
    memory = {index: (low, _held_tensor(attached, low, high - low, _where(torch_devices, index)))
              for index, (low, high) in spans.items()}
    out, dtypes = {}, {}
    for (tensor, dtype, shape, nbytes, address, index), block in listed:
        shape = _load_shape(attached.format, dtype, tuple(shape), nbytes, block)
        if nbytes:
            low, flat = memory[index]
            flat = flat[address - low:address - low + nbytes]
        elif torch is not None:
            flat = torch.empty(0, dtype=torch.uint8, device=_where(torch_devices, index))
        else:
            import numpy
            flat = numpy.empty(0, dtype="uint8")
        quantized = _is_quantized(attached.format, dtype, block)
        out[tensor] = _typed(flat, None if quantized else dtype, shape, torch)
        dtypes[tensor] = dtype
    return out, dtypes


def _where(torch_devices, index):
    return torch_devices[index] if 0 <= index < len(torch_devices) else torch_devices[0]


def held_models():
    """What this user's holders (hoist serve) hold: [{"name", "model" (absolute path or URL),
    "socket", "pid", "devices", "bytes", "tensors"}] (a holder gone: "stale": True)."""
    return _json.loads(_native.held_models())["held"]


def _torch_device_of(hoist_name):
    """The torch device (or "cpu" without torch) of a device hoist names."""
    torch = _torch()
    if hoist_name.split(":")[0] in ("cuda", "hip", "gpu") and torch is not None:
        return torch.device("cuda", int(hoist_name.split(":")[1]))
    return torch.device("cpu") if torch is not None else "cpu"


def _typed(flat, dtype, shape, torch):
    """A uint8 tensor (or numpy array) of a tensor's bytes viewed as `dtype` (None: as bytes)
    in `shape`."""
    if dtype is None or dtype not in _DTYPES:
        return flat.reshape(shape)
    if torch is None:
        return flat.view(_NUMPY_DTYPES[dtype]).reshape(shape)
    return flat.view(getattr(torch, _TORCH_DTYPES[dtype])).reshape(shape)


def release_cached_memory():
    """Unpins and frees the pinned staging memory (about 96 MiB) that GPU loads keep so that
    the next load in the process, a model's next shard say, starts without pinning any; and
    the pinned slabs that hoist.safetensors' CPU reads keep for reuse."""
    _native.release_cached_memory()


