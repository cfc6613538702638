"""Test tiers: unit tests (unmarked: tiny random configs, most take seconds, but the tier builds the five
components once per session in float64 on random weights, so it costs minutes, not seconds), `real` (the
embedded Kokoro-82M weights and their symbolic, bf16 and int8 builds: minutes, part of `make test`),
`notebooks` (every notebook under papermill with FAST=True, the longest file) and `slow` (not in `make test`;
`make test-slow`). NOTES/architecture.md has the measured totals."""

import os

import pytest

# The notebook tier first: it is the longest file (the whole FAST pipeline), so with `make test`'s two workers
# (pytest-xdist, one file per worker at a time) it starts at once beside the other files. Next, on the other
# worker, the files that build the real-weights artifacts the notebooks use later (the five symbolic-length
# builds, the bf16 ones): the notebooks then find them in the shared cache instead of building them on the
# longest path (xdist hands a worker its next file only when its current one is nearly
# done, in this order with the Makefile's --no-loadscope-reorder; by default it sorts files by test count).
# (test_bucketed_real first as well, for the 32 / 64 buckets notebook 05 profiles, left the notebook path at
# 882 s and the run 47 s longer: by then the two workers' loads are even.) Then the other long files, longest
# first, so the run ends on short ones: in a fresh-clone run on a 2-core Zen 2 the notebook worker finished the
# pipeline at 652 s, then drew test_scale (106 s) and test_streaming (51 s) and ended 77 s after the other worker.
FIRST_FILES = (
    "test_notebooks.py",
    "test_dynamic_real.py",
    "test_bf16_real.py",
    "test_compile.py",
    "test_scale.py",
    "test_streaming.py",
    "test_gpu_builds.py",
    "test_gpu_check_real.py",
    "test_symbolic.py",
    "test_openvino_peer.py",
)


def _share_the_cores():
    """With several pytest-xdist workers, each worker and every process it starts (notebook kernels, CLI
    subprocesses) gets its share of the CPUs for torch's OpenMP pool and TVM's pool, unless set already. Two
    workers each running 2-thread pools on 2 cores oversubscribe them: both pools spin at every parallel region
    waiting for a thread the other process holds, and small PyTorch ops run many times slower (tests time
    nothing; `bench` and notebook 08 set their own thread counts)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        share = str(max(1, len(os.sched_getaffinity(0)) // workers))
        for variable in ("OMP_NUM_THREADS", "TVM_NUM_THREADS"):
            os.environ.setdefault(variable, share)


_share_the_cores()  # at import, before any test module imports torch or TVM


def pytest_sessionstart(session):
    """Refuse the run in one line when the disk cannot hold what it writes (tests/disk_space.py); checked by the
    process that starts the run, not again by each pytest-xdist worker."""
    import tempfile

    from disk_space import shortfall

    from kokoro_tvm.paths import cache_dir

    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    problem = shortfall([cache_dir(), tempfile.gettempdir()])
    if problem:
        pytest.exit(problem, returncode=1)


def pytest_collection_modifyitems(config, items):
    def rank(item):
        name = item.path.name
        return FIRST_FILES.index(name) if name in FIRST_FILES else len(FIRST_FILES)

    items.sort(key=rank)  # stable: the rest keep their order


@pytest.fixture(scope="session")
def unit_cache_folder(tmp_path_factory):
    """The folder of `unit_cache`: one per session, shared by parallel workers (builds are locked and atomic)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        folder = tmp_path_factory.getbasetemp().parent / "unit-cache"
        folder.mkdir(exist_ok=True)
        return folder
    return tmp_path_factory.mktemp("unit-cache")


@pytest.fixture
def unit_cache(unit_cache_folder, monkeypatch):
    """One artifact cache for every unit test that builds components on random weights: each (component,
    shape, dtype) is built once per session and reused by every test that needs it. Only for the test that asks
    for it: the real-weights tiers keep the user's cache ($KOKORO_TVM_CACHE or ~/.cache/kokoro-tvm), where the
    notebooks and the other real tests find their builds (a session-wide switch sent every later real test on the
    same worker to this folder, to build the five symbolic components a second time)."""
    monkeypatch.setenv("KOKORO_TVM_CACHE", str(unit_cache_folder))
    return unit_cache_folder


@pytest.fixture(scope="session")
def random_model64():
    """Kokoro-82M's architecture on seeded random weights, float64, with our fixed STFT bases (weights.stft)."""
    import torch

    from kokoro_tvm.weights.resolve import kmodel_skeleton
    from kokoro_tvm.weights.stft import match_stock_stft

    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = kmodel_skeleton().eval()
    match_stock_stft(model.decoder.generator.stft)
    return model.double()


@pytest.fixture(scope="session")
def kmodel():
    """The real model on the resolved weights (the embedded default on a fresh machine), float32."""
    from kokoro_tvm.weights.resolve import load_kmodel

    model, info = load_kmodel()
    return model, info


@pytest.fixture(scope="session")
def default_voice():
    """af_heart, the default voice (the official pack, fetched on first use)."""
    from kokoro_tvm.frontend.voices import DEFAULT_VOICE, load_voice

    return load_voice(DEFAULT_VOICE)


CHROMIUM_PACKAGES = ("chromium", "chromium-driver")  # Debian's headless browser and its WebDriver


@pytest.fixture(scope="session")
def chromium():
    """Headless Chromium through Selenium; the Debian packages are installed here when missing (needs root and
    apt-get, as on CI and in our containers; elsewhere the test is skipped with the reason)."""
    import os
    import shutil
    import subprocess

    if shutil.which("chromedriver") is None:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            pytest.skip("chromium-driver is not installed and cannot be (needs root and apt-get)")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for command in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *CHROMIUM_PACKAGES],
        ):
            try:  # a stalled mirror or a held dpkg lock: skip with the reason, never hang the run
                done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
            except subprocess.TimeoutExpired:
                pytest.skip(f"`{' '.join(command)}` did not finish within 240 s")
            if done.returncode != 0:  # e.g. no route to the Debian mirror: say so, with apt's own words
                pytest.skip(f"could not install {' '.join(CHROMIUM_PACKAGES)}: {done.stderr.strip()[-300:]}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    browser = shutil.which("chromium")
    if browser:
        options.binary_location = browser
    driver = webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver")), options=options)
    yield driver
    driver.quit()
