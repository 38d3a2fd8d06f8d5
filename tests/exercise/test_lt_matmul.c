// tests/exercise/test_lt_matmul.c: Criterion suite "lt_matmul" for describe_matmul (common/lt_matmul.c), the
// cuBLASLt descriptors of one GEMM of stages 06-08: each of the three kinds of GEMM the MNIST trainers plan, read
// back attribute by attribute. Descriptors are host objects, so no GPU is needed: this is the part of stage 06's
// build exercise (region bias-relu-epilogue) that `make stage 6 exercise` checks on any machine, linked with the
// candidate's lt_matmul.c by tools/try.sh.
//
//     make test          (build/tests/exercise/test_lt_matmul, with the repository's own common/lt_matmul.c)
#include <criterion/criterion.h>
#include <stdint.h>

#include "lt_matmul.h"

static int64_t desc_int(const MatmulPlan *plan, cublasLtMatmulDescAttributes_t attr, size_t bytes) {
    int64_t value = 0;  // an attribute is 4 or 8 bytes; little-endian, so the low bytes hold a 4-byte one
    size_t written = 0;
    cublasStatus_t status = cublasLtMatmulDescGetAttribute(plan->desc, attr, &value, bytes, &written);
    cr_assert_eq(status, CUBLAS_STATUS_SUCCESS, "reading matmul attribute %d: status %d", (int)attr, (int)status);
    return value;
}

static const void *desc_pointer(const MatmulPlan *plan, cublasLtMatmulDescAttributes_t attr) {
    const void *value = NULL;
    size_t written = 0;
    cublasStatus_t status = cublasLtMatmulDescGetAttribute(plan->desc, attr, &value, sizeof(value), &written);
    cr_assert_eq(status, CUBLAS_STATUS_SUCCESS, "reading matmul attribute %d: status %d", (int)attr, (int)status);
    return value;
}

// layout NAME's rows, columns and leading dimension must be ROWS, COLS, LD, column-major
static void check_layout(cublasLtMatrixLayout_t layout, const char *name, uint64_t rows, uint64_t cols, int64_t ld) {
    cr_assert_not_null(layout, "%s: no layout created", name);
    uint64_t got_rows = 0, got_cols = 0;
    int64_t got_ld = 0;
    int32_t order = -1;
    size_t written;
    cr_assert_eq(cublasLtMatrixLayoutGetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_ROWS, &got_rows, sizeof(got_rows),
                                                  &written), CUBLAS_STATUS_SUCCESS, "%s: rows unreadable", name);
    cr_assert_eq(cublasLtMatrixLayoutGetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_COLS, &got_cols, sizeof(got_cols),
                                                  &written), CUBLAS_STATUS_SUCCESS, "%s: columns unreadable", name);
    cr_assert_eq(cublasLtMatrixLayoutGetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_LD, &got_ld, sizeof(got_ld),
                                                  &written), CUBLAS_STATUS_SUCCESS, "%s: ld unreadable", name);
    cr_assert_eq(cublasLtMatrixLayoutGetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof(order),
                                                  &written), CUBLAS_STATUS_SUCCESS, "%s: order unreadable", name);
    cr_expect_eq(got_rows, rows, "%s: %llu rows, want %llu", name, (unsigned long long)got_rows,
                 (unsigned long long)rows);
    cr_expect_eq(got_cols, cols, "%s: %llu columns, want %llu", name, (unsigned long long)got_cols,
                 (unsigned long long)cols);
    cr_expect_eq(got_ld, ld, "%s: leading dimension %lld, want %lld (packed, column-major: ld = rows)", name,
                 (long long)got_ld, (long long)ld);
    cr_expect_eq(order, CUBLASLT_ORDER_COL, "%s: not column-major", name);
}

static void check_epilogue(const MatmulPlan *plan, cublasLtEpilogue_t epilogue, const void *bias, const void *aux,
                           int64_t aux_ld) {
    cr_expect_eq(desc_int(plan, CUBLASLT_MATMUL_DESC_EPILOGUE, sizeof(uint32_t)), (int64_t)epilogue,
                 "the epilogue attribute is %lld, want %d", (long long)desc_int(plan, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                                              sizeof(uint32_t)), (int)epilogue);
    cr_expect_eq(desc_pointer(plan, CUBLASLT_MATMUL_DESC_BIAS_POINTER), bias, "the bias pointer is %p, want %p",
                 desc_pointer(plan, CUBLASLT_MATMUL_DESC_BIAS_POINTER), bias);
    cr_expect_eq(desc_pointer(plan, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER), aux, "the aux pointer is %p, want %p",
                 desc_pointer(plan, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER), aux);
    if (aux)
        cr_expect_eq(desc_int(plan, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, sizeof(int64_t)), aux_ld,
                     "the aux's leading dimension is %lld, want %lld (in bits: relu_mask_ld(m), a multiple of 128)",
                     (long long)desc_int(plan, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, sizeof(int64_t)),
                     (long long)aux_ld);
}

