"""The Dask client for `evaluate` and `sweep`, and the check that every worker can run the same project.

`dask_client(scheduler, workers)`: without an address (or with "local"), a LocalCluster of `workers` worker
processes (default: one per core, THREADS_PER_TASK), each running one task at a time (a task uses `cores // workers`
compute threads: workers x threads = cores);
with one, the scheduler at that address (`dask scheduler`,
then `dask worker ADDRESS` on each machine: NOTES/scale.md). A scheduler that does not answer within `timeout` is
one `ClusterError` line.

`check_workers(client)`: waits up to WORKER_WAIT_S for a first worker (workers started beside the scheduler are
still joining), then every worker reports its facts (`worker_facts`: project and TVM versions, weights
fingerprint, CPU); a worker without the project installed, or whose versions or weights differ from this
process's, stops the run with one line naming it. The CPU may differ: each worker builds or loads artifacts for its
own CPU in its own cache (the artifact key holds the target), never code built for another machine.

`completed(client, futures)`: Dask's `as_completed`, except that a run whose cluster has had no worker (or no
scheduler) for WORKER_WAIT_S stops with one `ClusterError` line naming how many tasks never ran. Dask itself
keeps such tasks waiting for a worker that may never come: a run would hang.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import platform
import time

import psutil

from kokoro_tvm import __version__
from kokoro_tvm.errors import ResourceError
from kokoro_tvm.runtime.devices import usable_cpus

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10
# How long a run waits for a first worker, and how long it lets its cluster go without any worker (or without its
# scheduler) before it stops: a `dask worker` joins within seconds, so a minute without one means none is coming
WORKER_WAIT_S = 60
# The local cluster's default: one worker per core, each task on one thread (NOTES/scale.md has the measurements).
THREADS_PER_TASK = 1
# Dask's nanny starts each worker with MALLOC_TRIM_THRESHOLD_=65536, which fixes glibc's mmap threshold at 128 KiB:
# every large array is a fresh mmap and its pages are faulted in again. One notebook-07 task (fp32 + int8 + the two
# PyTorch runs) took 21-22 s on such a worker against 16-16.8 s in process or on a worker without it (2 threads, Zen 4).
# The local cluster starts its workers without it; a remote worker that has it is named by `check_workers`.
SLOW_ALLOCATOR_ENV = "MALLOC_TRIM_THRESHOLD_"
CHECKED_FACTS = ("kokoro_tvm", "tvm", "weights")  # what must agree between the client and every worker


LOCAL, IN_PROCESS = "local", "in-process"  # what `--scheduler` (notebook 07's SCHEDULER) takes beside an address


class ClusterError(ResourceError):
    """No scheduler at the address, or a worker that cannot run this project's tasks."""


# Our tasks hold no Dask data, so a worker's memory is its loaded models: Dask's pause (at 80% of its share of the
# machine) cannot free any of it and only stops the worker taking tasks; with every worker paused a run never ends
# (notebook 07's full run did so on this 24 GiB machine, two workers at 10.8 and 9.9 GB). The local cluster's
# workers never pause, spill or get terminated by Dask; instead there are only as many as the memory holds
# (`memory_gb` per worker).
NO_MEMORY_MANAGEMENT = {f"distributed.worker.memory.{key}": False for key in ("target", "spill", "pause", "terminate")}
MEMORY_FOR_WORKERS = 0.8  # of the available memory: the rest for the client (notebook 07's kernel holds 1.6 GB)


