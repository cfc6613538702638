"""The only module that calls TVM build APIs: export -> import -> Relax pipeline -> build, with a cache.

An artifact is one component at one static shape and dtype for one target: a shared library (the Relax VM
executable, weights kept as parameters) plus a manifest. Parameters are stored once per (weights,
component, dtype) as .npz and shared by every shape. The cache key covers the weights fingerprint,
component, shape, dtype, the export/convert recipe version, the TVM version and the target; a manifest that
does not match, or a file whose sha256 differs from its manifest, is rebuilt with a log line, never used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from kokoro_tvm.artifacts import Artifact, ArtifactError, file_sha256, params_digest
from kokoro_tvm.export import ComponentShape
from kokoro_tvm.paths import cache_dir

log = logging.getLogger(__name__)

# Bump when export wrappers, patches, custom ops or converters change what a build computes.
# recipe 20: power(x, 2|3) as products; 16x16 or 8x32 register tiles chosen by L1 set collisions and tile order
# by operand size; conv epilogues per tile again; vectorized row reductions; masked norms recompute x * mask
RECIPE_VERSION = "20-integer-powers"
DTYPES = ("float32", "float64")


@dataclass(frozen=True)
class BuildSpec:
    component: str
    length: int  # tokens T or frames F
    dtype: str = "float32"
    batch: int = 1

    def __post_init__(self):
        ComponentShape(self.component, self.length, self.batch)  # validates component and sizes
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")

    @property
    def shape(self) -> ComponentShape:
        return ComponentShape(self.component, self.length, self.batch)


def host_target() -> dict:
    """LLVM for this CPU. `mcpu="native"` silently falls back to generic code with this wheel's LLVM, so the
    CPU name comes from LLVM's host detection."""
    from tvm.target import codegen

    return {"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu()}


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
    raise ValueError(f"GPU target must be 'metal' or 'cuda', got {kind!r}")


def _cuda_arch() -> str:
    """This machine's GPU architecture, or sm_80 (A100-class) where there is no CUDA device to ask."""
    import tvm

    device = tvm.cuda(0)
    return f"sm_{device.compute_version.replace('.', '')}" if device.exist else "sm_80"


def check_dtype(dtype: str, kind: str) -> None:
    """Metal has no float64: a float64 (verification) build for Metal (target or device kind) is refused."""
    if kind == "metal" and dtype == "float64":
        raise ValueError("Metal has no float64: the float64 verification build runs on the CPU (or CUDA)")


def check_device(device: str, dtype: str) -> None:
    """Before any weights load or build: `device` takes `dtype` and exists on this machine (one clear error)."""
    from kokoro_tvm.runtime import require_device

    check_dtype(dtype, device)
    if device != "cpu":
        require_device(device)


def relax_pipeline(target, coverage: dict | None = None):
    """The Relax pipeline for `target`: kokoro_tvm.gpu_schedule's for GPU targets; for the CPU, TVM's CPU
    pipeline plus our Relax rewrites before legalization and our schedules after fusion (TVM 0.27's own
    CPU pipeline leaves every PrimFunc unscheduled: serial scalar loops)."""
    from kokoro_tvm import gpu_schedule

    if target.kind.name in gpu_schedule.GPU_KINDS:  # `coverage`: functions scheduled per rule
        return gpu_schedule.relax_pipeline(target, coverage)
    import tvm
    from tvm import relax
    from tvm.s_tir import dlight

    from kokoro_tvm.cpu_schedule import rules
    from kokoro_tvm.relax_passes import AlignConvLengths, IntegerPowers, PolyphaseConvTranspose, VectorizableSine

    cpu = relax.backend.cpu_generic.pipeline

    @tvm.transform.module_pass(opt_level=0, name="KokoroCPUPipeline")
    def _pipeline(mod, _ctx):
        with target:
            return tvm.transform.Sequential(
                [PolyphaseConvTranspose(), AlignConvLengths(), VectorizableSine(), IntegerPowers()]
                + cpu.library_dispatch_passes(target)
                + cpu.legalize_passes(target)
                + [dlight.ApplyDefaultSchedule(*rules())]
                + cpu.dataflow_lower_passes(target)
                + cpu.finalize_passes(target)
            )(mod)

    return _pipeline


# The VM function that turns the stored parameters into the ones `main` takes (see lift_weight_transforms).
TRANSFORM_PARAMS = "main_transform_params"


def lift_weight_transforms(mod):
    """Move every computation that depends on weights alone (ALBERT's per-call `permute_dims` of each linear
    weight, 12 times over for its one shared layer) out of `main` into TRANSFORM_PARAMS, which the runtime
    calls once at load. Exact: the lifted ops are the same ops, run earlier."""
    from tvm import relax

    return relax.transform.LiftTransformParams()(mod)


def lower(mod, target: dict, coverage: dict | None = None):
    """The Relax module after our pipeline for `target`: every PrimFunc scheduled, not yet code-generated
    (kokoro_tvm.gpu_builds inspects it: which kernels exist, their thread bindings; for GPU targets
    `coverage` receives how many functions each schedule rule took)."""
    import tvm

    tvm_target = tvm.target.Target(target)
    return relax_pipeline(tvm_target, coverage)(mod)


# TVM 0.27's CUDA code generation writes a vectorized boolean (our masks' `where` in conv epilogues, which
# dlight's GPU Matmul rule vectorizes 2-wide) as `float2 v = make_ushort2(...)`, which nvcc rejects: CUDA
# builds lower vectorized loops to scalar ones (NOTES/metal.md). Metal's schedules do not vectorize there.
CODEGEN_CONFIG = {"cuda": {"tirx.disable_vectorize": True}}


def compile_lowered(lowered, target: dict):
    """A module from `lower` -> VM executable (TVM's TIR pipeline and code generation only)."""
    import tvm

    current = tvm.transform.PassContext.current()
    config = CODEGEN_CONFIG.get(target["kind"])
    if not config:
        return tvm.compile(lowered, target=tvm.target.Target(target), relax_pipeline=None)
    with tvm.transform.PassContext(opt_level=current.opt_level, config=config):
        return tvm.compile(lowered, target=tvm.target.Target(target), relax_pipeline=None)


def compile_relax(mod, target: dict):
    """The Relax module -> VM executable with our pipeline."""
    return compile_lowered(lower(mod, target), target)


def relax_module(model, spec: BuildSpec):
    """Export `model`'s component at `spec` and import it into Relax, weight-only work lifted out of main.
    Returns (module, exported program, {"export": s, "import": s})."""
    from kokoro_tvm.convert import to_relax
    from kokoro_tvm.export import export_component
    from kokoro_tvm.reference import default_dtype

    if str(next(model.parameters()).dtype).removeprefix("torch.") != spec.dtype:
        raise ValueError(f"model dtype {next(model.parameters()).dtype} does not match the spec's {spec.dtype}")
    t0 = time.perf_counter()
    exported = export_component(model, spec.shape)
    t1 = time.perf_counter()
    with default_dtype(next(model.parameters()).dtype):  # the importer re-runs decompositions: same rule
        mod = lift_weight_transforms(to_relax(exported, keep_params_as_input=True))
    return mod, exported, {"export": t1 - t0, "import": time.perf_counter() - t1}


def _key(fields: dict) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:24]


