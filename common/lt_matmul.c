// common/lt_matmul.c: see lt_matmul.h.
#include <stdint.h>
#include <cuda_runtime.h>
#include <cublasLt.h>  // before check.h, which defines cublasCheck only for headers included

#include "check.h"
#include "lt_matmul.h"

// The largest power of two up to 256 dividing p: the heuristic assumes 256-byte alignment unless told otherwise.
static uint32_t alignment_of(const void *p) { return (uint32_t)(((uintptr_t)p | 256) & -((uintptr_t)p | 256)); }

int64_t relu_mask_ld(int dim) { return ((int64_t)dim + 127) / 128 * 128; }

void describe_matmul(MatmulPlan *plan, Precision precision, int trans_a, int trans_b, int m, int n, int k,
                     cublasLtEpilogue_t epilogue, const float *bias, void *aux) {
    cublasComputeType_t compute = precision == PRECISION_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    int32_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    plan->a_layout = plan->b_layout = plan->c_layout = NULL;
    cublasCheck(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F));
#define SET_DESC(attr, value) cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, attr, &(value), sizeof(value)))
    SET_DESC(CUBLASLT_MATMUL_DESC_TRANSA, op_a);
    SET_DESC(CUBLASLT_MATMUL_DESC_TRANSB, op_b);
    // EXERCISE(bias-relu-epilogue) begin: set the epilogue attribute; where given, the bias pointer, the aux pointer
    //: and the aux's leading dimension (relu_mask_ld(m) bits); then a_layout, b_layout and c_layout, each
    //: operand as stored: column-major, packed (ld = rows). Which of m, n, k are A's rows when trans_a is set?
    uint32_t epilogue_id = epilogue;
    int64_t aux_ld = relu_mask_ld(m);
    SET_DESC(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue_id);
    if (bias) SET_DESC(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    if (aux) SET_DESC(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
    if (aux) SET_DESC(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld);
    int a_rows = trans_a ? k : m, b_rows = trans_b ? n : k;  // as stored (column-major), packed: ld = rows
    cublasCheck(cublasLtMatrixLayoutCreate(&plan->a_layout, CUDA_R_32F, a_rows, trans_a ? m : k, a_rows));
    cublasCheck(cublasLtMatrixLayoutCreate(&plan->b_layout, CUDA_R_32F, b_rows, trans_b ? k : n, b_rows));
    cublasCheck(cublasLtMatrixLayoutCreate(&plan->c_layout, CUDA_R_32F, m, n, m));
    // EXERCISE end
#undef SET_DESC
}

void plan_matmul(MatmulPlan *plan, cublasLtHandle_t lt, Precision precision, int trans_a, int trans_b, int m, int n,
                 int k, const void *a, const void *b, float *c, float alpha, float beta, cublasLtEpilogue_t epilogue,
                 const float *bias, void *aux, void *workspace) {
    describe_matmul(plan, precision, trans_a, trans_b, m, n, k, epilogue, bias, aux);
    cublasLtMatmulPreference_t preference;
    size_t workspace_bytes = WORKSPACE_BYTES;
    const cublasLtMatmulPreferenceAttributes_t align_attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t aligns[4] = {alignment_of(a), alignment_of(b), alignment_of(c), alignment_of(c)};  // D = C
    cublasCheck(cublasLtMatmulPreferenceCreate(&preference));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &workspace_bytes, sizeof(workspace_bytes)));
    for (int i = 0; i < 4; i++)
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(preference, align_attrs[i], &aligns[i], sizeof(aligns[i])));
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(lt, plan->desc, plan->a_layout, plan->b_layout, plan->c_layout,
                                               plan->c_layout, preference, 1, &heuristic, &found));
    if (found == 0) cublasCheck(CUBLAS_STATUS_NOT_SUPPORTED);  // no algorithm for this GEMM at this precision
    cublasCheck(cublasLtMatmulPreferenceDestroy(preference));
    plan->algo = heuristic.algo;
    plan->a = a, plan->b = b, plan->c = c, plan->alpha = alpha, plan->beta = beta, plan->workspace = workspace;
}

void run_matmul(cublasLtHandle_t lt, const MatmulPlan *plan, cudaStream_t stream) {
    cublasCheck(cublasLtMatmul(lt, plan->desc, &plan->alpha, plan->a, plan->a_layout, plan->b, plan->b_layout,
                               &plan->beta, plan->c, plan->c_layout, plan->c, plan->c_layout, &plan->algo,
                               plan->workspace, WORKSPACE_BYTES, stream));
}

void destroy_matmul(MatmulPlan *plan) {
    cublasCheck(cublasLtMatmulDescDestroy(plan->desc));
    cublasCheck(cublasLtMatrixLayoutDestroy(plan->a_layout));
    cublasCheck(cublasLtMatrixLayoutDestroy(plan->b_layout));
    cublasCheck(cublasLtMatrixLayoutDestroy(plan->c_layout));
}
