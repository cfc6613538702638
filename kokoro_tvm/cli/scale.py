"""`kokoro-tvm evaluate` and `sweep`: corpus evaluations and notebook sweeps as Dask tasks (kokoro_tvm.scale), on
a local cluster sized to this machine or on an existing cluster by its scheduler's address."""

from __future__ import annotations

import argparse
import json
import logging

from kokoro_tvm.components import TIMED_PRECISIONS
from kokoro_tvm.errors import InputError
from kokoro_tvm.report import records

log = logging.getLogger("kokoro_tvm.cli")

SUMMARY_COLUMNS = ["backend", "sentences", "same_length", "pesq_wb", "stoi", "log_mel_l1", "wer_mean", "wer"]


def evaluate(args: argparse.Namespace) -> int:
    from kokoro_tvm.scale.evaluate import evaluate as run_evaluate  # (deferred: torch, TVM, Dask)

    voices = tuple(v.strip() for v in args.voices.split(",") if v.strip())
    if not voices:
        raise InputError("--voices takes one or more voice names, comma-separated")
    record = run_evaluate(
        args.sentences,
        args.out,
        voices,
        args.precisions,
        args.limit,
        args.scheduler,
        args.workers,
        args.threads,
        progress=not args.quiet,
        wav_dir=f"{args.out}/wav" if args.wavs else None,
    )
    if args.json:
        print(json.dumps(record, default=str))
        return 0
    print(
        f"{record['tasks']} tasks: {record['ran']} run, {record['skipped']} already done, {len(record['failed'])} "
        f"failed; {record['seconds']:.1f} s on {record['where']}; table: {args.out}/rows/"
    )
    for key, error in record["failed"].items():
        print(f"failed {key}: {error}")
    print(records.markdown_table(record["summary"], SUMMARY_COLUMNS))
    return 0 if not record["failed"] else 1


def sweep(args: argparse.Namespace) -> int:
    from kokoro_tvm.scale.sweep import sweep as run_sweep  # (deferred: Dask, papermill)

    record = run_sweep(args.notebook, [tuple(p) for p in args.parameter], args.scheduler, args.workers, args.fast)
    for row in record["points"]:
        held = sum(1 for c in row["claims"] if c.get("passed"))
        print(
            f"{row['point']}: {row['status']}, {held}/{len(row['claims'])} findings hold"
            + (f"; {row['error']}" if row["error"] else "")
        )
    return 0 if all(row["status"] == "ok" for row in record["points"]) else 1


def _add_cluster(parser) -> None:
    parser.add_argument(
        "--scheduler",
        help="address of a running Dask scheduler (tcp://host:8786), 'local' (the "
        "default: a local cluster) or 'in-process' (no Dask, like --workers 0)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        help="local cluster: worker processes (default: one per core); evaluate --workers 0: in this process, no Dask",
    )


def _add_evaluate(sub) -> None:
    parser = sub.add_parser("evaluate", help="notebook 07's comparison over many sentences and voices, on Dask")
    parser.add_argument("--sentences", default="corpus", help="a text file (one sentence per line) or 'corpus'")
    parser.add_argument("--limit", type=int, help="that many sentences, spread over the lengths (default: all)")
    parser.add_argument("--voices", default="af_heart", help="comma-separated voice names (default af_heart)")
    choices = ", ".join(TIMED_PRECISIONS)
    parser.add_argument("--precisions", default="fp32,int8", help=f"TVM builds, comma-separated, from {choices}")
    parser.add_argument("--threads", type=int, help="compute threads per task (default: cores / local workers)")
    parser.add_argument("--out", default="outputs/evaluate", help="results folder; a rerun skips what is there")
    parser.add_argument(
        "--wavs",
        action="store_true",
        help="also bring every backend's audio back, as float32 WAVs "
        "in OUT/wav/ (about 0.5 MB per backend per 5 s of speech per task)",
    )
    parser.add_argument("--json", action="store_true", help="print the run's record as one JSON line")
    _add_cluster(parser)
    parser.set_defaults(func=evaluate)


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
    parser.set_defaults(func=sweep)


COMMANDS = (_add_evaluate, _add_sweep)  # each adds its subcommand to `kokoro-tvm`
