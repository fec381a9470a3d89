"""Two processes under mpi4py (Open MPI's mpirun) with the collective array calls."""

import os
import re
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
    # mpirun forwards each rank's output in chunks of its own choosing: one rank's line can
    # arrive inside another's, so the reports are found anywhere in the output.
    ranks = re.findall(r"ok rank (\d+) ", done.stdout)
    assert sorted(ranks) == ["0", "1"], done.stdout
