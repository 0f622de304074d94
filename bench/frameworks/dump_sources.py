"""Writes the installed transformers' loading functions (the ones hoist.transformers hooks or
relies on) to a folder, so that the hook is checked against the code that actually runs:
    python3 dump_sources.py OUTDIR"""
import inspect
import os
import sys

import transformers
from transformers import core_model_loading, modeling_utils

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
wanted = [(modeling_utils.PreTrainedModel, "_load_pretrained_model"),
          (modeling_utils.PreTrainedModel, "from_pretrained"),
          (modeling_utils, "caching_allocator_warmup"),
          (modeling_utils, "load_state_dict"),
          (core_model_loading, "convert_and_load_state_dict_in_model"),
          (core_model_loading, "_materialize_copy"),
          (core_model_loading, "spawn_materialize"),
          (core_model_loading, "spawn_tp_materialize"),
          (core_model_loading, "set_param_for_module")]
with open(os.path.join(out, "transformers_sources.py"), "w") as f:
    f.write(f"# transformers {transformers.__version__}\n")
    for owner, name in wanted:
        obj = getattr(owner, name, None)
        if obj is None:
            f.write(f"# {name}: missing\n")
            continue
        f.write(f"# ---- {name} ({inspect.getsourcefile(obj)}:{inspect.getsourcelines(obj)[1]})\n")
        f.write(inspect.getsource(obj) + "\n")
print("sources written", os.path.getsize(os.path.join(out, "transformers_sources.py")))
