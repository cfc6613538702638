"""What a user would run instead of TVM, each as a `speak(padded_ids, style, speed) -> audio` callable, so that
`kokoro-tvm bench` (kokoro_tvm.commands.bench) times them all in one process, interleaved, on the same utterance
and threads.

- `torch`: stock `KModel.forward_with_tokens`, fp32 eager (what kokoro users run).
- `torch_bf16`: the same forward under `torch.autocast("cpu", dtype=torch.bfloat16)`, what a user of a CPU with
  bf16 reaches for (oneDNN runs its convolutions and matmuls in bf16, on AMX where the CPU has it); only on a CPU
  with AVX512_BF16 (elsewhere autocast's bf16 runs emulated, a slow fp32 peer under a bf16 name).
- `torch_compile`: the same forward through `torch.compile` (inductor, static shapes: one compile per utterance
  length, like a user who compiles once for a fixed input). Graph breaks (the LSTMs' packed sequences, the
  host-side durations) fall back to eager; everything else is inductor's. The first call compiles: its seconds
  are reported as `setup_s`.
- `ort_fp32`: ONNX Runtime on an ONNX export of the same fp32 weights that this project makes itself
  (`torch.onnx.export`, TorchScript exporter, opset 17, dynamic token axis), cached beside the artifacts.
- `ort_int8`: ONNX Runtime on the embedded int8 export (the file our default weights are recovered from).
- `kokoro_onnx`, `kokoro_onnx_fp32`: the `kokoro-onnx` package's `Kokoro.create` as its users run it (ONNX
  Runtime underneath; its own sentence/clause splitting, pauses and silence trimming) on the embedded int8 export
  and on our fp32 export, the voice from the official pack, on our G2P's phonemes (`is_phonemes=True`).
- `openvino_f32`, `openvino_bf16`: OpenVINO's CPU plugin on our own conversion of the same weights, in parts
  around the host-side durations, shapes fixed per utterance, Snake's sine as a polynomial
  (kokoro_tvm.peers.openvino). Like `torch_compile`, the first call converts and compiles (`compile_s`).

Every ONNX Runtime session gets `threads` intra-op workers that do not spin (an idle spinning pool would burn a
core while the next backend runs).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch

from kokoro_tvm import paths
from kokoro_tvm.compiled import check_precision, runs_here
from kokoro_tvm.config import load_vocab
from kokoro_tvm.errors import InputError
from kokoro_tvm.peers.openvino import OpenVinoKokoro
from kokoro_tvm.weights.resolve import embedded_onnx
from kokoro_tvm.weights.stft import bases_digest

log = logging.getLogger(__name__)

PEERS = (
    "torch",
    "torch_bf16",
    "torch_compile",
    "ort_fp32",
    "ort_int8",
    "kokoro_onnx",
    "kokoro_onnx_fp32",
    "openvino_f32",
    "openvino_bf16",
)
FP32_PEERS = ("torch", "torch_compile", "ort_fp32", "kokoro_onnx_fp32", "openvino_f32")
COMPILING_PEERS = ("torch_compile", "openvino_f32", "openvino_bf16")  # compile on their first call
BF16_PEERS = ("torch_bf16", "openvino_bf16")  # run only where the CPU has AVX512_BF16
ONNX_OPSET = 17


class PeerError(InputError):
    """A peer list `bench` cannot take."""


def parse_peers(spec: str | None) -> tuple[str, ...]:
    """`"torch,ort_int8"` -> ("torch", "ort_int8"); None or "all" -> every peer this CPU runs (runnable_peers);
    "none" -> no peer."""
    if spec is None or spec.strip() == "all":
        return runnable_peers()
    if spec.strip() == "none":
        return ()
    names = tuple(p.strip() for p in spec.split(",") if p.strip())
    unknown = [p for p in names if p not in PEERS]
    if unknown or len(set(names)) != len(names) or not names:
        raise PeerError(f"peers are distinct names from {', '.join(PEERS)} (or all / none); got {spec!r}")
    return names


def runnable_peers() -> tuple[str, ...]:
    """Every peer, less the bf16 ones on a CPU without AVX512_BF16 (there OpenVINO computes in f32 and autocast
    emulates bf16: an fp32 peer under a bf16 name), which is said in one log line; asked for by name, they are
    refused instead."""
    if runs_here("bf16"):
        return PEERS
    log.warning("%s left out of the peers: this CPU has no AVX512_BF16", " and ".join(BF16_PEERS))
    return tuple(p for p in PEERS if p not in BF16_PEERS)


def ort_session(path: Path, threads: int | None):
    """One CPU InferenceSession on `path` with `threads` non-spinning intra-op workers."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def ort_inputs(padded_ids, style: np.ndarray, speed: float) -> dict[str, np.ndarray]:
    """The input names both ONNX files share (the embedded export's, which ours copies)."""
    return {
        "tokens": np.asarray([padded_ids], dtype=np.int64),
        "style": np.asarray(style, dtype=np.float32).reshape(1, -1),
        "speed": np.array([speed], dtype=np.float32),
    }


