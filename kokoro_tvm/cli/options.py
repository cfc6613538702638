"""Arguments several `kokoro-tvm` commands share; each choice list is read from the table that defines it."""

from __future__ import annotations

import argparse
import importlib
import math

from kokoro_tvm.components import PRECISIONS
from kokoro_tvm.frontend.voices import DEFAULT_VOICE
from kokoro_tvm.runtime.devices import DEVICES

LANG_HELP = (
    "the text's language as a Kokoro code (a: American English, b: British, e, f, h, i, p, j, z); default: the "
    "voice name's first letter, as kokoro's KPipeline does"
)
BUCKETS_HELP = (
    "TVM shapes: 'default' (= dynamic: one symbolic-length build per component), 'bucketed' (the chosen bucket "
    "set, geo1.25), a named set (pow2, geo1.5, geo1.25, earlier, align32), 'tokens=..;frames=..' or 'exact' "
    "(one build per length)"
)


def _integer_at_least(value: str, minimum: int, kind: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a {kind} integer, got {value!r}") from None
    if number < minimum:
        raise argparse.ArgumentTypeError(f"must be a {kind} integer, got {value}")
    return number


def positive_int(value: str) -> int:
    return _integer_at_least(value, 1, "positive")


def positive_seconds(value: str) -> float:
    """A finite number of seconds > 0 (a budget of 0, -5 or nan tuned nothing and wrote an empty tuning record)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value}")
    return number


def non_negative_int(value: str) -> int:
    """An integer >= 0 (a noise seed: numpy's generator takes no negative one; a worker count, 0 meaning none)."""
    return _integer_at_least(value, 0, "non-negative")


def batch_sizes(value: str) -> tuple[int, ...]:
    """Comma-separated batch sizes ("8,64"), or "none"."""
    if value.strip().lower() == "none":
        return ()
    return tuple(positive_int(part) for part in value.split(","))


def python_version(value: str) -> str:
    """A Python version as major.minor ("3.12")."""
    parts = value.split(".")
    if len(parts) != 2 or not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"must be a Python version like 3.12, got {value!r}")
    return value


def precision_help(names=tuple(PRECISIONS)) -> str:
    return "; ".join(f"{name}: {PRECISIONS[name].summary}" for name in names)


def add_voice(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--voice",
        default=DEFAULT_VOICE,
        help=f"a voice name (`kokoro-tvm voices`; default {DEFAULT_VOICE}) or a .bin/.npz/.pt pack file",
    )
    parser.add_argument("--lang", help=LANG_HELP)


def add_precision(parser: argparse.ArgumentParser, what: str = "TVM's arithmetic", auto: bool = False) -> None:
    """`--precision`; with `auto` (say), also "auto", the default: the fastest on this CPU by its tuning record."""
    if auto:
        help_text = f"{what}: auto (default: the fastest this CPU runs, by its tuning record), {precision_help()}"
        parser.add_argument("--precision", choices=("auto", *PRECISIONS), default="auto", help=help_text)
        return
    parser.add_argument(
        "--precision", choices=tuple(PRECISIONS), default="fp32", help=f"{what} (default fp32): {precision_help()}"
    )


def add_device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=DEVICES, default="cpu", help="where TVM runs (metal, cuda: where one is)")


def add_weights(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--weights", help="a kokoro-v1_0.pth-style weights file (default: resolved)")


def command(name: str):
    """The `run(args)` of kokoro_tvm.commands.<name>, the command's one module, imported when the command runs:
    the CLI parses, the commands package does the work (and `kokoro-tvm --help` loads no torch, TVM or Dask)."""
    module = f"kokoro_tvm.commands.{name}"

    def run(args: argparse.Namespace) -> int:
        return importlib.import_module(module).run(args)

    run.command_module = module
    return run
