"""NVRTC compilation (cuasync._launch.nvrtc): results, logs, and the interpreter left intact."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cuasync._launch.nvrtc import nvrtc_problem

pytestmark = pytest.mark.skipif(nvrtc_problem() is not None, reason=str(nvrtc_problem()))

# Compiled in a fresh interpreter: if NVRTC ever writes into a shared ``bytes`` object
# again, the corruption stays in that process instead of breaking the rest of the suite.
_CHECK = textwrap.dedent(
    r"""
    import sys
    from cuasync._launch.kernel import Kernel

    CLEAN = 'extern "C" __global__ void clean(float* x) { x[0] = 1.0f; }'
    WARNS = 'extern "C" __global__ void warns(float* x) { int unused; x[0] = 1.0f; }'

    def intact(after):
        # Each comparison involves a new object, so a corrupted shared b" " shows up.
        checks = {
            "list(b' ')": list(b" ") == [32],
            "bytes([32]) + b'x'": bytes([32]) + b"x" == b"\x20x",
            "b' '.join": b" ".join([b"a", b"b"]) == b"a\x20b",
            "' '.encode()[0]": " ".encode()[0] == 32,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            sys.exit(f"after {after}: the interpreter's b' ' is {b' '!r}; failed: {bad}")

    image, lowered = Kernel(CLEAN, "clean").compile_image("sm_90")
    assert image[:4] == b"\x7fELF" and lowered == "clean", (image[:4], lowered)
    intact("a compile with an empty log")

    from cuasync._launch.nvrtc import compile_cubin

    compiled = compile_cubin(WARNS, "warns", "sm_90", [])
    assert "declared but never referenced" in compiled.log, compiled.log
    assert compiled.image[:4] == b"\x7fELF" and compiled.lowered_name == "warns"
    intact("a compile with a warning in its log")
    print("intact")
    """
)


def test_compiling_leaves_the_interpreters_shared_bytes_intact() -> None:
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", _CHECK], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "intact"
