"""PyTorch's own Kokoro on a device check bundle's utterances, on the bundle's device: the peer a GPU user runs
(KModel on CUDA, as Kokoro-FastAPI does) beside the compiled components. Standalone like the bundle runner
(kokoro_tvm.runtime.bundle_runner): copied into each bundle as `run_torch_peer.py`, it needs numpy, torch and
transformers, and imports nothing of kokoro_tvm; kokoro's model files and loguru travel in the bundle's
`torch_peer/` folder (kokoro_tvm.commands.gpu_torch_peer), and KModel's weights are the bundle's own component
parameters (no second copy travels), each put on its KModel name, weight norm folded as our export folds it:

    PYTHONPATH=torch_peer python3 run_torch_peer.py BUNDLE --device cuda --out RESULTS_DIR [--runs N]

Every utterance is spoken with `forward_with_tokens` (the recorded token ids, style and speed) as `torch` (fp32)
and `torch_bf16` (under `torch.autocast(device, torch.bfloat16)`), the two taking turns in each round, after
warm-up rounds; each call is timed with a device sync on both sides and seeded (`torch.manual_seed`), so its
SineGen noise is the same in every run. KModel speaks one utterance per call (its durations are one sequence):
its throughput is its batch-1 latency's. RESULTS_DIR/torch_peer.json holds the times and durations,
RESULTS_DIR/torch_peer/<utterance>-<peer>.npy the audio, to be scored where the project is installed.
"""

from __future__ import annotations

import json
import logging
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

if __package__:  # imported from the package
    from kokoro_tvm.runtime import bundle_runner
else:  # run as a bundle's run_torch_peer.py, beside its run_bundle.py
    import run_bundle as bundle_runner

BundleError = bundle_runner.BundleError
log = logging.getLogger("run_torch_peer")

PEERS = {"torch": None, "torch_bf16": "bfloat16"}  # peer -> autocast dtype (None: fp32 as KModel is)
RESULTS = "torch_peer.json"
AUDIO_DIR = "torch_peer"


def fold_weight_norm(model) -> int:
    """Every weight-normed module's `weight` as one plain parameter (g * v / |v|, computed once): the names our
    export gives the bundle's parameters. Returns how many were folded."""
    import torch
    from torch.nn.utils import parametrize

    folded = 0
    for module in model.modules():
        if hasattr(module, "weight_g") and hasattr(module, "weight_v"):  # torch.nn.utils.weight_norm (kokoro 0.9)
            torch.nn.utils.remove_weight_norm(module)
            folded += 1
        elif parametrize.is_parametrized(module, "weight"):  # torch.nn.utils.parametrizations.weight_norm
            parametrize.remove_parametrizations(module, "weight")
            folded += 1
    return folded


def build_kmodel(folder: Path, bundle: dict, device: str):
    """KModel from the bundle's config with the bundle's parameters (see the module docstring), on `device`."""
    import torch
    from kokoro.model import KModel

    peer = bundle["torch_peer"]
    config = json.loads((folder / peer["config"]).read_text())
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # KModel downloads its weights unless given a file (an empty one here); its construction warns about its
        # LSTM dropout and the old weight_norm API, which say nothing about this run
        warnings.simplefilter("ignore", (UserWarning, FutureWarning))
        empty = Path(tmp) / "empty.pth"
        torch.save({}, empty)
        model = KModel(repo_id=peer["repo_id"], config=config, model=str(empty))
    fold_weight_norm(model)
    state = {}
    for component, keys in peer["kmodel_keys"].items():
        entry = next(e for e in bundle["libraries"].values() if e["component"] == component)
        arrays = bundle_runner.load_params(folder / entry["params"], entry["param_names"])
        state.update({key: torch.from_numpy(np.ascontiguousarray(a)) for key, a in zip(keys, arrays, strict=True)})
    params = dict(model.named_parameters())  # its buffers (STFT bases, windows) are the constructor's to make
    left = [key for key in params if key not in state and not key.startswith(tuple(peer["unused_prefixes"]))]
    unexpected = [key for key in state if key not in params]
    if left or unexpected:
        raise BundleError(f"the bundle's parameters do not fit KModel: missing {left[:3]}, unexpected {unexpected[:3]}")
    model.load_state_dict(state, strict=False)
    return model.to(device).eval()


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _speak(model, inputs, device: str, peer: str, seed: int):
    import torch

    torch.manual_seed(seed)
    dtype = PEERS[peer]
    with torch.autocast(device, dtype=getattr(torch, dtype or "bfloat16"), enabled=dtype is not None):
        audio, durations = model.forward_with_tokens(*inputs)
    return audio.float().reshape(-1).cpu().numpy(), durations.reshape(-1).cpu().numpy()


