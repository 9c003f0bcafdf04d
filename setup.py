"""Declares the native reactor extension; everything else lives in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "cuasync._reactor",
            sources=[
                f"reactor/{name}.c"
                for name in (
                    *("module", "reactor", "queue", "driver", "submit"),
                    *("ledger", "cores", "express", "upload", "alloc", "launcher", "dlpack"),
                )
            ],
            depends=["reactor/reactor.h", "reactor/express.h", "reactor/ledger.h", "reactor/cores.h"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra"],
            libraries=["pthread"],
        )
    ]
)
