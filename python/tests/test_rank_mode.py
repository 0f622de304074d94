"""Rank mode: hoist.load_file(..., process_group=pg) in a job of 2 to 4 processes (gloo on
CPUs): each rank gets its slice of every cut weight, equal to narrow() of the tensor written, and
every whole tensor, equal to the one written, its bytes read 1/N by each rank and all-gathered."""
import gc
import os
import tempfile
import unittest

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import hoist
from hoist.safetensors.torch import save_file


def tensors():
    g = torch.Generator().manual_seed(5)
    out = {"model.embed_tokens.weight": torch.randn(24, 8, generator=g),
           "model.norm.weight": torch.randn(8, generator=g),
           "lm_head.weight": torch.randn(24, 8, generator=g).to(torch.bfloat16)}
    for layer in range(3):
        out[f"model.layers.{layer}.self_attn.q_proj.weight"] = torch.randn(12, 8, generator=g)
        out[f"model.layers.{layer}.self_attn.q_proj.bias"] = torch.randn(12, generator=g)
        out[f"model.layers.{layer}.self_attn.o_proj.weight"] = torch.randn(
            8, 12, generator=g).to(torch.bfloat16)
        out[f"model.layers.{layer}.input_layernorm.weight"] = torch.randn(8, generator=g)
    return out


def expected_part(name, whole, rank, world):
    parts = name.split(".")
    if "o_proj" in parts and parts[-1] == "weight":
        dim = 1
    elif any(p in parts for p in ("q_proj", "embed_tokens", "lm_head")):
        dim = 0
    else:
        return whole
    n = whole.shape[dim]
    begin, end = round(n * rank / world), round(n * (rank + 1) / world)
    return whole.narrow(dim, begin, end - begin)


def rank_main(rank, world, init_file, path, split, results):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        got = hoist.load_file(path, device="cpu", split=split, process_group=dist.group.WORLD)
        some = ["model.norm.weight", "model.layers.1.self_attn.o_proj.weight"]
        named = hoist.load_file(path, device="cpu", split=split, process_group=dist.group.WORLD,
                                names=some)
        gc.collect()  # the tensors are views of the engine's block: they alone keep it
        written = tensors()
        bad = []
        if sorted(named) != sorted(some):
            bad.append(f"names {sorted(named)}")
        for name in some:
            want = written[name] if split == "replicate" else expected_part(
                name, written[name], rank, world)
            if name in named and not torch.equal(named[name], want):
                bad.append(f"named {name}")
        if sorted(got) != sorted(written):
            bad.append(f"keys {sorted(got)}")
        for name, whole in written.items():
            want = whole if split == "replicate" else expected_part(name, whole, rank, world)
            if name not in got or got[name].shape != want.shape or not torch.equal(got[name], want):
                bad.append(name)
        results.put((rank, bad))
    finally:
        dist.destroy_process_group()


def failing_main(rank, world, init_file, path, case, results, finished):
    """Rank 0 loads; rank 1 does what `case` says: joins a group rank 0 is not in
    ("outsider"), or stays alive without loading until rank 0 has finished ("absent",
    "interrupt"): the peer that never gathers."""
    import signal
    import time
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a spawned child may inherit SIG_IGN
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        if case == "outsider":
            group = dist.new_group([1])  # every rank makes it; rank 0 is not in it
            if rank == 0:
                try:
                    hoist.load_file(path, device="cpu", split="tensor", process_group=group)
                    results.put((rank, "loaded", 0.0))
                except hoist.HoistError as e:
                    results.put((rank, str(e), 0.0))
            else:
                results.put((rank, "ok", 0.0))
            return
        if rank == 1:
            # Its own deadline is rank 0's verdict (60 s only if rank 0 never gives one).
            results.put((rank, "ok" if finished.wait(60) else "rank 0 never finished", 0.0))
            return
        start = time.monotonic()

        def progress(done, total):
            # Its own part landed: what remains is the gather, which waits for the peer.
            if done == total:
                results.put((rank, "gathering", 0.0))

        try:
            hoist.load_file(path, device="cpu", split="tensor", process_group=dist.group.WORLD,
                            progress=progress, stall_timeout=1.5 if case == "absent" else 30)
            results.put((rank, "loaded", time.monotonic() - start))
        except hoist.StalledError as e:
            results.put((rank, str(e), time.monotonic() - start))
        except KeyboardInterrupt:
            results.put((rank, "KeyboardInterrupt", time.time()))
        finished.set()
    finally:
        if case != "absent" and case != "interrupt":
            dist.destroy_process_group()
        results.close()
        results.join_thread()  # what was put is written before the process ends
        os._exit(0)  # a gloo collective left pending must not hold the process


