"""The CUDA C++ of cuasync's built-in kernels, shipped as package data; no Python API.

``cast.cuh`` (values, float16/bfloat16/FP8 bits and numpy's casting rules) and
``index.cuh`` (strided indexing) are shared; each ``.cu`` file is one family of kernels:
``fill``, ``linspace``, ``arange``, ``convert`` and ``random``. :mod:`cuasync._launch.builtin`
joins them, in that order, into the one translation unit that NVRTC compiles. ``guard.cu``
(with ``cancel.cuh``) is compiled on its own: the kernel that sets the condition of a
guarded region's graph node (:mod:`cuasync._launch.guard`).
"""
