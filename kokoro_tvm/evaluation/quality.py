"""What each `bench` backend's speed buys: its audio against PyTorch fp32 (pt.dynamic, with the SineGen noise bench
gives every backend that takes it as inputs).

Per backend (`backend_quality`): whether it ran with the reference's noise (`same_noise`: TVM and OpenVINO take
the noise as inputs; stock PyTorch, torch.compile and the ONNX exports draw their own), whether its durations
equal the reference's (None where the backend does not expose them: then `length_equal`, the total, is what is
known), log-mel L1 and PESQ-WB (None when the lengths differ: no sample-aligned comparison exists).

`torch_seeded_quality`: PyTorch bf16 autocast draws SineGen's noise from torch's generator, as stock fp32 does, and
autocast leaves those draws in fp32: seeded alike, the two draw the same noise, so its audio is judged against stock
fp32 (`KModel.forward_with_tokens`, the same seed) with the noise equal (`same_noise`), its own precision's error
alone. (torch.compile's inductor draws with its own generator: it stays an own-noise peer.)

`lead_over_peers`: TVM's fastest build over the fastest peer whose audio keeps PESQ-WB >= `min_pesq` (the bar every
build of ours is held to). Only a peer that runs with the reference's noise can be held to it; one that draws its
own noise is always counted (its PESQ mixes noise with error), so the lead is never flattered by excluding it.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from kokoro_tvm import marks
from kokoro_tvm.evaluation import metrics

SAME_NOISE_PEERS = ("openvino_f32", "openvino_bf16")  # peers that take the SineGen noise as inputs
TORCH_SEEDED_PEERS = ("torch_bf16",)  # peers judged against stock fp32 drawing the same noise (module docstring)
MIN_PESQ = marks.REDUCED_PESQ_WB  # a peer leads only where it keeps the bar our reduced-precision builds keep


def audio_quality(reference, audio, durations=None) -> dict:
    """One backend's audio (and durations, where known) against the reference Stages."""
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    aligned = audio.shape == reference.audio.shape
    return {
        "durations_equal": None if durations is None else bool(np.array_equal(durations, reference.durations)),
        "length_equal": aligned,
        "log_mel_l1": metrics.log_mel_l1(reference.audio, audio) if aligned else None,
        "pesq_wb": metrics.pesq_wb(reference.audio, audio) if aligned else None,
    }


def backend_quality(reference, peer_audio: dict, peer_durations: dict, tvm_stages: dict) -> dict:
    """{backend: audio_quality + same_noise} for the peers' audio ({name: audio}, their durations where known)
    and TVM's variants ({name: Stages}, all with the reference's noise)."""
    quality = {}
    for name, audio in peer_audio.items():
        quality[name] = {
            "same_noise": name in SAME_NOISE_PEERS,
            **audio_quality(reference, audio, peer_durations.get(name)),
        }
    for name, stages in tvm_stages.items():
        quality[name] = {"same_noise": True, **audio_quality(reference, stages.audio, stages.durations)}
    return quality


def torch_seeded_quality(model, padded_ids, style, peer_audio: dict, seed: int) -> dict:
    """{peer: audio_quality + same_noise} for the TORCH_SEEDED_PEERS in `peer_audio` ({name: audio}, each spoken
    after `torch.manual_seed(seed)`): against stock fp32 (peers.catalog.TorchEager) spoken after the same seed, or
    the `torch` peer's audio, which is that. Durations unknown (the peers return audio only): `length_equal` says
    whether they agree."""
    names = [name for name in TORCH_SEEDED_PEERS if name in peer_audio]
    if not names:
        return {}
    stock = peer_audio.get("torch")
    if stock is None:
        import torch

        from kokoro_tvm.peers.catalog import TorchEager

        torch.manual_seed(seed)
        stock = TorchEager(model).speak(padded_ids, style)
    reference = SimpleNamespace(audio=np.asarray(stock, dtype=np.float32).reshape(-1), durations=None)
    return {name: {"same_noise": True, **audio_quality(reference, peer_audio[name])} for name in names}


def lead_over_peers(record: dict, min_pesq: float = MIN_PESQ) -> dict | None:
    """TVM's fastest variant over the fastest qualifying peer (module docstring): {"tvm", "peer", "ratio"}; None
    when no peer qualifies."""
    quality = record["quality"]
    peers = [p for p in record["peers"] if not quality[p]["same_noise"] or (quality[p]["pesq_wb"] or 0.0) >= min_pesq]
    if not peers:
        return None
    tvm = min(record["tvm_policies"], key=lambda name: record["tvm_policies"][name]["s"])
    peer = min(peers, key=lambda name: record["peers"][name]["s"])
    return {"tvm": tvm, "peer": peer, "ratio": record["peers"][peer]["s"] / record["tvm_policies"][tvm]["s"]}
