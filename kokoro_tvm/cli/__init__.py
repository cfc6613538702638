"""`kokoro-tvm` command line: say, compare, bench, compile, tune, gpu-build, gpu-check, pipeline, lab, voices,
weights, evaluate, sweep.

Bad input (empty text, an unknown voice or symbol, a missing or corrupt weights file, an unwritable output) ends
with one clear `kokoro-tvm: error: ...` line on stderr and exit status 2, never a traceback: the project's own
errors (kokoro_tvm.errors.KokoroTVMError) are the ones printed so. Any other exception is a bug and raises with
its traceback.

The CLI only parses: each subcommand calls `run(args)` of its module of kokoro_tvm.commands (`options.command`),
imported when it runs. The parsers, by group:

- `speech`: say, compare, bench (text in, audio or numbers out);
- `builds`: compile, tune, gpu-build, gpu-check (artifacts, tuning records and device checks);
- `project`: pipeline, lab, voices, weights (the notebooks and the inputs);
- `scale`: evaluate, sweep (corpus evaluations and notebook sweeps on Dask);
- `options`: the arguments several commands share, with the choices read from their one table.

Each group's `COMMANDS` add its subcommands to the parser.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from kokoro_tvm import __version__
from kokoro_tvm.cli import builds, project, scale, speech
from kokoro_tvm.errors import KokoroTVMError

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    summary = " ".join(__doc__.split("\n\n")[0].split())  # the docstring's first paragraph, on one line
    parser = argparse.ArgumentParser(prog="kokoro-tvm", description=summary)
    parser.add_argument("--version", action="version", version=f"kokoro-tvm {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings and errors only")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (speech, builds, project, scale):
        for add_command in group.COMMANDS:
            add_command(sub)
    return parser


# Dask's scheduler, nannies and comms narrate every start and close at INFO (about 30 lines around one `evaluate`)
# and `import distributed` sets that level itself, from this dask setting unless given: the commands say what ran;
# Dask's warnings and errors still show.
DASK_LOG_LEVEL_ENV = "DASK_LOGGING__DISTRIBUTED"


def configure_logging(quiet: bool) -> None:
    """Log lines `HH:MM:SS LEVEL name: message` at INFO (WARNING with `quiet`); Dask's own at WARNING."""
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    os.environ.setdefault(DASK_LOG_LEVEL_ENV, "warning")  # read when dask is first imported (and by its workers)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.quiet)
    try:
        return args.func(args)
    except KokoroTVMError as exc:
        print(f"kokoro-tvm: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # the reader left early (`kokoro-tvm voices | head`): nothing is wrong, stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the flush at exit does not raise again
        return 0
