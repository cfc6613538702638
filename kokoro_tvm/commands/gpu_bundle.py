"""Check bundles: what a device check carries to the machine with the device (kokoro_tvm.commands.gpu_check runs
and scores it).

- `make_bundle`: speak a few utterances with the CPU fp32 build (the runtime's default symbolic-length builds),
  recording every component call (its padded inputs, tile count and outputs); build the same components for
  the device, and write a self-contained folder: the device libraries, their parameters (lossless codebook
  compression, `pack_params`), the recorded calls, pt.dynamic's audio, the standalone runner
  (kokoro_tvm/runtime/bundle_runner.py, copied as run_bundle.py), and what PyTorch's KModel needs to run on the
  same device as the peer (kokoro_tvm.commands.gpu_torch_peer; its runner copied as run_torch_peer.py). With
  `with_runtime=True` it also carries TVM's runtime (`runtime_kit`: the Python packages without the compiler
  library), for a machine without apache-tvm; with `batches`, batched builds for the throughput runner
  (kokoro_tvm.commands.gpu_batches). bundle_transfer.transfer_parts groups its files for copies of limited size.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from kokoro_tvm.commands.bundle_transfer import PART_BYTES, transfer_parts
from kokoro_tvm.commands.gpu_batches import add_batched_builds, default_batches
from kokoro_tvm.commands.gpu_torch_peer import add_torch_peer
from kokoro_tvm.commands.runtime_kit import runtime_kit
from kokoro_tvm.compiler.targets import host_target, target_for
from kokoro_tvm.components import NAMES
from kokoro_tvm.config import SAMPLES_PER_FRAME
from kokoro_tvm.errors import InputError, UnsupportedError
from kokoro_tvm.frontend.corpus import load_sentences
from kokoro_tvm.frontend.text import prepare
from kokoro_tvm.frontend.voices import DEFAULT_VOICE, load_voice
from kokoro_tvm.peers import kmodel_device
from kokoro_tvm.reference.noise import noise_source
from kokoro_tvm.runtime import bundle_batches, bundle_device, bundle_runner
from kokoro_tvm.runtime.buckets import DynamicLengths
from kokoro_tvm.runtime.devices import DEVICES
from kokoro_tvm.runtime.kokoro import TVMKokoro

log = logging.getLogger(__name__)

# How many of each case's longest calls (kernels, VM built-ins) a run records (run_bundle.py --kernels): where a
# device's time goes, read from its report.
KERNELS_RECORDED = 12
# Another device's fp32 kernels sum in other orders (and Metal's fast math rounds differently): 1e-4 relative
# L2 per stage is the fp32 bar of the CPU build against PyTorch (NOTES/audio_comparison.md) with room for that.
TOLERANCE_REL_L2 = 1e-4


# A bundle's CUDA libraries run on another machine, whose CPU is unknown here: their host code (it only
# launches kernels) is built for baseline x86-64, not for this CPU's model (znver4 code may use AVX-512).
PORTABLE_HOST = {"kind": "llvm", "mtriple": "x86_64-pc-linux-gnu", "mcpu": "x86-64"}


def bundle_target(device: str) -> dict:
    """The build target of a bundle's libraries: the device's, with a portable host for CUDA."""
    target = target_for(device)
    return {**target, "host": dict(PORTABLE_HOST)} if device == "cuda" else target


@dataclass(frozen=True)
class Utterance:
    name: str
    text: str
    speed: float = 1.0


def default_utterances(quick: bool = False) -> list[Utterance]:
    """A short one; the corpus's longest sentence; the same at half speed (a long symbolic frame length)."""

    short = Utterance("short", "Hello world.")
    if quick:
        return [short]
    longest = max(load_sentences(), key=len)
    return [short, Utterance("long", longest), Utterance("slow", longest, 0.5)]


