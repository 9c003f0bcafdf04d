"""The documentation: every public name has a docstring, the site builds with
``mkdocs build --strict``, the migration guide's snippets run, and the troubleshooting
page's environment variables exist."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import os
import re
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import run_script

pytestmark = pytest.mark.path_independent  # (the documentation and its site: no op path)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

#: The public modules: everything in their ``__all__`` is public API.
PUBLIC_MODULES = [
    "cuasync",
    "cuasync.errors",
    "cuasync.lowlevel",
    "cuasync.testing",
    "cuasync.emulator",
    "cuasync.bench",
    "cuasync.kernel_cache",
]


def _public_objects() -> dict[str, Any]:
    """Every name in a public module's ``__all__``, and the public methods and properties
    of the public classes (inherited ones included, where cuasync defines them)."""
    found: dict[str, Any] = {}
    for modname in PUBLIC_MODULES:
        module = importlib.import_module(modname)
        found[modname] = module
        for name in module.__all__:
            obj = getattr(module, name)
            if obj is None or isinstance(obj, (str, int, float, np.dtype, types.ModuleType)):
                continue  # __version__, submodules; data (pi, newaxis, float32): their docs
                # are the ``#:`` comments the API reference shows
            found[f"{modname}.{name}"] = obj
            if not isinstance(obj, type):
                continue
            for attr in dir(obj):
                if attr.startswith("_"):
                    continue
                owner = next(c for c in obj.__mro__ if attr in vars(c))
                if not owner.__module__.startswith("cuasync"):
                    continue  # Exception.add_note, tuple.count, ...
                member = vars(owner)[attr]
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                if inspect.isfunction(member) or isinstance(member, property):
                    found[f"{modname}.{name}.{attr}"] = member
    return found


def _doc(obj: Any) -> str:
    if isinstance(obj, property):
        return obj.__doc__ or (obj.fget.__doc__ if obj.fget else None) or ""
    doc = obj.__doc__ or ""
    if isinstance(obj, type):
        own = vars(obj).get("__doc__") or ""
        if dataclasses.is_dataclass(obj) and own.startswith(f"{obj.__name__}("):
            return ""  # the signature dataclasses write when there is no docstring
        return own
    return doc


def test_every_public_name_has_a_docstring() -> None:
    public = _public_objects()
    assert len(public) > 250  # the walk found the API (not an empty __all__)
    missing = sorted(name for name, obj in public.items() if not _doc(obj).strip())
    assert not missing, f"{len(missing)} public names without a docstring:\n" + "\n".join(missing)


def _fields(cls: type) -> list[str]:
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")]
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return list(cls._fields)
    return []


@functools.cache
def _static_package() -> Any:
    """cuasync as the API reference reads it (griffe, from the source)."""
    _require_docs_tools()
    import griffe

    return griffe.load("cuasync", search_paths=[str(ROOT)])


def _attributes(cls: type) -> list[str]:
    """The public attributes the class itself declares or sets in its methods (what the
    API reference lists under it) that have no docstring of their own."""
    obj = _static_package()[f"{cls.__module__.removeprefix('cuasync.')}.{cls.__qualname__}"]
    return [
        name
        for name, member in obj.members.items()
        if not name.startswith("_")
        and not member.is_alias
        and member.is_attribute
        and not member.docstring
    ]


def test_every_public_attribute_is_described_by_its_class() -> None:
    """A public class's fields and attributes (a dataclass's or named tuple's fields,
    ``self.x`` set in its methods) are named, as ``x``, in the class docstring, which is
    where ``help()`` and the API reference show them."""
    missing = []
    for name, obj in _public_objects().items():
        if isinstance(obj, type):
            doc = _doc(obj)
            missing += [
                f"{name}.{f}"
                for f in dict.fromkeys([*_fields(obj), *_attributes(obj)])
                if not re.search(rf"``[^`]*\b{f}\b[^`]*``", doc)
            ]
    assert not missing, "attributes not named (as ``name``) in their class docstring:\n" + (
        "\n".join(missing)
    )


def _require_docs_tools() -> None:
    """The docs tools are in the ``test`` extra, so a missing one is a broken install,
    not a reason to skip: the build below would otherwise never run in CI."""
    for module, package in [
        ("mkdocs", "mkdocs"),
        ("material", "mkdocs-material"),
        ("mkdocstrings_handlers.python", "mkdocstrings[python]"),
    ]:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            pytest.fail(
                f"{package} is not installed ({exc}); it is in the test extra: "
                f'pip install -e ".[test]"',
                pytrace=False,
            )


def _build_site(out: Path) -> None:
    """Build the site as ``tox -e docs`` does: ``mkdocs build --strict`` (a warning, a
    broken link or an unresolved API reference, fails it)."""
    _require_docs_tools()
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}{proc.stderr}"
    print(f"docs built in {time.monotonic() - started:.1f} s")


def test_the_site_builds_with_strict_and_documents_every_public_name(tmp_path: Path) -> None:
    """One test, so that the site is built once however the suite is distributed."""
    site = tmp_path / "site"
    _build_site(site)
    for page in ["index.html", "migrating/index.html", "troubleshooting/index.html"]:
        assert (site / page).exists(), page
    missing = []
    for modname in PUBLIC_MODULES:
        page = "cuasync" if modname == "cuasync" else modname.removeprefix("cuasync.")
        html = (site / "api" / page / "index.html").read_text()
        module = importlib.import_module(modname)
        for name in module.__all__:
            if isinstance(getattr(module, name), types.ModuleType) or name.startswith("__"):
                continue  # (__version__, __array_api_version__: the filter hides dunders)
            if f'id="{modname}.{name}"' not in html:
                missing.append(f"{modname}.{name}")
    assert not missing, "not in the API reference:\n" + "\n".join(missing)
    # docstrings are rendered as Markdown: roles as code spans, examples as code blocks
    html = (site / "api" / "cuasync" / "index.html").read_text()
    assert ":class:`" not in html and ":func:`" not in html and "&gt;&gt;&gt;" in html
    assert '<pre><span></span><code><span class="gp">&gt;&gt;&gt; </span>' in html


def _snippets(page: str) -> list[str]:
    """The page's Python blocks that need neither torch nor CuPy: complete programs."""
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)
    return [b for b in blocks if not re.search(r"\b(torch|cupy)\b|\bloop\.", b)]