def _device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(0) if device == "cuda" else bundle_runner.cpu_model()


def run_peer(folder, device: str = "cuda", runs: int = 10, warmup: int = 2, out_dir=None, seed: int = 0) -> dict:
    """Speak every utterance of the bundle at `folder` with both peers on `device`; returns (and, with
    `out_dir`, writes) the results (module docstring)."""
    import torch

    folder = Path(folder)
    bundle = bundle_runner.read_bundle(folder)
    if "torch_peer" not in bundle:
        raise BundleError(f"{folder} carries no PyTorch peer (a bundle made before it)")
    if device == "cuda" and not torch.cuda.is_available():
        raise BundleError("torch sees no CUDA device on this machine")
    start = time.perf_counter()
    model = build_kmodel(folder, bundle, device)
    rows, load_seconds = [], time.perf_counter() - start
    for utterance in bundle["utterances"]:
        ids = torch.tensor([utterance["input_ids"]], dtype=torch.long, device=device)
        style = torch.from_numpy(np.load(folder / utterance["style"])).to(device)
        inputs, seconds, spoken = (ids, style, utterance["speed"]), {p: [] for p in PEERS}, {}
        for _ in range(warmup):
            for peer in PEERS:
                _speak(model, inputs, device, peer, seed)
        for run in range(runs):  # the peers take turns, each first in every other round
            for peer in list(PEERS) if run % 2 == 0 else list(PEERS)[::-1]:
                _sync(device)
                began = time.perf_counter()
                spoken[peer] = _speak(model, inputs, device, peer, seed)
                _sync(device)
                seconds[peer].append(time.perf_counter() - began)
        for peer, (audio, durations) in spoken.items():
            rows.append(
                {
                    "utterance": utterance["name"],
                    "peer": peer,
                    "seconds_median": statistics.median(seconds[peer]),
                    "seconds_min": min(seconds[peer]),
                    "seconds_max": max(seconds[peer]),
                    "runs": runs,
                    "durations": durations.tolist(),
                    "audio": f"{AUDIO_DIR}/{utterance['name']}-{peer}.npy",
                }
            )
            if out_dir is not None:
                (Path(out_dir) / AUDIO_DIR).mkdir(parents=True, exist_ok=True)
                np.save(Path(out_dir) / rows[-1]["audio"], audio.astype(np.float32))
            log.info("%s %s: %.1f ms median", utterance["name"], peer, 1e3 * rows[-1]["seconds_median"])
    results = {
        "device": device,
        "device_name": _device_name(device),
        "torch": torch.__version__,
        "kokoro": str(Path(sys.modules["kokoro"].__file__).parent),  # the bundle's copy where kokoro is absent
        "threads": torch.get_num_threads(),
        "seed": seed,
        "load_seconds": load_seconds,
        "rows": rows,
    }
    if out_dir is not None:
        (Path(out_dir) / RESULTS).write_text(json.dumps(results, indent=1))
    return results


def main(argv=None) -> int:
    parser = bundle_runner.runner_parser("run_torch_peer", __doc__, f"{RESULTS} and {AUDIO_DIR}/", runs=10, warmup=2)
    parser.add_argument("--seed", type=int, default=0, help="torch.manual_seed before every call (default 0)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="run_torch_peer: %(message)s")
    try:
        results = run_peer(args.bundle, args.device, args.runs, args.warmup, args.out, args.seed)
    except (RuntimeError, ImportError, OSError) as exc:  # a BundleError; torch's or kokoro's own refusal
        print(bundle_runner.error_line("run_torch_peer", exc), file=sys.stderr)
        return 2
    print(json.dumps({k: results[k] for k in ("device", "device_name", "torch")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
