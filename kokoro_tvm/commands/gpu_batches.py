"""Batched throughput in the device check: what a check bundle carries for it (each component's symbolic-length
build for B utterances a call, at a few batch sizes; kokoro_tvm.runtime.bundle_batches runs them) and its
scoring.

A few batch sizes, not a symbolic batch axis: the builds, like the CPU runtime's (`synthesize_batch`), fix B
and keep the length symbolic, and each batch size is one more library per component (the decoder's CUDA
library is 7.8 MB; the parameters are shared). No recorded inputs travel for them: the runner repeats each
recorded case's inputs B times, and checks each row against the batch-1 build on the same device.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from kokoro_tvm.components import NAMES
from kokoro_tvm.config import SAMPLE_RATE, SAMPLES_PER_FRAME
from kokoro_tvm.runtime import bundle_batches

# The batch sizes a GPU bundle carries unless told: 8 and 64 beside the bundle's batch 1 (batches of 1 to 64 in
# three points, each a CUDA library per component to compile as it loads on the lent machine's limited time)
GPU_BATCHES = (8, 64)


def default_batches(device: str) -> tuple[int, ...]:
    """GPU_BATCHES on a GPU; none on the CPU (batching does not pay there: NOTES/performance.md "Batching")."""
    return () if device == "cpu" else GPU_BATCHES


def add_batched_builds(
    model, weights_fingerprint: str, device: str, target: dict, folder, libraries: dict, utterances, sizes
) -> dict | None:
    """Each component's batch-B build for `target` (the bundle's) for every B in `sizes` into folder/libs/
    (`<component>-b<B>.so`, the batch-1 build's parameters); returns bundle.json's "batches" entry, or None
    without sizes."""
    from kokoro_tvm.compiler.build import OnDemandBuilder

    if not sizes:
        return None
    builds, entries, seconds = OnDemandBuilder(model, weights_fingerprint, "float32", target), {}, {}
    for batch in sizes:
        for component in NAMES:
            start, key = time.perf_counter(), f"{component}-b{batch}"
            artifact = builds(component, None, batch)
            first = next(entry for entry in libraries.values() if entry["component"] == component)
            if artifact.param_names != first["param_names"]:  # the component's one parameter file must fit it
                raise ValueError(f"{key}: its parameters differ from the batch-1 build's")
            shutil.copyfile(artifact.library, Path(folder) / "libs" / f"{key}.so")
            entries[key] = {
                **first,
                "library": f"libs/{key}.so",
                "batch": batch,
                "length_tile": artifact.length_tile,
                "transform_params": artifact.manifest.get("transform_params"),
            }
            seconds[key] = time.perf_counter() - start
    return {
        "sizes": list(sizes),
        "libraries": entries,
        "audio_seconds": {u["name"]: u["frames"] * SAMPLES_PER_FRAME / SAMPLE_RATE for u in utterances},
        "build_seconds": seconds,
        "run": f"python3 run_batches.py . --device {device} --out results",
    }


def score_batches(results_dir, torch_peer: list[dict] | None) -> list[dict] | None:
    """Per batch size and utterance, from the runner's results (None where it did not run): audio seconds per
    second, its gain over batch 1, the worst row's distance from the utterance alone, and over PyTorch's
    throughput on the same device and utterance (its fp32 and bf16, the faster; KModel speaks one utterance a
    call) where the PyTorch peer ran."""
    path = Path(results_dir) / bundle_batches.RESULTS
    if not path.is_file():
        return None
    rows = json.loads(path.read_text())["rows"]
    single = {row["utterance"]: row.get("audio_per_second") for row in rows if row["batch"] == 1}
    best_peer = {}
    for row in torch_peer or ():
        best_peer[row["utterance"]] = max(best_peer.get(row["utterance"], 0.0), row["audio_per_second"])
    scored = []
    for row in rows:
        if "error" in row:
            scored.append({"batch": row["batch"], "utterance": row["utterance"], "error": row["error"]})
            continue
        base, peer = single.get(row["utterance"]), best_peer.get(row["utterance"])
        scored.append(
            {
                "batch": row["batch"],
                "utterance": row["utterance"],
                "audio_per_second": row["audio_per_second"],
                "vs_batch_1": row["audio_per_second"] / base if base else None,
                "over_pytorch": row["audio_per_second"] / peer if peer else None,
                "worst_row_rel_l2": row["worst_row_rel_l2"],
                "chain_seconds": row["chain_seconds"],
                **{f"{c}_s": s for c, s in row["components"].items()},
            }
        )
    return scored
