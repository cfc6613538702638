"""Build one component: export -> import -> Relax pipeline (kokoro_tvm.compiler.pipeline) -> library, cached.

An artifact is one component at one shape and dtype for one target: a shared library (the Relax VM
executable, weights kept as parameters) plus a manifest. The shape is one static length, or (`symbolic=True`)
every whole number of kokoro_tvm.components.LENGTH_TILE steps up to `length` (kokoro_tvm.compiler.symbolic; its
manifest records `length_tile`; a caller passes the tile count after the inputs). Parameters are stored once per
(weights, component, dtype) as .npz and shared by every shape. The cache key covers the
weights fingerprint, component, shape, dtype, the export/convert recipe version, a digest of the source that
decides what a build computes (`build_source_digest`), the TVM version and the target; a manifest that does not
match, or a file whose sha256 differs from its manifest, is rebuilt with a log line, never used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import tvm

from kokoro_tvm.artifacts import Artifact, ArtifactError, build_source_digest, file_sha256, params_digest
from kokoro_tvm.compiler import amx, bf16, int8, programs
from kokoro_tvm.compiler.arithmetic import require_arithmetic
from kokoro_tvm.compiler.converters import to_relax
from kokoro_tvm.compiler.export import ComponentShape, export_component
from kokoro_tvm.compiler.pipeline import TRANSFORM_PARAMS, compile_relax, lift_weight_transforms
from kokoro_tvm.compiler.symbolic import SymbolicShape, add_tile_count, export_symbolic
from kokoro_tvm.compiler.targets import DTYPES, check_dtype, cpu_geometry, host_target
from kokoro_tvm.compiler.tuning import record as tuning_record
from kokoro_tvm.compiler.tuning.record import TuningRecord
from kokoro_tvm.components import (
    LENGTH_TILE,
    SYMBOLIC_MAX_LENGTH,
    build_precision,
    check_arithmetic,
)
from kokoro_tvm.components import component as component_info
from kokoro_tvm.machine import amx_tiles
from kokoro_tvm.paths import cache_dir, cache_lock, temporary_sibling
from kokoro_tvm.reference.pt_dynamic import default_dtype

log = logging.getLogger(__name__)

# Part of every cache key, bumped by hand with a name for a change in what builds compute (its history is git's
# log of this line); the build-source digest below forces a rebuild after any edit in any case.
RECIPE_VERSION = "25-phase-rounded-as-pytorch"


LEAF_SPEC_WARNING = r"`isinstance\(treespec, LeafSpec\)` is deprecated"


@dataclass(frozen=True)
class BuildSpec:
    component: str
    length: int  # tokens T or frames F; symbolic: the largest length the build takes
    dtype: str = "float32"
    batch: int = 1
    symbolic: bool = False
    precision: str = "full"  # the build's arithmetic (components.ARITHMETICS; a --precision's .arithmetic)

    def __post_init__(self):
        ComponentShape(self.component, self.length, self.batch)  # validates component and sizes
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if check_arithmetic(self.precision) != "full" and self.dtype != "float32":
            raise ValueError(f"{self.precision} builds start from the float32 model, not {self.dtype}")
        if self.symbolic and self.length % LENGTH_TILE:
            raise ValueError(f"a symbolic build takes a multiple of {LENGTH_TILE}, got {self}")

    @classmethod
    def dynamic(cls, component: str, dtype: str = "float32", precision: str = "full", batch: int = 1) -> BuildSpec:
        """The symbolic-length build of `component` for `batch` utterances: every tile count up to its axis's
        largest length (each utterance its own length, masked, within the longest)."""
        axis = component_info(component).axis
        return cls(component, SYMBOLIC_MAX_LENGTH[axis], dtype, batch, symbolic=True, precision=precision)

    @property
    def shape(self) -> ComponentShape:
        return ComponentShape(self.component, self.length, self.batch)


def decomposed_program(model, spec: BuildSpec) -> torch.export.ExportedProgram:
    """`model`'s component exported at `spec` (a static length, or symbolic) and decomposed as the importer reads
    it: a notebook that reads its ops (`converters.graph_ops(..., decompose=False)`) and builds it (`build(...,
    decomposed=)`) does this once, and `build` keeps it for the shape's other precisions (compiler.programs).

    The trace runs on a thread of its own, which the caller waits for. A Dask worker's profiler walks the frames of
    the thread running its task every 10 ms (`distributed.profile.process`); a trace on a thread so walked now and
    then lost a factory tensor from its proxies and stopped on "a fake tensor in the exported program constant's
    list" (NOTES/scale.md; tests/test_compile.py). A profiler samples its task's thread, not one the task starts."""

    def trace() -> torch.export.ExportedProgram:
        with default_dtype(next(model.parameters()).dtype), warnings.catch_warnings():  # dtype: every export's rule
            # torch's export deep-copies its own pytree leaf, whose class is deprecated: a warning per build that
            # no caller can act on
            warnings.filterwarnings("ignore", LEAF_SPEC_WARNING, FutureWarning)
            if spec.symbolic:
                shape = SymbolicShape(spec.component, spec.length // LENGTH_TILE, spec.batch)
                exported = export_symbolic(model, shape)
            else:
                exported = export_component(model, spec.shape)
            return exported.run_decompositions()

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kokoro-tvm-export") as tracer:
        return tracer.submit(trace).result()


def relax_module(model, spec: BuildSpec, decomposed: torch.export.ExportedProgram | None = None, target=None):
    """Export and decompose `model`'s component at `spec` (or take `decomposed`, its `decomposed_program`) and
    import it, weight work lifted for `target` (pipeline.lift_weight_transforms): (module, decomposed program,
    {"export": s, "import": s}), the export's seconds including PyTorch's decompositions."""
    if str(next(model.parameters()).dtype).removeprefix("torch.") != spec.dtype:
        raise ValueError(f"model dtype {next(model.parameters()).dtype} does not match the spec's {spec.dtype}")
    t0 = time.perf_counter()
    program = decomposed_program(model, spec) if decomposed is None else decomposed
    t1 = time.perf_counter()
    with default_dtype(next(model.parameters()).dtype):
        mod = to_relax(program, keep_params_as_input=True, decomposed=True)
        mod = lift_weight_transforms(add_tile_count(mod), spec.component, spec.precision, target)
    return mod, program, {"export": t1 - t0, "import": time.perf_counter() - t1}


def symbolic_relax_module(model, shape: SymbolicShape, precision: str = "full", target=None):
    """relax_module for one component with a symbolic length (kokoro_tvm.compiler.symbolic)."""
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    spec = BuildSpec(shape.component, shape.max_length, dtype, shape.batch, symbolic=True, precision=precision)
    return relax_module(model, spec, target=target)


def _key(fields: dict) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:24]


