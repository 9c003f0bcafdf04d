"""A griffe extension for the API reference (mkdocs.yml loads it): renders cuasync's
docstrings, written for ``help()`` and IDEs, as Markdown.

- ``:class:`X```-style roles become code spans;
- ``>>>`` examples become ``pycon`` code blocks, and a paragraph ending in ``::``
  introduces a literal block, as in reStructuredText;
- functions built at import time (the elementwise tensor ops) are read from the
  imported module, since a static reading sees only ``abs = _unary(...)``.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):`~?\.?([^`]+)`")


def _markdown(text: str) -> str:
    text = _ROLE.sub(r"`\1`", text)
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(indent + "```pycon")
            while i < len(lines) and lines[i].strip():
                out.append(lines[i])
                i += 1
            out.append(indent + "```")
            continue
        if line.rstrip().endswith("::") and not line.strip().startswith("`"):
            if line.strip() != "::":  # "text::" reads "text:"; a bare "::" vanishes
                out.append(line.rstrip()[:-1])
            i += 1
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            out += ["", "```text", *textwrap.dedent("\n".join(block)).split("\n"), "```", ""]
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


class CuasyncDocstrings(griffe.Extension):
    """Rewrites every docstring of the loaded package once, after loading."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._runtime_functions(pkg)
        self._walk(pkg, set())

    def _walk(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            obj.docstring.value = _markdown(obj.docstring.value)
        for member in obj.members.values():
            if not member.is_alias:
                self._walk(member, seen)  # type: ignore[arg-type]

    def _runtime_functions(self, pkg: griffe.Module) -> None:
        module = pkg["_ops.elementwise"]
        inspected = griffe.inspect("cuasync._ops.elementwise")
        for name, member in list(module.members.items()):
            if member.is_alias or not member.is_attribute or member.docstring:
                continue
            live = inspected.members.get(name)
            if live is not None and not live.is_alias and live.is_function and live.docstring:
                live.parent = module
                live.lineno, live.endlineno = member.lineno, member.endlineno
                module.set_member(name, live)