class _RecordingKokoro(TVMKokoro):
    """A TVMKokoro that keeps every component call: (component, padded length, inputs, tile count, outputs)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple] = []

    def run_component(self, component: str, length: int, *inputs: np.ndarray):
        outputs = super().run_component(component, length, *inputs)
        tile = self.runner(component, length).artifact.length_tile
        tiles = None if tile is None else length // tile
        self.calls.append((component, length, [np.array(x) for x in inputs], tiles, [np.array(o) for o in outputs]))
        return outputs


def pack_params(arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The runner's parameter format (bundle_runner.load_params): a tensor with at most 256 distinct values as
    codebook + uint8 indices (lossless: the embedded weights were int8), others as they are."""
    packed = {}
    for i, array in enumerate(arrays):
        values, index = np.unique(array, return_inverse=True)
        if values.size <= 256 and array.size > 256:
            packed[f"{i}.codebook"] = values
            packed[f"{i}.index"] = index.reshape(array.shape).astype(np.uint8)
        else:
            packed[str(i)] = array
    return packed


def check_device(device: str) -> None:
    """One clear line for a device no bundle can be made for here."""
    if device not in DEVICES:
        raise InputError(f"unknown device {device!r}; choose from {', '.join(DEVICES)}")
    if device == "metal" and sys.platform != "darwin":
        raise UnsupportedError(
            "a Metal bundle is built on macOS (its library needs Xcode's metal compiler); here, "
            "`kokoro-tvm gpu-build --target metal` generates and checks the Metal sources"
        )


