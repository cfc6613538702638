"""The project's own error classes. Each says what went wrong and what to do in one line; the CLI prints them as
`kokoro-tvm: error: ...` with exit status 2 and lets every other exception (a bug) raise with its traceback."""


class KokoroTVMError(Exception):
    """An error the user can act on: bad input, a missing or corrupt file, something this machine lacks."""


class InputError(KokoroTVMError, ValueError):
    """A value the user gave (an option, a text, a name) that cannot be used."""


class UnsupportedError(InputError):
    """Something this machine, target or device cannot do (an instruction set, a device, a dtype)."""
