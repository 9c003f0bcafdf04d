"""What a plain ``pip install cuasync`` brings: everything the package needs at run time."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _names(requirements: list[str]) -> set[str]:
    """Distribution names, normalized as pip does (``ml_dtypes`` → ``ml-dtypes``)."""
    names = set()
    for requirement in requirements:
        match = re.match(r"[A-Za-z0-9._-]+", requirement)
        assert match, requirement
        names.add(re.sub(r"[-_.]+", "-", match.group()).lower())
    return names


def _cuda_imports() -> set[str]:
    found = set()
    for path in (ROOT / "cuasync").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.split(".")[0] == "cuda"}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "cuda":
                found.add(node.module or "")
    return found


def test_a_plain_install_brings_nvrtc_the_bindings_and_bfloat16() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    dependencies = _names(project["dependencies"])
    # NVRTC compiles every kernel (the built-in creation ops too), so it is no test extra.
    assert {"cuda-bindings", "nvidia-cuda-nvrtc", "numpy", "ml-dtypes"} <= dependencies
    # cuda-python is a metapackage; the package imports cuda.bindings, and cuda.pathfinder
    # to find cuBLAS (declared although cuda-bindings 13 requires it too).
    assert "cuda-python" not in dependencies
    assert _cuda_imports() == {"cuda.bindings", "cuda.pathfinder"}
    assert "cuda-pathfinder" in dependencies
    # cuBLAS (matrix products on a GPU) is an extra: it is loaded when first used.
    assert _names(project["optional-dependencies"]["cublas"]) == {"nvidia-cublas"}


def test_every_subpackage_is_installed() -> None:
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"
    ]
    found = {
        ".".join(p.relative_to(ROOT).parent.parts) for p in (ROOT / "cuasync").rglob("__init__.py")
    }
    assert found <= set(packages), found - set(packages)


def test_users_see_precise_types(tmp_path: Path) -> None:
    """mypy verifies tests/typing_check.py's ``assert_type`` lines (about 4 s, cold cache)."""
    pytest.importorskip("mypy")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path), "tests/typing_check.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
