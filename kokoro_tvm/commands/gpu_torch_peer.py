"""PyTorch on the device, in the device check: what a check bundle carries for KModel to run beside the compiled
components on the same machine and utterances (kokoro_tvm.peers.kmodel_device, the runner), and its scoring.

The lent GPU machine has torch and transformers but neither kokoro nor this project's weights. The weights
need not travel twice: the bundle's component parameters are KModel's own (each component's export wrapper holds
KModel's sub-modules; the export folds weight norm into one `weight`), so the bundle records each parameter's
KModel name and the runner folds KModel's weight norm the same way before loading them. What travels besides is
kokoro's model source (model.py, modules.py, istftnet.py, custom_stft.py, with an `__init__` of its own: kokoro's
imports its G2P pipeline, misaki and spaCy, which the runner never uses), loguru (model.py logs with it), the
config: 308 KB (`du -sh torch_peer`). Each utterance's style vector is in audio/, its token ids in bundle.json.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import numpy as np

from kokoro_tvm.config import SAMPLE_RATE, kokoro_config
from kokoro_tvm.peers import kmodel_device

FOLDER = "torch_peer"
KOKORO_FILES = ("model.py", "modules.py", "istftnet.py", "custom_stft.py")
KOKORO_INIT = '"""kokoro\'s model only (its own __init__ also imports the G2P pipeline, not needed here)."""\n'
# KModel parameters no component reads: ALBERT's pooler (CustomAlbert computes it, KModel never uses it); the
# runner leaves them as KModel's constructor made them
UNUSED_PREFIXES = ("bert.pooler.",)


def _package_folder(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"{name} is not installed: the PyTorch peer's bundle needs its source")
    return Path(spec.submodule_search_locations[0])


def kmodel_keys(model, component: str, param_names: list[str]) -> list[str]:
    """The KModel state-dict name of each parameter of `component`'s build, in the build's order: the module
    that holds it is found in the export wrapper by its path there, and named by its path in `model`."""
    from kokoro_tvm.compiler.export import component_module

    wrapper, paths = component_module(model, component), {id(m): p for p, m in model.named_modules()}
    keys = []
    for name in param_names:
        module_path, _, attribute = name.rpartition(".")
        keys.append(f"{paths[id(wrapper.get_submodule(module_path))]}.{attribute}")
    return keys


def add_torch_peer(model, folder, libraries: dict, device: str) -> dict:
    """Write folder/torch_peer/ (module docstring) for the runner (gpu_bundle copies it as run_torch_peer.py);
    returns bundle.json's "torch_peer" entry. `libraries`: the bundle's, one parameter file per component."""
    from kokoro_tvm.weights.resolve import HF_REPO_ID

    folder = Path(folder)
    (folder / FOLDER / "kokoro").mkdir(parents=True, exist_ok=True)
    kokoro = _package_folder("kokoro")
    for name in KOKORO_FILES:
        shutil.copyfile(kokoro / name, folder / FOLDER / "kokoro" / name)
    (folder / FOLDER / "kokoro" / "__init__.py").write_text(KOKORO_INIT)
    shutil.copytree(_package_folder("loguru"), folder / FOLDER / "loguru", ignore=shutil.ignore_patterns("__pycache__"))
    (folder / FOLDER / "config.json").write_text(json.dumps(kokoro_config()))
    first = {}
    for entry in libraries.values():
        first.setdefault(entry["component"], entry)
    keys = {c: kmodel_keys(model, c, entry["param_names"]) for c, entry in first.items()}
    folded = {re.sub(r"\.weight_[gv]$", ".weight", key) for key, _ in model.named_parameters()}
    unread = sorted(folded - {key for names in keys.values() for key in names})
    if any(not key.startswith(UNUSED_PREFIXES) for key in unread):
        raise ValueError(f"KModel parameters no component build holds: {unread[:5]}")
    return {
        "repo_id": HF_REPO_ID,
        "config": f"{FOLDER}/config.json",
        "kmodel_keys": keys,
        "unused_prefixes": list(UNUSED_PREFIXES),
        "peers": list(kmodel_device.PEERS),
        "run": f"PYTHONPATH={FOLDER} python3 run_torch_peer.py . --device {device} --out results",
    }


def score_torch_peer(folder, results_dir, utterances: list[dict]) -> list[dict] | None:
    """Per utterance and peer, from the runner's results (None where it did not run): its latency and audio
    seconds per second, durations against pt.dynamic's, its audio against pt.dynamic's (PESQ-WB, STOI: KModel
    draws its own SineGen noise, so these mix noise with error), and the compiled chain's latency from
    `utterances` (score's rows, `components_seconds`: the components' medians summed, without the host steps
    between them) over KModel's whole call."""
    from kokoro_tvm.evaluation.metrics import pesq_wb, stoi

    folder, results_dir = Path(folder), Path(results_dir)
    path = results_dir / kmodel_device.RESULTS
    if not path.is_file():
        return None
    results, chain = json.loads(path.read_text()), {u["utterance"]: u["components_seconds"] for u in utterances}
    bundle = json.loads((folder / "bundle.json").read_text())
    spoken = {u["name"]: u for u in bundle["utterances"]}
    rows = []
    for row in results["rows"]:
        utterance = spoken[row["utterance"]]
        audio, reference = np.load(results_dir / row["audio"]), np.load(folder / "audio" / f"{row['utterance']}-pt.npy")
        same_length = audio.shape == reference.shape
        rows.append(
            {
                "utterance": row["utterance"],
                "peer": row["peer"],
                "seconds_median": row["seconds_median"],
                "seconds_min": row["seconds_min"],
                "seconds_max": row["seconds_max"],
                "audio_per_second": audio.shape[0] / SAMPLE_RATE / row["seconds_median"],
                "durations_equal_pt": row["durations"] == utterance["pt_durations"],
                "pesq_wb_vs_pt": pesq_wb(reference, audio) if same_length else None,
                "stoi_vs_pt": stoi(reference, audio) if same_length else None,
                "tvm_chain_over_peer": chain[row["utterance"]] / row["seconds_median"],
            }
        )
    return rows
