"""The environment descriptions agree, and importing kokoro_tvm changes nothing in torch, kokoro or TVM."""

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _pins(requirements):
    out = {}
    for req in requirements:
        m = re.fullmatch(r"([A-Za-z0-9_.\-\[\]]+)==(\S+)", req.strip())
        if m:
            out[m.group(1).lower()] = m.group(2)
    return out


def test_environment_yml_pins_match_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    pyproject_pins, conda_pins = _pins(project["dependencies"]), _pins(pip_section)
    assert conda_pins == pyproject_pins
    assert {"torch", "apache-tvm", "apache-tvm-ffi", "kokoro"} <= set(pyproject_pins)
    assert any(line.startswith("-e .") for line in pip_section), "the pip section must install the project"
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    assert python == "python=3.11"


_PROBE = r"""
import json, sys
import torch, torch.nn.functional as F, kokoro, kokoro.istftnet, kokoro.modules, tvm, tvm.relax
import tvm.relax.frontend.torch
def snapshot():
    return {
        "pack_padded_sequence": id(torch.nn.utils.rnn.pack_padded_sequence),
        "pad_packed_sequence": id(torch.nn.utils.rnn.pad_packed_sequence),
        "LSTM.forward": id(torch.nn.LSTM.forward),
        "interpolate": id(F.interpolate),
        "torch.rand": id(torch.rand), "randn_like": id(torch.randn_like),
        "SineGen.forward": id(kokoro.istftnet.SineGen.forward),
        "AdaIN1d.forward": id(kokoro.istftnet.AdaIN1d.forward),
        "InstanceNorm1d.forward": id(torch.nn.InstanceNorm1d.forward),
        "TextEncoder.forward": id(kokoro.modules.TextEncoder.forward),
        "default_dtype": str(torch.get_default_dtype()),
        "from_exported_program": id(tvm.relax.frontend.torch.from_exported_program),
        "relax_op_names": sorted(n for n in dir(tvm.relax.op) if not n.startswith("_")),
    }
before = snapshot()
import pkgutil, importlib, kokoro_tvm
for m in pkgutil.walk_packages(kokoro_tvm.__path__, "kokoro_tvm."):
    importlib.import_module(m.name)
after = snapshot()
print(json.dumps({k: before[k] == after[k] for k in before}))
"""


def test_importing_kokoro_tvm_changes_nothing():
    result = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    unchanged = json.loads(result.stdout.strip().splitlines()[-1])
    assert all(unchanged.values()), {k: v for k, v in unchanged.items() if not v}


def test_work_given_no_thread_count_takes_the_share_its_parent_set(monkeypatch):
    """`cpu_share`: OMP_NUM_THREADS when a parent set it (never more than the CPUs this process may run on), else
    every such CPU; a value OpenMP reads as a list is not a count."""
    import os

    from kokoro_tvm.runtime.devices import cpu_share

    cpus = len(os.sched_getaffinity(0))
    for value, expected in (("1", 1), (str(cpus + 8), cpus), ("0", 1), ("4,2", cpus)):
        monkeypatch.setenv("OMP_NUM_THREADS", value)
        assert cpu_share() == expected, value
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert cpu_share() == cpus


def test_a_disk_without_room_for_the_run_is_named_in_one_line(tmp_path):
    """conftest refuses a run the disk cannot hold (tests/disk_space.py): the folder is named, even one not made
    yet (a fresh cache), in one line; with room, nothing is said. Halving and doubling the free space leaves a
    margin for whatever else writes to this disk between the two calls."""
    import shutil

    from disk_space import shortfall

    folder = tmp_path / "cache-not-made-yet"
    free = shutil.disk_usage(tmp_path).free
    assert shortfall([folder], needed=free // 2) is None
    line = shortfall([tmp_path, folder], needed=free * 2)
    assert line.startswith("only ") and f"under {tmp_path};" in line and "\n" not in line
