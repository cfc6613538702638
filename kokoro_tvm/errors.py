"""The project's own error classes. Each says what went wrong and what to do in one line; the CLI prints them as
`kokoro-tvm: error: ...` with exit status 2 and lets every other exception (a bug) raise with its traceback.

- `InputError` (also a ValueError): a value the user gave cannot be used; `UnsupportedError`: this machine,
  target or device cannot do what was asked.
- `ResourceError` (also a RuntimeError): something the run needs from outside (a file, a package, a download,
  a compiled artifact) is missing, unreadable or corrupt; `OutputError`: a result cannot be written.
"""

from __future__ import annotations

import contextlib
from pathlib import Path


class KokoroTVMError(Exception):
    """An error the user can act on: bad input, a missing or corrupt file, something this machine lacks."""


class InputError(KokoroTVMError, ValueError):
    """A value the user gave (an option, a text, a name) that cannot be used."""


class UnsupportedError(InputError):
    """Something this machine, target or device cannot do (an instruction set, a device, a dtype)."""


class ResourceError(KokoroTVMError, RuntimeError):
    """A file, package, download or artifact the run needs is missing, unreadable or corrupt."""


class OutputError(ResourceError):
    """A result cannot be written where the user asked (no such folder, no permission, a full disk)."""


@contextlib.contextmanager
def writing(path: str | Path):
    """Writes inside this block that fail at the operating system (OSError) become one OutputError naming
    `path`; any other exception passes through unchanged."""
    try:
        yield Path(path)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc


def writable_folder(path: str | Path) -> Path:
    """`path` as a folder, made if missing; one OutputError naming it where it cannot be."""
    with writing(path) as folder:
        folder.mkdir(parents=True, exist_ok=True)
    return folder
