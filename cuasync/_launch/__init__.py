"""From CUDA C++ source to a kernel launch.

``kernel`` has :class:`~cuasync.Kernel` and its launches; ``signature`` parses a
``__global__`` parameter list; ``nvrtc`` compiles; ``module`` loads or borrows compiled
modules; ``partition`` turns a tensor's tiles into a launch grid; ``builtin`` and
``twins`` are the kernels cuasync itself launches (sources in ``cuasync/kernels/``) and
their numpy twins for the emulator. The native launcher wiring is still
``cuasync/_launcher.py`` (being reworked with the native core).

Named ``_launch`` rather than ``_kernels`` so that it is not mistaken for
``cuasync/kernels/``, which holds the CUDA sources (package data, not Python).
"""
