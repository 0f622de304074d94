"""hoist.transformers: transformers' from_pretrained with its checkpoint streamed by hoist
straight to the devices the device_map names, overlapped with transformers' own work.

    import hoist.transformers
    hoist.transformers.enable()
    model = AutoModelForCausalLM.from_pretrained(path, device_map="cuda:0", dtype=torch.bfloat16)

hoist.safetensors.patch() does the same (quietly) once transformers is imported, unless called
with transformers=False.

transformers (5.x) loads a safetensors checkpoint by opening every shard, taking a lazy slice of
every tensor, and having four worker threads materialize them (`slice[...]`, then `.to(device,
dtype)`) into the model's parameters, with its renamings, conversions and dtype casts on the
way. enable() wraps `PreTrainedModel._load_pretrained_model` so that, where it applies, those lazy
values are hoist's: the first one asked for starts one hoist stream per target device (after
transformers has warmed its allocator), each key going where the device_map's longest matching
prefix says, and each `[...]` waits for its tensor to land. The tensor handed over becomes the
parameter (no second copy on the device); transformers' own steps run on it unchanged.

It applies when the checkpoint is safetensors files, no state_dict was given, the device_map
names only "cpu" and CUDA devices (any number of them), and neither DeepSpeed ZeRO-3, a quantizer
nor a tensor-parallel mesh is in play. Elsewhere (disk offload among them) from_pretrained runs
as it would without hoist, after one warning line that says why (none under patch(), whose
safetensors then serves transformers). disable() restores transformers.

Measured in docs/PYTHON.md (bench/frameworks/run_from_pretrained.sh).
"""
import inspect
import threading
import warnings

import os

from ._engine import attach_with_dtypes, held_models
from ._engine import open as open_model
from ._errors import HoistError
from ._stream import iter_tensors

__all__ = ["enable", "disable", "enabled"]

_state = {"original": None, "quiet": False, "share": False}


def enabled():
    """Whether enable() is in effect."""
    return _state["original"] is not None


def enable(share=False):
    """Makes from_pretrained stream safetensors checkpoints through hoist where it applies,
    and take a checkpoint that `hoist serve` holds from its holder (each parameter a private copy
    made on the device; share=True: the held memory itself, for a model whose parameters are
    never changed in place). Idempotent; raises ImportError without transformers."""
    _state["share"] = bool(share)
    _enable(quiet=False)


def _enable(quiet, modeling_utils=None):
    if modeling_utils is None:
        from transformers import modeling_utils
    cls = modeling_utils.PreTrainedModel
    _state["quiet"] = quiet
    if _state["original"] is not None:
        return
    original = cls.__dict__["_load_pretrained_model"]
    function = original.__func__ if isinstance(original, staticmethod) else original
    signature = inspect.signature(function)
    for needed in ("model", "state_dict", "checkpoint_files", "load_config"):
        if needed not in signature.parameters:
            raise HoistError(f"hoist.transformers: this transformers' _load_pretrained_model takes "
                             f"no '{needed}' (written for transformers 5.x)", "unavailable")

    def load_pretrained_model(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        reason, device_map = _applies(bound.arguments)
        if reason is not None:
            if not _state["quiet"]:
                warnings.warn(f"hoist.transformers: {reason}; transformers loads it itself",
                              stacklevel=2)
            return function(*args, **kwargs)
        held = _held_checkpoint(bound.arguments["checkpoint_files"])
        if held is not None:
            stream = _AttachedCheckpoint(held["socket"], _state["share"])
        else:
            stream = _CheckpointStream(bound.arguments["checkpoint_files"],
                                       lambda key: device_of(device_map, key))
        bound.arguments["state_dict"] = stream.lazy_state_dict()
        try:
            return function(*bound.args, **bound.kwargs)
        finally:
            stream.close()

    load_pretrained_model.__wrapped__ = function
    _state["original"] = original
    cls._load_pretrained_model = staticmethod(load_pretrained_model) \
        if isinstance(original, staticmethod) else load_pretrained_model


def disable():
    """Restores transformers' own loading (and stops patch() from enabling it on import)."""
    _remove_import_hook()
    if _state["original"] is None:
        return
    from transformers import modeling_utils
    modeling_utils.PreTrainedModel._load_pretrained_model = _state["original"]
    _state["original"] = None


class _EnableOnImport:
    """A meta path finder that enables the hook, quietly, once transformers.modeling_utils has
    been imported: what hoist.safetensors.patch() installs, since it runs before the program
    imports transformers. Where the hook does not apply, the patched safetensors still loads."""

    _target = "transformers.modeling_utils"

    def find_spec(self, fullname, path, target=None):
        if fullname != self._target:
            return None
        import importlib.util
        _remove_import_hook()  # found by the other finders, once
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                _enable(quiet=True, modeling_utils=module)
            except (ImportError, HoistError):  # a transformers this hook was not written for
                pass
        spec.loader.exec_module = exec_module
        return spec


def _install_import_hook():
    """Enables the hook quietly now if transformers is imported, else when it is."""
    import sys
    if _EnableOnImport._target in sys.modules:
        try:
            _enable(quiet=True)
        except (ImportError, HoistError):
            pass
        return
    if not any(isinstance(f, _EnableOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _EnableOnImport())


def _undo_patch():
    """What hoist.safetensors.unpatch() undoes: the import hook, and the hook if patch() (not
    enable()) turned it on."""
    _remove_import_hook()
    if _state["quiet"]:
        disable()


def _remove_import_hook():
    import sys
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _EnableOnImport)]


