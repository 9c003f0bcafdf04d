"""The package runs the code it ships: nothing is generated and run with ``exec`` or
``eval`` (issue 31: the generated-Python launcher was a copy of the native one)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_generates_no_code_with_exec_or_eval() -> None:
    found = []
    for path in sorted((ROOT / "cuasync").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("exec", "eval")
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.func.id}()")
    assert not found, found
