"""The suite's graphs are shared through pytest-xdist's `--dist loadgroup` (tests/conftest.py marks
each test with its shared fixture's group): if the installed pytest and pytest-xdist stop honouring
the groups, nothing fails, every shared graph just starts once per worker. This test notices."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GROUPED = """
import os
from pathlib import Path

import pytest


@pytest.mark.xdist_group("graph")
@pytest.mark.parametrize("i", range(4))
def test_grouped(i):
    with (Path(__file__).parent / "workers.txt").open("a") as workers:
        workers.write(os.environ["PYTEST_XDIST_WORKER"] + " ")


@pytest.mark.parametrize("i", range(8))
def test_free(i):
    pass
"""


def test_a_group_s_tests_run_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:dash",
            "-o",
            "addopts=",
            "--rootdir",
            str(tmp_path),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0 and "12 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    workers = (tmp_path / "workers.txt").read_text().split()
    assert len(workers) == 4 and len(set(workers)) == 1, f"the group's tests ran on {workers}"
