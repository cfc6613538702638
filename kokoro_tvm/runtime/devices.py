"""Devices the runtime can run on, whether this machine has them, and how many CPU threads TVM uses."""

from __future__ import annotations

import os
import sys

from kokoro_tvm.errors import UnsupportedError

DEVICES = ("cpu", "metal", "cuda")
_WHERE = {
    "metal": "Metal runs need macOS on an Apple GPU; here, `kokoro-tvm gpu-build --target metal` generates and "
    "checks the Metal sources",
    "cuda": "CUDA runs need an NVIDIA GPU and its driver; `kokoro-tvm gpu-build --target cuda` generates and "
    "compiles the sources without one",
}


class DeviceUnavailableError(UnsupportedError):
    """The requested device does not exist on this machine."""


def device_exists(name: str) -> bool:
    """Whether TVM sees device `name` (index 0) on this machine."""
    import tvm

    try:
        return bool(tvm.device(name, 0).exist)
    except Exception:  # a TVM runtime built without that device's support
        return False


def require_device(name: str) -> None:
    """Raise DeviceUnavailableError (one clear line) unless device `name` exists here."""
    if name not in DEVICES:
        raise DeviceUnavailableError(f"unknown device {name!r}; choose from {', '.join(DEVICES)}")
    if not device_exists(name):
        raise DeviceUnavailableError(f"no {name} device on this machine: {_WHERE.get(name, '')}")


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cpu_share() -> int:
    """Threads for work given no count: OMP_NUM_THREADS when set (the share a parent hands each of several
    processes on one machine: tests/conftest.py gives each pytest-xdist worker and everything it starts half of
    two cores), else every CPU this process may run on. Two processes each running 2-thread pools on 2 cores
    oversubscribe them: every parallel region waits for a thread the other process holds. Beside one busy process
    on a 2-core Zen 2, notebook 08's FAST `bench` (`kokoro-tvm bench --text "Hello world." --runs 1 --warmup 1
    --peers torch,ort_fp32,ort_int8`) took 97 s at `--threads 2` and 53 s at 1 (NOTES/dynamic_shapes.md)."""
    cpus = usable_cpus()
    try:
        share = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:  # unset, or not a number (OpenMP itself accepts lists such as "2,1": not ours to parse)
        return cpus
    return max(1, min(share, cpus))


def use_every_cpu() -> None:
    """TVM's thread pool defaults to half the logical CPUs on x86 (it assumes hyper-threads): one thread on a
    2-vCPU machine, which made every compiled component ~1.7x slower outside `kokoro-tvm bench` (which sets
    the count). Unless TVM_NUM_THREADS is set, use every CPU this process may run on; TVM reads it once, when
    its pool starts (the first parallel kernel)."""
    os.environ.setdefault("TVM_NUM_THREADS", str(usable_cpus()))


def gpu_devices() -> list[dict]:
    """Which GPU devices this machine has, as TVM sees them (notebook 06's 'what ran where' table)."""

    gpus = [kind for kind in DEVICES if kind != "cpu"]
    return [{"device": kind, "exists": device_exists(kind), "platform": sys.platform} for kind in gpus]
