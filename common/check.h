// common/check.h: error checks for every CUDA, cuBLAS, cuDNN and cuRAND call, and for kernel launches.
//
//     cudaCheck(cudaMalloc(&x, bytes));
//     my_kernel<<<grid, block>>>(...); launchCheck();
//
// A failure prints one line with the call, the library's message and file:line, then exits with
// EXIT_CUDA. Only the library headers a file includes before this one get their macro, so a stage
// that uses no cuDNN needs no cuDNN headers: include cublas_v2.h / cudnn.h / curand.h first.
#ifndef CHECK_H
#define CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime_api.h>
#include "exit_codes.h"

static inline void cuda_check(cudaError_t status, const char *call, const char *file, int line) {
    if (status == cudaSuccess) return;
    const char *hint = "";
    if (status == cudaErrorMemoryAllocation) hint = " (out of device memory: try a smaller --points or --hidden)";
    if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver)
        hint = " (no usable CUDA device: use --reference to train on the CPU)";
    fprintf(stderr, "error: CUDA: %s%s in %s at %s:%d\n", cudaGetErrorString(status), hint, call, file, line);
    exit(EXIT_CUDA);
}
#define cudaCheck(call) cuda_check((call), #call, __FILE__, __LINE__)
// After every kernel launch: catches bad launch configurations at once (execution errors surface at
// the next synchronizing call, which is checked too).
#define launchCheck() cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

#ifdef CUBLAS_API_H_
static inline void cublas_check(cublasStatus_t status, const char *call, const char *file, int line) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "error: cuBLAS: %s (%s) in %s at %s:%d\n", cublasGetStatusName(status),
            cublasGetStatusString(status), call, file, line);
    exit(EXIT_CUDA);
}
#define cublasCheck(call) cublas_check((call), #call, __FILE__, __LINE__)
#endif

#ifdef CUDNN_VERSION
static inline void cudnn_check(cudnnStatus_t status, const char *call, const char *file, int line) {
    if (status == CUDNN_STATUS_SUCCESS) return;
    fprintf(stderr, "error: cuDNN: %s in %s at %s:%d\n", cudnnGetErrorString(status), call, file, line);
    exit(EXIT_CUDA);
}
#define cudnnCheck(call) cudnn_check((call), #call, __FILE__, __LINE__)
#endif

#ifdef CURAND_H_
static inline void curand_check(curandStatus_t status, const char *call, const char *file, int line) {
    if (status == CURAND_STATUS_SUCCESS) return;
    fprintf(stderr, "error: cuRAND: status %d in %s at %s:%d\n", (int)status, call, file, line);
    exit(EXIT_CUDA);
}
#define curandCheck(call) curand_check((call), #call, __FILE__, __LINE__)
#endif

#endif
