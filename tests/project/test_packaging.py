"""What a plain ``pip install cuasync`` brings: everything the package needs at run time."""

from __future__ import annotations

import ast
import fcntl
import inspect
import os
import re
import subprocess
import sys
import tomllib
import typing
from collections.abc import Callable
from pathlib import Path

import pytest

import cuasync

pytestmark = pytest.mark.path_independent  # (packaging and what mypy sees: no op path)

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


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mypy cache for the run's mypy checks, whichever xdist worker runs each (in the
    run's directory, tests/conftest.py's), so that cuasync and numpy are analyzed once a
    run, not once a worker (a cold run took 13 s on the CI host, a warm one under 1 s)."""
    run = os.environ.get("CUASYNC_TEST_RUN_KERNEL_CACHE")
    if not run:
        return tmp_path_factory.mktemp("mypy_cache")
    cache = Path(run) / "mypy"
    cache.mkdir(exist_ok=True)
    return cache


def _mypy(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """mypy with ``cache``, one run at a time (a lock file beside it: mypy's cache is not
    meant for concurrent writers)."""
    with open(cache.with_name(cache.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return subprocess.run(
            [sys.executable, "-m", "mypy", "--cache-dir", str(cache), *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )


def test_users_see_precise_types(mypy_cache: Path) -> None:
    """mypy verifies tests/typing_check.py's ``assert_type`` lines (about 4 s, cold cache)."""
    pytest.importorskip("mypy")
    result = _mypy(mypy_cache, "tests/typing_check.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_a_forgotten_await_as_troubleshooting_md_says(
    mypy_cache: Path, tmp_path: Path
) -> None:
    """docs/troubleshooting.md: an op used as its result fails type-checking, and with
    ``--enable-error-code unused-awaitable`` (the docs recommend it) an op built and
    dropped is flagged."""
    pytest.importorskip("mypy")
    assert "--enable-error-code unused-awaitable" in (ROOT / "docs/troubleshooting.md").read_text()
    probe = tmp_path / "app.py"
    probe.write_text(
        "import cuasync\n"
        "async def main(x: cuasync.Tensor) -> None:\n"
        "    total: float = cuasync.sum(x).item()\n"  # 3: an op used as its result
        "    cuasync.memcpy(x, x)\n"  # 4: built and dropped
        "    (x * 2.0)[0]\n"  # 5: an op indexed
        "    await cuasync.memcpy(x, x)\n"  # 6: fine
    )
    result = _mypy(mypy_cache, "--enable-error-code", "unused-awaitable", str(probe))
    lines = {
        int(n): code
        for n, code in re.findall(r":(\d+): error: .*\[([\w-]+)\]$", result.stdout, re.M)
    }
    assert lines == {3: "assignment", 4: "unused-awaitable", 5: "index"}, result.stdout


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


#: ``Any`` that mypy may show in a public name's type, each with why: a kernel's launch
#: result is whatever its C signature binds (``Kernel[R]``'s default, a user states it:
#: ``k: Kernel[Tensor] = Kernel(...)``), and a numpy twin takes the launch's arguments.
ALLOWED_ANY = {
    "Kernel": ("[R = Any]", "emulate: (def (*Any, **Any) -> object)"),
}


def _bare_any(revealed: str) -> list[str]:
    """The ``Any`` of ``revealed`` that are not a generic's argument (``np.dtype[Any]`` is
    fine, ``obj: Any``, ``-> Any`` and ``def (*Any, **Any)`` are not), each with the
    text before it."""
    found, depth = [], 0
    for i, ch in enumerate(revealed):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if revealed.startswith("Any", i) and not revealed[i - 1 : i].isalnum() and not depth:
            found.append(revealed[max(0, i - 40) : i + 3])
    return found


def test_no_public_name_is_any_to_mypy(mypy_cache: Path, tmp_path: Path) -> None:
    """mypy's ``reveal_type`` of each public name shows no ``Any`` but a generic's
    argument (and :data:`ALLOWED_ANY`): no ``Any`` parameter, no ``(*Any, **Any)``
    signature and no ``Any`` result (``cuasync.sum(x).item()`` with the await forgotten
    must fail type-checking, and the API reference shows real signatures)."""
    pytest.importorskip("mypy")
    names = list(cuasync.__all__)
    probe = tmp_path / "reveal_public_names.py"
    probe.write_text("import cuasync\n" + "".join(f"reveal_type(cuasync.{n})\n" for n in names))
    result = _mypy(mypy_cache, str(probe))
    revealed = re.findall(r":(\d+): note: Revealed type is \"(.*)\"$", result.stdout, re.M)
    assert len(revealed) == len(names), result.stdout + result.stderr
    vague = []
    for line, kind in revealed:
        name = names[int(line) - 2]
        for allowed in ALLOWED_ANY.get(name, ()):
            assert allowed in kind, f"{name}: {allowed!r} is no longer revealed; drop it"
            kind = kind.replace(allowed, "")
        vague += [f"{name}: ...{where}" for where in _bare_any(kind)]
    assert not vague, "\n".join(vague)


def test_bare_any_is_found() -> None:
    assert len(_bare_any("def (x: Any, y: numpy.dtype[Any]) -> Any")) == 2
    assert len(_bare_any("def (f: def (*Any, **Any) -> int)")) == 2
    assert not _bare_any("def (numpy.number[Any, int]) -> tuple[Any, ...]")


def _signatures(obj: Callable[..., object]) -> list[inspect.Signature]:
    """What callers see: an overloaded function's overloads, else its signature."""
    return [inspect.signature(f) for f in typing.get_overloads(obj)] or [inspect.signature(obj)]


def _any_parameters(name: str, obj: Callable[..., object]) -> list[str]:
    return [
        f"{name}({p.name}: {p.annotation})"
        for sig in _signatures(obj)
        for p in sig.parameters.values()
        if p.kind is not p.VAR_KEYWORD and _bare_any(str(p.annotation))
    ]


#: Public methods' parameters that may still be ``Any``, each with why.
ANY_PARAMETERS = {
    # a kernel's arguments: whatever its C signature takes, checked when it is launched
    "Kernel.launch(args": "the kernel's parameters",
}


def test_public_parameters_are_not_any() -> None:
    """Every parameter of a public function, class constructor and method has a precise
    type (issue 34): a bare ``Any`` (``dtype: Any``, ``obj: Any``) accepts anything
    without a word to the reader or mypy. Generic arguments (``np.integer[Any]``) are
    fine; an overloaded function is checked by its overloads (what callers see)."""
    vague = []
    for name in cuasync.__all__:
        obj = inspect.unwrap(getattr(cuasync, name))  # (a native elementwise function: its def)
        if inspect.isfunction(obj):
            vague += _any_parameters(name, obj)
        elif inspect.isclass(obj) and not issubclass(obj, BaseException):
            for method, fn in inspect.getmembers(obj, inspect.isfunction):
                if method.startswith("_") and method not in ("__init__", "__getitem__"):
                    continue
                if method in ("send", "throw"):  # (a coroutine's protocol)
                    continue
                vague += _any_parameters(f"{name}.{method}", fn)
    stale = set(ANY_PARAMETERS) - {v.split(":")[0] for v in vague}
    assert not stale, f"no longer Any: drop them from ANY_PARAMETERS: {sorted(stale)}"
    vague = [v for v in vague if v.split(":")[0] not in ANY_PARAMETERS]
    assert not vague, "\n".join(vague)
