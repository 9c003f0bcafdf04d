// The guard of a conditional graph node (CUDA 12.4+): library calls and copies that
// cannot check a cancel word themselves (cuBLAS, memsets) are captured into the body of
// an IF node, and this kernel, upstream of it in the same graph, sets the node's
// condition from the word: the body runs only if the scope is not cancelled when the
// graph starts. cuasync/_backends/conditional.py builds the graph.
//
// cudaGraphSetConditional is a device runtime builtin: declared here, it compiles to a
// complete cubin (no device runtime library to link).
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(
    unsigned long long handle, unsigned int value);

extern "C" __global__ void ca_cancel_guard(unsigned long long handle, unsigned long long word) {
    cudaGraphSetConditional(handle, ca_cancel_seen(word) ? 0u : 1u);
}
