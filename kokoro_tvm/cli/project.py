"""`kokoro-tvm pipeline`, `lab`, `voices` and `weights`: the notebooks, and the inputs every command reads."""

from __future__ import annotations

import argparse
import logging

from kokoro_tvm.cli.options import add_weights, command

log = logging.getLogger("kokoro_tvm.cli")


def _add_pipeline(sub) -> None:
    parser = sub.add_parser("pipeline", help="run the numbered notebooks in order with papermill")
    parser.add_argument("--fast", action="store_true", help="FAST=True in every notebook")
    parser.add_argument("--only", help="comma-separated notebook numbers, e.g. 01,02")
    parser.set_defaults(func=command("pipeline"))


def _add_lab(sub) -> None:
    parser = sub.add_parser("lab", help="JupyterLab on notebooks/ (this environment's kernel; saved without outputs)")
    parser.add_argument("jupyter_args", nargs=argparse.REMAINDER, help="passed to jupyter lab, e.g. --no-browser")
    parser.set_defaults(func=command("lab"))


def _add_voices(sub) -> None:
    parser = sub.add_parser("voices", help="list every voice: language, gender, source and sha256")
    parser.add_argument("--fetch", action="store_true", help="fetch and check the official packs first (npm)")
    parser.add_argument("--json", action="store_true", help="one JSON line per voice")
    parser.set_defaults(func=command("voices"))


def _add_weights(sub) -> None:
    parser = sub.add_parser("weights", help="resolve the weights and print one JSON line about them")
    add_weights(parser)
    parser.set_defaults(func=command("weights"))


COMMANDS = (_add_pipeline, _add_lab, _add_voices, _add_weights)  # each adds its subcommand to `kokoro-tvm`
