"""`kokoro-tvm evaluate`: notebook 07's comparison (kokoro_tvm.evaluation.backends: every metric against
pt.dynamic, Whisper's WER included) over many sentences and voices, one Dask task per sentence and voice.

- Work: `plan_tasks` turns sentences x voices into tasks (a sentence's index is its position in the source, so a
  rerun with a larger `limit` reuses what is done); the results folder (kokoro_tvm.evaluation.results_table) is
  read first and every task already there is skipped.
- Workers: each process builds its `Speakers` (weights, compiled artifacts, ONNX session, Whisper) on its first task
  and keeps it (`process_speakers`), never per task; it runs with `threads` intra-op threads for torch and TVM.
- Client: the tasks go to the cluster (kokoro_tvm.scale.cluster), results are written as they finish, with a
  progress bar and its ETA. A task that fails (its worker died more often than Dask's retries allow, or its sentence
  is bad) is reported in one line and the others go on; a worker that dies mid-task has its task rerun elsewhere by
  Dask, so each task's rows arrive once.
- `workers=0` or `scheduler="in-process"`: the same tasks in this process, one after another, no Dask (the serial
  baseline, and a pipeline without a cluster); `scheduler=None` or "local": a local cluster; else an address.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import pickle
import time
from dataclasses import dataclass
from pathlib import Path

from kokoro_tvm.compiled import check_precision
from kokoro_tvm.components import precision_list
from kokoro_tvm.config import SAMPLE_RATE
from kokoro_tvm.errors import InputError
from kokoro_tvm.evaluation.backends import REFERENCE, Speakers, compare_backends, pick_sentences
from kokoro_tvm.evaluation.results_table import ResultTable, summarize, task_key
from kokoro_tvm.frontend.corpus import load_sentences
from kokoro_tvm.frontend.voices import load_voice
from kokoro_tvm.report import records
from kokoro_tvm.runtime.audio_io import read_wav, write_wav
from kokoro_tvm.runtime.devices import cpu_share, usable_cpus
from kokoro_tvm.scale.cluster import IN_PROCESS, LOCAL, check_workers, completed, dask_client

log = logging.getLogger(__name__)

CORPUS = "corpus"  # `--sentences corpus`: the project's sentence list
BACKEND_OF = {"fp32": "tvm_dynamic", "bf16": "tvm_bf16", "int8": "tvm_int8"}  # --precisions -> notebook 07's names
DEFAULT_BACKENDS = (REFERENCE, "torch_stock")  # always: the reference and PyTorch's run-to-run floor


@dataclass(frozen=True)
class Task:
    voice: str
    sentence: int  # its position in the source list
    text: str
    backends: tuple[str, ...]

    @property
    def key(self) -> str:
        return task_key(self.voice, self.sentence)


def read_sentences(source: str) -> list[str]:
    """`corpus` or a UTF-8 text file of one sentence per line (blank lines and # comments skipped)."""
    if source == CORPUS:
        return load_sentences()
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(
            f"cannot read sentences from {source} ({type(exc).__name__}); give a UTF-8 text file or 'corpus'"
        ) from None
    sentences = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if not sentences:
        raise InputError(f"{source} holds no sentence")
    return sentences


def backends_for(precisions: str) -> tuple[str, ...]:
    """The reference, stock PyTorch and one TVM build per precision (`fp32,int8` -> tvm_dynamic, tvm_int8)."""

    chosen = precision_list(precisions, tuple(BACKEND_OF))
    for precision in chosen:
        check_precision(precision.name)  # a CPU without bf16 / VNNI: one line before any work
    return (*DEFAULT_BACKENDS, *(BACKEND_OF[p.name] for p in chosen))


def plan_tasks(
    sentences: list[str], voices: list[str], backends: tuple[str, ...], limit: int | None = None, exact: int = 0
) -> list[Task]:
    """One task per chosen sentence and voice; `limit` picks that many spread over the lengths (notebook 07's
    choice); `tvm_exact` (one build per length) only on the first `exact` chosen sentences."""
    if limit is not None and limit < 1:
        raise InputError(f"--limit must be >= 1, got {limit}")
    chosen = pick_sentences(sentences, limit) if limit else sorted(sentences, key=len)
    positions = {text: index for index, text in reversed(list(enumerate(sentences)))}  # first occurrence
    for voice in voices:
        load_voice(voice)  # an unknown voice: one line before any task
    return [
        Task(voice, positions[text], text, backends if rank < exact else tuple(b for b in backends if b != "tvm_exact"))
        for voice in voices
        for rank, text in enumerate(chosen)
    ]


# One worker's resident memory at its peak, measured (2-core Zen 4, 24 GiB, 2026-11-25): 4.8 GB running the
# reference, stock PyTorch and the fp32 and int8 builds (`evaluate`'s default) on 20 corpus sentences (the largest
# process of that two-worker run, /usr/bin/time's maximum resident set); 10.8 GB running notebook 07's every backend
# with the exact-length builds of three lengths (the worker's RSS, `ps`). Whisper, the weights and the two PyTorch
# runs are in both.
MEMORY_GB_DEFAULT = 5.0
MEMORY_GB_EVERY_BACKEND = 11.0
HEAVY_BACKENDS = {"tvm_exact", "tvm_bucketed", "ort_int8"}  # what notebook 07 adds: builds per length, ORT


def worker_memory_gb(backends: tuple[str, ...]) -> float:
    """What one worker running `backends` needs, from the measurements above (sizes the local cluster)."""
    return MEMORY_GB_EVERY_BACKEND if HEAVY_BACKENDS & set(backends) else MEMORY_GB_DEFAULT


@functools.cache
def process_speakers(voice: str, seed: int) -> Speakers:
    """This process's `Speakers` for `voice` and `seed`, built once: a worker's for all its tasks, and in process the
    one notebook 07 also streams with, so `SCHEDULER="in-process"` loads the weights and each build once."""
    return Speakers(voice, seed)


def _set_threads(threads: int) -> None:
    """torch's intra-op threads, and TVM's pool (read when it starts: the first task of the process)."""
    import torch

    torch.set_num_threads(threads)
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))


