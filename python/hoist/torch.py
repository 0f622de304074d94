"""Loading straight into a torch model's existing parameters and buffers.

    import hoist.torch
    result = hoist.torch.load_into(model, "model.safetensors")

Every tensor is copied from the file into the storage of the parameter or buffer with the
same name, on whatever device it lives: no intermediate tensors, so the weights never exist
twice in GPU memory.
"""
from typing import List, NamedTuple

from . import _engine
from ._errors import HoistError


class LoadIntoResult(NamedTuple):
    loaded: List[str]
    missing_keys: List[str]      # in the module, not in the file
    unexpected_keys: List[str]   # in the file, not in the module
    mismatched: List[str]        # in both, with a different shape or dtype (or not contiguous)


def load_into(module_or_state_dict, path, strict=True, progress=None, **options):
    """Fills the module's parameters and buffers (or a state dict's tensors) from the file.

    Names match exactly. With strict=True any missing, unexpected or mismatched name raises
    HoistError listing them all, before a byte is copied; with strict=False the matching
    tensors are filled and the result lists the rest. progress and options as in
    hoist.load_file. Returns a LoadIntoResult."""
    import torch

    model = path if isinstance(path, _engine.Model) else _engine.Model(path)
    if isinstance(module_or_state_dict, torch.nn.Module):
        # state_dict() shares storage with the parameters and buffers it names.
        state = module_or_state_dict.state_dict(keep_vars=True)
    else:
        state = dict(module_or_state_dict)
    missing = [k for k in state if k not in model.tensors]
    unexpected = [k for k in model.tensors if k not in state]
    mismatched, problems, matched = [], [], []
    for name in model.tensors:
        if name not in state:
            continue
        target = state[name]
        want_shape = tuple(model.load_shape(name))
        want_dtype = _engine.torch_dtype(model, name)
        if tuple(target.shape) != want_shape or target.dtype != want_dtype:
            mismatched.append(name)
            problems.append(f"'{name}': file has {model.tensors[name].dtype} {list(want_shape)}, "
                            f"module has {str(target.dtype).replace('torch.', '')} "
                            f"{list(target.shape)}")
        elif not target.is_contiguous():
            mismatched.append(name)
            problems.append(f"'{name}': the module's tensor is not contiguous")
        else:
            matched.append(name)
    if strict and (missing or unexpected or mismatched):
        lines = [f"{model.path}: load_into found differences between the file and the module:"]
        lines += [f"  missing from the file: '{k}'" for k in missing]
        lines += [f"  not in the module: '{k}'" for k in unexpected]
        lines += [f"  mismatched {p}" for p in problems]
        raise HoistError("\n".join(lines), "invalid argument")

    # One load per device the destinations live on.
    by_device = {}
    for name in matched:
        tensor = state[name]
        if model.tensors[name].nbytes == 0:
            continue
        by_device.setdefault(tensor.device, []).append((name, tensor.data_ptr()))
    with torch.no_grad():
        for device, destinations in by_device.items():
            hoist_name, torch_device = _engine.hoist_device(device)
            if torch_device.type == "cuda":
                torch.cuda.current_stream(torch_device).synchronize()
            _engine.fill(model, destinations, hoist_name, progress, **options)
    return LoadIntoResult(matched, missing, unexpected, mismatched)
