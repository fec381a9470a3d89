"""A real Tessera cluster for the tests: 4 I/O servers on loopback, started once per session
by `tessera up` in a temporary directory and stopped by `tessera down` afterwards, also when
tests fail. `$TESSERA` names the tessera binary (the Makefile passes target/release/tessera).
"""

import os
import shutil
import subprocess
import tempfile

import pytest

import tessera


def tessera_binary():
    binary = os.environ.get("TESSERA") or shutil.which("tessera")
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail("no tessera binary: set $TESSERA (make python-test does)")
    return binary


@pytest.fixture(scope="session")
def cluster_file():
    binary = tessera_binary()
    work = tempfile.mkdtemp(prefix="tessera-pytest.")
    directory = os.path.join(work, "cluster")
    up = subprocess.run(
        [binary, "up", "--servers", "4", "--dir", directory],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        if up.returncode != 0:
            pytest.fail(f"tessera up failed:\n{up.stdout}\n{up.stderr}")
        yield os.path.join(directory, "cluster.toml")
    finally:
        subprocess.run(
            [binary, "down", "--dir", directory], capture_output=True, timeout=120
        )
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="session")
def client(cluster_file):
    return tessera.connect(cluster_file)


@pytest.fixture
def path(client, request):
    """A fresh file name per test, under /pytest."""
    try:
        client.mkdir("/pytest")
    except FileExistsError:
        pass
    name = "/pytest/" + request.node.name.replace("[", "_").replace("]", "").replace("/", "_")
    try:
        client.remove(name)
    except FileNotFoundError:
        pass
    return name
