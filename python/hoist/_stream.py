"""hoist.iter_tensors: a model's tensors as a stream of (name, tensor), the shape a framework's
weight loader consumes, with the memory read ahead bounded."""
import os

from ._engine import (LOAD_OPTIONS, Model, _keep_if_stalled, _mib_bytes, _progress_callback,
                      address_of, hoist_device, native_options, new_tensor, settle)
from ._errors import CancelledError, HoistError, TensorNotFoundError


def _models(paths):
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
    arguments = native_options(options, LOAD_OPTIONS)
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
    total = sum(m.tensors[n].nbytes for m, order in plan for n in order)
    report = _progress_callback(progress)
    done = 0
    try:
        for model, order in plan:
            # Zero-byte tensors need no memory: they are made when the load reports them.
            order_out = [n for n in order if model.tensors[n].nbytes > 0]
            indices = [model._indices[n] for n in order_out]
            names_by_index = {model._indices[n]: n for n in order}
            stream = model._stream(order, hoist_name, **arguments)
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
                        tensor = new_tensor(model, name, torch_device)
                        handed[indices[next_out]] = tensor
                        held += nbytes
                        batch.append((indices[next_out], address_of(tensor)))
                        next_out += 1
                    if batch:
                        settle([torch_device])
                        stream.provide(batch)
                    try:
                        landed = stream.next()
                    except HoistError as e:
                        _keep_if_stalled(e, handed)
                        raise
                    if landed is None:
                        break
                    name = names_by_index[landed]
                    tensor = (handed.pop(landed) if landed in handed
                              else new_tensor(model, name, torch_device))
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