static float *const BIAS = (float *)0x10000;  // never dereferenced: describing a GEMM reads no buffer
static void *const MASK = (void *)0x20000;

Test(lt_matmul, relu_mask_ld_rounds_up_to_128) {
    cr_expect_eq(relu_mask_ld(1), 128);
    cr_expect_eq(relu_mask_ld(128), 128);
    cr_expect_eq(relu_mask_ld(129), 256);
    cr_expect_eq(relu_mask_ld(1024), 1024);
}

// a hidden layer's forward GEMM, out^T (out, rows) = W^T (out, in) @ in^T (in, rows) + b, then ReLU, the mask out
Test(lt_matmul, forward_bias_relu_aux) {
    int m = 100, n = 256, k = 784;  // out, rows, in: m not a multiple of 128
    MatmulPlan plan;
    describe_matmul(&plan, PRECISION_FP32, 0, 0, m, n, k, CUBLASLT_EPILOGUE_RELU_AUX_BIAS, BIAS, MASK);
    cr_expect_eq(desc_int(&plan, CUBLASLT_MATMUL_DESC_TRANSA, sizeof(int32_t)), CUBLAS_OP_N);
    cr_expect_eq(desc_int(&plan, CUBLASLT_MATMUL_DESC_TRANSB, sizeof(int32_t)), CUBLAS_OP_N);
    cr_expect_eq(desc_int(&plan, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, sizeof(int32_t)), CUBLAS_COMPUTE_32F);
    check_epilogue(&plan, CUBLASLT_EPILOGUE_RELU_AUX_BIAS, BIAS, MASK, relu_mask_ld(m));
    check_layout(plan.a_layout, "A (W^T, stored (m, k))", m, k, m);
    check_layout(plan.b_layout, "B (in^T, stored (k, n))", k, n, k);
    check_layout(plan.c_layout, "C = D (out^T, (m, n))", m, n, m);
    destroy_matmul(&plan);
}

// an input gradient through the ReLU, din^T (in, rows) = op_T(W^T) @ dout^T: A stored (k, m), the mask in, no bias
Test(lt_matmul, input_gradient_drelu) {
    int m = 128, n = 256, k = 10;  // in, rows, out
    MatmulPlan plan;
    describe_matmul(&plan, PRECISION_TF32, 1, 0, m, n, k, CUBLASLT_EPILOGUE_DRELU, NULL, MASK);
    cr_expect_eq(desc_int(&plan, CUBLASLT_MATMUL_DESC_TRANSA, sizeof(int32_t)), CUBLAS_OP_T);
    cr_expect_eq(desc_int(&plan, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, sizeof(int32_t)), CUBLAS_COMPUTE_32F_FAST_TF32);
    check_epilogue(&plan, CUBLASLT_EPILOGUE_DRELU, NULL, MASK, relu_mask_ld(m));
    check_layout(plan.a_layout, "A (W^T, stored (k, m) and transposed)", k, m, k);
    check_layout(plan.b_layout, "B (dout^T, stored (k, n))", k, n, k);
    check_layout(plan.c_layout, "C = D (din^T, (m, n))", m, n, m);
    destroy_matmul(&plan);
}

// the weights' SGD GEMM, W^T (out, in) = -lr dout^T @ op_T(in^T) + W^T: B stored (n, k), no epilogue
Test(lt_matmul, weight_update_default) {
    int m = 10, n = 784, k = 256;  // out, in, rows
    MatmulPlan plan;
    describe_matmul(&plan, PRECISION_FP32, 0, 1, m, n, k, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
    cr_expect_eq(desc_int(&plan, CUBLASLT_MATMUL_DESC_TRANSB, sizeof(int32_t)), CUBLAS_OP_T);
    check_epilogue(&plan, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0);
    check_layout(plan.a_layout, "A (dout^T, stored (m, k))", m, k, m);
    check_layout(plan.b_layout, "B (in^T, stored (n, k) and transposed)", n, k, n);
    check_layout(plan.c_layout, "C = D (W^T, (m, n))", m, n, m);
    destroy_matmul(&plan);
}