def key_fields(spec: BuildSpec, weights_fingerprint: str, target: dict, tuning: TuningRecord | None = None) -> dict:
    shape = asdict(spec)
    if not spec.symbolic:
        del shape["symbolic"]  # static keys as before the field existed: their cached artifacts stay valid
    else:
        shape["length_tile"] = LENGTH_TILE  # a build for one tile never serves another
    if spec.precision == "full":
        del shape["precision"]  # likewise
    else:
        shape["reduced_kernel"] = bf16.KERNEL_VERSION
        if spec.precision == "int8":
            shape["int8_kernel"] = int8.KERNEL_VERSION
    return dict(
        shape,
        weights=weights_fingerprint,
        recipe=RECIPE_VERSION,
        source=build_source_digest(),
        tvm=tvm.__version__,
        target=target,
        # what the CPU schedules read of the machine (its measured caches included): a build never meets a
        # cache entry scheduled for another geometry
        **({"cpu_geometry": asdict(cpu_geometry(target))} if target.get("kind") == "llvm" else {}),
        # the measured schedules it was built with (kokoro_tvm.compiler.tuning): a new record rebuilds
        **({"tuning": tuning.digest()} if tuning is not None else {}),
        # AMX tile kernels where the record chose them and this process may use the tile engine (the runtime
        # asks for the same grant before it loads the library)
        **({"amx_kernel": amx.KERNEL_VERSION} if _uses_amx(spec, tuning) else {}),
    )


