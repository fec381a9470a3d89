"""Two processes under mpi4py (Open MPI's mpirun) with the collective array calls."""

import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def mpirun():
    launcher = shutil.which("mpirun.openmpi") or shutil.which("mpirun")
    if launcher is None:
        pytest.fail("no mpirun: install openmpi-bin and python3-mpi4py (make deps)")
    return launcher


@pytest.mark.parametrize("method", ["server_directed", "two_phase"])
def test_two_processes_collective(cluster_file, client, path, method):
    command = [
        mpirun(),
        "--allow-run-as-root",
        "--oversubscribe",
        "-n",
        "2",
        sys.executable,
        os.path.join(HERE, "mpi_collective.py"),
        cluster_file,
        path,
        method,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    lines = [line for line in done.stdout.splitlines() if line.startswith("ok rank")]
    assert sorted(line.split()[2] for line in lines) == ["0", "1"], done.stdout
