"""Interop with other GPU libraries: DLPack, the CUDA Array Interface, foreign streams.

``foreign`` adopts memory another library owns (never freed by cuasync) and orders
streams across the boundary; ``dlpack`` and ``cai`` speak the two exchange protocols
both ways; ``convert`` is :func:`cuasync.asarray`; ``wait`` awaits work another library
enqueued. Modules here may import ``_core``, ``_backends`` and the tensor layer; the
tensor layer imports them lazily (``Tensor.__dlpack__`` and friends).
"""