def _uses_amx(spec: BuildSpec, record: TuningRecord | None) -> bool:
    return (
        record is not None and spec.precision != "full" and tuning_record.AMX in record.packed.values() and amx_tiles()
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
        artifact.verify()
    except (ArtifactError, KeyError) as exc:
        log.warning("rebuilding %s: %s", folder.name, exc)
        return None
    return artifact


def cache_folder(spec: BuildSpec, fields: dict) -> Path:
    length = f"upto{spec.length}" if spec.symbolic else f"n{spec.length}"
    dtype = spec.dtype if spec.precision == "full" else spec.precision
    return cache_dir() / "artifacts" / f"{spec.component}-{dtype}-b{spec.batch}-{length}-{_key(fields)}"


def artifact_place(spec: BuildSpec, weights_fingerprint: str, target: dict) -> tuple[TuningRecord | None, dict, Path]:
    """Where `build` keeps the artifact of `spec` for `target`: the tuning record it schedules from, its key
    fields and its cache folder (what `precompile` asks to tell a cached artifact from a built one)."""
    record = tuning_record.for_target(target)
    fields = key_fields(spec, weights_fingerprint, target, record)
    return record, fields, cache_folder(spec, fields)


def build(model, weights_fingerprint: str, spec: BuildSpec, target: dict | None = None, decomposed=None) -> Artifact:
    """The cached artifact for `spec`, building it if missing or invalid. `model`: the KModel in spec.dtype, or a
    function that loads it, called only to build; `decomposed`, if given, is `decomposed_program(model, spec)`,
    which a build then neither exports nor decomposes.

    Safe with several processes on one cache: the build holds the artifact's lock (a second process waits,
    then finds it built), and every file is written under a temporary name and renamed into place, the
    manifest last, so a reader never meets a half-written library."""
    target = target or host_target()
    record, fields, folder = artifact_place(spec, weights_fingerprint, target)
    with cache_lock(folder):
        cached = _valid(folder, fields)  # possibly built by another process while this one waited
        if cached is not None:
            return cached
        library = folder / "component.so"
        model = model if isinstance(model, torch.nn.Module) else model()
        with tuning_record.using(record):
            params = _params_path(weights_fingerprint, spec)
            manifest = _build(model, spec, target, fields, library, params, decomposed)
        tmp = temporary_sibling(folder / "manifest.json")
        tmp.write_text(json.dumps(manifest, indent=1))
        os.replace(tmp, folder / "manifest.json")
    return Artifact.open(folder)


def _params_path(weights_fingerprint: str, spec: BuildSpec) -> Path:
    key = _key({"weights": weights_fingerprint, "component": spec.component, "dtype": spec.dtype})
    return cache_dir() / "params" / f"{spec.component}-{spec.dtype}-{key}.npz"


def _build(model, spec: BuildSpec, target: dict, fields: dict, library: Path, params: Path, decomposed=None) -> dict:
    check_dtype(spec.dtype, target["kind"])
    require_arithmetic(spec.precision, target)
    log.info(
        "building %s (%s, length %s%d, batch %d) for %s",
        spec.component,
        spec.dtype,
        "symbolic up to " if spec.symbolic else "",
        spec.length,
        spec.batch,
        target.get("mcpu", target["kind"]),
    )
    shared = decomposed if decomposed is not None else programs.kept_program(model, fields["weights"], spec)
    mod, exported, seconds = relax_module(model, spec, shared, target)
    programs.keep_program(fields["weights"], spec, exported)
    t2 = time.perf_counter()
    executable = compile_relax(mod, target)
    library.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(library).with_suffix(".so")  # the linker picks the output kind by suffix
    executable.export_library(str(tmp))
    os.replace(tmp, library)
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
        "params_file": os.path.relpath(params, library.parent),  # the cache can move (Artifact.open)
        "params_digest": digest,
        "transform_params": TRANSFORM_PARAMS if TRANSFORM_PARAMS in {gv.name_hint for gv in mod.functions} else None,
        "library_sha256": file_sha256(library),
        "length_tile": LENGTH_TILE if spec.symbolic else None,
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
    tmp = temporary_sibling(path)
    with open(tmp, "wb") as handle:  # a file object: np.savez would append .npz to a name
        np.savez(handle, **arrays)
    os.replace(tmp, path)


class OnDemandBuilder:
    """An artifact provider `(component, length, batch) -> Artifact` for kokoro_tvm.runtime.kokoro.TVMKokoro: builds
    (or finds in the cache) each shape on first use; length None is the component's symbolic-length build. `model`: as
    `build` takes it (a loader is called at the first build, never when every artifact is cached)."""

    def __init__(self, model, weights_fingerprint: str, dtype="float32", target: dict | None = None, precision="full"):
        self.model, self.weights_fingerprint, self.dtype = model, weights_fingerprint, dtype
        self.target, self.precision = target or host_target(), precision

    def __call__(self, component: str, length: int | None, batch: int = 1) -> Artifact:
        precision = build_precision(component, self.precision)
        if length is None:
            spec = BuildSpec.dynamic(component, self.dtype, precision, batch)
        else:
            spec = BuildSpec(component, length, self.dtype, batch, precision=precision)
        return build(self.model, self.weights_fingerprint, spec, self.target)
