"""Copies between host and device memory, and between devices.

``copies`` has the public copy ops (``from_host``, ``to_host``, ``empty``, ``zeros``,
``dup``, ``memcpy``) and the device-side strided copy; ``pinned`` the pinned host
buffers and their pool; ``staging`` the pooled pinned blocks that every host copy goes
through; ``pageable`` and ``copy_threads`` the chunked routes for large pageable arrays;
``readback`` ``download_into``; ``peer`` copies between devices; ``pending`` the
``PendingTransfer`` futures of ``upload_pending``/``download_pending``. The small-upload
fast path is still ``cuasync/_small_upload.py`` (being reworked with the native core).
"""