def _applies(arguments):
    """(None, {device: [checkpoint keys]}) where hoist can stream the load, else (why not,
    None)."""
    if arguments.get("state_dict") is not None:
        return "a state_dict was given", None
    files = arguments.get("checkpoint_files")
    if not files or not all(str(f).endswith(".safetensors") for f in files):
        return "the checkpoint is not safetensors files", None
    config = arguments.get("load_config")
    if getattr(config, "hf_quantizer", None) is not None:
        return "a quantizer converts the weights", None
    if getattr(config, "device_mesh", None) is not None:
        return "the model is loaded tensor-parallel", None
    try:
        from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
        if is_deepspeed_zero3_enabled():
            return "DeepSpeed ZeRO-3 partitions the weights", None
    except ImportError:
        pass
    device_map = {k: _device_name(d) for k, d in
                  (getattr(config, "device_map", None) or {"": "cpu"}).items()}
    targets = set(device_map.values())
    if "disk" in targets:
        return "the device_map offloads to disk", None
    if "meta" in targets:
        return "the device_map keeps part of the model on meta", None
    others = sorted(t for t in targets if t != "cpu" and not t.startswith("cuda:"))
    if others:
        return f"hoist does not load onto {others[0]}", None
    return None, device_map


def _device_name(device):
    if isinstance(device, int):
        return f"cuda:{device}"
    text = str(device)
    return "cuda:0" if text == "cuda" else text


def device_of(device_map, key):
    """The device that `device_map` ({module name: device}) gives checkpoint key `key`: the
    entry of its longest dotted prefix, as accelerate resolves it. A key no entry covers (one
    transformers renames on the way) goes to the device that holds most of the map's entries;
    transformers moves it where it belongs, so any choice is correct and this one is cheap."""
    name = key
    while True:
        if name in device_map:
            return device_map[name]
        if not name:
            break
        name = name.rpartition(".")[0]
    counts = {}
    for device in device_map.values():
        counts[device] = counts.get(device, 0) + 1
    return max(sorted(counts), key=counts.get)


class _Pending:
    """One checkpoint tensor for transformers: its dtype and shape at once, its bytes (on the
    target device) when indexed."""

    __slots__ = ("_stream", "_name", "_dtype", "_shape")

    def __init__(self, stream, name, dtype, shape):
        self._stream, self._name, self._dtype, self._shape = stream, name, dtype, shape

    def get_dtype(self):
        return self._dtype

    def get_shape(self):
        return list(self._shape)

    def __getitem__(self, index):
        tensor = self._stream.take(self._name)
        if index is Ellipsis or index == () or (isinstance(index, slice) and index == slice(None)):
            return tensor
        return tensor[index]


