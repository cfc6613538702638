"""`kokoro-tvm pipeline`: the numbered notebooks run in order by papermill into outputs/, then the report
(kokoro_tvm.report.notebook_runner)."""

from __future__ import annotations

import argparse

from kokoro_tvm import paths
from kokoro_tvm.report.notebook_runner import run as run_notebooks


def run(args: argparse.Namespace) -> int:
    only = [s.strip() for s in args.only.split(",")] if args.only else None
    for path in run_notebooks(only=only, fast=args.fast):
        print(path)
    print(paths.outputs_dir() / "index.html")
    return 0