def hostile_main(rank, world, init_file, path, case, results, finished):
    """Every rank loads with split="tensor"; the last rank (or rank 0) misbehaves as `case` says:
    "refuse" (shares that do not fit the job, the error caught), "refuse_python" (a load refused
    before it reaches the engine, the process living on), "raise" (rank 0's all-gather raises),
    "kill" (SIGKILLed while its lane loads). Each rank reports what it got: an error, or the
    ranks' tensors compared with the file's cut (the names of those that differ)."""
    import signal
    import time
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    stall = 3.0
    last = world - 1
    try:
        options = {"stall_timeout": stall}
        if case == "refuse" and rank == last:
            options["tensor_split"] = [1] * (world + 1)
        if case == "raise" and rank == 0:
            real = dist.all_gather
            calls = []

            def failing_all_gather(*args, **kwargs):
                calls.append(1)
                if len(calls) == 2:  # the check before it went through; the gather raises
                    raise RuntimeError("injected failure of the all-gather")
                return real(*args, **kwargs)
            dist.all_gather = failing_all_gather
        if case == "kill" and rank == last:
            def progress(done, total):
                os.kill(os.getpid(), signal.SIGKILL)
            options["progress"] = progress
        start = time.monotonic()
        try:
            if case == "refuse_python" and rank == last:
                hoist.load_file(path, device=["cpu"], split="tensor",
                                process_group=dist.group.WORLD)
            got = hoist.load_file(path, device="cpu", split="tensor",
                                  process_group=dist.group.WORLD, **options)
        except (hoist.HoistError, TypeError) as e:
            results.put((rank, f"{type(e).__name__}: {e}", time.monotonic() - start, None))
            if rank == last and case.startswith("refuse"):
                finished.wait(30)  # lives on, its group open, while the others decide
            return
        written = tensors()
        bad = [name for name, whole in written.items()
               if name not in got or not torch.equal(got[name],
                                                     expected_part(name, whole, rank, world))]
        results.put((rank, "loaded", time.monotonic() - start, bad))
    finally:
        results.close()
        results.join_thread()
        os._exit(0)  # a gloo collective left pending must not hold the process


class RankModeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "model.safetensors")
        save_file(tensors(), self.path)

    def tearDown(self):
        self.tmp.cleanup()

    def run_job(self, world, split):
        ctx = mp.get_context("spawn")
        results = ctx.Queue()
        init_file = os.path.join(self.tmp.name, f"init-{world}-{split}")
        procs = [ctx.Process(target=rank_main,
                             args=(r, world, init_file, self.path, split, results))
                 for r in range(world)]
        for p in procs:
            p.start()
        got = dict(results.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(timeout=60)
            self.assertEqual(p.exitcode, 0)
        for rank in range(world):
            self.assertEqual(got[rank], [], f"rank {rank} of {world}")

    def test_each_rank_gets_its_slices_and_every_whole_tensor(self):
        for world in (2, 3):
            with self.subTest(world=world):
                self.run_job(world, "tensor")

    def test_replicas_are_gathered_whole_on_every_rank(self):
        self.run_job(4, "replicate")

    def run_failing(self, case, interrupt=False):
        ctx = mp.get_context("spawn")
        results = ctx.Queue()
        finished = ctx.Event()
        init_file = os.path.join(self.tmp.name, f"init-{case}")
        procs = [ctx.Process(target=failing_main,
                             args=(r, 2, init_file, self.path, case, results, finished))
                 for r in range(2)]
        for p in procs:
            p.start()
        sent = None
        got = {}
        while len(got) < len(procs):
            rank, message, seconds = results.get(timeout=60)
            if message != "gathering":
                got[rank] = (message, seconds)
            elif interrupt and sent is None:  # rank 0 now waits for its peer
                import signal
                import time
                sent = time.time()
                os.kill(procs[0].pid, signal.SIGINT)
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
        return got, sent

    def test_a_rank_outside_the_group_is_told_so(self):
        got, _ = self.run_failing("outsider")
        self.assertIn("is not in the process group given", got[0][0])

    def test_a_peer_that_never_gathers_costs_the_stall_timeout_not_the_groups(self):
        got, _ = self.run_failing("absent")
        message, seconds = got[0]
        self.assertIn("rank 0 of 2 waited", message)
        self.assertIn("(stall timeout 1.5 s): a rank failed, hangs or never started its load; "
                      "this rank's block (", message)
        self.assertLess(seconds, 4)  # the stall timeout, not the peer's time away
        self.assertEqual(got[1][0], "ok")

    def test_ctrl_c_while_waiting_for_peers_is_prompt(self):
        got, sent = self.run_failing("interrupt", interrupt=True)
        message, at = got[0]
        self.assertEqual(message, "KeyboardInterrupt")
        self.assertLess(at - sent, 0.5)

    def run_hostile(self, world, case):
        ctx = mp.get_context("spawn")
        results = ctx.Queue()
        finished = ctx.Event()
        init_file = os.path.join(self.tmp.name, f"init-{case}-{world}")
        procs = [ctx.Process(target=hostile_main,
                             args=(r, world, init_file, self.path, case, results, finished))
                 for r in range(world)]
        for p in procs:
            p.start()
        expected = world - 1 if case == "kill" else world
        got = {}
        import queue
        try:
            while len(got) < expected:
                rank, message, seconds, bad = results.get(timeout=60)
                got[rank] = (message, seconds, bad)
                if all(r in got for r in range(world - 1)):
                    finished.set()  # the misbehaving rank may go now
        except queue.Empty:
            pass
        finished.set()
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
        return got

    def test_no_rank_returns_bytes_a_peer_never_sent(self):
        # Every rank ends with an error, or with every tensor equal to the file's cut; never
        # success with the bytes a failed peer did not send. Within the stall timeout (3 s).
        for world in (2, 4):
            for case in ("refuse", "refuse_python", "raise", "kill"):
                with self.subTest(world=world, case=case):
                    got = self.run_hostile(world, case)
                    self.assertEqual(len(got), world - 1 if case == "kill" else world, got)
                    for rank, (message, seconds, bad) in got.items():
                        if message == "loaded":
                            self.assertEqual(bad, [], f"rank {rank}")
                        self.assertLess(seconds, 3.0 + 2.5, f"rank {rank}: {message}")
                    loaded = [r for r, (m, _, _) in got.items() if m == "loaded"]
                    self.assertEqual(loaded, [], f"{case}: ranks {loaded} returned success")
                    last = world - 1
                    if case == "refuse":
                        for rank in range(last):
                            self.assertIn(f"rank {last} of {world} failed its load: ",
                                          got[rank][0])
                        # at once: before the stall timeout a silent peer would cost
                        self.assertLess(max(s for _, s, _ in got.values()), 3.0)
                    if case == "refuse_python":
                        self.assertIn("TypeError", got[last][0])
                        for rank in range(last):
                            self.assertIn("StalledError", got[rank][0])
                            self.assertIn("in the check before the all-gather", got[rank][0])
                    if case == "raise":
                        self.assertIn("injected failure of the all-gather", got[0][0])

    def test_rank_mode_refuses_a_layer_split(self):
        with self.assertRaises(hoist.HoistError) as caught:
            hoist.load_file(self.path, device="cpu", split="layer", process_group=object())
        self.assertIn("rank mode takes a split that places parts (tensor, replicate), not 'layer'",
                      str(caught.exception))


if __name__ == "__main__":
    unittest.main()