def make_bundle(
    model,
    weights_fingerprint: str,
    device: str,
    folder,
    utterances: list[Utterance] | None = None,
    voice: str | None = None,
    noise: str = "seeded:0",
    with_runtime: bool = False,
    part_bytes: int = PART_BYTES,
    kit_python: str | None = None,
    batches: tuple[int, ...] | None = None,
) -> dict:
    """Write a check bundle for `device` into `folder` (module docstring); returns bundle.json's content and size.
    `model`: the fp32 KModel of `weights_fingerprint`; `part_bytes`: the most one copy to the device's machine
    carries (bundle.json 'parts'); `kit_python`: the Python ("3.12") that runs the runtime kit (default: this);
    `batches`: the batch sizes of its batched builds (default gpu_batches.default_batches)."""
    check_device(device)
    folder = Path(folder)
    if (folder / "bundle.json").exists():
        shutil.rmtree(folder)  # a bundle is rewritten whole, never mixed with an older one
    for sub in ("libs", "params", "cases", "audio"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    pack, noise_src = load_voice(voice or DEFAULT_VOICE), noise_source(noise)
    cases, spoken = _record(model, weights_fingerprint, folder, utterances or default_utterances(), pack, noise_src)
    libraries, build_seconds, symbolic_failures = _device_libraries(model, weights_fingerprint, device, folder, cases)
    _copy_runners(folder)
    sizes = default_batches(device) if batches is None else batches
    batched = add_batched_builds(
        model, weights_fingerprint, device, bundle_target(device), folder, libraries, spoken, sizes
    )
    bundle = {
        "format": bundle_runner.BUNDLE_FORMAT,
        "device": device,
        "target": bundle_target(device),
        "dtype": "float32",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "weights": weights_fingerprint,
        "voice": pack.name,
        "noise": noise_src.description,
        "tolerance_rel_l2": TOLERANCE_REL_L2,
        "libraries": libraries,
        "symbolic_failures": symbolic_failures,
        "cases": cases,
        "utterances": spoken,
        "build_seconds": build_seconds,
        "run": f"python3 run_bundle.py . --device {device} --out results --kernels {KERNELS_RECORDED}",
        "torch_peer": add_torch_peer(model, folder, libraries, device),
        "batches": batched,
    }
    if with_runtime:
        _carry_runtime(bundle, folder, kit_python)
    bundle["parts"] = transfer_parts(folder, part_bytes)
    (folder / "bundle.json").write_text(json.dumps(bundle, indent=1))
    bundle["bytes"] = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    _warn_of_parts(bundle, part_bytes)
    return bundle


def _warn_of_parts(bundle: dict, part_bytes: int) -> None:
    if len(bundle["parts"]) > 1:
        log.warning(
            "the bundle is %.0f MiB: it travels in %d parts of at most %.0f MiB (bundle.json 'parts'; "
            "--archive packs it into fewer)",
            bundle["bytes"] / 2**20,
            len(bundle["parts"]),
            part_bytes / 2**20,
        )


def _carry_runtime(bundle: dict, folder: Path, kit_python: str | None) -> None:
    """TVM's runtime into folder/runtime_kit/, for the Python `kit_python`, and the TVM run lines set to use it."""
    bundle["runtime_kit_bytes"] = runtime_kit(folder / "runtime_kit", kit_python)
    bundle["python"] = kit_python or bundle["python"]
    for entry in (bundle, bundle["batches"] or {}):
        if "run" in entry:
            entry["run"] = "TVM_USE_RUNTIME_LIB=1 PYTHONPATH=runtime_kit " + entry["run"]


def _copy_runners(folder: Path) -> None:
    """The standalone runners the bundle's run lines call: run_bundle.py beside bundle_device.py and
    run_batches.py (TVM's runtime), and run_torch_peer.py (PyTorch's KModel, the peer)."""
    for module, name in (
        (bundle_runner, "run_bundle.py"),
        (bundle_device, "bundle_device.py"),
        (bundle_batches, "run_batches.py"),
        (kmodel_device, "run_torch_peer.py"),
    ):
        shutil.copyfile(module.__file__, folder / name)


def _record(model, weights_fingerprint: str, folder: Path, utterances, pack, noise_src) -> tuple[list, list]:
    """Speak each utterance with the CPU build, recording every component call's inputs and outputs as a case
    (folder/cases/) and both audios (the CPU build's and pt.dynamic's, folder/audio/); returns (cases, the
    utterances as spoken)."""
    from kokoro_tvm.compiler.build import OnDemandBuilder
    from kokoro_tvm.reference.pt_dynamic import run_stages

    recorder = _RecordingKokoro(
        OnDemandBuilder(model, weights_fingerprint, "float32", host_target()), "float32", DynamicLengths()
    )
    cases, spoken = [], []
    for utterance in utterances:
        chunks = prepare(text=utterance.text)
        if len(chunks) != 1:
            raise InputError(f"utterance {utterance.name!r} is {len(chunks)} chunks; a check utterance is one chunk")
        chunk, style = chunks[0], pack.style(len(chunks[0].phonemes))
        first = len(recorder.calls)
        stages = recorder.run_stages(chunk.padded_ids, style, speed=utterance.speed, noise=noise_src, stream=0)
        reference = run_stages(model, chunk.padded_ids, style, speed=utterance.speed, noise=noise_src, stream=0)
        np.save(folder / "audio" / f"{utterance.name}-pt.npy", reference.audio.astype(np.float32))
        np.save(folder / "audio" / f"{utterance.name}-cpu.npy", stages.audio.astype(np.float32))
        np.save(folder / "audio" / f"{utterance.name}-style.npy", np.asarray(style, np.float32))
        (decoder_inputs,) = [inputs for component, _, inputs, _, _ in recorder.calls[first:] if component == "decoder"]
        frames = int(stages.alignment.shape[0])
        same_inputs = pt_decoder_audio(model, decoder_inputs, frames)
        np.save(folder / "audio" / f"{utterance.name}-pt-same-inputs.npy", same_inputs)
        for component, length, inputs, tiles, outputs in recorder.calls[first:]:
            name = f"{utterance.name}-{component}"
            arrays = {f"input{i}": x for i, x in enumerate(inputs)} | {f"expected{i}": y for i, y in enumerate(outputs)}
            np.savez_compressed(folder / "cases" / f"{name}.npz", **arrays)
            cases.append(
                {
                    "name": name,
                    "utterance": utterance.name,
                    "component": component,
                    "length": length,
                    "tiles": tiles,
                    "inputs": f"cases/{name}.npz",
                    "n_inputs": len(inputs),
                    "n_outputs": len(outputs),
                }
            )
        spoken.append(
            dict(
                asdict(utterance),
                tokens=int(len(chunk.padded_ids)),
                input_ids=list(chunk.padded_ids),
                style=f"audio/{utterance.name}-style.npy",
                frames=int(stages.alignment.shape[0]),
                durations=stages.durations.tolist(),
                pt_durations=reference.durations.tolist(),
                buckets=list(stages.buckets),
            )
        )
        log.info("%s: %d tokens, %d frames recorded", utterance.name, spoken[-1]["tokens"], spoken[-1]["frames"])
    return cases, spoken


def pt_decoder_audio(model, inputs: list[np.ndarray], frames: int) -> np.ndarray:
    """PyTorch's decoder (pt.dynamic's, SineGen's noise taken from the call) on one recorded decoder call's
    inputs, cut to its `frames`: what the CPU build's decoder is scored against on exactly its own inputs (the
    scale for a device's deviation from the CPU build, `gpu_check.score`)."""
    import torch

    from kokoro_tvm.reference.pt_dynamic import explicit_sine_noise_tensors

    asr, f0, n, style, initial_phase, additive = (torch.as_tensor(x) for x in inputs[:6])
    samples = frames * SAMPLES_PER_FRAME
    with torch.no_grad(), explicit_sine_noise_tensors(model.decoder, initial_phase, additive[:, :samples]):
        audio = model.decoder(asr[..., :frames], f0[:, : 2 * frames], n[:, : 2 * frames], style)
    return audio.reshape(-1).numpy().astype(np.float32)


def _device_libraries(model, weights_fingerprint: str, device: str, folder: Path, cases: list[dict]):
    """Each component's symbolic-length build for `device`, as the CPU runtime uses; where that build fails on
    a GPU target, static builds at each length the cases need (the failure recorded). Sets each case's
    "library" (and drops its tile count where it runs a static build); returns (libraries, build seconds,
    symbolic failures)."""
    from kokoro_tvm.compiler.build import OnDemandBuilder

    builds = OnDemandBuilder(model, weights_fingerprint, "float32", bundle_target(device))
    libraries, seconds, failures, param_names = {}, {}, {}, {}

    def add(key: str, component: str, artifact) -> None:
        shutil.copyfile(artifact.library, folder / "libs" / f"{key}.so")
        if component not in param_names:
            np.savez_compressed(folder / "params" / f"{component}.npz", **pack_params(artifact.load_params()))
            param_names[component] = artifact.param_names
        if artifact.param_names != param_names[component]:  # one parameter file per component must fit all
            raise ValueError(f"{key}: its parameters differ from the other builds of {component}")
        libraries[key] = {
            "component": component,
            "library": f"libs/{key}.so",
            "params": f"params/{component}.npz",
            "param_names": artifact.param_names,
            "length_tile": artifact.length_tile,
            "transform_params": artifact.manifest.get("transform_params"),
        }

    for component in NAMES:
        mine = [case for case in cases if case["component"] == component]
        start = time.perf_counter()
        try:
            add(component, component, builds(component, None))
            for case in mine:
                case["library"] = component
        except Exception as exc:  # TVM's own error types; on a GPU target only (the CPU build must work)
            if device == "cpu":
                raise
            failures[component] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            log.warning(
                "%s: no symbolic build for %s (%s); static builds at %s",
                component,
                device,
                failures[component],
                sorted({case["length"] for case in mine}),
            )
            for case in mine:
                key = f"{component}-n{case['length']}"
                if key not in libraries:
                    add(key, component, builds(component, case["length"]))
                case["library"], case["tiles"] = key, None
        seconds[component] = time.perf_counter() - start
    return libraries, seconds, failures
