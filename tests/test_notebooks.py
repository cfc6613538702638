"""Notebooks: structure rules for every notebook (unit tier), and each one executed by papermill with FAST=True
(the `notebooks` tier: it loads the real weights and builds components, minutes)."""

import ast
import json
from pathlib import Path

import pytest

from kokoro_tvm.report.notebook_runner import (
    FAST_PARAMETERS,
    PipelineError,
    declared_parameters,
    injected,
    notebooks,
    run,
)

NOTEBOOKS = notebooks()
# The FAST pipeline (every notebook, in the first notebook test's set-up) took 576-652 s in fresh-clone runs on a
# 2-core Zen 2: three times that before it counts as hung (pyproject.toml's 600 s is for any other test)
PIPELINE_TIMEOUT_S = 1800
MAX_CELL_LINES = 15
# the parameters cell lists one literal a line, each with what it means: it may run longer than a code cell
MAX_PARAMETER_LINES = 20
MAX_LINE_CHARS = 120  # the package's own line length (ruff): a cell reads in a shared notebook without scrolling


def test_the_notebooks_are_numbered_in_order_without_gaps():
    """The pipeline runs them in this order; a gap or a stray file would drop or reorder a chapter of the story."""
    assert [p.stem[:3] for p in NOTEBOOKS] == [f"{i:02d}_" for i in range(1, len(NOTEBOOKS) + 1)]
    assert len(NOTEBOOKS) >= 8 and all(p.stem[3:].replace("_", "").isalpha() for p in NOTEBOOKS)


