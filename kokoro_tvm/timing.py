"""The one way this project times code: warm-up rounds, then timed rounds with every contender once per round
(interleaved, a short idle before each call), the median and the spread read from the samples. `bench`, the
studies and the notebooks all time through it; speed is never asserted in a unit test."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable


def seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# Seconds of idle before each backend's call. A thread pool spins for a while after its work (torch's OpenMP
# workers, ONNX Runtime's, TVM's) on the cores the next backend starts on: `--conv-peak` timed our int8 conv,
# which ran straight after PyTorch's, at 502 GOP/s without this pause and at 732 with it (NOTES/performance.md).
SETTLE_SECONDS = 0.05


def interleaved(
    backends: dict[str, Callable[[], object]], runs: int, warmup: int, settle: float = SETTLE_SECONDS
) -> dict[str, list[float]]:
    """Every backend once per round (`warmup` untimed rounds first), `settle` seconds of idle before each
    call: the seconds of each timed round."""
    for _ in range(warmup):
        for fn in backends.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in backends}
    for _ in range(runs):
        for name, fn in backends.items():
            time.sleep(settle)
            samples[name].append(seconds(fn))
    return samples


def median_interleaved(backends: dict[str, Callable[[], object]], runs: int, warmup: int) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in interleaved(backends, runs, warmup).items()}


def set_threads(threads: int) -> None:
    """torch's intra-op threads, and TVM's pool size through TVM_NUM_THREADS, which TVM reads when its pool
    starts (the first parallel kernel of the process). Not `runtime.config_threadpool`: it pins the calling
    thread to a core, and torch's OpenMP workers, started from that thread later, inherit the pin and end
    up sharing one core."""
    import torch

    torch.set_num_threads(threads)
    os.environ["TVM_NUM_THREADS"] = str(threads)


def median_seconds(fn: Callable[[], object], runs: int = 3, warmup: int = 1) -> float:
    """One contender alone: the median of `runs` timed calls after `warmup` untimed ones."""
    return median_interleaved({"": fn}, runs, warmup)[""]
