"""`kokoro-tvm evaluate` and `sweep`: corpus evaluations and notebook sweeps as Dask tasks (kokoro_tvm.scale), on
a local cluster sized to this machine or on an existing cluster by its scheduler's address."""

from __future__ import annotations

import logging

from kokoro_tvm.cli.options import command, non_negative_int, positive_int
from kokoro_tvm.components import TIMED_PRECISIONS

log = logging.getLogger("kokoro_tvm.cli")


def _add_cluster(parser) -> None:
    parser.add_argument(
        "--scheduler",
        help="address of a running Dask scheduler (tcp://host:8786), 'local' (the "
        "default: a local cluster) or 'in-process' (no Dask, like --workers 0)",
    )
    parser.add_argument(
        "--workers",
        type=non_negative_int,
        help="local cluster: worker processes (default: one per core); evaluate --workers 0: in this process, no Dask",
    )


def _add_evaluate(sub) -> None:
    parser = sub.add_parser("evaluate", help="notebook 07's comparison over many sentences and voices, on Dask")
    parser.add_argument("--sentences", default="corpus", help="a text file (one sentence per line) or 'corpus'")
    parser.add_argument("--limit", type=int, help="that many sentences, spread over the lengths (default: all)")
    parser.add_argument("--voices", default="af_heart", help="comma-separated voice names (default af_heart)")
    choices = ", ".join(TIMED_PRECISIONS)
    parser.add_argument("--precisions", default="fp32,int8", help=f"TVM builds, comma-separated, from {choices}")
    parser.add_argument(
        "--threads", type=positive_int, help="compute threads per task (default: cores / local workers)"
    )
    parser.add_argument("--out", default="outputs/evaluate", help="results folder; a rerun skips what is there")
    parser.add_argument(
        "--wavs",
        action="store_true",
        help="also bring every backend's audio back, as float32 WAVs "
        "in OUT/wav/ (about 0.5 MB per backend per 5 s of speech per task)",
    )
    parser.add_argument("--json", action="store_true", help="print the run's record as one JSON line")
    _add_cluster(parser)
    parser.set_defaults(func=command("evaluate"))


def _add_sweep(sub) -> None:
    parser = sub.add_parser("sweep", help="one papermill run of a notebook per grid point, on Dask")
    parser.add_argument("notebook", help="the notebook's number or stem, e.g. 03")
    parser.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "VALUES"),
        help="a parameter and its comma-separated values; the grid is every combination",
    )
    parser.add_argument("--fast", action="store_true", help="FAST=True at every point")
    _add_cluster(parser)
    parser.set_defaults(func=command("sweep"))


COMMANDS = (_add_evaluate, _add_sweep)  # each adds its subcommand to `kokoro-tvm`
