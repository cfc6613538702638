"""A tuning record: what measurement chose for one CPU (see the package docstring).

A contraction class is what the CPU Contraction rule's choice depends on: the operand dtypes, the row extent
(output channels) and the reduction extents ("float32:256:256x7"); a symbolic row extent (a matmul over tokens)
has no class and keeps the heuristic tile. A packed class is a bf16 or int8 conv class; its entry says whether
the packed kernel beat the float32 kernel of the same conv on this CPU, and a build keeps the float32 conv where
it did not (so a bf16 build is never slower than fp32 for want of a faster instruction). A long float32 conv
shape ("c128-k11-d1") names the frequency-domain tiles [N, m] it runs with, or null where the direct conv was
faster; a record without such entries (tuned before they were measured) leaves the choice to the heuristic.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from kokoro_tvm.compiler.targets import is_this_machine
from kokoro_tvm.errors import InputError
from kokoro_tvm.machine import cpu_identity, machine, record_name
from kokoro_tvm.paths import TUNING_ENV, TUNING_RECORDS, cache_dir

log = logging.getLogger(__name__)

FORMAT = 2  # 2: a packed class names its kernel (amx, avx512, float32); 1 said packed or not


AMX, AVX512, FLOAT32 = "amx", "avx512", "float32"  # a packed class's kernel
KERNELS = (AMX, AVX512, FLOAT32)


@dataclass(frozen=True)
class Choice:
    """One contraction class's schedule: register tile rows x vectors of columns, and the tile walk order."""

    rows: int
    vectors: int
    rows_outer: bool

    @property
    def label(self) -> str:
        return f"{self.rows}x{self.vectors}{'r' if self.rows_outer else 'c'}"


@dataclass
class TuningRecord:
    cpu: dict
    choices: dict[str, Choice] = field(default_factory=dict)
    packed: dict[str, str] = field(default_factory=dict)  # packed class -> the kernel it runs on (KERNELS)
    frequency: dict[str, list[int] | None] = field(default_factory=dict)  # conv shape -> [N, m], or None: direct
    measured: dict = field(default_factory=dict)  # per class: every candidate's seconds, for the notebook
    tuned: dict = field(default_factory=dict)  # when, on what commit, how long, at which length

    @property
    def name(self) -> str:
        return record_name(self.cpu)

    def choice(self, key: str) -> Choice | None:
        """The measured schedule of contraction class `key`, or None (the heuristic)."""
        return self.choices.get(key)

    def fastest_precision(self, available) -> str | None:
        """The precision of `available` whose contraction kernels summed fastest when this CPU was tuned."""
        seconds = self.tuned.get("precision_seconds", {})
        timed = [p for p in available if seconds.get(p)]
        return min(timed, key=lambda p: seconds[p]) if timed else None

    def packed_kernel(self, key: str) -> str:
        """The kernel packed conv class `key` runs on: AMX, AVX512 (the vector kernel; unmeasured classes) or
        FLOAT32 (the packed kernels were not faster than the float32 conv)."""
        return self.packed.get(key, AVX512)

    def decisions(self) -> dict:
        """What a build computes from (not the timings): part of every llvm build's cache key."""
        return {
            "choices": {k: [c.rows, c.vectors, c.rows_outer] for k, c in sorted(self.choices.items())},
            "packed": dict(sorted(self.packed.items())),
            "frequency": dict(sorted(self.frequency.items())),
        }

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.decisions(), sort_keys=True).encode()).hexdigest()[:16]

    def as_dict(self) -> dict:
        return {"format": FORMAT, "cpu": self.cpu, "tuned": self.tuned, **self.decisions(), "measured": self.measured}

    def save(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / self.name
        path.write_text(json.dumps(self.as_dict(), indent=1, sort_keys=True) + "\n")
        return path

    @classmethod
    def load(cls, path: Path) -> TuningRecord:
        try:
            data = json.loads(Path(path).read_text())
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, this version reads {FORMAT}")
            choices = {k: Choice(int(r), int(v), bool(o)) for k, (r, v, o) in data["choices"].items()}
            packed = {k: str(v) for k, v in data["packed"].items()}
            if set(packed.values()) - set(KERNELS):
                raise ValueError(f"a packed class names a kernel outside {KERNELS}")
            frequency = {k: None if v is None else [int(n) for n in v] for k, v in data.get("frequency", {}).items()}
            if any(v is not None and len(v) != 2 for v in frequency.values()):
                raise ValueError("a frequency-domain conv names other than two tile sizes [N, m]")
            measured, tuned = data.get("measured", {}), data.get("tuned", {})
            return cls(data["cpu"], choices, packed, frequency, measured, tuned)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"tuning record {path} is unreadable: {exc}") from None


def user_folder() -> Path:
    return cache_dir() / "tuning"


def find(identity: dict | None = None, folders: tuple[Path, ...] | None = None) -> TuningRecord | None:
    """This CPU's record: the one `kokoro-tvm tune` wrote into the cache, else the committed one; None if
    neither exists. A record that cannot be read is skipped with a warning (the build then uses heuristics)."""
    identity = identity or cpu_identity()
    for folder in folders or (user_folder(), TUNING_RECORDS):
        path = folder / record_name(identity)
        if path.is_file():
            try:
                return TuningRecord.load(path)
            except InputError as exc:
                log.warning("%s", exc)
    return None


# TUNING_ENV (KOKORO_TVM_TUNING): unset, this CPU's record if there is one; "off", the heuristics (notebook 08
# compares the two); a path, that record file (tests give a record for tiny shapes).


@functools.cache
def _announced(line: str) -> None:
    log.info("%s", line)


def for_target(target) -> TuningRecord | None:
    """The record a build for `target` schedules from: this CPU's (cache, then committed) where the target is
    the machine that builds; None for another CPU, a GPU, KOKORO_TVM_TUNING=off or a CPU with no record, which
    is said in one log line per process."""
    setting = os.environ.get(TUNING_ENV, "")
    if target.get("kind") != "llvm" or setting == "off" or not is_this_machine(target):
        return None
    if setting:
        return TuningRecord.load(Path(setting))
    found = find()
    if found is None:
        m = machine()
        _announced(
            f"no tuning record for this CPU ({m.cpu}, family {m.family} model {m.model}): heuristic schedules on its "
            "measured geometry; `kokoro-tvm tune` measures this machine once (minutes)"
        )
    else:
        _announced(f"scheduling from tuning record {found.name} (tuned {found.tuned.get('date', '?')})")
    return found


_ACTIVE: contextvars.ContextVar[TuningRecord | None] = contextvars.ContextVar("kokoro_tuning", default=None)


def active() -> TuningRecord | None:
    """The record the build that is running schedules from (None: heuristics)."""
    return _ACTIVE.get()


@contextlib.contextmanager
def using(record: TuningRecord | None):
    """Schedule with `record` (None: heuristics) inside the block."""
    token = _ACTIVE.set(record)
    try:
        yield record
    finally:
        _ACTIVE.reset(token)
