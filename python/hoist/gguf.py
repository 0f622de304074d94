"""hoist.gguf: a GGUF file through the same front as hoist.safetensors.safe_open.

    with hoist.gguf.open("model.gguf", device="cuda:0") as f:
        for name in f.keys():
            w = f.get_tensor(name)        # Q4_K etc.: uint8 [rows, bytes_per_row]
            f.info(name).dtype           # "Q4_K", the ggml type

keys(), offset_keys(), metadata() (typed values), get_tensor(name), get_slice(name) (rows of
the loaded shape), info(name). One file; hoist.load_file reads split sets.
"""
from ._reader import TensorReader

__all__ = ["open", "GgufFile"]


class GgufFile(TensorReader):
    FORMAT = "gguf"


def open(path, framework="pt", device="cpu"):  # noqa: A001 (the module's verb)
    """Opens one GGUF file for reading tensors by name on device."""
    return GgufFile(path, framework, device)
