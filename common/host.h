// common/host.h: host-side helpers every trainer uses: a wall clock and allocations that cannot fail
// silently. An allocation that fails prints one line and exits with EXIT_HOST_MEMORY (exit_codes.h).
#ifndef HOST_H
#define HOST_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// Milliseconds on CLOCK_MONOTONIC, the one host clock: for what CUDA events cannot time (setup on the host,
// the CPU reference, stage 01's CPU loop).
double host_ms(void);
// malloc, or "error: out of host memory for <what> (<bytes> bytes)" and exit(EXIT_HOST_MEMORY).
void *host_malloc(size_t bytes, const char *what);
// cudaMallocHost (pinned, so copies from it can run asynchronously), with the same failure line.
void *host_pinned(size_t bytes, const char *what);
// cudaMalloc followed by cudaMemset to zero: a buffer that a library may read before we write it.
void *device_zeros(size_t bytes);
// The shared memory one block of the current device may opt into, in bytes: its own figure, no more than a GPU
// of its compute capability has, CUDA_STAGES_CC applied (gates.h), so that a rehearsal meets that GPU's limit too.
int device_shared_per_block(void);

#ifdef __cplusplus
}
#endif

#endif
