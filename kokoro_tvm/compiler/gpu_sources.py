"""GPU builds you can inspect: every component built for Metal (or CUDA) from the same Relax module as the CPU
build, its kernels inventoried and its device source checked, on any machine.

Code generation needs no GPU: `build_sources` runs our GPU pipeline (kokoro_tvm.compiler.schedule.gpu) and TVM's code
generation and returns the shader source with, per kernel, its threadgroup and grid sizes. Checks, each a list
of problems that should be empty:
- `unbound_functions`: every PrimFunc that does work is bound to GPU threads (otherwise TVM's VerifyMemory
  stops the build; we check before code generation and name the function);
- `source_problems`: the source defines one kernel per launch of every bound PrimFunc, each with a complete
  body (balanced braces), and nothing else.
Where the tools exist, more: `nvcc_check` compiles a CUDA build's source to PTX with NVIDIA's compiler; a
Metal library can be exported only on macOS (Xcode's `metal` compiler), elsewhere that step is recorded as
"skipped: needs macOS".
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from kokoro_tvm.compiler.gpu_launches import Launch, primfunc_launches, unbound_functions
from kokoro_tvm.compiler.pipeline import compile_lowered, lower
from kokoro_tvm.compiler.targets import check_dtype, gpu_target

log = logging.getLogger(__name__)

SOURCE_FORMAT = {"metal": "metal", "cuda": "cuda"}  # inspect_source format of each device module kind
SOURCE_SUFFIX = {"metal": ".metal", "cuda": ".cu"}
KERNEL_DEFINITION = {
    "metal": re.compile(r"^kernel void (\w+)\(", re.M),
    "cuda": re.compile(r'^extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\([^;{]*\)\s*\{', re.M),
}


@dataclass
class GPUBuild:
    component: str
    length: int
    dtype: str
    kind: str  # "metal" or "cuda"
    target: dict
    launches: dict[str, list[Launch]]  # PrimFunc name -> its launches, in program order
    unbound: list[str]
    source: str
    kernels: dict[str, str]  # kernel name -> its source text
    seconds: dict[str, float]
    coverage: dict[str, int] = field(default_factory=dict)  # schedule rule -> functions it scheduled
    executable: object = field(repr=False, default=None)

    @property
    def kernel_count(self) -> int:
        return len(self.kernels)

    def problems(self) -> list[str]:
        return [f"{name}: not bound to GPU threads" for name in self.unbound] + source_problems(self)

    def manifest(self) -> dict:
        """What outputs/06_metal_builds records per component (no source text; see `save`)."""
        sizes = sorted({launch.threads_per_group for ls in self.launches.values() for launch in ls})
        return {
            "component": self.component,
            "length": self.length,
            "dtype": self.dtype,
            "target": self.target,
            "primfuncs": len(self.launches),
            "kernel_count": self.kernel_count,
            "threadgroup_sizes": sizes,
            "source_bytes": len(self.source.encode()),
            "source_sha256": hashlib.sha256(self.source.encode()).hexdigest(),
            "kernels": [{"name": name, "bytes": len(text.encode())} for name, text in sorted(self.kernels.items())],
            "launches": {name: [asdict(launch) for launch in ls] for name, ls in sorted(self.launches.items())},
            "unbound": self.unbound,
            "rules": self.coverage,
            "problems": self.problems(),
            "seconds": self.seconds,
        }


def device_source(executable, kind: str) -> str:
    """The device module's source (Metal shading language or CUDA C) from a VM executable's imports."""
    pending, found = [executable.mod], []
    while pending:
        module = pending.pop()
        if module.kind == kind:
            found.append(module.inspect_source(SOURCE_FORMAT[kind]))
        pending.extend(module.imports)
    if not found:
        raise RuntimeError(f"the executable holds no {kind} module (no kernel was generated)")
    return "\n".join(found)


def split_kernels(source: str, kind: str) -> dict[str, str]:
    """Kernel name -> its definition's text (from its signature to the next definition)."""
    matches = list(KERNEL_DEFINITION[kind].finditer(source))
    return {
        m.group(1): source[m.start() : matches[i + 1].start() if i + 1 < len(matches) else len(source)]
        for i, m in enumerate(matches)
    }


def _kernel_owner(kernel: str, functions: list[str]) -> str | None:
    """TVM names the kernels of PrimFunc f `f_kernel`, `f_kernel_1`, ...; the longest matching f owns it."""
    owners = [f for f in functions if re.fullmatch(re.escape(f) + r"_kernel(_\d+)?", kernel)]
    return max(owners, key=len) if owners else None


