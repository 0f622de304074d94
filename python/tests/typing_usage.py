"""Code a user writes against hoist's public API, type-checked (never run) by the python
stage's `mypy --strict` against the package's stubs (python/hoist/*.pyi, py.typed)."""
import hoist
import hoist.torch
import hoist.gguf
import hoist.transformers

m = hoist.open("x.safetensors")
sd = hoist.load_file("x.safetensors", device="cuda:0")
for name, t in hoist.iter_tensors(["a", "b"], device="cpu"):
    print(name, t)
r = hoist.torch.load_into({}, "x", strict=False)
print(r.missing_keys, m.tensors["a"].nbytes, hoist.placement(m, ["cuda:0"]))
with hoist.gguf.open("m.gguf") as f:
    print(f.keys(), f.get_slice("a").get_shape())
hoist.transformers.enable()
try:
    pass
except hoist.StalledError as e:
    print(e.status)
import hoist.safetensors
from hoist.safetensors.torch import load_file, save_file, _remove_duplicate_names
from hoist.safetensors import safe_open
hoist.safetensors.patch(transformers=False)
with safe_open("x", framework="pt", device="cuda:0") as f:
    t = f.get_tensor("a")
    print(f.get_slice("a")[:, :3], f.keys())
d = load_file("x", device="cpu")
save_file(d, "y")
print(_remove_duplicate_names(d))
