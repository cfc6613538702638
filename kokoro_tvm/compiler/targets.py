"""Build targets (TVM JSON-dict targets) and what the CPU schedules need to know about the target machine.

- `host_target()`: LLVM for this CPU (LLVM's host detection names it).
- `gpu_target(kind)`: Metal (arm64 macOS host) or CUDA (this CPU as the host).
- `cpu_geometry(target)`: vector width, vector registers and L1 data-cache geometry of an LLVM target, read
  from the target itself (its features, its `mtriple`) and, for the caches, from the machine when the target is
  the machine that builds (kokoro_tvm.machine), else a small table by `mcpu`; so a build for `-mcpu=haswell`
  (AVX2) or an aarch64 target is scheduled for that machine, not for the one that builds.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

from kokoro_tvm.errors import InputError, UnsupportedError
from kokoro_tvm.machine import machine

DTYPES = ("float32", "float64")
GPU_KINDS = ("metal", "cuda")


# /proc/cpuinfo flags of the instructions our packed kernels use -> LLVM's feature names.
KERNEL_FEATURES = {"avx512_bf16": "avx512bf16", "avx512_vnni": "avx512vnni"}


def host_target() -> dict:
    """LLVM for this CPU. `mcpu="native"` silently falls back to generic code with this wheel's LLVM, so the
    CPU name comes from LLVM's host detection. A virtual machine can report a CPU model number whose LLVM model
    lacks features the CPU has (a Sapphire Rapids-class guest that LLVM names `rocketlake`, without
    AVX512_BF16): the kernel features /proc/cpuinfo reports and the model lacks are added as `mattr`, as
    `-march=native` would from CPUID. Where the model has them (Zen 4, Zen 5) the target is the bare model."""
    import tvm
    from tvm.target import codegen

    target = {"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu()}
    model = tvm.target.Target(target)
    flags = cpu_flags() or frozenset()
    extra = [
        f"+{feature}"
        for flag, feature in KERNEL_FEATURES.items()
        if flag in flags and not codegen.llvm_cpu_has_features([feature], model)
    ]
    return {**target, "mattr": extra} if extra else target


def cpu_flags() -> frozenset[str] | None:
    """This CPU's flags in /proc/cpuinfo ("avx512_bf16", ...); None where there is no such file."""

    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        return None
    for line in cpuinfo.read_text().splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


# Apple GPUs: 32-wide SIMD groups and up to 1024 threads per threadgroup (TVM's Metal defaults are 16 and 256).
# The host code is arm64 macOS: the only place a Metal library can be exported and run.
METAL_TARGET = {
    "kind": "metal",
    "max_threads_per_block": 1024,
    "thread_warp_size": 32,
    "host": {"kind": "llvm", "mtriple": "arm64-apple-macos"},
}


def gpu_target(kind: str) -> dict:
    """The JSON-dict target for a GPU build: "metal" (arm64 macOS host) or "cuda" (this machine's CPU as the
    host, so the library runs here when a CUDA device exists)."""
    if kind == "metal":
        return dict(METAL_TARGET)
    if kind == "cuda":
        return {"kind": "cuda", "arch": _cuda_arch(), "host": host_target()}
    raise InputError(f"GPU target must be 'metal' or 'cuda', got {kind!r}")


def _cuda_arch() -> str:
    """This machine's GPU architecture, or sm_80 (A100-class) where there is no CUDA device to ask."""
    import tvm

    device = tvm.cuda(0)
    return f"sm_{device.compute_version.replace('.', '')}" if device.exist else "sm_80"


def target_for(device: str) -> dict:
    """The build target for a runtime device: this CPU, or a GPU target."""
    return host_target() if device == "cpu" else gpu_target(device)


def check_dtype(dtype: str, kind: str) -> None:
    """Metal has no float64: a float64 (verification) build for Metal (target or device kind) is refused."""
    if dtype not in DTYPES:
        raise InputError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if kind == "metal" and dtype == "float64":
        raise UnsupportedError("Metal has no float64: the float64 verification build runs on the CPU (or CUDA)")


