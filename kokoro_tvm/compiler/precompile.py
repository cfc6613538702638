"""The `compile` command's work: every artifact of a bucket set (or the symbolic-length builds) built ahead of
time into the cache (kokoro_tvm.compiler.build), with a progress bar and one record per artifact."""

from __future__ import annotations

import time

from kokoro_tvm.compiler.build import BuildSpec, artifact_place, build
from kokoro_tvm.compiler.targets import host_target
from kokoro_tvm.components import FRAME_COMPONENTS, NAMES, TOKEN_COMPONENTS, build_precision


def bucket_specs(buckets, dtype: str = "float32", precision: str = "full") -> list[BuildSpec]:
    """Every (component, length) a bucket set needs, token axis first, smallest first; for the symbolic set
    (kokoro_tvm.runtime.buckets.DynamicLengths) one symbolic build per component."""
    if buckets.symbolic:
        return [BuildSpec.dynamic(name, dtype, build_precision(name, precision)) for name in NAMES]
    return [
        BuildSpec(c, n, dtype, precision=build_precision(c, precision))
        for n, c in [(n, c) for n in buckets.tokens for c in TOKEN_COMPONENTS]
        + [(n, c) for n in buckets.frames for c in FRAME_COMPONENTS]
    ]


def precompile(
    model, weights_fingerprint: str, buckets, dtype: str = "float32", progress: bool = True, precision: str = "full"
) -> list[dict]:
    """Build (or find in the cache) every artifact of a bucket set, with a progress bar; one record per
    artifact: component, length, cached or built, seconds, library bytes, its folder in the cache."""
    from tqdm.auto import tqdm

    target = host_target()
    records = []
    specs = bucket_specs(buckets, dtype, precision)
    bar = tqdm(specs, desc=f"compile {buckets.name}", unit="artifact", disable=not progress)
    for spec in bar:
        bar.set_postfix_str(f"{spec.component} {spec.length}")
        start = time.perf_counter()
        manifest = artifact_place(spec, weights_fingerprint, target)[2] / "manifest.json"
        before = manifest.stat().st_mtime_ns if manifest.exists() else None
        artifact = build(model, weights_fingerprint, spec, target)
        cached = before is not None and manifest.stat().st_mtime_ns == before  # build() rewrites what it builds
        records.append(
            {
                "component": spec.component,
                "length": spec.length,
                "symbolic": spec.symbolic,
                "dtype": dtype,
                "precision": spec.precision,
                "cached": cached,
                "seconds": time.perf_counter() - start,
                "build_seconds": sum(artifact.manifest["seconds"].values()),
                "library_bytes": artifact.library.stat().st_size,
                "folder": str(artifact.library.parent),
            }
        )
    return records
