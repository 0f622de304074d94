"""hoist.iter_tensors: a model's tensors as a stream of (name, tensor), the shape a framework's
weight loader consumes, with the memory read ahead bounded."""
import os

from ._errors import CancelledError, HoistError, TensorNotFoundError

_STREAM_OPTIONS = ("threads", "chunk_mib", "staging_mib", "stall_timeout", "direct_io")


def _models(paths):
    from . import Model
    if isinstance(paths, (str, bytes, os.PathLike, Model)):
        paths = [paths]
    return [p if isinstance(p, Model) else Model(p) for p in paths]


def _wanted(models, names):
    """[(model, [names in file order])], every name in `names` found in some model."""
    wanted = None if names is None else set(names)
    found = set()
    plan = []
    for model in models:
        order = sorted((n for n in model.tensors if wanted is None or n in wanted),
                       key=lambda n: (model.tensors[n].file, model.tensors[n].offset))
        found.update(order)
        if order:
            plan.append((model, order))
    if wanted is not None and wanted - found:
        missing = sorted(wanted - found)[0]
        raise TensorNotFoundError(f"no tensor named '{missing}' in {', '.join(m.path for m in models)}")
    return plan


def iter_tensors(paths, device="cpu", names=None, ahead_mib=1024, progress=None, **options):
    """Yields (name, tensor) for every tensor of the models at `paths` (one path or several:
    the shards of a model), each as soon as it has landed, in about file order, so that reads
    stay sequential.

    One load per model runs through hoist's engine while the caller consumes: memory is handed
    to it in file order as the stream is consumed, so what is held beyond the tensors already
    yielded (handed out, not yet yielded) stays within ahead_mib MiB, or one tensor when a
    tensor is larger. names and progress are load_file's; options: threads, chunk_mib,
    staging_mib, stall_timeout, direct_io. Closing the iterator early (break) cancels the load
    and frees what it had not yielded.
    """
    from . import _keep_if_stalled, _mib_bytes, _progress_callback, hoist_device, _torch, \
        torch_dtype
    from . import _NUMPY_DTYPES
    unknown = sorted(set(options) - set(_STREAM_OPTIONS))
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)}: expected "
                        f"{', '.join(_STREAM_OPTIONS)}")
    if isinstance(names, (str, bytes)):
        raise TypeError(f"names must be a list of tensor names, not a {type(names).__name__}")
    if names is not None:
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"names must hold strings, not {type(name).__name__}")
    ahead = _mib_bytes({"ahead_mib": ahead_mib}, "ahead_mib")
    if ahead <= 0:
        raise HoistError("ahead_mib must be above 0", "invalid argument")
    models = _models(paths)
    plan = _wanted(models, names)
    hoist_name, torch_device = hoist_device(device)
    torch = _torch()
    total = sum(m.tensors[n].nbytes for m, order in plan for n in order)
    report = _progress_callback(progress)
    native_options = dict(
        threads=options.get("threads", 0),
        chunk_bytes=_mib_bytes(options, "chunk_mib"),
        staging_bytes=_mib_bytes(options, "staging_mib"),
        stall_timeout_s=float(options.get("stall_timeout", 0.0)),
        direct_io=bool(options.get("direct_io", False)))

    def allocate(model, name):
        if torch is not None:
            return torch.empty(model.load_shape(name), dtype=torch_dtype(model, name),
                               device=torch_device)
        import numpy
        dtype = "uint8" if model.is_quantized(name) else _NUMPY_DTYPES[model.tensors[name].dtype]
        return numpy.empty(model.load_shape(name), dtype=dtype)

    def address(tensor):
        return tensor.data_ptr() if torch is not None else tensor.ctypes.data

    done = 0
    try:
        for model, order in plan:
            # Zero-byte tensors need no memory: they are made when the load reports them.
            order_out = [n for n in order if model.tensors[n].nbytes > 0]
            indices = [model._indices[n] for n in order_out]
            names_by_index = {model._indices[n]: n for n in order}
            stream = model._stream(order, hoist_name, **native_options)
            try:
                handed = {}  # index -> tensor handed to the load, not yet yielded
                held = 0
                next_out = 0
                while True:
                    # Hand out memory in file order while the bound allows (one tensor always:
                    # the load cannot move without it).
                    batch = []
                    while next_out < len(order_out):
                        name = order_out[next_out]
                        nbytes = model.tensors[name].nbytes
                        if held > 0 and held + nbytes > ahead:
                            break
                        try:
                            tensor = allocate(model, name)
                        except RuntimeError as e:  # torch.cuda.OutOfMemoryError among them
                            from ._errors import DeviceError
                            raise DeviceError(f"{model.path}: cannot allocate tensor '{name}' on "
                                              f"{torch_device}: {e}", "device error") from e
                        handed[indices[next_out]] = tensor
                        held += nbytes
                        batch.append((indices[next_out], address(tensor)))
                        next_out += 1
                    if batch:
                        if torch is not None and torch_device.type == "cuda":
                            # Memory the caching allocator hands back may still be in use by
                            # work queued on torch's stream; hoist copies on its own streams.
                            torch.cuda.current_stream(torch_device).synchronize()
                        stream.provide(batch)
                    try:
                        landed = stream.next()
                    except HoistError as e:
                        _keep_if_stalled(e, handed)
                        raise
                    if landed is None:
                        break
                    name = names_by_index[landed]
                    tensor = handed.pop(landed) if landed in handed else allocate(model, name)
                    nbytes = model.tensors[name].nbytes
                    held -= nbytes
                    done += nbytes
                    if report is not None and report(done, total) is False:
                        raise CancelledError("cancelled by the progress callback", "cancelled")
                    yield name, tensor
                    del tensor
            finally:
                stream.close()
    finally:
        if hasattr(report, "close"):
            report.close()
