import os
from typing import Any, Union

from ._reader import TensorReader


class GgufFile(TensorReader):
    FORMAT: str


def open(path: Union[str, "os.PathLike[str]"], framework: str = ...,
         device: Union[str, int, Any] = ...) -> GgufFile: ...