MIGRATING = _snippets("migrating.md")


def test_the_migration_guide_has_runnable_snippets() -> None:
    assert len(MIGRATING) >= 5


@pytest.mark.parametrize("code", MIGRATING, ids=[f"block{i}" for i in range(len(MIGRATING))])
def test_a_migration_snippet_runs(code: str) -> None:
    run_script(code)


def test_the_migration_guide_names_only_real_api() -> None:
    """Every ``cuasync.name`` the page uses exists (the torch snippets cannot run here)."""
    import cuasync

    text = (DOCS / "migrating.md").read_text()
    unknown = {n for n in re.findall(r"\bcuasync\.(\w+)", text) if not hasattr(cuasync, n)}
    assert not unknown, unknown


def test_the_documented_environment_variables_exist() -> None:
    """Every ``CUASYNC_*`` variable the user docs name is one cuasync (or an example
    program) reads: named in a string in the code."""
    code = "".join(p.read_text() for d in ("cuasync", "examples") for p in (ROOT / d).rglob("*.py"))
    read = set(re.findall(r'"(CUASYNC_[A-Z0-9_]+)"', code))
    assert {"CUASYNC_BACKEND", "CUASYNC_EMU_MEMORY", "CUASYNC_EMU_COMPILE"} <= read
    pages = [p for p in DOCS.glob("*.md") if p.name not in ("changelog.md", "design.md")]
    named = {
        (p.name, v)
        for p in [*pages, ROOT / "README.md"]
        for v in re.findall(r"\bCUASYNC_[A-Z0-9_]*[A-Z0-9]\b", p.read_text())
    }
    unknown = sorted(f"{page}: {v}" for page, v in named if v not in read)
    assert not unknown, unknown


def test_troubleshooting_covers_the_common_failures() -> None:
    """The page has a section for each, quoting what cuasync really says."""
    text = (DOCS / "troubleshooting.md").read_text()
    code = "".join(p.read_text() for p in (ROOT / "cuasync").rglob("*.py"))
    for phrase in [
        "no NVIDIA driver found",  # no GPU
        "NVRTC (libnvrtc) could not be loaded",
        "CUASYNC_EMU_MEMORY",
        "cuasync's native module cuasync._reactor could not be imported",
        "os.fork()",
        "was initialized in the parent process before os.fork()",
    ]:
        assert phrase in text, f"troubleshooting.md does not mention {phrase!r}"
        assert phrase in code, f"cuasync no longer says {phrase!r}: update the page"