def _key_fields(spec: BuildSpec, weights_fingerprint: str, target: dict) -> dict:
    import tvm

    return dict(
        asdict(spec),
        weights=weights_fingerprint,
        recipe=RECIPE_VERSION,
        tvm=tvm.__version__,
        target=target,
    )


def _valid(folder: Path, fields: dict) -> Artifact | None:
    """The cached artifact if its manifest matches `fields` and its files their recorded hashes, else None."""
    if not (folder / "manifest.json").exists():
        return None
    try:
        artifact = Artifact.open(folder)
        if artifact.manifest.get("key") != fields:
            raise ArtifactError(f"built for {artifact.manifest.get('key')}")
        if not artifact.library.exists() or file_sha256(artifact.library) != artifact.manifest["library_sha256"]:
            raise ArtifactError(f"{artifact.library} is missing or does not match its recorded sha256")
        artifact.load_params()
    except (ArtifactError, KeyError) as exc:
        log.warning("rebuilding %s: %s", folder.name, exc)
        return None
    return artifact


def _folder(spec: BuildSpec, fields: dict) -> Path:
    return cache_dir() / "artifacts" / f"{spec.component}-{spec.dtype}-b{spec.batch}-n{spec.length}-{_key(fields)}"


def build(model, weights_fingerprint: str, spec: BuildSpec, target: dict | None = None) -> Artifact:
    """The cached artifact for `spec`, building it if missing or invalid. `model` must be in spec.dtype."""
    target = target or host_target()
    fields = _key_fields(spec, weights_fingerprint, target)
    folder = _folder(spec, fields)
    cached = _valid(folder, fields)
    if cached is not None:
        return cached
    manifest = _build(model, spec, target, fields, folder / "component.so", _params_path(weights_fingerprint, spec))
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return Artifact.open(folder)


def _params_path(weights_fingerprint: str, spec: BuildSpec) -> Path:
    key = _key({"weights": weights_fingerprint, "component": spec.component, "dtype": spec.dtype})
    return cache_dir() / "params" / f"{spec.component}-{spec.dtype}-{key}.npz"


