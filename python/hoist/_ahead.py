"""Read-ahead of whole tensors for one open file, shared by the threads that ask for them.

A framework that opens a file with safe_open(device="cpu") asks for its tensors one at a time,
from several threads (transformers: four workers, in natural key order; vLLM: one thread, in
keys() order; accelerate's disk offload: one tensor, then close). Each answer must be a tensor the
caller owns. This reads them through hoist's native engine before they are asked for, in the
order the requests follow, into memory the consumer can hand to a DMA engine as it is (pinned,
when a GPU is present), so that the consumer's own `.to("cuda")` runs at the link's rate.

Rules, each for a reason:
- The first request reads only the tensor asked for: a caller that opens, takes one tensor and
  closes (accelerate's offload, PEFT) must not pay for a batch it never uses.
- Read-ahead starts with the second request, in the order that best explains the requests so far
  (file offsets, keys() or natural key order), from the furthest request on; batches grow while
  requests keep landing on what was read ahead.
- What is read but not yet asked for is bounded (ahead_bytes); a request outside it is read at
  once on the asking thread, beside the read-ahead, never queued behind it.
- Tensors handed out are the caller's, views of pinned slabs (PinnedPool) that return to the
  pool once the caller has freed every view of one. What the pool pins is bounded; past the
  bound new tensors are pageable, so a consumer that keeps every tensor on the CPU never makes
  hoist wait or pin the machine's memory away.
- A batch that fails is not reported by the read-ahead: the request that wanted one of its
  tensors reads that tensor itself and gets the error with its own file, offset and tensor.

Thread safety: every method may be called from any thread; one condition guards the state.
"""
import os
import threading
import weakref

from ._errors import HoistError

_FIRST_BATCH_BYTES = 64 << 20
_LARGEST_BATCH_BYTES = 256 << 20


def _env_mib(name, default_mib):
    value = os.environ.get(name)
    if value is None or value == "":
        return default_mib << 20
    try:
        mib = float(value)
    except ValueError:
        raise HoistError(f"{name}={value!r}: expected a number of MiB", "invalid argument") from None
    if not 0 <= mib <= (1 << 30):
        raise HoistError(f"{name}={value!r}: expected 0 to {1 << 30} MiB", "invalid argument")
    return int(mib * (1 << 20))