def run_task(task: Task, seed: int, threads: int, keep_audio: bool = False) -> tuple[list[dict], dict]:
    """One sentence and voice on every backend of the task: (notebook 07's rows, keyed; {backend: float32 audio} if
    `keep_audio`, else {}) (runs on a worker)."""
    start = time.perf_counter()
    _set_threads(threads)
    rows, audio = compare_backends(process_speakers(task.voice, seed), [task.text], task.backends)
    seconds = time.perf_counter() - start
    for row in rows:
        row.update(voice=task.voice, sentence=task.sentence, text=task.text, task_s=seconds)
    return rows, audio[0] if keep_audio else {}


class _Results:
    """Where a finished task's output goes: its WAVs (if asked) first, then its rows, so a task in the table has
    its audio on disk too."""

    def __init__(self, table: ResultTable, wav_dir: Path | None, seed: int):
        self.table, self.wav_dir, self.seed = table, wav_dir, seed

    def write(self, task: Task, rows: list[dict], audio: dict) -> None:
        for backend, waveform in audio.items():  # float32 WAVs: no PCM16 clipping
            metadata = {"text": task.text, "backend": backend, "voice": task.voice, "seed": self.seed}
            write_wav(self.wav_dir / f"{task.key}_{backend}.wav", waveform, SAMPLE_RATE, metadata=metadata)
        self.table.write(task.key, rows)


def task_audio(wav_dir: Path | str, voice: str, sentence: int, backends: tuple[str, ...]) -> dict:
    """{backend: float32 audio} of one task from the WAVs `evaluate(wav_dir=...)` wrote, in `backends`' order (those
    it has)."""
    paths = {backend: Path(wav_dir) / f"{task_key(voice, sentence)}_{backend}.wav" for backend in backends}
    return {backend: read_wav(path)[0] for backend, path in paths.items() if path.exists()}


def _run_serial(tasks: list[Task], results: _Results, seed: int, threads: int, progress: bool) -> dict[str, str]:
    from tqdm import tqdm

    failed = {}
    for task in tqdm(tasks, desc="evaluate", unit="task", disable=not progress):
        try:
            results.write(task, *run_task(task, seed, threads, keep_audio=results.wav_dir is not None))
        except InputError as exc:
            failed[task.key] = f"{type(exc).__name__}: {exc}"
            log.error("task %s failed: %s", task.key, failed[task.key])
    return failed


def _run_on_cluster(tasks: list[Task], results: _Results, seed: int, threads: int, client, progress: bool):
    """Submit every task, write each one's output as it finishes: ({key: error} of the tasks that failed, the largest
    pickled arguments sent and results received, in bytes; `run_task` itself travels by its module path)."""
    from tqdm import tqdm

    keep_audio = results.wav_dir is not None
    futures = {
        client.submit(run_task, task, seed, threads, keep_audio, key=f"evaluate-{task.key}", pure=False): task
        for task in tasks
    }
    sizes = {"to_worker": max(len(pickle.dumps((task, seed, threads, keep_audio))) for task in tasks), "back": 0}
    failed = {}
    finished = completed(client, futures)
    for future in tqdm(finished, total=len(futures), desc="evaluate", unit="task", disable=not progress):
        task = futures[future]
        if future.status == "finished":
            rows, audio = future.result()
            sizes["back"] = max(sizes["back"], len(pickle.dumps((rows, audio))))
            results.write(task, rows, audio)
        else:
            error = future.exception()
            failed[task.key] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            log.error("task %s failed: %s", task.key, failed[task.key])
        future.release()
    return failed, sizes


