"""Test tiers: unit tests (default, seconds), `real` (embedded Kokoro-82M weights, minutes, part of `make test`)
and `slow` (not in `make test`; `make test-slow`)."""

import pytest


@pytest.fixture(scope="session")
def kmodel():
    """The real model on the resolved weights (the embedded default on a fresh machine), float32."""
    from kokoro_tvm.weights import load_kmodel

    model, info = load_kmodel()
    return model, info


@pytest.fixture(scope="session")
def jm_kumo():
    from kokoro_tvm.voices import load_voice

    return load_voice("jm_kumo")


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
            done = subprocess.run(command, env=env, capture_output=True, text=True)
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
