// common/host.c: see host.h.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "gates.h"
#include "host.h"

double host_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static void out_of_host_memory(size_t bytes, const char *what) {
    fprintf(stderr, "error: out of host memory for %s (%zu bytes)\n", what, bytes);
    exit(EXIT_HOST_MEMORY);
}

void *host_malloc(size_t bytes, const char *what) {
    void *p = malloc(bytes);
    if (p == NULL) out_of_host_memory(bytes, what);
    return p;
}

void *host_pinned(size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t status = cudaMallocHost(&p, bytes);
    if (status == cudaErrorMemoryAllocation) out_of_host_memory(bytes, what);
    cudaCheck(status);
    return p;
}

void *device_zeros(size_t bytes) {
    void *p = NULL;
    cudaCheck(cudaMalloc(&p, bytes));
    cudaCheck(cudaMemset(p, 0, bytes));
    return p;
}

// Shared memory a block may opt into, KB, by compute capability: the CUDA C++ Programming Guide's table of
// technical specifications. A capability between two rows takes the lower row's figure.
static const struct {
    int capability, kb;
} SHARED_PER_BLOCK[] = {{75, 64}, {80, 163}, {86, 99}, {87, 163}, {89, 99}, {90, 227}, {120, 99}};

int device_shared_per_block(void) {
    int device, bytes, capability = device_capability(), kb = SHARED_PER_BLOCK[0].kb;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    for (size_t i = 0; i < sizeof(SHARED_PER_BLOCK) / sizeof(SHARED_PER_BLOCK[0]); i++)
        if (SHARED_PER_BLOCK[i].capability <= capability) kb = SHARED_PER_BLOCK[i].kb;
    return kb * 1024 < bytes ? kb * 1024 : bytes;
}
