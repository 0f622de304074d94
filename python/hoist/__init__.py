"""hoist: load model weights (GGUF, safetensors, sharded sets) into GPU or host memory at the
speed of the machine's slowest link.

    import hoist
    tensors = hoist.load_file("model.safetensors", device="cuda:0", progress=True)
    model = hoist.open("model.gguf"); model.tensors["token_embd.weight"].dtype  # "Q4_K"
    hoist.torch.load_into(module, "model.safetensors")  # fill parameters in place

Torch is optional: without it, host loads return numpy arrays.
"""
import importlib as _importlib

# What the package offers is built in _engine (the only caller of the native extension) and
# _stream; hoist.torch, hoist.gguf, hoist.safetensors and hoist.transformers are its submodules.
from . import _engine
from ._engine import (Model, TensorInfo, attach, fill, held_models, hoist_device, load_file, open,
                      placement, release_cached_memory, torch_dtype)
from ._errors import (CancelledError, DeviceError, HoistError, InvalidModelError,
                      ModelChangedError, NotFoundError, StalledError, TensorNotFoundError,
                      UnavailableError)
from ._progress import ProgressBar
from ._stream import iter_tensors

__all__ = ["open", "load_file", "attach", "held_models", "placement", "iter_tensors",
           "release_cached_memory", "Model",
           "TensorInfo", "HoistError", "InvalidModelError", "StalledError", "DeviceError",
           "CancelledError", "NotFoundError", "TensorNotFoundError", "UnavailableError",
           "ModelChangedError",
           # for hoist.torch's kind of caller: allocate, then fill
           "fill", "hoist_device", "torch_dtype", "ProgressBar"]
__version__ = _engine.VERSION  # CMakeLists.txt's project(VERSION), through hoist_version()

# hoist.gguf and hoist.torch (load_into; it imports torch lazily): importing a submodule sets it
# on the package, without a module-level name `torch` that the functions' own would shadow.
for _submodule in ("gguf", "torch"):
    _importlib.import_module(f"{__name__}.{_submodule}")