@dataclass(frozen=True)
class CPUGeometry:
    """What the CPU schedules tile for: SIMD width, how many vector registers hold accumulators, L1 sets."""

    vector_bits: int
    vector_registers: int
    l1_bytes: int = 32 * 1024
    l1_ways: int = 8
    cache_line: int = 64

    @property
    def l1_sets(self) -> int:
        return self.l1_bytes // (self.l1_ways * self.cache_line)

    def lanes(self, dtype_bits: int) -> int:
        return max(1, self.vector_bits // dtype_bits)


# L1 data caches that differ from the common 32 KiB, 8-way, 64-byte lines (vendor optimization manuals).
_L1_BY_MCPU = {
    **dict.fromkeys(
        (
            "icelake-server",
            "icelake-client",
            "tigerlake",
            "sapphirerapids",
            "emeraldrapids",
            "alderlake",
            "raptorlake",
            "meteorlake",
            "graniterapids",
        ),
        (48 * 1024, 12, 64),
    ),
    **dict.fromkeys(("znver5",), (48 * 1024, 12, 64)),
    **dict.fromkeys(("neoverse-n1", "neoverse-n2", "neoverse-v1", "neoverse-v2"), (64 * 1024, 4, 64)),
    **dict.fromkeys(("apple-m1", "apple-m2", "apple-m3", "apple-m4"), (128 * 1024, 8, 128)),
}


def _target_attr(target, name: str):
    attrs = target.attrs if hasattr(target, "attrs") else target
    value = attrs.get(name) if hasattr(attrs, "get") else None
    return str(value) if value is not None else ""


def _is_this_machine(mcpu: str, triple: str) -> bool:
    """A target for the CPU that builds (the host's LLVM name, no foreign triple): its caches can be read."""
    from tvm.target import codegen

    return mcpu == codegen.llvm_get_system_cpu() and (not triple or triple.startswith(platform.machine()))


def is_this_machine(target) -> bool:
    """An LLVM target (JSON dict or Target) for the CPU that builds: what it measures holds for the target."""
    return _is_this_machine(_target_attr(target, "mcpu"), _target_attr(target, "mtriple"))


def _measured_l1() -> tuple[int, int, int] | None:
    """This machine's L1 data cache (bytes, ways, line) from sysfs (kokoro_tvm.machine), or None without it."""
    l1 = machine().cache(1)
    return (l1.bytes, l1.ways, l1.line) if l1 and l1.ways and l1.line else None


def cpu_geometry(target) -> CPUGeometry:
    """The geometry of an LLVM target (a tvm.target.Target or its JSON dict). x86: AVX-512 (512-bit, 32
    registers), AVX/AVX2 (256-bit, 16) or SSE (128-bit, 16) by the target's features; AArch64: NEON (128-bit, 32
    registers; SVE is scheduled as 128-bit NEON). The L1 data cache of the machine that builds for itself is
    read from the machine (sysfs); another CPU's comes from a table by LLVM's name."""
    import tvm
    from tvm.target import codegen

    if isinstance(target, dict):
        target = tvm.target.Target(target)
    mcpu, triple = _target_attr(target, "mcpu"), _target_attr(target, "mtriple")
    l1 = _measured_l1() if _is_this_machine(mcpu, triple) else None
    l1 = l1 or _L1_BY_MCPU.get(mcpu, (32 * 1024, 8, 64))
    if triple.startswith(("aarch64", "arm64")):
        return CPUGeometry(128, 32, *l1)
    if codegen.target_has_features(["avx512f"], target):
        return CPUGeometry(512, 32, *l1)
    if codegen.target_has_features(["avx"], target):
        return CPUGeometry(256, 16, *l1)
    return CPUGeometry(128, 16, *l1)
