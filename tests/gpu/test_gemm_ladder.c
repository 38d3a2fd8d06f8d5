// tests/gpu/test_gemm_ladder.c: every version of a GEMM ladder, out = relu(in @ W + bias), against the
// CPU in double precision. The Makefile links it three times, each with a ladder compiled with -DLADDER_NO_MAIN
// (all three export the four functions below): 04-shared-memory/gemm_ladder.cu into build/04/test_gemm_ladder,
// 06-cublas-cudnn/gemm_ladder.cu into build/06/test_gemm_ladder, and, through tests/gpu/test_mma_ladder.c,
// 09-tensor-cores/mma_ladder.cu into build/09/test_mma_ladder.
//
//     make test        (or: make build/04/test_gemm_ladder && build/04/test_gemm_ladder --verbose)
//
// Most shapes are no multiples of the tiles (16, 32, 64), of the K slice (32) or of 4; K = 785 leaves a last
// slice of one element. 33 x 100 x 36 has k and n multiples of 4 but not of the tiles (stage 09's 16-byte
// copies, zero-filled past the edges); 128 x 784 x 10 and 784 x 128 x 128 are the trainer's. out is poisoned
// (NaN) first, so an output no thread writes fails; the bound is ladder_gemm_tolerance's (common/ladder.h),
// which grows with k and with the rounding of tf32 and bf16 inputs. About 5% of the outputs are negative
// before ReLU, so ReLU is exercised without hiding most errors. Without a GPU every test is skipped.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <cuda_runtime_api.h>

#define GPU_SUITE_NAME "gemm_ladder"
#include "gpu/skip_report.h"

#include "ladder.h"

// From the ladder this binary links. index counts from 0; gemm_ladder_run returns why the version
// cannot run on this GPU, or NULL.
int gemm_ladder_version_count(void);
const char *gemm_ladder_version_name(int index);
double gemm_ladder_input_rounding(int index);
const char *gemm_ladder_run(int index, const float *in, const float *weight, const float *bias, float *out, int m,
                            int k, int n);

static const int SHAPES[][3] = {{1, 1, 1},       {2, 3, 5},      {17, 33, 65},    {127, 785, 129},
                                {33, 100, 36},   {128, 784, 10}, {784, 128, 128}, {67, 250, 1030}};
#define SHAPE_COUNT ((int)(sizeof(SHAPES) / sizeof(SHAPES[0])))

typedef struct {
    int version;
    int m, k, n;
} Case;

static void free_cases(struct criterion_test_params *params) { cr_free(params->params); }

ParameterizedTestParameters(gemm_ladder, matches_cpu) {
    size_t count = (size_t)gemm_ladder_version_count() * SHAPE_COUNT;
    Case *cases = cr_malloc(sizeof(Case) * count);
    if (!cases) return cr_make_param_array(Case, NULL, 0, NULL);
    for (size_t i = 0; i < count; i++) {
        const int *shape = SHAPES[i % SHAPE_COUNT];
        cases[i].version = (int)(i / SHAPE_COUNT);
        cases[i].m = shape[0];
        cases[i].k = shape[1];
        cases[i].n = shape[2];
    }
    return cr_make_param_array(Case, cases, count, free_cases);
}

ParameterizedTest(Case *tc, gemm_ladder, matches_cpu) {
    // No check macro here: without a GPU this call fails, and the test must skip, not exit.
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) cr_skip_test("no CUDA device: GPU suite skipped");

    const char *name = gemm_ladder_version_name(tc->version);
    int m = tc->m, k = tc->k, n = tc->n;
    size_t outputs = (size_t)m * n;
    float *in = malloc(sizeof(float) * (size_t)m * k), *weight = malloc(sizeof(float) * (size_t)k * n);
    float *bias = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * outputs);
    double *expected = malloc(sizeof(double) * outputs), *scale = malloc(sizeof(double) * outputs);
    cr_assert(in && weight && bias && out && expected && scale, "out of host memory for %d x %d x %d", m, k, n);
    // in like pixels, W as nn.Linear initializes it; bias mostly above the spread of in @ W
    float bound = 1.0f / sqrtf((float)k);
    ladder_fill_uniform(in, (int64_t)m * k, 0.0f, 1.0f, 21);
    ladder_fill_uniform(weight, (int64_t)k * n, -bound, bound, 22);
    ladder_fill_uniform(bias, n, 0.3f, 0.8f, 23);
    memset(out, 0xff, sizeof(float) * outputs);  // NaN, in case a version forgets to copy anything back

    const char *skipped = gemm_ladder_run(tc->version, in, weight, bias, out, m, k, n);
    if (skipped) cr_skip_test("version %s: %s", name, skipped);

    double rounding = gemm_ladder_input_rounding(tc->version);
    ladder_gemm_reference(in, weight, bias, m, k, n, expected, scale);
    int64_t wrong = ladder_gemm_first_wrong(out, expected, scale, m, k, n, rounding);
    if (wrong >= 0)
        cr_assert_fail("version %s, %d x %d x %d: out[%lld][%lld] = %.9g, expected %.9g (tolerance %.3g)", name, m, k, n,
                       (long long)(wrong / n), (long long)(wrong % n), out[wrong], expected[wrong],
                       ladder_gemm_tolerance(k, rounding) * scale[wrong]);
    free(in);
    free(weight);
    free(bias);
    free(out);
    free(expected);
    free(scale);
}