def _run_tasks(todo, results, seed: int, threads, scheduler, workers, backends, progress: bool):
    """Run `todo` in this process or on the cluster: (where it ran, {key: error} of the failed, bytes per task
    through Dask or None)."""
    if not todo:
        return "nowhere: every task was done", {}, None
    if workers == 0 or scheduler == IN_PROCESS:
        return "in process", _run_serial(todo, results, seed, threads or cpu_share(), progress), None
    local = scheduler in (None, LOCAL)
    with dask_client(scheduler, workers, memory_gb=worker_memory_gb(backends)) as client:
        n_workers = len(check_workers(client))
        where = f"local cluster of {n_workers} workers" if local else scheduler
        # workers x threads = cores on the local cluster; a remote worker's share is the caller's --threads
        per_task = threads or (max(1, usable_cpus() // n_workers) if local else 1)
        return where, *_run_on_cluster(todo, results, seed, per_task, client, progress)


def evaluate(
    sentences: str | list[str] = CORPUS,
    out: Path | str = "outputs/evaluate",
    voices: tuple[str, ...] = ("af_heart",),
    precisions: str = "fp32,int8",
    limit: int | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    threads: int | None = None,
    seed: int = 0,
    backends: tuple[str, ...] | None = None,
    exact: int = 0,
    progress: bool = True,
    wav_dir: Path | str | None = None,
    fresh: bool = False,
) -> dict:
    """Evaluate (module docstring) into `out`; returns the run's record (also `out/summary.json`): tasks planned,
    run, skipped and failed, seconds, where it ran, and notebook 07's summary over the planned tasks' rows.
    `wav_dir`: every backend's audio of each task run is sent back too and written there as float32 WAVs
    (`<voice>-<sentence>_<backend>.wav`). `fresh`: the rows already in `out` (and WAVs in `wav_dir`) are deleted
    first, so the run shows its own results only (a notebook's run), where by default it skips the tasks done."""
    backends = tuple(backends) if backends else backends_for(precisions)
    source = read_sentences(sentences) if isinstance(sentences, str) else list(sentences)
    tasks = plan_tasks(source, list(voices), backends, limit, exact)
    table = ResultTable(Path(out))
    results = _Results(table, Path(wav_dir) if wav_dir is not None else None, seed)
    if fresh:
        table.clear()
        for old in results.wav_dir.glob("*.wav") if results.wav_dir is not None else ():
            old.unlink()
    done = table.done()
    # longest first: Dask starts tasks in submission order, so the long ones no longer end the run on one worker
    # while the others idle (20 corpus sentences on two workers: 371 s in length order, serial 312 s). The tasks
    # with exact-length builds before all: each builds its own length first (a minute on the Zen 4), which makes
    # them the longest
    todo = sorted(
        (task for task in tasks if task.key not in done),
        key=lambda task: ("tvm_exact" not in task.backends, -len(task.text)),
    )
    start = time.perf_counter()
    where, failed, sizes = _run_tasks(todo, results, seed, threads, scheduler, workers, backends, progress)
    keys = {task.key for task in tasks}
    rows = [row for row in table.read() if task_key(row["voice"], row["sentence"]) in keys]
    record = {
        "tasks": len(tasks),
        "ran": len(todo) - len(failed),
        "skipped": len(tasks) - len(todo),
        "failed": failed,
        "seconds": time.perf_counter() - start,
        "where": where,
        "backends": list(backends),
        "voices": list(voices),
        "task_bytes": sizes,
        "summary": summarize(rows) if rows else [],
    }
    (Path(out) / "summary.json").parent.mkdir(parents=True, exist_ok=True)
    (Path(out) / "summary.json").write_text(json.dumps(record, indent=1, default=str))
    return record


SUMMARY_COLUMNS = ["backend", "sentences", "same_length", "pesq_wb", "stoi", "log_mel_l1", "wer_mean", "wer"]


def run(args: argparse.Namespace) -> int:
    voices = tuple(v.strip() for v in args.voices.split(",") if v.strip())
    if not voices:
        raise InputError("--voices takes one or more voice names, comma-separated")
    record = evaluate(
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
