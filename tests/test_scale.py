"""Dask runs (kokoro_tvm.scale): the results table, the sweep grid, the cluster checks against real Dask processes,
and, with the real weights, an evaluation that loses nothing when a worker is killed mid-run."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from kokoro_tvm.errors import InputError


def _rows(key_sentence: int, backends=("pt_dynamic", "tvm_dynamic")) -> list[dict]:
    return [
        {
            "voice": "af_heart",
            "sentence": key_sentence,
            "text": "A b.",
            "backend": b,
            "seconds": 1.5,
            "samples_vs_reference": 0,
            "finite": True,
            "wer": 0.0,
            "transcript": "a b",
            "pesq_wb": None if b == "pt_dynamic" else 4.6,
        }
        for b in backends
    ]


def test_table_keeps_each_task_once_and_reads_back(tmp_path):
    from kokoro_tvm.evaluation.results_table import ResultTable, task_key

    table = ResultTable(tmp_path)
    assert table.done() == set() and table.read() == []
    table.write(task_key("af_heart", 3), _rows(3))
    table.write(task_key("af_heart", 3), _rows(3))  # a task that ran twice (a retried worker): still one file
    table.write(task_key("af_heart", 10), _rows(10))
    assert table.done() == {"af_heart-000003", "af_heart-000010"}
    rows = table.read()
    assert [(r["sentence"], r["backend"]) for r in rows] == [
        (3, "pt_dynamic"),
        (3, "tvm_dynamic"),
        (10, "pt_dynamic"),
        (10, "tvm_dynamic"),
    ]
    assert rows[1]["pesq_wb"] == 4.6 and rows[0]["pesq_wb"] is None and rows[0]["snr_db"] is None
    assert not list((tmp_path / "rows").glob(".*partial"))  # no temporary file left behind
    table.clear()  # a fresh run into the same folder (evaluate(fresh=True), notebook 07)
    assert table.done() == set() and table.read() == []


def test_table_refuses_foreign_columns_and_names_a_corrupt_file(tmp_path):
    from kokoro_tvm.evaluation.results_table import ResultTable, TableError, task_key

    table = ResultTable(tmp_path)
    with pytest.raises(ValueError, match="colour"):
        table.write("af_heart-000001", [{**_rows(1)[0], "colour": "red"}])
    with pytest.raises(InputError):
        task_key("../etc", 1)
    (tmp_path / "rows").mkdir(exist_ok=True)
    (tmp_path / "rows" / "af_heart-000002.parquet").write_bytes(b"not parquet")
    with pytest.raises(TableError, match="af_heart-000002.parquet"):
        table.read()


def test_the_report_reads_a_notebooks_results_table(tmp_path, caplog):
    """A notebook folder with an `evaluate/` table gets a section table read from the Parquet files (per backend,
    the worst PESQ-WB among them), not from its metrics.json; a corrupt part file drops that table, not the page."""
    from kokoro_tvm.evaluation.results_table import ResultTable, task_key
    from kokoro_tvm.report.index_page import build_summary, render_html

    folder = tmp_path / "07_audio_comparison"
    folder.mkdir()
    (folder / "metrics.json").write_text(json.dumps({"parameters": {"FAST": True}, "metrics": {}, "claims": []}))
    table = ResultTable(folder / "evaluate")
    table.write(task_key("af_heart", 0), _rows(0))
    table.write(task_key("af_heart", 1), [{**row, "pesq_wb": 4.1 if row["pesq_wb"] else None} for row in _rows(1)])
    (entry,) = build_summary(tmp_path)["notebooks"]
    by_backend = {row["backend"]: row for row in entry["evaluation"]["summary"]}
    assert entry["evaluation"]["rows"] == 4 and entry["evaluation"]["tasks"] == 2
    assert by_backend["tvm_dynamic"]["pesq_wb_worst"] == 4.1 and by_backend["pt_dynamic"]["pesq_wb"] is None
    page = render_html(build_summary(tmp_path))
    assert "Results table: 2 sentences x voices (af_heart), 4 rows" in page and "<td>4.1</td>" in page
    (folder / "evaluate" / "rows" / "af_heart-000002.parquet").write_bytes(b"not parquet")
    with caplog.at_level(logging.WARNING, logger="kokoro_tvm.report.index_page"):
        (entry,) = build_summary(tmp_path)["notebooks"]
    assert entry["evaluation"] is None and "af_heart-000002.parquet" in caplog.text


def test_a_scheduler_that_is_no_address_is_one_line():
    """`--scheduler` (notebook 07's SCHEDULER) is an address, 'local' or 'in-process'; anything else is one line, at
    once, and a sweep cannot run in process."""
    from kokoro_tvm.commands.sweep import sweep
    from kokoro_tvm.scale.cluster import ClusterError, dask_client

    with pytest.raises(ClusterError, match="'lcoal' is not a Dask scheduler's address .*'local' or 'in-process'"):
        with dask_client("lcoal"):
            pass
    with pytest.raises(ClusterError, match="sweep runs its points on Dask"):
        sweep("03", [("SEED", "0")], scheduler="in-process")


def test_grid_is_the_product_of_declared_parameters():
    from kokoro_tvm.commands.sweep import grid, point_name

    declared = {"FAST": False, "SEED": 0, "VALID_STEPS": 32}
    points = grid([("SEED", "0,1"), ("VALID_STEPS", "16, 32")], declared)
    assert points == [{"SEED": a, "VALID_STEPS": b} for a in (0, 1) for b in (16, 32)]
    assert point_name({"TEXT": "a b/c", "SEED": 1}) == "TEXT=a_b_c__SEED=1"
    assert len({point_name(p) for p in points}) == 4
    for bad in ([("SEEDS", "0,1")], [("SEED", "0"), ("SEED", "1")], [("SEED", ",")]):
        with pytest.raises(InputError):
            grid(bad, declared)


def test_sentences_and_tasks_are_checked_before_any_work(tmp_path):
    from kokoro_tvm.commands.evaluate import plan_tasks, read_sentences

    with pytest.raises(InputError, match="cannot read"):
        read_sentences(str(tmp_path / "missing.txt"))
    (tmp_path / "empty.txt").write_text("# nothing\n\n")
    with pytest.raises(InputError, match="no sentence"):
        read_sentences(str(tmp_path / "empty.txt"))
    sentences = ["A much longer sentence than the others.", "Short.", "Middle one here.", "Tiny."]
    tasks = plan_tasks(sentences, ["af_heart"], ("pt_dynamic", "tvm_exact", "tvm_dynamic"), limit=2, exact=1)
    # two sentences spread over the lengths (shortest and longest); indices are their places in the source
    assert [(t.sentence, t.backends) for t in tasks] == [
        (3, ("pt_dynamic", "tvm_exact", "tvm_dynamic")),
        (0, ("pt_dynamic", "tvm_dynamic")),
    ]
    with pytest.raises(InputError, match="unknown voice 'xx_nobody'"):
        plan_tasks(sentences, ["xx_nobody"], ("pt_dynamic",))


def test_an_address_nobody_answers_is_one_line(capsys, monkeypatch):
    from kokoro_tvm.cli import main
    from kokoro_tvm.scale import cluster

    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 2)  # Dask retries a refused connection until the timeout

    with socket.socket() as probe:  # a port that was just free: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.perf_counter()
    assert main(["-q", "sweep", "03", "-p", "SEED", "0", "--scheduler", f"tcp://127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kokoro-tvm: error: no Dask scheduler answers at") and "within 2 s" in err, err
    assert "\n" not in err and time.perf_counter() - started < 60  # the connect timeout, not a hang


def test_a_bad_sweep_parameter_is_one_line(capsys):
    from kokoro_tvm.cli import main

    assert main(["-q", "sweep", "03", "-p", "VOICES", "a,b"]) == 2
    err = capsys.readouterr().err.strip()
    assert "VOICES" in err and "VALID_STEPS" in err and "\n" not in err, err


def test_workers_are_checked_against_this_process(tmp_path, monkeypatch, caplog):
    """A real local cluster: matching facts pass; a worker reporting another project version, or one that cannot
    import the function it is sent (a module only this process has: a worker without the project), is one line
    naming the worker."""
    from kokoro_tvm.scale.cluster import ClusterError, check_workers, dask_client, worker_facts

    here = worker_facts()
    with dask_client(workers=1) as client:  # its worker started with this process's sys.path as it was
        (tmp_path / "only_here.py").write_text("def facts():\n    return {}\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        import only_here

        (worker,) = check_workers(client, here)
        assert check_workers(client, here)[worker]["allocator"] is None  # started without Dask's slow malloc setting
        # our tasks hold no Dask data: a worker that paused on memory could free nothing and would stall the run
        assert client.run(_memory_pause) == {worker: False}
        with caplog.at_level(logging.WARNING, logger="kokoro_tvm.scale.cluster"):
            check_workers(client, here, facts=lambda: {**here, "allocator": "65536"})
        assert f"worker {worker} runs with MALLOC_TRIM_THRESHOLD_=65536" in caplog.text
        with pytest.raises(ClusterError, match=f"worker {worker} differs.*kokoro_tvm"):
            check_workers(client, {**here, "kokoro_tvm": "0.0.0"})
        with pytest.raises(ClusterError, match=f"worker {worker} cannot run kokoro_tvm tasks"):
            check_workers(client, here, facts=only_here.facts)


def _memory_pause():
    import dask

    return dask.config.get("distributed.worker.memory.pause")


def test_the_local_cluster_is_as_large_as_the_memory_holds():
    from kokoro_tvm.runtime.devices import usable_cpus
    from kokoro_tvm.scale.cluster import local_workers

    assert local_workers() == local_workers(0.001) == usable_cpus()  # one per core when memory is no limit
    assert local_workers(10_000) == 1  # never fewer than one, however much each needs


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _dask(*args: str, log: Path) -> subprocess.Popen:
    dask = Path(sys.executable).with_name("dask")
    return subprocess.Popen([str(dask), *args], stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def _scheduler(address: str, log: Path) -> subprocess.Popen:
    """A real `dask scheduler` on this machine's loopback, at `address`'s port."""
    return _dask("scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1], "--no-dashboard", log=log)


def _stop(*processes: subprocess.Popen) -> None:
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)


def test_a_cluster_without_workers_stops_the_run_instead_of_hanging(tmp_path, monkeypatch):
    """A real `dask scheduler` and `dask worker` (processes): a scheduler no worker joins is one line after the
    wait; once the only worker is killed while tasks run, the run stops with one line after `patience` seconds
    (Dask alone would keep the tasks waiting for a worker forever)."""
    from distributed import Client

    from kokoro_tvm.scale import cluster

    monkeypatch.setattr(cluster, "WORKER_WAIT_S", 3)
    address = f"tcp://127.0.0.1:{_free_port()}"
    scheduler = _scheduler(address, log=tmp_path / "scheduler.log")
    worker = None
    try:
        with Client(address, timeout=30) as client:
            with pytest.raises(cluster.ClusterError, match=r"^no Dask worker joined the scheduler within 3 s"):
                cluster.check_workers(client, facts=dict)
            worker = _dask(
                "worker", address, "--nthreads", "1", "--no-dashboard", "--no-nanny", log=tmp_path / "worker.log"
            )
            client.wait_for_workers(1, timeout=60)
            futures = [client.submit(time.sleep, 600, pure=False) for _ in range(2)]
            while not client.processing()[next(iter(client.scheduler_info()["workers"]))]:
                time.sleep(0.1)  # a task runs on the worker
            os.killpg(worker.pid, signal.SIGKILL)
            started = time.perf_counter()
            with pytest.raises(cluster.ClusterError, match="no worker .* for 2 s with 2 of 2 tasks not done") as error:
                list(cluster.completed(client, futures, patience=2))
            assert "\n" not in str(error.value) and time.perf_counter() - started < 30  # patience + polls, not 600 s
    finally:
        _stop(*(p for p in (worker, scheduler) if p is not None))


@pytest.mark.real
def test_a_killed_worker_loses_nothing(tmp_path):
    """A real `dask scheduler` and two `dask worker` processes; one worker is killed by its pid while tasks run.
    Every task's rows arrive once and equal a serial in-process run's (one compute thread on both sides, so the
    arithmetic is the same); a rerun into the same folder runs nothing."""
    from kokoro_tvm.commands.evaluate import evaluate, task_audio
    from kokoro_tvm.evaluation.results_table import ResultTable
    from kokoro_tvm.frontend.corpus import load_sentences

    sentences = sorted(load_sentences(), key=len)[:3]
    backends = ("pt_dynamic", "tvm_dynamic")
    serial = evaluate(
        sentences,
        tmp_path / "serial",
        backends=backends,
        scheduler="in-process",
        threads=1,
        progress=False,
        wav_dir=tmp_path / "serial_wav",
    )
    address = f"tcp://127.0.0.1:{_free_port()}"
    env_log = tmp_path / "logs"
    env_log.mkdir()
    scheduler = _scheduler(address, log=env_log / "scheduler.log")
    workers = [
        _dask("worker", address, "--nthreads", "1", "--no-dashboard", "--no-nanny", log=env_log / f"worker{i}.log")
        for i in range(2)
    ]
    done = threading.Event()  # set when the test ends, however: the killer thread never outlives it
    try:
        out = tmp_path / "cluster"

        def kill_first_worker_once_a_task_is_done():
            while not (out / "rows").is_dir() or not list((out / "rows").glob("*.parquet")):
                if done.wait(0.2):
                    return
            os.killpg(workers[0].pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_first_worker_once_a_task_is_done, daemon=True)
        killer.start()
        record = evaluate(
            sentences, out, backends=backends, scheduler=address, threads=1, progress=False, wav_dir=tmp_path / "wav"
        )
        killer.join(timeout=1)
        assert workers[0].poll() is not None, "the worker was not killed mid-run"
        assert record["failed"] == {} and record["ran"] == len(sentences), record
        rows = ResultTable(out).read()
        keys = [(r["sentence"], r["backend"]) for r in rows]
        assert len(keys) == len(set(keys)) == len(sentences) * len(backends)
        expected = ResultTable(tmp_path / "serial").read()
        drop = ("task_s",)  # wall time differs by nature

        def same(a, b) -> bool:  # the audio is compared bit for bit below; a float64 metric computed from it can
            # differ in its last bits between processes (log_mel_l1 7.106272797839482e-05 against ...464e-05, 2.5e-15
            # relative, in one of three runs of this file alone: BLAS thread counts), so 1e-12 relative
            if isinstance(a, float) and isinstance(b, float):
                return a == b or abs(a - b) <= 1e-12 * max(abs(a), abs(b))
            return a == b

        differ = [
            (a["sentence"], a["backend"], k, a[k], b[k])
            for a, b in zip(rows, expected, strict=True)
            for k in a
            if k not in drop and not same(a[k], b[k])
        ]
        assert not differ, differ
        for index in range(len(sentences)):  # every backend's audio came back through Dask, equal to the serial run's
            sent, kept = (
                task_audio(folder, "af_heart", index, backends)
                for folder in (tmp_path / "wav", tmp_path / "serial_wav")
            )
            assert list(sent) == list(kept) == list(backends)
            assert all(np.array_equal(sent[b], kept[b]) for b in backends)
        again = evaluate(sentences, out, backends=backends, scheduler=address, threads=1, progress=False)
        assert again["ran"] == 0 and again["skipped"] == len(sentences)
        summary = json.loads((out / "summary.json").read_text())["summary"]  # per backend, from the rows above: the
        # same 1e-12 relative as the rows (a mean over rows carries their last bits)
        assert [sorted(s) for s in summary] == [sorted(s) for s in serial["summary"]]
        unequal = [
            (a["backend"], k, a[k], b[k])
            for a, b in zip(summary, serial["summary"], strict=True)
            for k in a
            if not same(a[k], b[k])
        ]
        assert not unequal, unequal
    finally:
        done.set()
        _stop(*workers, scheduler)


@pytest.mark.notebooks
def test_a_sweep_runs_every_point_into_its_own_folder(tmp_path):
    """A 2 x 2 grid of notebook 03 in FAST mode on a local cluster, where VALID_STEPS=0 makes the notebook raise:
    four executed notebooks in four folders, each failed point recorded with a one-line error while the others
    ran, one sweep table, and the report's sweep section lists the four points."""
    from kokoro_tvm.commands.sweep import sweep
    from kokoro_tvm.report.index_page import build_summary, render_html

    out = tmp_path / "sweeps" / "03_masked_lstm"
    record = sweep("03", [("SEED", "0,1"), ("VALID_STEPS", "0,16")], fast=True, out=out)
    statuses = [(r["parameters"]["SEED"], r["parameters"]["VALID_STEPS"], r["status"]) for r in record["points"]]
    assert statuses == [(0, 0, "failed"), (0, 16, "ok"), (1, 0, "failed"), (1, 16, "ok")], record
    folders = {Path(row["folder"]) for row in record["points"]}
    assert len(folders) == 4 and all(f.parent == out for f in folders)
    for row in record["points"]:
        folder = Path(row["folder"])
        assert (folder / "03_masked_lstm.ipynb").exists()  # a failed run's copy too: it shows where it stopped
        if row["status"] == "failed":
            assert row["error"] and "\n" not in row["error"] and not row["claims"], row
            continue
        metrics = json.loads((folder / "metrics.json").read_text())
        assert metrics["parameters"]["SEED"] == row["parameters"]["SEED"] and metrics["parameters"]["FAST"] is True
        assert row["claims"] and row["claims"] == metrics["claims"]
    summary = build_summary(tmp_path)
    (listed,) = summary["sweeps"]
    assert {p["point"] for p in listed["points"]} == {row["point"] for row in record["points"]}
    assert "Sweeps" in render_html(summary)
