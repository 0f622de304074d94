"""hoist.iter_tensors: a model's tensors as a stream of (name, tensor), the shape a framework's
weight loader consumes, with the memory read ahead bounded."""
import collections
import concurrent.futures
import os

from ._errors import HoistError, TensorNotFoundError

# Loads at once, and batches per ahead_mib: two loads of half the bound each streamed fastest
# within the bound on the H200 (docs/PYTHON.md; scripts/device/python_stream.py measures them).
_LOADS_IN_FLIGHT = 2
_BATCHES_PER_BOUND = 2


def _models(paths):
    from . import Model
    if isinstance(paths, (str, bytes, os.PathLike, Model)):
        paths = [paths]
    return [p if isinstance(p, Model) else Model(p) for p in paths]


def _batches(models, names, batch_bytes):
    """[(model, [names])]: each model's wanted tensors in file order, cut into batches of at
    most batch_bytes (at least one tensor each)."""
    wanted = None if names is None else set(names)
    found = set()
    batches = []
    for model in models:
        order = sorted(model.tensors, key=lambda n: (model.tensors[n].file, model.tensors[n].offset))
        batch, size = [], 0
        for name in order:
            if wanted is not None and name not in wanted:
                continue
            found.add(name)
            nbytes = model.tensors[name].nbytes
            if batch and size + nbytes > batch_bytes:
                batches.append((model, batch))
                batch, size = [], 0
            batch.append(name)
            size += nbytes
        if batch:
            batches.append((model, batch))
    if wanted is not None and wanted - found:
        missing = sorted(wanted - found)[0]
        raise TensorNotFoundError(f"no tensor named '{missing}' in {', '.join(m.path for m in models)}")
    return batches


def iter_tensors(paths, device="cpu", names=None, ahead_mib=1024, progress=None, **options):
    """Yields (name, tensor) for every tensor of the models at `paths` (one path or several:
    the shards of a model), in file order, so that reads stay sequential.

    Tensors are loaded in batches of half of ahead_mib by hoist's engine, the next while the
    caller consumes the one before: what is held beyond the tensors already yielded (loaded or
    being loaded, not yet yielded) stays within ahead_mib MiB, whatever the model's size. names,
    progress and options are load_file's. Closing the iterator early (break) waits for the
    loads in flight and frees what they read.
    """
    from . import _mib_bytes, _progress_callback, load_file
    models = _models(paths)
    if isinstance(names, (str, bytes)):
        raise TypeError(f"names must be a list of tensor names, not a {type(names).__name__}")
    ahead = _mib_bytes({"ahead_mib": ahead_mib}, "ahead_mib")
    if ahead <= 0:
        raise HoistError("ahead_mib must be above 0", "invalid argument")
    # The batches fit in the bound: one being yielded, the others loading or queued.
    batches = _batches(models, names, max(ahead // _BATCHES_PER_BOUND, 1))
    sizes = [sum(m.tensors[n].nbytes for n in b) for m, b in batches]
    total = sum(sizes)
    report = _progress_callback(progress)
    done = 0
    pending = collections.deque()  # (future, index)
    held = 0
    next_batch = 0
    # Several loads at once: each load's fixed cost (opening, planning, starting its readers)
    # then overlaps another's streaming, so the link stays busy with batches this small.
    with concurrent.futures.ThreadPoolExecutor(max_workers=_LOADS_IN_FLIGHT,
                                               thread_name_prefix="hoist") as pool:
        def fill():
            nonlocal next_batch, held
            while next_batch < len(batches) and len(pending) < _LOADS_IN_FLIGHT and (
                    not pending or held + sizes[next_batch] <= ahead):
                model, batch = batches[next_batch]
                pending.append(pool.submit(load_file, model, device, batch, None, **options))
                held += sizes[next_batch]
                next_batch += 1

        try:
            fill()
            while pending:
                loaded = pending.popleft().result()
                for name in list(loaded):
                    tensor = loaded.pop(name)
                    nbytes = tensor.element_size() * tensor.numel() if hasattr(tensor, "element_size") \
                        else tensor.nbytes
                    held -= nbytes
                    done += nbytes
                    fill()
                    if report is not None and report(done, total) is False:
                        from ._errors import CancelledError
                        raise CancelledError("cancelled by the progress callback", "cancelled")
                    yield name, tensor
        finally:
            for future in pending:
                future.cancel()
            # Loads already running finish (the pool's exit waits); their tensors are dropped.
            pending.clear()
            if hasattr(report, "close"):
                report.close()
