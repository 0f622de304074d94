"""hoist.transformers: transformers' from_pretrained with its checkpoint streamed by hoist
straight to the device the device_map names, overlapped with transformers' own work.

    import hoist.transformers
    hoist.transformers.enable()
    model = AutoModelForCausalLM.from_pretrained(path, device_map="cuda:0", dtype=torch.bfloat16)

transformers (5.x) loads a safetensors checkpoint by opening every shard, taking a lazy slice of
every tensor, and having four worker threads materialize them (`slice[...]`, then `.to(device,
dtype)`) into the model's parameters, with its renamings, conversions and dtype casts on the
way. enable() wraps `PreTrainedModel._load_pretrained_model` so that, where it applies, those lazy
values are hoist's: the first one asked for starts one hoist stream of every shard onto the
target device (after transformers has warmed its allocator), and each `[...]` waits for its
tensor to land. The tensor handed over becomes the parameter (no second copy on the device);
transformers' own steps run on it unchanged.

It applies when the checkpoint is safetensors files, no state_dict was given, the device_map puts
the whole model on one device (a GPU or the CPU), and neither DeepSpeed ZeRO-3, a quantizer nor a
tensor-parallel mesh is in play. Elsewhere from_pretrained runs as it would without hoist, after
one warning line that says why. disable() restores transformers.

Status: written against transformers 5.17's loading code; its speed is not measured yet
(docs/PYTHON.md).
"""
import inspect
import threading
import warnings

from ._errors import HoistError

__all__ = ["enable", "disable", "enabled"]

_state = {"original": None}


def enabled():
    """Whether enable() is in effect."""
    return _state["original"] is not None


def enable():
    """Makes from_pretrained stream safetensors checkpoints through hoist where it applies.
    Idempotent; raises ImportError without transformers."""
    from transformers import modeling_utils
    cls = modeling_utils.PreTrainedModel
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
        reason, device = _applies(bound.arguments)
        if reason is not None:
            warnings.warn(f"hoist.transformers: {reason}; transformers loads it itself",
                          stacklevel=2)
            return function(*args, **kwargs)
        stream = _CheckpointStream(bound.arguments["checkpoint_files"], device)
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
    """Restores transformers' own loading."""
    if _state["original"] is None:
        return
    from transformers import modeling_utils
    modeling_utils.PreTrainedModel._load_pretrained_model = _state["original"]
    _state["original"] = None


def _applies(arguments):
    """(None, device) where hoist can stream the load to one device, else (why not, None)."""
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
    device_map = getattr(config, "device_map", None)
    targets = {"cpu"} if not device_map else {_device_name(d) for d in device_map.values()}
    if "disk" in targets:
        return "the device_map offloads to disk", None
    if len(targets) != 1:
        return f"the device_map spreads the model over {sorted(targets)}", None
    device = targets.pop()
    if device not in ("cpu", "meta") and not device.startswith("cuda"):
        return f"hoist does not load onto {device}", None
    if device == "meta":
        return "the device_map keeps the model on meta", None
    return None, device


def _device_name(device):
    if isinstance(device, int):
        return f"cuda:{device}"
    text = str(device)
    return "cuda:0" if text == "cuda" else text


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


class _CheckpointStream:
    """Every tensor of the checkpoint's files, streamed by one hoist load per file onto
    `device` on a thread of its own, started by the first tensor asked for. Thread-safe."""

    def __init__(self, files, device):
        from . import open as open_model
        self._models = [open_model(f) for f in files]
        self._device = device
        self._cv = threading.Condition()
        self._landed = {}   # landed, not yet asked for
        self._taken = set()
        self._error = None
        self._done = False
        self._closed = False
        self._thread = None

    def lazy_state_dict(self):
        out = {}
        for model in self._models:
            for name, info in model.tensors.items():
                out[name] = _Pending(self, name, info.dtype, model.load_shape(name))
        return out

    def take(self, name):
        with self._cv:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="hoist-transformers",
                                                daemon=True)
                self._thread.start()
            if name in self._taken:
                raise HoistError(f"hoist.transformers: tensor '{name}' was asked for twice",
                                 "invalid argument")
            while name not in self._landed and self._error is None and not self._done:
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

    def _run(self):
        from ._stream import iter_tensors
        try:
            stream = iter_tensors(self._models, device=self._device)
            for name, tensor in stream:
                with self._cv:
                    if self._closed:
                        break
                    self._landed[name] = tensor
                    self._cv.notify_all()
            stream.close()
        except BaseException as e:  # noqa: BLE001 (handed to the threads that wait)
            with self._cv:
                self._error = e
        with self._cv:
            self._done = True
            self._cv.notify_all()

    def close(self):
        """Stops the stream if it still runs; the tensors handed out are transformers'."""
        with self._cv:
            self._closed = True
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._cv:
            self._landed.clear()
