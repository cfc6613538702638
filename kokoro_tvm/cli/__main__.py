"""`python -m kokoro_tvm.cli ...`: the `kokoro-tvm` command."""

import sys

from kokoro_tvm.cli import main

if __name__ == "__main__":
    sys.exit(main())