def source_problems(build: GPUBuild) -> list[str]:
    problems = []
    functions = list(build.launches)
    counts: dict[str, int] = {}
    for name, text in build.kernels.items():
        owner = _kernel_owner(name, functions)
        if owner is None:
            problems.append(f"kernel {name} belongs to no PrimFunc of the module")
            continue
        counts[owner] = counts.get(owner, 0) + 1
        if text.count("{") != text.count("}") or text.count("{") == 0:
            problems.append(f"kernel {name}: incomplete body (unbalanced braces)")
    for name, ls in build.launches.items():
        if ls and counts.get(name, 0) != len(ls):
            problems.append(f"{name}: {len(ls)} launches but {counts.get(name, 0)} kernels in the source")
    return problems


def build_sources(model, spec, kind: str = "metal") -> GPUBuild:
    """Build `model`'s component at `spec` (a kokoro_tvm.compiler.build.BuildSpec) for a GPU and inventory it."""
    from kokoro_tvm.compiler.build import relax_module

    target = gpu_target(kind)
    check_dtype(spec.dtype, kind)
    mod, _exported, seconds = relax_module(model, spec)
    start, coverage = time.perf_counter(), {}
    lowered = lower(mod, target, coverage)
    seconds["schedule"] = time.perf_counter() - start
    launches = primfunc_launches(lowered)
    unbound = unbound_functions(launches)
    if unbound:  # code generation would stop in VerifyMemory; report every function instead
        return GPUBuild(
            spec.component, spec.length, spec.dtype, kind, target, launches, unbound, "", {}, seconds, coverage
        )
    start = time.perf_counter()
    executable = compile_lowered(lowered, target)
    seconds["codegen"] = time.perf_counter() - start
    source = device_source(executable, kind)
    kernels = split_kernels(source, kind)
    log.info(
        "%s %d for %s: %d kernels, %d bytes of source", spec.component, spec.length, kind, len(kernels), len(source)
    )
    return GPUBuild(
        spec.component,
        spec.length,
        spec.dtype,
        kind,
        target,
        launches,
        [],
        source,
        kernels,
        seconds,
        coverage,
        executable,
    )