def _audio_only(model):
    """`forward_with_tokens` returns (audio, durations) and takes a float speed; the ONNX graph takes speed as a
    [1] tensor, like the embedded export, and keeps the audio. The wrapper is in the model's mode: the exporter
    puts it in eval mode and back into its own mode afterwards, and a new module's own mode is training, which
    left the caller's model training (dropout on: another voice in every later PyTorch run of that process)."""

    class AudioOnly(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, tokens, style, speed):
            return self.model.forward_with_tokens(tokens, style, speed[0])[0]

    return AudioOnly().train(model.training)


def onnx_fp32_export(model, fingerprint: str) -> Path:
    """Our own fp32 ONNX file of `model`, exported once (cache: onnx/<weights fingerprint>-stft<its STFT bases'
    digest>-torch<version>-opset<n>.onnx: the bases are constants we fix, kokoro_tvm.weights.stft)."""

    stft = bases_digest(model.decoder.generator.stft)
    name = f"{fingerprint}-stft{stft}-torch{torch.__version__.split('+')[0]}-opset{ONNX_OPSET}.onnx"
    path = paths.cache_dir() / "onnx" / name
    with paths.cache_lock(path):
        if path.exists():
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        tokens = torch.zeros((1, 8), dtype=torch.long)
        style, speed = torch.zeros((1, 256)), torch.ones(1)
        partial = paths.temporary_sibling(path)
        start = time.perf_counter()
        with torch.no_grad():
            torch.onnx.export(
                _audio_only(model),
                (tokens, style, speed),
                str(partial),
                dynamo=False,
                opset_version=ONNX_OPSET,
                input_names=["tokens", "style", "speed"],
                output_names=["audio"],
                dynamic_axes={"tokens": {1: "tokens"}, "audio": {0: "samples"}},
            )
        partial.replace(path)
        log.info("exported fp32 ONNX (%.1f s): %s", time.perf_counter() - start, path)
    return path


class OrtPeer:
    """One CPU InferenceSession on an ONNX export of Kokoro (non-spinning workers: see `ort_session`)."""

    def __init__(self, path: Path, threads: int | None = None):
        self.path = path
        self.session = ort_session(path, threads)

    def speak(self, padded_ids, style: np.ndarray, speed: float = 1.0) -> np.ndarray:
        """float32 audio for one utterance (token ids with both pads), with the export's own SineGen noise."""
        (audio,) = self.session.run(None, ort_inputs(padded_ids, style, speed))
        return np.asarray(audio, dtype=np.float32).reshape(-1)


class OrtFp32(OrtPeer):
    """ONNX Runtime on our fp32 export of the loaded weights."""

    def __init__(self, model, fingerprint: str, threads: int | None = None):
        super().__init__(onnx_fp32_export(model, fingerprint), threads)


class OrtInt8(OrtPeer):
    """ONNX Runtime on the embedded int8 export of Kokoro-82M (the export our default weights are recovered from)."""

    def __init__(self, threads: int | None = None):
        super().__init__(embedded_onnx(), threads)


def kokoro_onnx(voice, threads: int | None, onnx_path: Path | None = None):
    """kokoro-onnx's `Kokoro` on `onnx_path` (default: the embedded int8 export) with the voice `voice` (a
    frontend.voices.Voice) in the voices file its class reads, written whole into the cache."""
    from kokoro_onnx import Kokoro  # (deferred: a peer package only the benchmarks use)

    voices = paths.cache_dir() / "kokoro_onnx" / f"{voice.name}.npz"
    voices.parent.mkdir(parents=True, exist_ok=True)
    partial = paths.temporary_sibling(voices)
    with open(partial, "wb") as handle:  # a file object: np.savez would append .npz to a name
        np.savez(handle, **{voice.name: np.asarray(voice.pack, dtype=np.float32)})
    partial.replace(voices)  # whole or not at all, for another process reading it
    return Kokoro.from_session(ort_session(onnx_path or embedded_onnx(), threads), str(voices))


