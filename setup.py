"""Declares the native extension; everything else lives in pyproject.toml.

The build stamps the module with a hash of its sources (``SOURCE_HASH``), so that
``cuasync._native`` can refuse a build left over from other sources in a checkout.
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

NATIVE = Path(__file__).parent / "reactor"


def source_hash(folder: Path) -> str:
    """The hash cuasync/_native.py compares: every .c and .h file under ``folder``, by path."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.[ch]")):
        name = path.relative_to(folder).as_posix()
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


setup(
    ext_modules=[
        Extension(
            "cuasync._reactor",
            sources=[
                # the reactor proper: never includes Python.h
                *(f"reactor/core/{name}.c" for name in ("reactor", "queue", "submit")),
                # the CPython types, the module and the driver fast paths
                *(
                    f"reactor/python/{name}.c"
                    for name in (
                        *("module", "driver", "ledger", "cores", "express", "upload"),
                        *("alloc", "launcher", "dlpack", "plan", "apply", "launches", "memo"),
                        *("reduce", "blas", "wake", "timer", "completion", "park", "watched"),
                        "op_future",
                    )
                ),
            ],
            depends=[str(p) for p in sorted(NATIVE.rglob("*.h"))],
            define_macros=[("CUASYNC_SOURCE_HASH", f'"{source_hash(NATIVE)}"')],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra"],
            libraries=["pthread"],
        )
    ]
)
