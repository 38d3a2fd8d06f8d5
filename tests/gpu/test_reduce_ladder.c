// tests/gpu/test_reduce_ladder.c: every version of 04-shared-memory/reduce_ladder.cu against sums the
// test computes itself in double precision, on sizes that are no multiple of 4, 32 or 256 (1, 3, 37,
// 1000, 2^16 + 1) and on one large enough for a one-wave grid to loop several times (3,000,001).
//
//     make test        (or: make build/04/test_reduce_ladder && build/04/test_reduce_ladder --verbose)
//
// Every 1021st point and the last three are heavy (y 100 higher: a term of 10^4 in sum r^2), far above
// the tolerance: a version that drops or repeats one of them, a tail, a block or a loop fails. Without a
// GPU every test reports itself skipped.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <cuda_runtime_api.h>

#define GPU_SUITE_NAME "reduce_ladder"
#include "gpu/skip_report.h"

// From 04-shared-memory/reduce_ladder.cu, compiled with -DLADDER_NO_MAIN. index counts from 0;
// reduce_ladder_run returns the number of GPU threads it ran.
int reduce_ladder_version_count(void);
const char *reduce_ladder_version_name(int index);
int64_t reduce_ladder_run(int index, const float *x, const float *y, float w, float b, int64_t n, double sums[3]);

static const int64_t SIZES[] = {1, 3, 37, 1000, (1 << 16) + 1, 3000001};
#define SIZE_COUNT ((int)(sizeof(SIZES) / sizeof(SIZES[0])))
#define W 0.83f  // the trainer's initial parameters
#define B 0.7645f

typedef struct {
    int version;
    int64_t n;
} Case;

static void free_cases(struct criterion_test_params *params) { cr_free(params->params); }

ParameterizedTestParameters(reduce_ladder, matches_cpu) {
    size_t count = (size_t)reduce_ladder_version_count() * SIZE_COUNT;
    Case *cases = cr_malloc(sizeof(Case) * count);
    if (!cases) return cr_make_param_array(Case, NULL, 0, NULL);
    for (size_t i = 0; i < count; i++) {
        cases[i].version = (int)(i / SIZE_COUNT);
        cases[i].n = SIZES[i % SIZE_COUNT];
    }
    return cr_make_param_array(Case, cases, count, free_cases);
}

// x in [-1, 1), y = 0.7 x + 0.3 + noise in [-0.1, 0.1), heavy points 100 higher.
static void fill_points(float *x, float *y, int64_t n) {
    uint64_t state = 11;
    for (int64_t i = 0; i < n; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)(int32_t)(state >> 32) / 2147483648.0f;
        float noise = (float)(int32_t)(state & 0xffffffffu) / 21474836480.0f;
        y[i] = 0.7f * x[i] + 0.3f + noise + (i % 1021 == 0 || i >= n - 3 ? 100.0f : 0.0f);
    }
}

ParameterizedTest(Case *tc, reduce_ladder, matches_cpu) {
    // No check macro here: without a GPU this call fails, and the test must skip, not exit.
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) cr_skip_test("no CUDA device: GPU suite skipped");

    const char *name = reduce_ladder_version_name(tc->version);
    int64_t n = tc->n;
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);  // (n,) each
    cr_assert(x && y, "out of host memory for n = %lld", (long long)n);
    fill_points(x, y, n);
    double got[3] = {NAN, NAN, NAN};
    int64_t threads = reduce_ladder_run(tc->version, x, y, W, B, n, got);

    // The sums in double, and their sizes: a = |w x| + |b| + |y| bounds |r|.
    double expected[3] = {0.0, 0.0, 0.0}, size[3] = {0.0, 0.0, 0.0};
    for (int64_t i = 0; i < n; i++) {
        double r = (double)W * x[i] + B - y[i], a = fabs((double)W * x[i]) + B + fabs((double)y[i]);
        expected[0] += r * r;
        expected[1] += r * x[i];
        expected[2] += r;
        size[0] += a * a;
        size[1] += a * fabs((double)x[i]);
        size[2] += a;
    }
    // fp32 terms (7 roundings of their size), fp32 sums of ceil(n / threads) + 4 points a thread in series
    // and a block tree of depth 8 (plus slack), then at most n double additions.
    double chain = (double)((n + threads - 1) / threads) + 24.0;
    static const char *const sums[3] = {"sum r^2", "sum r x", "sum r"};
    for (int j = 0; j < 3; j++) {
        double tolerance = (chain * ldexp(1.0, -24) + (double)n * ldexp(1.0, -53)) * size[j];
        cr_expect(fabs(got[j] - expected[j]) <= tolerance,
                  "version %s, n = %lld (%lld threads): %s = %.12g, expected %.12g (tolerance %.3g)", name,
                  (long long)n, (long long)threads, sums[j], got[j], expected[j], tolerance);
    }
    free(x);
    free(y);
}
