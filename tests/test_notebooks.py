"""Notebook tier: structure rules for every notebook, and each one executed by papermill with FAST=True."""

import ast
import json

import pytest

from kokoro_tvm.pipeline import NOTEBOOK_DIR, PipelineError, declared_parameters, notebooks, run

NOTEBOOKS = notebooks()
MAX_CELL_LINES = 15


def test_there_are_notebooks():
    assert [p.stem[:2] for p in NOTEBOOKS][:2] == ["01", "02"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_structure(path):
    cells = json.loads(path.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert all(not c.get("outputs") and not c.get("execution_count") for c in code), "commit without outputs"
    params = declared_parameters(path)  # exactly one parameters cell, literals only
    assert "FAST" in params and params["FAST"] is False
    tagged = next(i for i, c in enumerate(code) if "parameters" in c["metadata"].get("tags", []))
    assert tagged == 1, "the parameters cell comes right after the imports"
    for cell in code:
        source = "".join(cell["source"])
        assert len(source.splitlines()) <= MAX_CELL_LINES, source[:200]
        tree = ast.parse(source)
        assert not any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in ast.walk(tree)), "no def/class in cells"
        assert "print(" not in source and "!pip" not in source
    assert cells[0]["cell_type"] == "markdown" and cells[0]["source"][0].startswith("# ")


def test_unknown_parameters_are_rejected():
    with pytest.raises(PipelineError, match="declares no parameter"):
        run(only=["01"], parameters={"FASTT": True})


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_fast(path, tmp_path, monkeypatch):
    monkeypatch.setenv("KOKORO_TVM_OUTPUTS", str(tmp_path))
    (executed,) = run(only=[path.stem], fast=True)
    assert executed.exists()
    metrics = json.loads((tmp_path / path.stem / "metrics.json").read_text())
    assert metrics["parameters"]["FAST"] is True and metrics["metrics"]
    assert metrics["versions"]["apache-tvm"] and "git_sha" in metrics
    assert NOTEBOOK_DIR.exists()
