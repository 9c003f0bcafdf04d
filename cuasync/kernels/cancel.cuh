// cuasync/cancel.cuh: cancellation of queued work, seen from device code.
//
// A launch made inside a cuasync cancel scope (cuasync.cancel_scope()) carries the
// scope's cancel word as the kernel's last parameter, `unsigned long long
// cuasync_cancel_word_`: 0 outside any scope, else the address of a 32-bit word in
// device memory (low 48 bits) and the scope's generation (high 16 bits). The scope is
// cancelled when the word holds its generation: cancelling enqueues that write on a
// stream of the greatest priority, which carries nothing else; a kernel that checks the
// word before working returns at once, so a cancelled request's queued kernels give the
// GPU its time back.
//
// A kernel compiled through cuasync.Kernel that includes this header gets the parameter
// added by cuasync (hidden: launches pass the same arguments as before) and may call
//
//   cuasync_cancelled()        in any thread, anywhere in the kernel's own body: one
//                              volatile load of the word;
//   cuasync_block_cancelled()  once per block, by every thread of the block (it holds
//                              __syncthreads): thread 0 loads the word.
//
//   #include <cuasync/cancel.cuh>
//   __global__ void scale(float* x, float a, int n) {
//       if (cuasync_block_cancelled()) return;      // the whole block skips its work
//       ...
//   }
//
// cuasync's own kernels (generated elementwise and reduction kernels, creation and
// structural ones) check once per block the same way, when they write a tensor the op made.
#ifndef CUASYNC_CANCEL_CUH
#define CUASYNC_CANCEL_CUH

#define CA_CANCEL_ADDRESS_BITS 48

// Whether the scope of `word` (a cancel word argument, 0 for none) is cancelled.
__device__ __forceinline__ bool ca_cancel_seen(unsigned long long word) {
    if (word == 0) return false;
    const unsigned long long mask = (1ull << CA_CANCEL_ADDRESS_BITS) - 1;
    const volatile unsigned int* p = (const volatile unsigned int*)(word & mask);
    return *p == (unsigned int)(word >> CA_CANCEL_ADDRESS_BITS);
}

// The same, once per block: thread 0 loads the word, the block agrees. Every thread of
// the block must call it (it holds __syncthreads); with no scope (word 0) nothing is
// loaded and nothing is waited for.
__device__ __forceinline__ bool ca_block_cancelled(unsigned long long word) {
    if (word == 0) return false;
    __shared__ int ca_cancel_block_seen;
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        ca_cancel_block_seen = ca_cancel_seen(word);
    }
    __syncthreads();
    return ca_cancel_block_seen != 0;
}

#define cuasync_cancelled() ca_cancel_seen(cuasync_cancel_word_)
#define cuasync_block_cancelled() ca_block_cancelled(cuasync_cancel_word_)

#endif  // CUASYNC_CANCEL_CUH
