"""`kokoro-tvm weights`: which weights every command would load, as one JSON line."""

from __future__ import annotations

import argparse
import json


def run(args: argparse.Namespace) -> int:
    from kokoro_tvm.weights.resolve import load_weights  # (deferred: torch, for the commands that read weights)

    info, _ = load_weights(args.weights)
    print(json.dumps(info.as_dict()))
    return 0
