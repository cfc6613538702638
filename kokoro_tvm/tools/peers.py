"""What a user would run instead of TVM, each as a `speak(padded_ids, style, speed) -> audio` callable, so that
`benchmark.bench` times them all in one process, interleaved, on the same utterance and threads.

- `torch`: stock `KModel.forward_with_tokens`, fp32 eager (what kokoro users run).
- `torch_compile`: the same forward through `torch.compile` (inductor, static shapes: one compile per utterance
  length, like a user who compiles once for a fixed input). Graph breaks (the LSTMs' packed sequences, the
  host-side durations) fall back to eager; everything else is inductor's. The first call compiles: its seconds
  are reported as `setup_s`.
- `ort_fp32`: ONNX Runtime on an ONNX export of the same fp32 weights that this project makes itself
  (`torch.onnx.export`, TorchScript exporter, opset 17, dynamic token axis), cached beside the artifacts.
- `ort_int8`: ONNX Runtime on the embedded int8 export (the file our default weights are recovered from).

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
from kokoro_tvm.errors import InputError
from kokoro_tvm.weights.resolve import embedded_onnx

log = logging.getLogger(__name__)

PEERS = ("torch", "torch_compile", "ort_fp32", "ort_int8")
FP32_PEERS = ("torch", "torch_compile", "ort_fp32")
ONNX_OPSET = 17


class PeerError(InputError):
    """A peer list `bench` cannot take."""


def parse_peers(spec: str | None) -> tuple[str, ...]:
    """`"torch,ort_int8"` -> ("torch", "ort_int8"); None or "all" -> every peer; "none" -> no peer."""
    if spec is None or spec.strip() == "all":
        return PEERS
    if spec.strip() == "none":
        return ()
    names = tuple(p.strip() for p in spec.split(",") if p.strip())
    unknown = [p for p in names if p not in PEERS]
    if unknown or len(set(names)) != len(names) or not names:
        raise PeerError(f"peers are distinct names from {', '.join(PEERS)} (or all / none); got {spec!r}")
    return names


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
    [1] tensor, like the embedded export, and keeps the audio."""

    class AudioOnly(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, tokens, style, speed):
            return self.model.forward_with_tokens(tokens, style, speed[0])[0]

    return AudioOnly()


def onnx_fp32_export(model, fingerprint: str) -> Path:
    """Our own fp32 ONNX file of `model` (cache: onnx/<weights fingerprint>-torch<version>.onnx), exported once."""

    path = paths.cache_dir() / "onnx" / f"{fingerprint}-torch{torch.__version__.split('+')[0]}-opset{ONNX_OPSET}.onnx"
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


def make_peer(name: str, model, fingerprint: str, threads: int):
    """The peer `name` (one of PEERS), an object with `speak(padded_ids, style, speed)`."""
    makers = {
        "torch": lambda: TorchEager(model),
        "torch_compile": lambda: TorchCompiled(model),
        "ort_fp32": lambda: OrtFp32(model, fingerprint, threads),
        "ort_int8": lambda: OrtInt8(threads),
    }
    if name not in makers:
        raise PeerError(f"unknown peer {name!r}; choose from {', '.join(PEERS)}")
    return makers[name]()