class KokoroOnnx:
    """`Kokoro.create(phonemes, voice, is_phonemes=True)`: the phonemes are recovered from the token ids through
    Kokoro's vocabulary (one symbol per id), so kokoro-onnx speaks exactly our G2P's phonemes."""

    def __init__(self, voice, threads: int | None, onnx_path: Path | None = None):
        self.kokoro, self.voice = kokoro_onnx(voice, threads, onnx_path), voice
        self.symbols = {index: symbol for symbol, index in load_vocab().items()}

    def speak(self, padded_ids, style: np.ndarray, speed: float = 1.0) -> np.ndarray:
        phonemes = "".join(self.symbols[int(i)] for i in padded_ids[1:-1])
        audio, _rate = self.kokoro.create(phonemes, self.voice.name, speed=speed, is_phonemes=True)
        return np.asarray(audio, dtype=np.float32)


def torch_inputs(padded_ids, style: np.ndarray):
    """`forward_with_tokens`'s token ids [1, T] and style [1, 256] for one utterance."""

    ids = torch.tensor([padded_ids], dtype=torch.long)
    return ids, torch.from_numpy(np.asarray(style, dtype=np.float32).reshape(1, -1))


class TorchEager:
    """Stock `KModel.forward_with_tokens` in fp32 eager mode."""

    def __init__(self, model):
        self.forward = model.forward_with_tokens

    def speak(self, padded_ids, style: np.ndarray, speed: float = 1.0):

        with torch.no_grad():
            return self.forward(*torch_inputs(padded_ids, style), speed)[0]


class TorchBf16(TorchEager):
    """`forward_with_tokens` under CPU autocast to bf16 (oneDNN's bf16 kernels, AMX where the CPU has it); the
    audio comes back as float32, as the other peers'."""

    def speak(self, padded_ids, style: np.ndarray, speed: float = 1.0):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return super().speak(padded_ids, style, speed).float()


class TorchCompiled(TorchEager):
    """`torch.compile(model.forward_with_tokens)` (inductor). `compile_s` is the first call's time, set by the
    first `speak` (the benchmark's warm-up, outside its timed rounds)."""

    def __init__(self, model):

        self.forward = torch.compile(model.forward_with_tokens, dynamic=False)
        self.compile_s: float | None = None

    def speak(self, padded_ids, style: np.ndarray, speed: float = 1.0):
        start = time.perf_counter()
        audio = super().speak(padded_ids, style, speed)
        if self.compile_s is None:
            self.compile_s = time.perf_counter() - start
        return audio


def make_peer(name: str, model, fingerprint: str, threads: int, voice=None, noise=None):
    """The peer `name` (one of PEERS), an object with `speak(padded_ids, style, speed)`; the kokoro-onnx peers
    also take the voice (frontend.voices.Voice), which their class reads by name, and the peers that take SineGen's
    noise as inputs (OpenVINO) take `noise` (a NoiseSource; default zero); the others draw their own."""
    makers = {
        "torch": lambda: TorchEager(model),
        "torch_bf16": lambda: TorchBf16(model),
        "torch_compile": lambda: TorchCompiled(model),
        "ort_fp32": lambda: OrtFp32(model, fingerprint, threads),
        "ort_int8": lambda: OrtInt8(threads),
        "kokoro_onnx": lambda: KokoroOnnx(voice, threads),
        "kokoro_onnx_fp32": lambda: KokoroOnnx(voice, threads, onnx_fp32_export(model, fingerprint)),
        "openvino_f32": lambda: OpenVinoKokoro(model, threads, "f32", noise=noise),
        "openvino_bf16": lambda: OpenVinoKokoro(model, threads, "bf16", noise=noise),
    }
    if name not in makers:
        raise PeerError(f"unknown peer {name!r}; choose from {', '.join(PEERS)}")
    if name in BF16_PEERS:
        check_precision("bf16")  # a CPU without AVX512_BF16: one line, not a silent f32 run
    return makers[name]()