def _build(model, spec: BuildSpec, target: dict, fields: dict, library: Path, params: Path) -> dict:
    import torch

    check_dtype(spec.dtype, target["kind"])
    log.info(
        "building %s (%s, length %d, batch %d) for %s",
        spec.component,
        spec.dtype,
        spec.length,
        spec.batch,
        target.get("mcpu", target["kind"]),
    )
    mod, exported, seconds = relax_module(model, spec)
    t2 = time.perf_counter()
    executable = compile_relax(mod, target)
    library.parent.mkdir(parents=True, exist_ok=True)
    executable.export_library(str(library))
    t3 = time.perf_counter()
    seconds["compile"] = t3 - t2
    names = list(exported.graph_signature.parameters)
    named = dict(exported.named_parameters())
    with torch.no_grad():
        arrays = {name: named[name].detach().cpu().numpy() for name in names}
    digest = params_digest(arrays, names)
    _write_params(params, arrays, names, digest)
    relax_lines = len(mod.script().splitlines())
    log.info(
        "built %s in %.1f s (export %.1f, import %.1f, compile %.1f); %d Relax lines",
        spec.component,
        sum(seconds.values()),
        seconds["export"],
        seconds["import"],
        seconds["compile"],
        relax_lines,
    )
    return {
        "key": fields,
        "param_names": names,
        "params_file": str(params),
        "params_digest": digest,
        "transform_params": TRANSFORM_PARAMS if TRANSFORM_PARAMS in {gv.name_hint for gv in mod.functions} else None,
        "library_sha256": file_sha256(library),
        "seconds": seconds,
        "relax_lines": relax_lines,
    }


def _write_params(path: Path, arrays: dict[str, np.ndarray], names: list[str], digest: str) -> None:
    """One parameter file per (weights, component, dtype), shared by every shape; rewritten if stale."""
    probe = Artifact(path.with_suffix(".so"), path, {"param_names": names, "params_digest": digest})
    if path.exists():
        try:
            probe.load_params()
            return
        except ArtifactError as exc:
            log.warning("rewriting parameters: %s", exc)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".partial.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)


class OnDemandBuilder:
    """An artifact provider for kokoro_tvm.runtime: builds (or finds in the cache) each shape on first use."""

    def __init__(self, model, weights_fingerprint: str, dtype: str = "float32", target: dict | None = None):
        self.model, self.weights_fingerprint, self.dtype = model, weights_fingerprint, dtype
        self.target = target or host_target()

    def __call__(self, component: str, length: int) -> Artifact:
        return build(self.model, self.weights_fingerprint, BuildSpec(component, length, self.dtype), self.target)


def target_for(device: str) -> dict:
    """The build target for a runtime device: this CPU, or a GPU target (kokoro_tvm.gpu_schedule)."""
    return host_target() if device == "cpu" else gpu_target(device)


def compiled_kokoro(
    model, weights_fingerprint: str, dtype: str = "float32", target: dict | None = None, buckets=None, device="cpu"
):
    """A runtime.TVMKokoro whose components are built on demand from `model` (in `dtype`) for `device`; with
    a kokoro_tvm.buckets.BucketSet, utterances run in its buckets, else at exact length. A missing device
    or a dtype it lacks is reported before anything is built."""
    from kokoro_tvm.runtime import TVMKokoro

    check_device(device, dtype)
    provider = OnDemandBuilder(model, weights_fingerprint, dtype, target or target_for(device))
    return TVMKokoro(provider, dtype, buckets, device)


def bucket_specs(buckets, dtype: str = "float32") -> list[BuildSpec]:
    """Every (component, length) a bucket set needs, token axis first, smallest first."""
    from kokoro_tvm.buckets import FRAME_COMPONENTS, TOKEN_COMPONENTS

    return [BuildSpec(c, n, dtype) for n in buckets.tokens for c in TOKEN_COMPONENTS] + [
        BuildSpec(c, n, dtype) for n in buckets.frames for c in FRAME_COMPONENTS
    ]


def precompile(model, weights_fingerprint: str, buckets, dtype: str = "float32", progress: bool = True) -> list[dict]:
    """Build (or find in the cache) every artifact of a bucket set, with a progress bar; one record per
    artifact: component, length, cached or built, seconds, library bytes, its folder in the cache."""
    from tqdm.auto import tqdm

    target = host_target()
    records = []
    specs = bucket_specs(buckets, dtype)
    bar = tqdm(specs, desc=f"compile {buckets.name}", unit="artifact", disable=not progress)
    for spec in bar:
        bar.set_postfix_str(f"{spec.component} {spec.length}")
        start = time.perf_counter()
        manifest = _folder(spec, _key_fields(spec, weights_fingerprint, target)) / "manifest.json"
        before = manifest.stat().st_mtime_ns if manifest.exists() else None
        artifact = build(model, weights_fingerprint, spec, target)
        cached = before is not None and manifest.stat().st_mtime_ns == before  # build() rewrites what it builds
        records.append(
            {
                "component": spec.component,
                "length": spec.length,
                "dtype": dtype,
                "cached": cached,
                "seconds": time.perf_counter() - start,
                "build_seconds": sum(artifact.manifest["seconds"].values()),
                "library_bytes": artifact.library.stat().st_size,
                "folder": str(artifact.library.parent),
            }
        )
    return records
