// common/ladder_gpu.h: the timing loop every kernel ladder shares (NN-*/*_ladder.cu; .cu files only).
//
// A timed run: prepare (untimed: e.g. zero the sums a version adds into), then `calls` calls of the
// version between two CUDA events, all on the default stream; its time is the events' interval / calls.
// A spin kernel goes first, so the host has queued the whole run before the GPU reaches it: the events
// then time the GPU's work back to back, not the host's launch calls (a launch costs a few microseconds,
// as much as a whole small GEMM). LADDER_WARMUP_RUNS untimed runs come first.
#ifndef LADDER_GPU_H
#define LADDER_GPU_H

#include <cuda_runtime.h>
#include "check.h"
#include "host.h"
#include "ladder.h"

#define LADDER_SPIN_CYCLES 1000000  // about 0.5 ms of GPU clock: longer than queueing any run here

// Keeps the GPU busy for `cycles` clock cycles.
static __global__ void ladder_spin_kernel(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

static inline void *ladder_to_device(const void *host, size_t bytes) {
    void *device = NULL;
    cudaCheck(cudaMalloc(&device, bytes));
    cudaCheck(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
    return device;
}

// One call of a version, on the default stream; ctx: its problem (buffers, sizes, plans).
typedef void (*LadderCallFn)(void *ctx);

// Median, min and max ms per call over `repeats` timed runs of `calls` calls. prepare may be NULL.
static inline LadderStats ladder_time_runs(LadderCallFn prepare, LadderCallFn call, void *ctx, int calls, int repeats) {
    double *ms = (double *)host_malloc(sizeof(double) * (size_t)repeats, "the run times");
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    for (int run = -LADDER_WARMUP_RUNS; run < repeats; run++) {
        ladder_spin_kernel<<<1, 1>>>(LADDER_SPIN_CYCLES);
        launchCheck();
        if (prepare) prepare(ctx);
        cudaCheck(cudaEventRecord(start, 0));
        for (int c = 0; c < calls; c++) call(ctx);
        cudaCheck(cudaEventRecord(stop, 0));
        cudaCheck(cudaEventSynchronize(stop));
        float elapsed = 0.0f;
        cudaCheck(cudaEventElapsedTime(&elapsed, start, stop));
        if (run >= 0) ms[run] = (double)elapsed / calls;
    }
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    LadderStats stats = ladder_stats(ms, repeats);
    free(ms);
    return stats;
}

#endif
