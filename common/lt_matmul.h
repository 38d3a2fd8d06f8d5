// common/lt_matmul.h: one cuBLASLt GEMM planned once (descriptors, layouts, the heuristic's algorithm, bound
// buffers) and then run with one call; the MNIST trainers of stages 06 and 07 plan every GEMM with it.
#ifndef LT_MATMUL_H
#define LT_MATMUL_H

#include <stdint.h>
#include <cuda_runtime.h>
#include <cublasLt.h>

#include "trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WORKSPACE_BYTES ((size_t)32 << 20)  // cuBLASLt scratch per stream (split-K and the like)

// One cublasLtMatmul call, planned before the timed region: descriptors, algorithm, bound buffers.
typedef struct {
    cublasLtMatmulDesc_t desc;                            // compute type, transposes, epilogue and its pointers
    cublasLtMatrixLayout_t a_layout, b_layout, c_layout;  // as stored, before op; D = C
    cublasLtMatmulAlgo_t algo;
    const void *a, *b;      // cuBLAS's operands
    float *c, alpha, beta;  // c: output (and input, with beta = 1)
    void *workspace;        // (WORKSPACE_BYTES,) one per stream: two GEMMs running at once must not share one
} MatmulPlan;

// Leading dimension, in bits, of a layer's ReLU bit mask (a column per batch row): a multiple of 128 for cuBLASLt.
int64_t relu_mask_ld(int dim);

// D (m, n) = alpha * op_a(A) @ op_b(B) + beta * C, column-major, D = C, A stored (m, k) or, if trans_a, (k, m),
// B stored (k, n) or, if trans_b, (n, k), each packed. bias and aux (the ReLU bit mask, relu_mask_ld(m) bits a
// column) are NULL unless the epilogue uses them. The algorithm is the heuristic's first answer (gemm_ladder.cu).
// The descriptors alone: desc (compute type, transposes, epilogue, bias and aux pointers, the aux's leading
// dimension) and the three layouts, for the same arguments as plan_matmul. Host objects only: no GPU needed
// (tests/exercise/test_lt_matmul.c reads them back). Its epilogue and layouts are stage 06's build exercise.
void describe_matmul(MatmulPlan *plan, Precision precision, int trans_a, int trans_b, int m, int n, int k,
                     cublasLtEpilogue_t epilogue, const float *bias, void *aux);
void plan_matmul(MatmulPlan *plan, cublasLtHandle_t lt, Precision precision, int trans_a, int trans_b, int m, int n,
                 int k, const void *a, const void *b, float *c, float alpha, float beta, cublasLtEpilogue_t epilogue,
                 const float *bias, void *aux, void *workspace);
void run_matmul(cublasLtHandle_t lt, const MatmulPlan *plan, cudaStream_t stream);
void destroy_matmul(MatmulPlan *plan);

#ifdef __cplusplus
}
#endif

#endif
