"""The machine a build or a benchmark runs on, read from the machine itself: the CPU's name, family and model and
the features our kernels care about from /proc/cpuinfo, its caches (level, size, ways, line, shared by how many
CPUs) from /sys/devices/system/cpu/cpu0/cache/, and the CPUs this process may use. A virtual machine may give
its CPU a model number whose LLVM name is another CPU's (an Emerald Rapids guest named `rocketlake`): sysfs
still gives the caches the guest really has. Where a file is missing (macOS, a container without sysfs) the
field is None and the caller falls back to what it knew before (kokoro_tvm.compiler.targets' table by LLVM name).

Every bench record carries `machine()` (as `machine`), and every build's cache key carries the geometry the
schedules read from it (kokoro_tvm.compiler.targets.cpu_geometry).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
MEMINFO = Path("/proc/meminfo")

# /proc/cpuinfo flags that decide which kernels can run, widest last within each family.
KERNEL_FLAGS = ("avx2", "fma", "avx512f", "avx512vl", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8")


@dataclass(frozen=True)
class Cache:
    level: int
    kind: str  # Data, Instruction or Unified
    bytes: int
    ways: int | None
    line: int | None
    shared_by: int  # how many CPUs share it (1: private to a core's thread)


@dataclass(frozen=True)
class Machine:
    cpu: str
    vendor: str | None = None
    family: int | None = None
    model: int | None = None
    flags: tuple[str, ...] = ()  # the KERNEL_FLAGS this CPU has
    caches: tuple[Cache, ...] = field(default_factory=tuple)
    cpus: int = 1

    def cache(self, level: int, kind: str = "Data") -> Cache | None:
        """The level-`level` cache that holds `kind` (Unified caches hold both), or None if sysfs did not say."""
        return next((c for c in self.caches if c.level == level and c.kind in (kind, "Unified")), None)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Machine:
        """A machine as `as_dict` wrote it (a bench record's `machine`)."""
        caches = tuple(Cache(**c) for c in data.get("caches", ()))
        return cls(**{**data, "flags": tuple(data.get("flags", ())), "caches": caches})


def _cpuinfo_fields(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor's block is enough: every core of one machine is the same CPU
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    return fields


def _size(text: str) -> int:
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    text = text.strip()
    return int(text[:-1]) * units[text[-1]] if text and text[-1] in units else int(text)


def _shared_by(cpu_list: str) -> int:
    count = 0
    for part in cpu_list.strip().split(","):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1 if low else 0
    return max(count, 1)


def read_caches(folder: Path = CACHE_DIR) -> tuple[Cache, ...]:
    """Every cache sysfs lists for CPU 0, smallest level first; () where sysfs has none."""
    caches = []
    for index in sorted(folder.glob("index[0-9]*")):

        def read(name: str, index=index) -> str | None:
            path = index / name
            return path.read_text().strip() if path.is_file() else None

        level, kind, size = read("level"), read("type"), read("size")
        if not (level and kind and size):
            continue
        ways, line, shared = read("ways_of_associativity"), read("coherency_line_size"), read("shared_cpu_list")
        caches.append(
            Cache(
                level=int(level),
                kind=kind,
                bytes=_size(size),
                ways=int(ways) if ways and ways.isdigit() and int(ways) > 0 else None,
                line=int(line) if line and line.isdigit() else None,
                shared_by=_shared_by(shared) if shared else 1,
            )
        )
    return tuple(sorted(caches, key=lambda c: (c.level, c.kind)))


def read_machine(cpuinfo: Path = CPUINFO, caches: Path = CACHE_DIR) -> Machine:
    """This machine (module docstring); the arguments are for tests, which give it another machine's files."""
    fields = _cpuinfo_fields(cpuinfo.read_text()) if cpuinfo.is_file() else {}
    flags = set(fields.get("flags", "").split())
    number = fields.get("cpu family"), fields.get("model")
    return Machine(
        cpu=fields.get("model name") or platform.processor() or platform.machine(),
        vendor=fields.get("vendor_id"),
        family=int(number[0]) if number[0] and number[0].isdigit() else None,
        model=int(number[1]) if number[1] and number[1].isdigit() else None,
        flags=tuple(flag for flag in KERNEL_FLAGS if flag in flags),
        caches=read_caches(caches),
        cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
    )


@functools.cache
def machine() -> Machine:
    """This machine, read once per process."""
    return read_machine()


def cpu_identity(m: Machine | None = None) -> dict:
    """What a record is keyed by: the CPU's vendor, family, model, kernel flags and L1 data / L2 caches as the
    machine reports them (a guest that hides AMX or has another L2 is another CPU to the schedules)."""
    m = m or machine()
    l1, l2 = m.cache(1), m.cache(2, "Unified")
    return {
        "vendor": m.vendor,
        "family": m.family,
        "model": m.model,
        "flags": list(m.flags),
        "l1d": [l1.bytes, l1.ways] if l1 else None,
        "l2": l2.bytes if l2 else None,
    }


def record_name(identity: dict) -> str:
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]
    vendor = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(identity.get("vendor"), "cpu")
    return f"{vendor}-f{identity.get('family')}-m{identity.get('model')}-{digest}.json"


ARCH_REQ_XCOMP_PERM = 0x1023  # arch_prctl: ask for an extended state component
XFEATURE_XTILEDATA = 18  # AMX's tile data
SYS_ARCH_PRCTL = 158  # x86-64


@functools.cache
def amx_tiles() -> bool:
    """Whether this process may use AMX tiles: the CPU reports amx_tile and Linux granted the tile state
    (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, once per process; an old kernel or a container that
    forbids it refuses). Without the grant the first tile instruction is SIGILL, so nothing uses AMX then."""
    if "amx_tile" not in machine().flags or platform.machine() != "x86_64":
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False


def available_memory(meminfo: Path = MEMINFO) -> int | None:
    """Bytes the kernel can give this process without swapping (/proc/meminfo's MemAvailable), or None where the
    file or the field is missing (macOS, an old kernel)."""
    try:
        fields = _cpuinfo_fields(meminfo.read_text())
        return int(fields["MemAvailable"].split()[0]) * 1024  # "12345678 kB"
    except (OSError, KeyError, ValueError, IndexError):
        return None
