"""`kokoro-tvm pipeline`, `lab`, `voices` and `weights`: the notebooks, and the inputs every command reads."""

from __future__ import annotations

import argparse
import json
import logging
import subprocess

from kokoro_tvm import paths
from kokoro_tvm.cli.options import add_weights
from kokoro_tvm.frontend.voices import fetch_official_voices, voice_table
from kokoro_tvm.report.lab import lab_command
from kokoro_tvm.report.notebook_runner import run

log = logging.getLogger("kokoro_tvm.cli")


def pipeline(args: argparse.Namespace) -> int:
    only = [s.strip() for s in args.only.split(",")] if args.only else None
    for path in run(only=only, fast=args.fast):
        print(path)
    print(paths.outputs_dir() / "index.html")
    return 0


def lab(args: argparse.Namespace) -> int:
    return subprocess.call(lab_command(*args.jupyter_args))


def voices(args: argparse.Namespace) -> int:
    if args.fetch:
        log.info("official voice packs in %s", fetch_official_voices())
    for row in voice_table():
        if args.json:
            print(json.dumps(row))
        else:
            print(f"{row['name']:<14} {row['language']:<21} {row['gender']:<7} {row['source']:<36} {row['sha256']}")
    return 0


def weights(args: argparse.Namespace) -> int:
    from kokoro_tvm.weights.resolve import load_weights  # (deferred: torch, for the commands that read weights)

    info, _ = load_weights(args.weights)
    print(json.dumps(info.as_dict()))
    return 0


def _add_pipeline(sub) -> None:
    parser = sub.add_parser("pipeline", help="run the numbered notebooks in order with papermill")
    parser.add_argument("--fast", action="store_true", help="FAST=True in every notebook")
    parser.add_argument("--only", help="comma-separated notebook numbers, e.g. 01,02")
    parser.set_defaults(func=pipeline)


def _add_lab(sub) -> None:
    parser = sub.add_parser("lab", help="JupyterLab on notebooks/ (this environment's kernel; saved without outputs)")
    parser.add_argument("jupyter_args", nargs=argparse.REMAINDER, help="passed to jupyter lab, e.g. --no-browser")
    parser.set_defaults(func=lab)


def _add_voices(sub) -> None:
    parser = sub.add_parser("voices", help="list every voice: language, gender, source and sha256")
    parser.add_argument("--fetch", action="store_true", help="fetch and check the official packs first (npm)")
    parser.add_argument("--json", action="store_true", help="one JSON line per voice")
    parser.set_defaults(func=voices)


def _add_weights(sub) -> None:
    parser = sub.add_parser("weights", help="resolve the weights and print one JSON line about them")
    add_weights(parser)
    parser.set_defaults(func=weights)


COMMANDS = (_add_pipeline, _add_lab, _add_voices, _add_weights)  # each adds its subcommand to `kokoro-tvm`
