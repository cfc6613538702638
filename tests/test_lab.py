"""JupyterLab as users open it (`make lab`): started headless, a notebook opened in headless Chromium, its first
cells run through the page, their output seen; saving strips the outputs from the file. Notebook tier."""

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

from kokoro_tvm.commands.lab import lab_command
from kokoro_tvm.paths import REPO_ROOT

pytestmark = pytest.mark.notebooks

NOTEBOOK = "notebooks/03_masked_lstm.ipynb"  # its fourth code cell shows a table (float64 LSTM sweep, seconds)
CELLS_TO_RUN = 6  # title, imports, parameters, set-up, section heading, the sweep and its table
TOKEN = "kokoro-tvm-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab serving a copy of the notebook (so no run or autosave can touch the repository's file)."""
    root = tmp_path_factory.mktemp("lab")
    (root / "notebooks").mkdir()
    shutil.copy(REPO_ROOT / NOTEBOOK, root / NOTEBOOK)
    port = _free_port()
    env = dict(os.environ, KOKORO_TVM_OUTPUTS=str(root / "outputs"))
    extra = (
        "--no-browser",
        f"--port={port}",
        f"--IdentityProvider.token={TOKEN}",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: the page's own commands
    )
    extra += ("--allow-root",) if os.geteuid() == 0 else ()
    log = root / "jupyterlab.log"
    with open(log, "wb") as sink:  # a file, not a pipe: the server must never block on its own log
        server = subprocess.Popen(lab_command(*extra, root=root), env=env, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):  # JupyterLab starts in a few seconds
        try:
            urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=2)
            break
        except OSError:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited: {log.read_text()[-2000:]}")
            time.sleep(0.5)
    yield url, root
    server.terminate()
    server.wait(timeout=30)


def _wait_for(driver, script, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for: {script}")


def test_a_notebook_runs_in_jupyterlab_and_is_saved_without_outputs(lab, chromium):
    url, root = lab
    chromium.get(f"{url}/lab/tree/{NOTEBOOK}?token={TOKEN}")
    _wait_for(chromium, "return window.jupyterapp && document.querySelectorAll('.jp-Notebook .jp-Cell').length > 5")
    _wait_for(chromium, "return document.querySelector('.jp-Notebook .jp-Cell.jp-mod-active') !== null")
    for _ in range(CELLS_TO_RUN):
        chromium.execute_script("window.jupyterapp.commands.execute('notebook:run-cell-and-select-next');")
        time.sleep(0.2)
    # the sweep's table: the Markdown rendering of records.markdown_table, with its column names
    table = _wait_for(
        chromium,
        "const t = Array.from(document.querySelectorAll('.jp-OutputArea-output table th')).map(e => e.textContent);"
        "return t.includes('masked_rel_err') ? t : null;",
    )
    assert "reverse_rel_err" in table
    errors = chromium.execute_script(
        "return document.querySelectorAll('.jp-OutputArea-output[data-mime-type*=error]').length;"
    )
    assert errors == 0
    saved = root / NOTEBOOK
    before = saved.stat().st_mtime_ns
    chromium.execute_script("window.jupyterapp.commands.execute('docmanager:save');")
    deadline = time.time() + 30
    while time.time() < deadline and saved.stat().st_mtime_ns == before:
        time.sleep(0.2)
    assert saved.stat().st_mtime_ns != before, "the page's save never reached the file"
    notebook = json.loads(saved.read_text())
    assert "version" in notebook["metadata"]["language_info"]  # the kernel that ran the cells wrote it: this save
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    assert chromium.execute_script("return document.querySelectorAll('.jp-OutputArea-output table').length;") > 0
    assert "without encryption" not in (root / "jupyterlab.log").read_text()  # its kernel ran on Unix sockets