def _held_checkpoint(files):
    """The holder (hoist serve) of the checkpoint these files are, or None: one that holds
    their folder, their index or the one file."""
    files = [os.path.abspath(str(f)) for f in files]
    folder = os.path.dirname(files[0])
    try:
        held = held_models()
    except HoistError:  # no directory of holders here: nothing is held
        return None
    for holder in held:
        model = holder.get("model", "")
        if holder.get("stale") or not model:
            continue
        if model in (folder, *files) or (model.endswith(".json") and
                                          os.path.dirname(model) == folder):
            return holder
    return None


class _AttachedCheckpoint:
    """Every tensor of a checkpoint that a holder holds, attached at once (hoist.attach) and
    handed to transformers as _CheckpointStream's are."""

    def __init__(self, socket, share):
        self._tensors, self._dtypes = attach_with_dtypes(socket, share=share)
        self._lock = threading.Lock()

    def lazy_state_dict(self):
        return {name: _Pending(self, name, self._dtypes[name], tuple(tensor.shape))
                for name, tensor in self._tensors.items()}

    def take(self, name):
        with self._lock:
            if name not in self._tensors:
                raise HoistError(f"hoist.transformers: tensor '{name}' was asked for twice or "
                                 f"is not held", "invalid argument")
            return self._tensors.pop(name)  # handed over: a cast must not keep it alive

    def close(self):
        with self._lock:
            self._tensors.clear()


class _CheckpointStream:
    """Every tensor of the checkpoint's files, streamed by hoist onto the device `device_of`
    (key -> device name) gives it: one stream per device, each on a thread of its own,
    started by the first tensor asked for. Thread-safe."""

    def __init__(self, files, device_of):
        self._models = [open_model(f) for f in files]
        self._groups = {}  # device -> the keys streamed onto it
        for model in self._models:
            for name in model.tensors:
                self._groups.setdefault(device_of(name), []).append(name)
        self._cv = threading.Condition()
        self._landed = {}   # landed, not yet asked for
        self._taken = set()
        self._error = None
        self._running = 0   # streams not yet ended
        self._closed = False
        self._threads = None

    def lazy_state_dict(self):
        out = {}
        for model in self._models:
            for name, info in model.tensors.items():
                out[name] = _Pending(self, name, info.dtype, model.load_shape(name))
        return out

    def take(self, name):
        with self._cv:
            if self._threads is None and not self._closed:
                self._threads = [threading.Thread(target=self._run, args=(device, names),
                                                  name=f"hoist-transformers-{device}", daemon=True)
                                 for device, names in self._groups.items()]
                self._running = len(self._threads)
                for thread in self._threads:
                    thread.start()
            if name in self._taken:
                raise HoistError(f"hoist.transformers: tensor '{name}' was asked for twice",
                                 "invalid argument")
            while name not in self._landed and self._error is None and self._running:
                self._cv.wait()
            if name in self._landed:
                # Handed over, not kept: a cast by transformers must not leave the original
                # alive beside it.
                self._taken.add(name)
                return self._landed.pop(name)
            if self._error is not None:
                raise self._error
            raise HoistError(f"hoist.transformers: no tensor '{name}' in the checkpoint",
                             "not found")

    def _run(self, device, names):
        try:
            stream = iter_tensors(self._models, device=device, names=names)
            for name, tensor in stream:
                with self._cv:
                    if self._closed or self._error is not None:
                        break
                    self._landed[name] = tensor
                    self._cv.notify_all()
            stream.close()
        except BaseException as e:  # noqa: BLE001 (handed to the threads that wait)
            with self._cv:
                self._error = self._error or e
        with self._cv:
            self._running -= 1
            self._cv.notify_all()

    def close(self):
        """Stops the streams still running; the tensors handed out are transformers'."""
        with self._cv:
            self._closed = True
            threads = self._threads or []
        for thread in threads:
            thread.join()
        with self._cv:
            self._landed.clear()
