// Device code of cuasync.testing: ops that hold a stream busy or fault the device.
// Compiled with NVRTC at first use; each kernel has a numpy twin in _device_ops.py.

// Keeps one thread busy until `ns` nanoseconds of the global timer have passed.
extern "C" __global__ void cuasync_sleep(unsigned long long ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

// Faults the context (CUDA_ERROR_LAUNCH_FAILED, sticky for the process).
extern "C" __global__ void cuasync_trap()
{
    __trap();
}