def _assigned(tree: ast.AST) -> set[str]:
    """Every name a cell binds: assignments (tuple targets too), augmented and annotated ones, loop targets."""
    targets = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets += node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.comprehension)):
            targets.append(node.target)
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _imported(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_parameters_cell_is_what_ran(path):
    """No cell rewrites a parameter (the FAST tier is parameters the runner passes in: FAST_PARAMETERS), and no cell
    rebinds an imported name (re-running a cell in JupyterLab would then fail): the parameters cell plus what was
    injected is exactly what ran, and the notebook re-runs top to bottom."""
    code = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    declared, imported = set(declared_parameters(path)), _imported(ast.parse("".join(code[0]["source"])))
    assert imported, "the first code cell holds the imports"
    rebound = {name for cell in code[2:] for name in _assigned(ast.parse("".join(cell["source"])))}
    assert rebound & declared == set(), "a cell rewrites a parameter"
    assert rebound & imported == set(), "a cell rebinds an imported name"
    closing = "".join(code[-1]["source"])
    assert "claims.conclusion(" in closing and "conclusion=conclusion" in closing, "the closing cell concludes"


def test_the_fast_tier_names_only_parameters_its_notebooks_declare():
    """`pipeline --fast` passes each notebook its FAST set: every name there is one its parameters cell declares,
    with a value of another type only where the declared default is None."""
    assert set(FAST_PARAMETERS) <= {p.stem for p in NOTEBOOKS}
    for path in NOTEBOOKS:
        declared = declared_parameters(path)
        given = injected(path, fast=True)
        assert given["FAST"] is True and set(given) <= set(declared)
        wrong = [
            k
            for k, v in given.items()
            if declared[k] is not None and v is not None and type(v) is not type(declared[k])
        ]
        assert wrong == [], (path.stem, wrong)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_structure(path):
    cells = json.loads(path.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert all(not c.get("outputs") and not c.get("execution_count") for c in code), "commit without outputs"
    # nbformat 4.5 cells carry an id: without one, every papermill run warns that it "will become a hard error"
    assert len({c.get("id") for c in cells} - {None}) == len(cells), "every cell has an id of its own"
    params = declared_parameters(path)  # exactly one parameters cell, literals only
    assert "FAST" in params and params["FAST"] is False
    tagged = next(i for i, c in enumerate(code) if "parameters" in c["metadata"].get("tags", []))
    assert tagged == 1, "the parameters cell comes right after the imports"
    for cell in code:
        source = "".join(cell["source"])
        limit = MAX_PARAMETER_LINES if "parameters" in cell["metadata"].get("tags", []) else MAX_CELL_LINES
        assert len(source.splitlines()) <= limit, source[:200]
        tree = ast.parse(source)
        assert not any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in ast.walk(tree)), "no def/class in cells"
        assert "print(" not in source and "!pip" not in source
        assert "plt." not in source, "figures are drawn by kokoro_tvm.report.figures, one call each"
    wide = [line for cell in cells for line in "".join(cell["source"]).splitlines() if len(line) > MAX_LINE_CHARS]
    assert wide == [], f"{len(wide)} lines over {MAX_LINE_CHARS} characters"
    assert cells[0]["cell_type"] == "markdown" and cells[0]["source"][0].startswith("# ")


def test_unknown_parameters_are_rejected():
    with pytest.raises(PipelineError, match="declares no parameter"):
        run(only=["01"], parameters={"FASTT": True})


@pytest.fixture(scope="module")
def fast_pipeline(tmp_path_factory):
    """`kokoro-tvm pipeline --fast` once, every notebook in order, into a fresh outputs folder."""
    outputs = tmp_path_factory.mktemp("outputs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KOKORO_TVM_OUTPUTS", str(outputs))
        executed = run(fast=True)
    return outputs, executed


@pytest.mark.notebooks
@pytest.mark.timeout(PIPELINE_TIMEOUT_S)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_fast(path, fast_pipeline):
    outputs, executed = fast_pipeline
    assert outputs / path.stem / path.name in executed
    metrics = json.loads((outputs / path.stem / "metrics.json").read_text())
    assert metrics["parameters"]["FAST"] is True and metrics["metrics"]
    assert metrics["versions"]["apache-tvm"] and "git_sha" in metrics
    # every notebook states its findings; each one FAST mode can assess must hold (the others need a full run)
    assert metrics["claims"], f"{path.stem} records no findings"
    failed = [c for c in metrics["claims"] if c["passed"] is False]
    assert not failed, failed
    assert all(c["passed"] is True for c in metrics["claims"] if c["assessed"])


@pytest.mark.notebooks
@pytest.mark.timeout(PIPELINE_TIMEOUT_S)
def test_pipeline_writes_the_shared_report(fast_pipeline):
    outputs, _ = fast_pipeline
    summary = json.loads((outputs / "summary.json").read_text())
    assert [e["notebook"] for e in summary["notebooks"]] == [p.stem for p in NOTEBOOKS]
    assert summary["weights"]["fingerprint"] and summary["versions"]["apache-tvm"] and summary["machine"]
    for entry in summary["notebooks"]:
        assert entry["parameters"]["FAST"] is True and entry["executed_notebook"]
        assert all((outputs / figure).exists() for figure in entry["figures"])
    assert (outputs / "index.html").read_text().count("<section") == len(NOTEBOOKS)


@pytest.mark.notebooks
def test_report_renders_in_headless_chromium(fast_pipeline, chromium):
    outputs, _ = fast_pipeline
    summary = json.loads((outputs / "summary.json").read_text())
    chromium.get((outputs / "index.html").as_uri())
    assert chromium.title.startswith("kokoro-tvm report")
    images = chromium.execute_script(
        "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0]);"
    )
    expected = [f for entry in summary["notebooks"] for f in entry["figures"]]
    assert sorted(src for src, _ in images) == sorted(expected) and expected, "every saved figure is on the page"
    assert all(loaded for _, loaded in images), [src for src, loaded in images if not loaded]
    findings = chromium.execute_script("return document.querySelectorAll('section table.findings').length;")
    assert findings == len(NOTEBOOKS), "every section opens with its findings"
    headline = chromium.execute_script(
        "return Array.from(document.querySelectorAll('#headline + table tbody tr td a'))"
        ".map(a => a.getAttribute('href'));"
    )
    assert headline and all(h.lstrip("#") in {p.stem for p in NOTEBOOKS} for h in headline)
    statuses = chromium.execute_script("return Array.from(document.querySelectorAll('td.fail')).length;")
    assert statuses == 0


def test_a_notebook_kernel_listens_on_private_sockets_and_leaves_nothing(tmp_path, capfd):
    """papermill's kernel over TCP made ipykernel warn on every notebook start that "all communication ... is
    susceptible to eavesdropping"; pipeline and sweep start it on Unix sockets in a 0700 folder, removed after."""
    import nbformat
    import papermill

    from kokoro_tvm.report.kernel import KERNEL_MANAGER

    code = (
        "import json, os, stat\n"
        "from ipykernel import get_connection_info\n"
        "info = get_connection_info(unpack=True)\n"
        "folder = os.path.dirname(info['ip'])\n"
        "print(json.dumps({'transport': info['transport'], 'ip': info['ip'], "
        "'mode': stat.S_IMODE(os.stat(folder).st_mode), 'sockets': sorted(os.listdir(folder))}))\n"
    )
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nbformat.write(notebook, tmp_path / "probe.ipynb")
    papermill.execute_notebook(
        str(tmp_path / "probe.ipynb"),
        str(tmp_path / "ran.ipynb"),
        cwd=str(tmp_path),
        progress_bar=False,
        kernel_name="python3",
        kernel_manager_class=KERNEL_MANAGER,
    )
    (output,) = nbformat.read(tmp_path / "ran.ipynb", as_version=4).cells[0].outputs
    seen = json.loads(output["text"])
    assert seen["transport"] == "ipc" and seen["mode"] == 0o700
    assert seen["sockets"] and all(s.startswith("kernel-") for s in seen["sockets"])  # its five channels
    assert not Path(seen["ip"]).parent.exists()  # removed at shutdown
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probe.ipynb", "ran.ipynb"]  # no sockets in the cwd
    assert "without encryption" not in capfd.readouterr().err
