"""``#include <cuasync/cancel.cuh>``: the hidden cancel-word parameter a kernel gets."""

from __future__ import annotations

import re

import pytest

import cuasync
from cuasync._launch.nvrtc import nvrtc_problem
from cuasync._launch.signature import parse_params, with_cancel_word
from cuasync.errors import LaunchError

HEADER = "#include <cuasync/cancel.cuh>\n"
WORD = "unsigned long long cuasync_cancel_word_"


def _declarations(source: str, name: str) -> list[str]:
    return re.findall(r"__global__[^{;]*\b" + name + r"\s*\(([^)]*)\)", source)


def test_the_header_adds_a_hidden_last_parameter() -> None:
    source = HEADER + "__global__ void k(float* x, int n) { if (cuasync_cancelled()) return; }"
    text = with_cancel_word(source, "k")
    assert not re.search(r"^#include <cuasync/cancel.cuh>", text, re.M)  # expanded in place
    assert "ca_cancel_seen" in text
    assert _declarations(text, "k") == [f"float* x, int n, {WORD}"]
    params = parse_params(text, "k")
    assert [p.name for p in params] == ["x", "n", "cuasync_cancel_word_"]
    assert [p.hidden for p in params] == [False, False, True]
    k = cuasync.Kernel(source, "k")
    assert repr(k) == "<cuasync.Kernel k(float* x, int n)>"


@pytest.mark.parametrize("params", ["", "void", " "])
def test_a_kernel_without_parameters(params: str) -> None:
    text = with_cancel_word(HEADER + f"__global__ void k({params}) {{}}", "k")
    assert _declarations(text, "k") == [WORD]


def test_every_declaration_of_the_kernel_and_only_it() -> None:
    source = (
        HEADER
        + "template <typename T> __global__ void k(T* x, int n);\n"
        + "__global__ void other(int n) {}\n"
        + "template <typename T> __global__ void k(T* x, int n) {}\n"
    )
    text = with_cancel_word(source, "k<float>")
    assert _declarations(text, "k") == [f"T* x, int n, {WORD}"] * 2
    assert _declarations(text, "other") == ["int n"]
    params = parse_params(text, "k<float>")
    assert [p.ctype for p in params] == ["float", "int", "unsigned long long"]


def test_a_source_without_the_header_is_unchanged() -> None:
    source = "__global__ void k(float* x, int n) {}"
    assert with_cancel_word(source, "k") == source
    assert [p.hidden for p in cuasync.Kernel(source, "k").params] == [False, False]


def test_the_hidden_parameter_is_not_an_argument() -> None:
    k = cuasync.Kernel(HEADER + "__global__ void k(float* x, int n) {}", "k")
    with pytest.raises(
        LaunchError, match=r"k\(\) takes 2 argument\(s\) \(float\* x, int n\), got 1"
    ):
        k[1, 32](cuasync.zeros((4,), "float32").sync())


@pytest.mark.skipif(nvrtc_problem() is not None, reason="needs NVRTC")
def test_kernels_using_the_header_compile() -> None:
    source = (
        HEADER
        + "__global__ void k(float* x, int n) {\n"
        + "    if (cuasync_block_cancelled()) return;\n"
        + "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        + "    if (i < n && !cuasync_cancelled()) x[i] += 1.0f;\n"
        + "}\n"
    )
    image, lowered = cuasync.Kernel(source, "k").compile_image("sm_90")
    assert image and lowered