def local_workers(memory_gb: float | None = None) -> int:
    """How many one-task workers this machine runs: one per THREADS_PER_TASK cores, at most as many as
    MEMORY_FOR_WORKERS of its available memory holds at `memory_gb` each, at least one."""
    n = max(1, usable_cpus() // THREADS_PER_TASK)
    if memory_gb:
        n = min(n, max(1, int(MEMORY_FOR_WORKERS * psutil.virtual_memory().available / 2**30 // memory_gb)))
    return n


@contextlib.contextmanager
def dask_client(
    scheduler: str | None = None,
    workers: int | None = None,
    timeout: float | None = None,
    memory_gb: float | None = None,
):
    """A connected `distributed.Client` (module docstring); the local cluster, if one was started, is closed on
    exit. `memory_gb`: what one worker's tasks need (the local cluster's size, `local_workers`); `timeout`: seconds
    to wait for a scheduler's answer (default CONNECT_TIMEOUT_S, read at the call)."""
    timeout = CONNECT_TIMEOUT_S if timeout is None else timeout
    import dask
    from distributed import Client, LocalCluster

    cluster = None
    if scheduler in (None, LOCAL):
        n = local_workers(memory_gb) if workers is None else workers
        if n < 1:
            raise ClusterError(f"a local cluster needs at least one worker, got {workers}")
        settings = {f"distributed.nanny.pre-spawn-environ.{SLOW_ALLOCATOR_ENV}": None, **NO_MEMORY_MANAGEMENT}
        with dask.config.set(settings):
            cluster = LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR
            )
        client = Client(cluster)
    else:
        try:
            client = Client(scheduler, timeout=timeout)
        except ValueError:  # no port, an unknown protocol
            raise ClusterError(
                f"{scheduler!r} is not a Dask scheduler's address (tcp://host:8786), {LOCAL!r} or {IN_PROCESS!r}"
            ) from None
        except (OSError, TimeoutError) as exc:
            raise ClusterError(
                f"no Dask scheduler answers at {scheduler} within {timeout:g} s ({type(exc).__name__})"
            ) from None
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


@functools.cache
def _weights_fingerprint() -> str:
    from kokoro_tvm.weights.resolve import load_weights

    info, _ = load_weights(None)
    return info.fingerprint


def worker_facts() -> dict:
    """This process's project version, TVM version, weights fingerprint and CPU (run on every worker)."""
    import tvm

    return {
        "kokoro_tvm": __version__,
        "tvm": tvm.__version__,
        "weights": _weights_fingerprint(),
        "cpu": platform.processor() or platform.machine(),
        "allocator": os.environ.get(SLOW_ALLOCATOR_ENV),
    }


def check_workers(client, expected: dict | None = None, facts=worker_facts) -> dict:
    """{worker address: facts}, after checking every worker's `facts()` against `expected` (default: this
    process's facts)."""
    if not client.scheduler_info(n_workers=1)["workers"]:
        log.info("no Dask worker yet; waiting up to %g s for one to join", WORKER_WAIT_S)
    try:
        client.wait_for_workers(1, timeout=WORKER_WAIT_S)
    except TimeoutError:
        raise ClusterError(
            f"no Dask worker joined the scheduler within {WORKER_WAIT_S:g} s; start one there with "
            f"`dask worker ADDRESS`"
        ) from None
    expected = expected or worker_facts()
    reported_by = client.run(facts, on_error="return")
    if not reported_by:
        raise ClusterError("the Dask cluster has no workers")
    for worker, reported in sorted(reported_by.items()):
        if isinstance(reported, BaseException):
            raise ClusterError(
                f"worker {worker} cannot run kokoro_tvm tasks ({type(reported).__name__}: "
                f"{str(reported).splitlines()[0] if str(reported) else ''}); install the project there"
            )
        differ = [
            f"{key} {reported.get(key)} (here {expected[key]})"
            for key in CHECKED_FACTS
            if reported.get(key) != expected[key]
        ]
        if differ:
            raise ClusterError(f"worker {worker} differs from this process: {', '.join(differ)}")
        if reported.get("allocator") is not None:  # runs, but slower (SLOW_ALLOCATOR_ENV)
            log.warning(
                "worker %s runs with %s=%s (Dask's default), about 1.3x slower on this work; start its nanny "
                "without it (NOTES/scale.md)",
                worker,
                SLOW_ALLOCATOR_ENV,
                reported["allocator"],
            )
    return reported_by


def completed(client, futures, patience: float | None = None, poll_s: float = 1.0):
    """The finished (or failed) `futures` as they complete, like `distributed.as_completed`, but a ClusterError
    once the cluster has had no worker or no scheduler connection for `patience` seconds (default WORKER_WAIT_S,
    read at the call) while some remain: the workers died or the scheduler went away, and Dask would wait."""
    from distributed import wait

    patience = WORKER_WAIT_S if patience is None else patience
    pending, alone_since = list(futures), None
    while pending:
        try:
            done, _ = wait(pending, timeout=poll_s, return_when="FIRST_COMPLETED")
        except TimeoutError:
            done = set()
        if done:
            pending = [future for future in pending if future not in done]
            alone_since = None
            yield from done
        elif client.status == "running" and client.scheduler_info(n_workers=1)["workers"]:
            alone_since = None
        elif alone_since is None:
            alone_since = time.monotonic()
        elif time.monotonic() - alone_since > patience:
            raise ClusterError(
                f"the Dask cluster has had no worker (or no scheduler) for {patience:g} s with "
                f"{len(pending)} of {len(futures)} tasks not done; stopped, not waiting"
            )