def natural_key(name):
    """transformers' order of checkpoint keys: dot-separated parts, numbers compared as numbers
    ("layers.6" before "layers.10")."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in name.split(".")]


def pin_host_memory():
    """Whether host tensors are allocated pinned: HOIST_PIN=on|off|auto (auto: when torch sees a
    GPU, CUDA or ROCm)."""
    mode = os.environ.get("HOIST_PIN", "auto").lower()
    if mode in ("0", "off", "false", "no"):
        return False
    try:
        import torch
    except ImportError:
        return False
    if mode in ("1", "on", "true", "yes"):
        return True
    return bool(torch.cuda.is_available())


_ALIGN = 256  # every view in a slab starts here: any dtype can view it, DMA engines like it
_SLAB = 256 << 20


def _register(address, nbytes):
    """Pins host memory in place for the GPU (cudaHostRegister through torch); False if not."""
    import torch
    try:
        return int(torch.cuda.cudart().cudaHostRegister(address, nbytes, 0)) == 0
    except (AttributeError, RuntimeError):
        return False


def _settle_devices():
    """Waits for every GPU's queued work: a consumer's non_blocking copy out of a slab that torch
    does not know (it records no event for it) must end before the slab is reused."""
    import torch
    if torch.cuda.is_initialized():
        for index in range(torch.cuda.device_count()):
            torch.cuda.synchronize(index)


class PinnedPool:
    """Host memory pinned once and reused, in slabs of 256 MiB (or one slab the size of a larger
    batch): pinning fresh memory (cudaHostAlloc, about 2.5 GB/s on the H200 machine) costs more
    than reading a model's bytes into it, so slabs are pinned in place (cudaHostRegister) and
    handed out again once every tensor viewing one has been freed. What the pool pins is bounded
    by HOIST_PINNED_MIB (default 8192); past it, callers get pageable memory. Slabs stay pinned
    until release() or the process ends. Thread-safe."""

    def __init__(self):
        self._lock = threading.RLock()  # a slab freed by GC inside take() comes back re-entrantly
        self._free = {}     # slab size -> [numpy buffers] ready to hand out
        self._pinned = 0    # bytes pinned by the pool
        self.limit = _env_mib("HOIST_PINNED_MIB", 8192)

    def take(self, nbytes):
        """A uint8 numpy array of nbytes over a pinned slab, the slab's while the array or any
        view of it lives; None when the bound is reached or memory cannot be pinned."""
        import numpy
        size = max(_SLAB, (nbytes + _SLAB - 1) // _SLAB * _SLAB)
        with self._lock:
            free = self._free.get(size)
            buffer = free.pop() if free else None
            if buffer is None:
                if self._pinned + size > self.limit:
                    return None
                buffer = numpy.empty(size, dtype=numpy.uint8)
                if not _register(buffer.ctypes.data, size):
                    return None
                self._pinned += size
        view = numpy.frombuffer(buffer, dtype=numpy.uint8, count=nbytes)
        # Not at exit: the slabs go with the process, and the GPUs may be gone by then.
        weakref.finalize(view, self._give_back, size, buffer).atexit = False
        return view

    def _give_back(self, size, buffer):
        _settle_devices()
        with self._lock:
            self._free.setdefault(size, []).append(buffer)

    @property
    def pinned_bytes(self):
        with self._lock:
            return self._pinned

    def release(self):
        """Unpins and frees the slabs no tensor uses."""
        import torch
        with self._lock:
            for size, buffers in self._free.items():
                for buffer in buffers:
                    torch.cuda.cudart().cudaHostUnregister(buffer.ctypes.data)
                    self._pinned -= size
            self._free.clear()


POOL = PinnedPool()


def host_tensors(specs, pinned):
    """torch.empty on the CPU for each (shape, dtype) in specs: views of one pinned slab of
    POOL when pinned and the pool has room, else pageable tensors."""
    import torch
    sizes = []
    for shape, dtype in specs:
        n = torch._utils._element_size(dtype)
        for d in shape:
            n *= d
        sizes.append(n)
    total = sum((n + _ALIGN - 1) // _ALIGN * _ALIGN for n in sizes)
    owner = POOL.take(total) if pinned and total else None
    if owner is None:
        return [torch.empty(shape, dtype=dtype) for shape, dtype in specs]
    slab = torch.from_numpy(owner)
    out, at = [], 0
    for (shape, dtype), n in zip(specs, sizes):
        out.append(slab[at:at + n].view(dtype).view(shape) if n else torch.empty(shape, dtype=dtype))
        at += (n + _ALIGN - 1) // _ALIGN * _ALIGN
    return out


def host_tensor(shape, dtype, pinned):
    """One tensor of host_tensors."""
    return host_tensors([(shape, dtype)], pinned)[0]


class ReadAhead:
    """Whole tensors of one model, read ahead for the requests of any number of threads.

    names: the tensors in file order; nbytes: {name: bytes}; read(names) -> {name: tensor}
    loads them in one native load (called without the lock, from the asking thread or the
    read-ahead thread); ahead_bytes bounds what is read and not yet asked for."""

    def __init__(self, names, nbytes, read, ahead_bytes=None):
        self._read = read
        self._nbytes = nbytes
        self._orders = {"offset": list(names), "natural": sorted(names, key=natural_key),
                        "keys": sorted(names)}
        self._position = {k: {n: i for i, n in enumerate(o)} for k, o in self._orders.items()}
        self._score = dict.fromkeys(self._orders, 0)
        self._order = "offset"
        self._ahead_limit = _env_mib("HOIST_AHEAD_MIB", 1024) if ahead_bytes is None else ahead_bytes
        self._cv = threading.Condition()
        self._ready = {}        # read, not yet asked for
        self._reading = set()   # in a batch being read by the read-ahead thread
        self._taken = set()     # asked for (handed out, or being read by the asking thread)
        self._ahead = 0         # bytes in _ready and _reading
        self._batch = _FIRST_BATCH_BYTES
        self._last = None       # the previous request
        self._furthest = -1     # the furthest request's position in the chosen order
        self._cursor = 0        # where the read-ahead looks next, in the chosen order
        self._requests = 0
        self._stopped = False   # closed, or a batch failed
        self._thread = None
        self.stats = {"hits": 0, "waits": 0, "misses": 0, "batches": 0, "read_bytes": 0}

    def get(self, name):
        """The tensor `name`, the caller's to keep; raises what its read raised."""
        with self._cv:
            self._learn(name)
            waited = False
            while name in self._reading:
                waited = True
                self._cv.wait()
            tensor = self._ready.pop(name, None)
            if tensor is not None:
                self._ahead -= self._nbytes[name]
                self.stats["waits" if waited else "hits"] += 1
                self._batch = min(2 * self._batch, _LARGEST_BATCH_BYTES)
                self._cv.notify_all()
                return tensor
            self._taken.add(name)
            self.stats["misses"] += 1
            self._cv.notify_all()
        try:
            return self._read([name])[name]
        except BaseException:
            with self._cv:
                self._taken.discard(name)  # asked again later, it is read again
            raise

    def close(self):
        """Stops the read-ahead and drops what it read; waits for a batch being read."""
        with self._cv:
            self._stopped = True
            self._ready.clear()
            self._ahead = 0
            self._cv.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    # The order: each request after the first scores the orders in which it follows the
    # previous one closely (several threads reorder neighbours a little).
    def _learn(self, name):
        self._requests += 1
        if self._last is not None:
            for order, position in self._position.items():
                step = position[name] - position[self._last]
                if step != 0 and abs(step) <= 8:
                    self._score[order] += 1
            best = max(self._orders, key=lambda o: (self._score[o], o == "natural", o == "offset"))
            if best != self._order:
                self._order = best
                self._furthest = -1
        self._last = name
        at = self._position[self._order][name]
        if at > self._furthest:
            self._furthest = at
            self._cursor = at + 1
        if self._requests >= 2 and self._thread is None and not self._stopped:
            self._thread = threading.Thread(target=self._run, name="hoist-read-ahead", daemon=True)
            self._thread.start()

    def _next_batch(self):
        """Names to read next in the chosen order, marked as being read; [] when none is due."""
        order = self._orders[self._order]
        room = self._ahead_limit - self._ahead
        budget = min(self._batch, room)
        batch, size = [], 0
        while self._cursor < len(order):
            name = order[self._cursor]
            if name in self._taken or name in self._ready or name in self._reading:
                self._cursor += 1
                continue
            n = self._nbytes[name]
            # One tensor larger than the bound is read when nothing else waits.
            if batch and size + n > budget or not batch and n > room and self._ahead:
                break
            batch.append(name)
            size += n
            self._cursor += 1
        for name in batch:
            self._reading.add(name)
        self._ahead += size
        return batch

    def _run(self):
        while True:
            with self._cv:
                batch = []
                while not self._stopped:
                    batch = self._next_batch()
                    if batch:
                        break
                    self._cv.wait()
                if self._stopped:
                    self._thread = None
                    return
            try:
                tensors = self._read(batch)
            except BaseException:  # noqa: B036 (the asking thread reads it again and raises)
                tensors = None
            with self._cv:
                self._reading.difference_update(batch)
                self.stats["batches"] += 1
                if tensors is None or self._stopped:
                    self._ahead -= sum(self._nbytes[n] for n in batch)
                    if tensors is None:
                        self._stopped = True  # reads fail: leave them to the requests
                else:
                    self._ready.update(tensors)
                    self.stats["read_bytes"] += sum(self._nbytes[n] for n in batch)
                self._cv.notify_all()
