"""One process's attach to a model `hoist serve` holds, for bench/serve/device.sh: timed with
the clock around the call alone (torch and its CUDA context started before), and compared with
the checkpoint's own bytes (safetensors, read onto the same device).

    python3 attach_probe.py time NAME [--share]            # one JSON line: seconds
    python3 attach_probe.py check NAME DIR [--share]       # every tensor equal to DIR's files
    python3 attach_probe.py hold NAME DIR READY GO [--share]
        # attach, create READY, wait for GO to exist, then check (the holder may die meanwhile)
    python3 attach_probe.py held DIR                       # whether hoist.transformers takes DIR
                                                           # from a holder (exit 1 if not)
    python3 attach_probe.py write NAME                     # a shared attach written in place:
                                                           # exit 0 when the device refused it
    python3 attach_probe.py crowd SOCKET N SECONDS         # N idle connections to a holder and
                                                           # one sending a byte a second, held
Exits 1 when a check fails.
"""
import glob
import json
import os
import sys
import time


def attach(name, share):
    import hoist
    import torch
    torch.cuda.init()
    torch.empty(1, device="cuda:0")  # the context, before the clock
    torch.cuda.synchronize()
    start = time.perf_counter()
    tensors = hoist.attach(name, share=share)
    torch.cuda.synchronize()
    return tensors, time.perf_counter() - start


def check(tensors, directory):
    """(tensors equal, tensors compared): each against the checkpoint's bytes."""
    import torch
    from safetensors import safe_open
    equal = compared = 0
    for path in sorted(glob.glob(os.path.join(directory, "*.safetensors"))):
        with safe_open(path, framework="pt", device="cuda:0") as f:
            for key in f.keys():
                want = f.get_tensor(key)
                got = tensors[key]
                compared += 1
                equal += int(got.dtype == want.dtype and got.shape == want.shape and
                             torch.equal(got.view(-1).view(torch.uint8),
                                         want.view(-1).view(torch.uint8)))
    return equal, compared


def main():
    args = [a for a in sys.argv[1:] if a != "--share"]
    share = "--share" in sys.argv
    verb = args[0]
    if verb == "time":
        tensors, seconds = attach(args[1], share)
        # Where the time goes: the native attach alone (devices opened, memory mapped and, for
        # a private copy, copied), timed again in the same process.
        from hoist import _native
        start = time.perf_counter()
        native = _native.Attached(args[1], "", share, 10.0)
        native_s = time.perf_counter() - start
        native.close()
        print(json.dumps({"share": share, "seconds": seconds, "native_again_s": native_s,
                          "tensors": len(tensors)}))
        return 0
    if verb == "check":
        tensors, seconds = attach(args[1], share)
        equal, compared = check(tensors, args[2])
        print(json.dumps({"share": share, "seconds": seconds, "equal": equal,
                          "compared": compared}))
        return 0 if equal == compared == len(tensors) and compared > 0 else 1
    if verb == "hold":
        tensors, seconds = attach(args[1], share)
        open(args[3], "w").close()
        while not os.path.exists(args[4]):
            time.sleep(0.01)
        equal, compared = check(tensors, args[2])
        print(json.dumps({"share": share, "seconds": seconds, "equal": equal,
                          "compared": compared, "after_holder_killed": True}))
        return 0 if equal == compared == len(tensors) and compared > 0 else 1
    if verb == "held":
        import hoist.transformers as ht
        files = sorted(glob.glob(os.path.join(args[1], "*.safetensors")))
        holder = ht._held_checkpoint(files)
        print(json.dumps({"held_by": holder}))
        return 0 if holder is not None else 1
    if verb == "write":
        import torch
        tensors, _ = attach(args[1], True)
        name, t = max(tensors.items(), key=lambda kv: kv[1].numel())
        try:
            t.view(-1).view(torch.uint8).fill_(0xA5)
            torch.cuda.synchronize()
            refused = ""
        except RuntimeError as e:  # the device's access error: this context is lost
            refused = str(e).splitlines()[0]
        print(json.dumps({"tensor": name, "write_refused": bool(refused), "error": refused}))
        return 0 if refused else 1
    if verb == "crowd":
        import socket
        idle = []
        for _ in range(int(args[2])):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(args[1])
            idle.append(c)
        slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        slow.connect(args[1])
        end = time.monotonic() + float(args[3])
        request = b'{"hoist_held":1,"op":"attach"}'
        i = 0
        while time.monotonic() < end:
            try:
                slow.send(request[i % len(request):i % len(request) + 1])
            except OSError:  # the holder's deadline closed it: open another
                slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                slow.connect(args[1])
            i += 1
            time.sleep(1)
        return 0
    raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
