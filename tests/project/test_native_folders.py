"""The native sources' folders show what may touch Python.

``reactor/core`` is the reactor proper (the reactor thread, the queues, the submitter):
nothing there includes ``Python.h``, directly or through a header it includes, so the
compiler enforces that nothing running on those threads or under their mutexes calls
the Python API. ``reactor/python`` holds the CPython types and the module.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "reactor"

_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.MULTILINE)
#: Headers that bring in the Python API.
_PYTHON_HEADERS = {"Python.h", "structmember.h"}


def included(path: Path, seen: set[Path] | None = None) -> list[str]:
    """Every header ``path`` includes, directly or through the project's own headers.

    >>> "stdint.h" in included(NATIVE / "core" / "reactor.h")
    True
    """
    seen = set() if seen is None else seen
    names: list[str] = []
    for quote, name in _INCLUDE.findall(path.read_text()):
        names.append(name)
        header = (path.parent / name).resolve()
        if quote == '"' and header.is_file() and header not in seen:
            seen.add(header)
            names += [str(header.relative_to(NATIVE)), *included(header, seen)]
    return names


def test_nothing_under_core_includes_python() -> None:
    sources = sorted((NATIVE / "core").rglob("*.[ch]"))
    assert {p.name for p in sources} >= {"reactor.c", "queue.c", "submit.c", "reactor.h"}
    for path in sources:
        names = included(path)
        bad = [n for n in names if Path(n).name in _PYTHON_HEADERS or n.startswith("python/")]
        assert not bad, f"{path.relative_to(ROOT)} includes {bad}"


def test_the_python_folder_holds_the_cpython_types() -> None:
    for path in sorted((NATIVE / "python").glob("*.c")):
        assert "Python.h" in included(path), f"{path.relative_to(ROOT)}: a CPython file"
    assert not list(NATIVE.glob("*.[ch]")), "every native source sits in core/ or python/"
