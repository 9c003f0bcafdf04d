"""Where the host time of a DLPack exchange with torch goes (GPU only): cProfile of
``cuasync.from_dlpack(torch_tensor)`` and of ``torch.from_dlpack(cuasync_tensor)``, and
the driver calls each makes (counted on the backend).

    python3 tools/probes/dlpack_profile.py
"""

import cProfile
import pstats
import time

import torch

import cuasync
from cuasync._backends import get_backend

x = cuasync.arange(1024, dtype="float32").sync()
tt = torch.arange(1024, dtype=torch.float32, device="cuda")
torch.cuda.synchronize()
cases = {
    "import": lambda: cuasync.from_dlpack(tt),
    "export": lambda: torch.from_dlpack(x),
}
backend = get_backend()
calls: dict[str, int] = {}
for name in ("event_create", "event_destroy", "event_record", "stream_wait_event",
             "stream_device", "_switch"):  # fmt: skip
    fn = getattr(backend, name)

    def counting(*a, _fn=fn, _name=name, **k):
        calls[_name] = calls.get(_name, 0) + 1
        return _fn(*a, **k)

    setattr(backend, name, counting)
for what, fn in cases.items():
    for _ in range(200):
        fn()
    calls.clear()
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    per = (time.perf_counter() - t0) / n * 1e6
    print(
        f"== {what}: {per:.1f} us per call (counting wrappers on); backend calls per call:",
        {k: v / n for k, v in calls.items()},
    )
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(14)
