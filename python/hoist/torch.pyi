import os
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Union

import torch

import hoist


class LoadIntoResult(NamedTuple):
    loaded: List[str]
    missing_keys: List[str]
    unexpected_keys: List[str]
    mismatched: List[str]


def load_into(module_or_state_dict: Union[torch.nn.Module, Dict[str, torch.Tensor]],
              path: Union[str, "os.PathLike[str]", hoist.Model], strict: bool = ...,
              progress: Union[None, bool, Callable[[int, int], Optional[bool]]] = ...,
              **options: Any) -> LoadIntoResult: ...