# -- version claims and thresholds ---------------------------------------------------------
def _release(version: str) -> tuple[int, ...]:
    """``"0.2.0.dev0"`` -> ``(0, 2, 0)``."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    assert match, version
    return tuple(int(part or 0) for part in match.groups())


#: Pages that state versions as history (measurements at a commit, release notes).
_HISTORY = ("changelog.md", "performance.md", "design.md")


def _version_claims() -> list[tuple[str, str, str]]:
    """``(page, word, version)`` for each "since 0.2", "in 0.2", "until 0.3", "cuasync
    0.1.0" the user docs make."""
    pattern = re.compile(
        r"\b(cuasync|[Vv]ersion|[Ss]ince|[Bb]efore|[Ii]n|[Uu]ntil|[Ff]rom)\s+v?"
        r"(\d+\.\d+(?:\.\d+)?(?:\.?(?:dev|a|b|rc)\d+)?)\b(?!\s*(?:[µu]s|ms|x|\u00d7|%|[KMG]i?B))"
    )
    pages = [p for p in DOCS.glob("*.md") if p.name not in _HISTORY]
    return [
        (p.name, m[1].lower(), m[2])
        for p in [*pages, ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
        for m in pattern.finditer(p.read_text())
    ]


def test_the_docs_claim_no_version_but_the_installed_one() -> None:
    """What the docs say "since", "in", "before" a version happened is this version or an
    earlier one; what is "until" or "from" a version is later; ``cuasync X.Y.Z`` (the
    output of ``python -m cuasync``) is this one exactly."""
    import tomllib

    import cuasync

    installed = cuasync.__version__
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert pyproject == installed, "pyproject.toml and cuasync.__version__ differ"
    now = _release(installed)[:2]
    claims = _version_claims()
    assert len(claims) >= 4, claims
    stale = []
    for page, word, version in claims:
        if word == "cuasync" and version.count(".") >= 2:
            ok = version == installed
        elif word in ("until", "from"):
            ok = _release(version)[:2] > now
        else:
            ok = _release(version)[:2] <= now
        if not ok:
            stale.append(f"{page}: {word} {version} (installed: {installed})")
    assert not stale, stale


def test_the_changelog_heads_with_the_installed_release() -> None:
    """The changelog's first heading is the version being made: this one, released or
    not (a ``.devN`` version is the unreleased one it leads to)."""
    import cuasync

    first = re.search(r"^## (\S+)( \(unreleased\))?$", (DOCS / "changelog.md").read_text(), re.M)
    assert first is not None
    assert _release(first[1]) == _release(cuasync.__version__)
    assert bool(first[2]) == ("dev" in cuasync.__version__), first[0]


def test_the_docs_give_the_pageable_threshold_the_code_uses() -> None:
    """Where the docs say from what size ``from_host`` stages on the copy threads."""
    from cuasync._transfers.pageable import UPLOAD_CHUNKED_MIN

    patterns = [
        r"below (\d+) MiB during submission",
        r"[Bb]elow (\d+) MiB, during submission",
        r"From (\d+) MiB up the (?:staging memcpy|copy threads)",
        r"of (\d+) MiB or more stages",
        r"\*\*single\*\* \| below (\d+) MiB",
        r"\*\*chunked\*\* \| from (\d+) MiB up",
    ]
    pages = {p: " ".join(p.read_text().split()) for p in DOCS.glob("*.md")}
    pages[ROOT / "cuasync" / "_transfers" / "copies.py"] = " ".join(
        (ROOT / "cuasync/_transfers/copies.py").read_text().split()
    )
    found = [
        (path.name, int(m))
        for path, text in pages.items()
        for p in patterns
        for m in re.findall(p, text)
    ]
    assert len(found) >= 6, found
    wrong = [f"{page}: {mib} MiB" for page, mib in found if mib << 20 != UPLOAD_CHUNKED_MIN]
    assert not wrong, f"the threshold is {UPLOAD_CHUNKED_MIN >> 20} MiB: {wrong}"


def test_design_names_every_module() -> None:
    """docs/design.md is the map of the code: every module file of the package (and the
    native module) has its line there, so a new module without one fails here."""
    text = (DOCS / "design.md").read_text()
    package = ROOT / "cuasync"
    modules = sorted(str(p.relative_to(package)) for p in package.rglob("*.py"))
    assert len(modules) > 50, modules
    missing = [m for m in modules if f"`{m}`" not in text]
    if "`_reactor`" not in text:
        missing.append("_reactor (the native module)")
    assert not missing, (
        "docs/design.md does not name these modules (paths relative to cuasync/, in "
        f"backticks, with a line on what each owns): {missing}"
    )
