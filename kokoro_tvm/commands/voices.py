"""`kokoro-tvm voices`: every voice with its language, gender, source and sha256; `--fetch` fetches and checks the
official packs first."""

from __future__ import annotations

import argparse
import json
import logging

from kokoro_tvm.frontend.voices import fetch_official_voices, voice_table

log = logging.getLogger("kokoro_tvm.cli")


def run(args: argparse.Namespace) -> int:
    if args.fetch:
        log.info("official voice packs in %s", fetch_official_voices())
    for row in voice_table():
        if args.json:
            print(json.dumps(row))
        else:
            print(f"{row['name']:<14} {row['language']:<21} {row['gender']:<7} {row['source']:<36} {row['sha256']}")
    return 0