def save(build: GPUBuild, folder: Path) -> dict:
    """Write the build's source (`<component>-n<length><suffix>`) under `folder`; return its manifest entry
    with the file name."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{build.component}-n{build.length}{SOURCE_SUFFIX[build.kind]}"
    (folder / name).write_text(build.source)
    return dict(build.manifest(), source_file=name)


def export_library(build: GPUBuild, path: Path) -> str:
    """Export a Metal build as a macOS library (needs Xcode's compiler); anywhere else, say why not."""
    if build.kind == "metal" and sys.platform != "darwin":
        return "skipped: needs macOS (Xcode's metal compiler and an arm64 macOS linker)"
    if build.executable is None:
        return "skipped: nothing was built"
    build.executable.export_library(str(path))
    return f"exported: {path}"


def nvcc_unavailable(checks: list[dict]) -> str | None:
    """Why no nvcc verdict exists for these nvcc_check results (None where nvcc ran on any of them): a claim on
    them is then not assessed, never passed."""
    if any(check["status"] in ("compiled", "failed") for check in checks):
        return None
    return "nvcc is not installed here"


def nvcc_check(source: str, arch: str = "sm_80") -> dict:
    """Compile CUDA source to PTX and assemble it for `arch` with nvcc (ptxas): a real compiler's verdict on the
    generated code without a GPU, resource limits included (ptxas alone refuses a kernel that needs more
    shared memory than a block may have)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return {"status": "skipped: nvcc not found"}
    with tempfile.TemporaryDirectory() as tmp:
        cu, ptx, cubin = Path(tmp) / "kernels.cu", Path(tmp) / "kernels.ptx", Path(tmp) / "kernels.cubin"
        cu.write_text(source)
        start = time.perf_counter()
        for step in (["-ptx", "-o", str(ptx), str(cu)], ["-cubin", "-o", str(cubin), str(ptx)]):
            done = subprocess.run([nvcc, "-w", f"-arch={arch}", *step], capture_output=True, text=True)
            if done.returncode != 0:  # (-w: TVM's unused-variable warnings drown the errors)
                messages = re.findall(r"error\s*: (.*)", done.stderr)
                distinct = {m: messages.count(m) for m in dict.fromkeys(messages)}
                return {
                    "status": "failed",
                    "arch": arch,
                    "seconds": time.perf_counter() - start,
                    "errors": distinct,
                    "first_error": done.stderr.strip()[:1500],
                }
        entries = len(re.findall(r"^\.visible \.entry ", ptx.read_text(), re.M))
    return {"status": "compiled", "arch": arch, "seconds": time.perf_counter() - start, "ptx_entries": entries}


def build_components(
    model, kind: str, lengths: dict[str, int], folder: Path, export: bool = False, symbolic: bool = False
) -> dict:
    """Build every component in `lengths` ({component: tokens or frames}; with `symbolic`, its symbolic-length
    build, the one the runtime uses for every length) for `kind`, save each source under `folder` with
    manifest.json, and return the manifest: per component its inventory, problems, and for CUDA nvcc's verdict,
    for Metal the export step's outcome."""
    from kokoro_tvm.compiler.build import BuildSpec

    folder = Path(folder)
    entries = []
    for component, length in lengths.items():
        spec = BuildSpec.dynamic(component) if symbolic else BuildSpec(component, length)
        build = build_sources(model, spec, kind)
        entry = dict(save(build, folder), symbolic=symbolic)  # symbolic: `length` is the largest it takes
        if kind == "cuda":
            entry["nvcc"] = nvcc_check(build.source, build.target["arch"])
        if kind == "metal":
            entry["export"] = (
                export_library(build, folder / f"{component}-n{build.length}.dylib") if export else "not requested"
            )
        entries.append(entry)
    manifest = {"kind": kind, "platform": sys.platform, "components": entries}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def gpu_lstm_check(batch: int = 2, hidden: int = 16, steps: int = 9, seed: int = 0) -> dict:
    """The GPU recurrence kernel's arithmetic checked on the CPU, in float64: its serial twin (same loop
    nest, thread loops serial) against our CPU kernel and PyTorch's packed LSTM on the same gates. Lengths
    are steps, steps-3, ...: every sample but the first has a padded tail. Returns the max abs errors."""
    import torch
    import tvm

    from kokoro_tvm.compiler.ops.lstm import masked_lstm_reference
    from kokoro_tvm.compiler.ops.lstm_gpu import gpu_recurrence_kernel
    from kokoro_tvm.compiler.ops.lstm_tir import recurrence_kernel

    rng = np.random.default_rng(seed)
    features = 5
    x = rng.standard_normal((batch, steps, features))
    lengths = np.array([max(1, steps - 3 * b) for b in range(batch)], dtype=np.int64)
    weights = [
        rng.standard_normal(shape) * 0.4
        for _ in range(2)
        for shape in ((4 * hidden, features), (4 * hidden, hidden), (4 * hidden,), (4 * hidden,))
    ]
    w_ih, w_hh, b_ih, b_hh, w_ih_r, w_hh_r, b_ih_r, b_hh_r = weights
    gates_x = np.stack([x @ w_ih.T + b_ih + b_hh, x @ w_ih_r.T + b_ih_r + b_hh_r])  # the hoisted projection
    w_hh_t = np.stack([w_hh.T, w_hh_r.T])

    def run(func):
        module = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
        kernel = tvm.tirx.build(module, target=tvm.target.Target({"kind": "llvm"}))
        out = tvm.runtime.tensor(np.full((batch, steps, 2 * hidden), np.nan))
        kernel["main"](*(tvm.runtime.tensor(np.ascontiguousarray(a)) for a in (gates_x, w_hh_t, lengths)), out)
        return out.numpy()

    gpu_twin = run(gpu_recurrence_kernel(batch, hidden, "float64", bind_threads=False))
    cpu = run(recurrence_kernel(batch, hidden, "float64"))
    torch_out = (
        masked_lstm_reference(torch.from_numpy(x), torch.from_numpy(lengths), *(torch.from_numpy(w) for w in weights))
        .detach()
        .numpy()
    )
    return {
        "batch": batch,
        "hidden": hidden,
        "steps": steps,
        "lengths": lengths.tolist(),
        "gpu_twin_vs_cpu_kernel": float(np.abs(gpu_twin - cpu).max()),
        "gpu_twin_vs_torch": float(np.abs(gpu_twin - torch_out).max()),
        "tail_is_zero": bool(all((gpu_twin[b, n:] == 0).all() for b, n in enumerate(lengths))),
    }


def excerpt(source: str, kind: str, kernel_prefix: str, lines: int = 12) -> str:
    """The first `lines` lines of the first kernel whose name starts with `kernel_prefix`."""
    for name, text in split_kernels(source, kind).items():
        if name.startswith(kernel_prefix):
            return "\n".join(text.splitlines()[:lines])
    raise KeyError(f"no kernel named {kernel_prefix}* in the source")


def inventory_row(entry: dict) -> dict:
    """One table row from a manifest entry."""
    row = {k: entry[k] for k in ("component", "length", "primfuncs", "kernel_count", "source_bytes")}
    row["threadgroups"] = ",".join(str(s) for s in entry["threadgroup_sizes"])
    row["bound"] = entry["primfuncs"] - len(entry["unbound"])
    row["build_s"] = round(sum(entry["seconds"].values()), 1)
    row["problems"] = len(entry["problems"])
    for key in ("nvcc", "export"):
        if key in entry:
            value = entry[key]
            row[key] = value["status"] if isinstance(value, dict) else value
    return row
