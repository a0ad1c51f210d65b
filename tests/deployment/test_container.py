"""The container image's Dockerfile: linted with hadolint, FROM the Dynamo runtime at the version the
lock file pins, and its install step resolvable from the lock. (No image is built here: the CI
machine has no registry access; the README says how to build and push it.)"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.support.commands import REPO

DOCKERFILE = REPO / "Dockerfile"


def test_the_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run([str(hadolint), str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_is_the_dynamo_runtime_the_lock_pins() -> None:
    locked = {p["name"]: p["version"] for p in tomllib.loads((REPO / "uv.lock").read_text())["package"]}
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG DYNAMO_VERSION=(\S+)$", text, re.M).group(1) == locked["ai-dynamo"]
    assert "FROM nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:${DYNAMO_VERSION}" in text


def test_the_install_step_resolves_from_the_lock_without_torch(tmp_path: Path) -> None:
    step = re.search(r"RUN (uv export .*?--output-file) \S+", DOCKERFILE.read_text(), re.S).group(1)
    argv = [shutil.which("uv") or "uv", *step.replace("\\\n", " ").split()[1:], str(tmp_path / "requirements.txt")]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    pinned = {
        line.split("==")[0]: line
        for line in (tmp_path / "requirements.txt").read_text().splitlines()
        if "==" in line and not line.startswith(" ")
    }
    assert "torch" not in pinned  # the image's CUDA torch stays
    assert pinned["aisimulate"].endswith("sys_platform == 'never'")  # never installed
    assert pinned["ai-dynamo"].startswith("ai-dynamo==") and "fastapi" in pinned
