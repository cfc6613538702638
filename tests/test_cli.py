"""CLI errors: one clear line, exit status 2, no traceback, and no model loaded before input is validated."""

import json
import os

import pytest
import torch

from kokoro_tvm.cli import main


@pytest.mark.parametrize(
    "argv, message",
    [
        (["say", "", "-o", "x.wav"], "nothing to say"),
        (["say", "?!", "-o", "x.wav"], "nothing to say"),
        (["say", "hello", "--voice", "af_nobody", "-o", "x.wav"], "unknown voice 'af_nobody'"),
        (["say", "hello", "--lang", "x", "-o", "x.wav"], "unknown language code 'x'"),
        (["say", "hello", "--voice", "/no/such/voice.bin", "-o", "x.wav"], "does not exist"),
        (["say", "hɛlO ☃", "--phonemes", "-o", "x.wav"], "not in Kokoro's vocabulary"),
        (["say", "hello", "--speed", "0", "-o", "x.wav"], "speed must be"),
        (["say", "hello", "--speed", "nan", "-o", "x.wav"], "speed must be"),
        (["weights", "--weights", "/does/not/exist.pth"], "does not exist"),
        (["compare", "--text", "", "--json"], "nothing to say"),
        (["bench", "--text", "", "--precision", "int8", "--peers", "none"], "nothing to say"),  # not bench's default
        (["bench", "--first-audio", "--text", " ", "--peers", "none"], "nothing to say"),
        (["say", "hello", "--voice", "af_heart,,af_bella", "-o", "x.wav"], "between every two commas"),
        (["compare", "--text", "hi", "--precision", "fp16"], None),
        (["say", "hello", "--seed", "-1", "-o", "x.wav"], None),  # numpy's generator takes no negative seed
        (["compare", "--text", "hi", "--seed", "-1"], None),
        (["compare", "--text", "hi", "--bucket", "0"], None),
        (["evaluate", "--threads", "0", "--out", "ev"], None),
        (["evaluate", "--workers", "-1", "--out", "ev"], None),
    ],
)
def test_bad_input_gives_one_clear_error(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if message is None:  # rejected by argparse itself
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        return
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "x.wav").exists()


def test_corrupt_or_foreign_weights_file_is_rejected(capsys, tmp_path):
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"\x80\x02not a checkpoint" * 10)
    assert main(["weights", "--weights", str(garbage)]) == 2
    err = capsys.readouterr().err
    assert "cannot read weights file" in err and err.count("\n") == 1  # one line, not torch's paragraphs
    truncated = tmp_path / "truncated.pth"
    torch.save({"bert": {"w": torch.zeros(1000)}}, truncated)
    truncated.write_bytes(truncated.read_bytes()[:-200])  # a checkpoint cut short (a failed download)
    assert main(["weights", "--weights", str(truncated)]) == 2
    err = capsys.readouterr().err
    assert "truncated, corrupt or not a checkpoint" in err and err.count("\n") == 1 and "miniz" not in err
    foreign = tmp_path / "foreign.pth"
    torch.save({"some": {"thing": torch.zeros(2)}}, foreign)
    assert main(["weights", "--weights", str(foreign)]) == 2
    assert "not a Kokoro weights file" in capsys.readouterr().err


def test_unknown_backend_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["say", "hello", "--backend", "nope", "-o", "x.wav"])
    assert exc.value.code == 2


def test_weights_prints_one_json_line_for_an_explicit_file(capsys, tmp_path):
    from kokoro_tvm.weights.resolve import TOP_MODULES, fingerprint

    state = {top: {"w": torch.arange(4, dtype=torch.float32)} for top in TOP_MODULES}
    path = tmp_path / "tiny.pth"
    torch.save(state, path)
    assert main(["weights", "--weights", str(path)]) == 0
    line = json.loads(capsys.readouterr().out.strip())
    assert line["source"] == "explicit" and line["path"] == str(path)
    assert line["fingerprint"] == fingerprint(state) and line["n_keys"] == len(TOP_MODULES)


