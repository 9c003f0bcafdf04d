"""What a plain ``pip install cuasync`` brings: everything the package needs at run time."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import cuasync

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


def _asserted_names(path: Path) -> set[str]:
    """The ``cuasync.NAME`` (or ``from cuasync import NAME``) names inside ``assert_type``
    calls of ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    imported = {
        a.asname or a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "cuasync"
        for a in node.names
    }
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "assert_type":
            for sub in ast.walk(node):
                if isinstance(sub, ast.Attribute) and getattr(sub.value, "id", None) == "cuasync":
                    found.add(sub.attr)
                elif isinstance(sub, ast.Name) and sub.id in imported:
                    found.add(sub.id)
    return found


def test_every_public_name_has_an_assert_type_line() -> None:
    missing = sorted(set(cuasync.__all__) - _asserted_names(ROOT / "tests" / "typing_check.py"))
    assert not missing, f"tests/typing_check.py has no assert_type line for {missing}"


def test_no_public_name_is_any_to_mypy(tmp_path: Path) -> None:
    """mypy's ``reveal_type`` of each public name: never ``Any``, no ``(*Any, **Any)``
    signature and no ``Any`` result (``cuasync.sum(x).item()`` with the await forgotten must
    fail type-checking, and the API reference shows real signatures)."""
    pytest.importorskip("mypy")
    names = list(cuasync.__all__)
    probe = tmp_path / "reveal_public_names.py"
    probe.write_text("import cuasync\n" + "".join(f"reveal_type(cuasync.{n})\n" for n in names))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), str(probe)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    revealed = re.findall(r":(\d+): note: Revealed type is \"(.*)\"$", result.stdout, re.M)
    assert len(revealed) == len(names), result.stdout + result.stderr
    vague = [
        f"{names[int(line) - 2]}: {kind}"
        for line, kind in revealed
        if kind == "Any" or kind.startswith("def (*Any, **Any)") or kind.endswith("-> Any")
    ]
    assert not vague, "\n".join(vague)


#: Public functions whose parameters may still be ``Any``, each with why: objects of any
#: kind by design, checked at run time (DLPack producers, host data of any kind), or
#: modules other work owns (the op core, kernel warm-up).
ANY_PARAMETERS = {
    "asarray": "obj: device arrays, DLPack producers, host data of any kind",
    "from_dlpack": "obj: any __dlpack__ producer",
    "shared": "x: cuasync._core (another area)",
    "zip": "ops: cuasync._core (another area)",
    "warmup": "things: cuasync._launch (another area)",
}


def test_public_parameters_are_not_any() -> None:
    """Every parameter of a public function has a precise type (issue 34): a bare ``Any``
    (``dtype: Any``, ``axes: Any``) accepts anything without a word to the reader or
    mypy. Generic arguments (``np.integer[Any]``) are fine."""
    bare = re.compile(r"(?<![\[\w])Any(?!\])")
    vague = []
    for name in cuasync.__all__:
        obj = getattr(cuasync, name)
        if not inspect.isfunction(obj) or name in ANY_PARAMETERS:
            continue
        for p in inspect.signature(obj).parameters.values():
            if p.kind is not p.VAR_KEYWORD and bare.search(str(p.annotation)):
                vague.append(f"{name}({p.name}: {p.annotation})")
    for cls in (cuasync.Tensor, cuasync.TensorOp):  # the methods too
        for name, obj in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith("_") or name in ("send", "throw"):  # (a coroutine's protocol)
                continue
            for p in inspect.signature(obj).parameters.values():
                if p.kind is not p.VAR_KEYWORD and bare.search(str(p.annotation)):
                    vague.append(f"{cls.__name__}.{name}({p.name}: {p.annotation})")
    assert not vague, "\n".join(vague)
