// common/host.c: see host.h.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
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