@pytest.mark.skipif(__import__("sys").platform == "darwin", reason="macOS can make a Metal bundle")
def test_gpu_check_for_metal_off_macos_is_one_line(capsys):
    assert main(["gpu-check", "--target", "metal", "--bundle-only"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kokoro-tvm: error:") and "built on macOS" in err and "\n" not in err


def test_gpu_check_without_the_device_is_one_line_before_any_build(capsys, tmp_path):
    from kokoro_tvm.runtime.devices import device_exists

    if device_exists("cuda"):
        pytest.skip("this machine has a CUDA device")
    assert main(["gpu-check", "--target", "cuda", "--out", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err.strip()
    assert "no cuda device on this machine" in err and "\n" not in err
    assert not (tmp_path / "g").exists()  # refused before any bundle was written


def test_unwritable_output_is_one_line(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert main(["say", "Hi.", "-o", str(blocker / "x.wav"), "--zero-noise", "--backend", "torch"]) == 2
    err = capsys.readouterr().err
    assert f"cannot write {blocker / 'x.wav'}" in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_bug_is_not_reported_as_a_user_error(monkeypatch):
    """Only the project's own errors become one line; a ValueError from a bug keeps its traceback."""
    from kokoro_tvm.commands import say

    def broken(*args, **kwargs):
        raise ValueError("an internal bug")

    monkeypatch.setattr(say, "synthesize", broken)
    with pytest.raises(ValueError, match="an internal bug"):
        main(["say", "Hi.", "-o", "x.wav"])


def test_every_error_class_of_the_project_is_one_the_cli_reports():
    """An exception class defined in kokoro_tvm (bar the standalone bundle runner and its device half, which
    import nothing from it) that is not a KokoroTVMError would reach the user as a traceback."""
    import importlib
    import inspect
    import pkgutil

    import kokoro_tvm
    from kokoro_tvm.errors import KokoroTVMError

    defined = []
    for module in pkgutil.walk_packages(kokoro_tvm.__path__, "kokoro_tvm."):
        if module.name.endswith(("bundle_runner", "bundle_device", "__main__")):
            continue
        found = importlib.import_module(module.name)
        defined += [
            obj
            for _, obj in inspect.getmembers(found, inspect.isclass)
            if issubclass(obj, Exception) and obj.__module__ == module.name
        ]
    assert len(defined) >= 15  # the walk found the project's error classes
    assert [cls.__qualname__ for cls in defined if not issubclass(cls, KokoroTVMError)] == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--conv-rates", "decoder:64", "--precision", "fp32"], "an fp32 build's time by kernel group"),
        (["--conv-rates", "decoder:64", "--precision", "int8,bf16"], "times one build's packed bf16 or int8"),
        (["--kernel-split", "decoder:64", "--precision", "fp33"], "precision must be one of"),
        (["--kernel-split", "vocoder:64"], "expected COMPONENT:LENGTH with a component of"),
        (["--conv-rates", "decoder:long"], "expected COMPONENT:LENGTH"),
    ],
)
def test_bench_on_kernels_refuses_what_it_cannot_time_in_one_line(argv, message, capsys):
    """`kokoro-tvm bench --conv-rates / --kernel-split` checks its precisions and its component before loading
    weights or building: an fp32 build has no packed convs to rate (it compiled the AVX-512 peak loops and LLVM
    aborted the process on an AVX2 CPU), and an unknown name is one line, not a traceback from the build."""
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_the_help_names_every_command():
    """Its summary was the docstring's first line, which stopped at "weights," and never named tune, evaluate or
    sweep."""
    from kokoro_tvm.cli import build_parser

    parser = build_parser()
    (commands,) = [action.choices for action in parser._subparsers._group_actions]
    named = parser.description.removeprefix("`kokoro-tvm` command line: ").removesuffix(".").split(", ")
    assert named == list(commands)


def test_each_precision_option_names_its_default_once():
    """fp32's summary said "(the default)" in every --precision help, also in say's, whose default is auto."""
    from kokoro_tvm.cli import build_parser

    (commands,) = [action.choices for action in build_parser()._subparsers._group_actions]
    helps = {
        name: action.help
        for name, command in commands.items()
        for action in command._actions
        if "--precision" in action.option_strings
    }
    assert set(helps) >= {"say", "compare", "bench", "compile"}
    for name, text in helps.items():
        assert text.count("default") == 1, name


@pytest.mark.parametrize("budget", ["0", "-5", "nan", "inf"])
def test_a_tuning_budget_that_measures_nothing_is_refused_before_any_work(budget, capsys):
    """`tune --budget -5` ran the 80-second export and timing, measured no class and wrote an empty record, which
    then shadowed the committed one for every later build on this CPU."""
    with pytest.raises(SystemExit) as stop:
        main(["tune", "--budget", budget])
    assert stop.value.code == 2
    assert f"must be a positive number of seconds, got {budget}" in capsys.readouterr().err


@pytest.mark.parametrize("given, level", [(None, "WARNING"), ("info", "INFO")])
def test_dask_narrates_at_warning_unless_told_otherwise(given, level):
    """`evaluate` printed about 30 INFO lines of Dask's scheduler and nannies around its own few: `import
    distributed` sets its loggers' level from dask's config, so the CLI sets that setting (a given one wins)."""
    import subprocess
    import sys

    from kokoro_tvm.cli import DASK_LOG_LEVEL_ENV

    code = (
        "import logging; from kokoro_tvm.cli import configure_logging; configure_logging(False)\n"
        "import distributed\n"
        "logging.getLogger('distributed.scheduler').info('narration')\n"
        "print(logging.getLevelName(logging.getLogger('distributed').getEffectiveLevel()))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != DASK_LOG_LEVEL_ENV} | (
        {DASK_LOG_LEVEL_ENV: given} if given else {}
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [level]
    assert ("INFO distributed.scheduler: narration" in done.stderr) == (level == "INFO")
