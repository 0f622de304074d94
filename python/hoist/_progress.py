"""The progress bar of `progress=True`: bytes, GB/s and ETA on a terminal, on stderr."""
import sys
import time


class ProgressBar:
    def __init__(self, stream=None, width=30):
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.start = time.monotonic()
        self.drawn = False

    def __call__(self, done, total):
        if not self.stream.isatty():
            return True
        elapsed = max(time.monotonic() - self.start, 1e-9)
        frac = done / total if total else 1.0
        filled = int(frac * self.width)
        rate = done / elapsed
        eta = (total - done) / rate if rate > 0 else 0.0
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(
            f"\r[{bar}] {_gib(done)} / {_gib(total)}  {rate / 1e9:.2f} GB/s  ETA {eta:.0f}s   ")
        self.stream.flush()
        self.drawn = True
        return True

    def close(self):
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()


def _gib(n):
    return f"{n / (1 << 30):.2f} GiB"
