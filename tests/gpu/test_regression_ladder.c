// tests/gpu/test_regression_ladder.c: every version of 08-persistent-kernels/regression_ladder.cu against
// common/reference.c's regression trainer (double precision) on the ladder's own data: at 37 points (one block,
// nothing whole on chip), 1,000,003 (no multiple of 4 or of a block's 512 threads; the last block short) and
// 6,000,000 (more than fits on chip on a 132-SM GPU: every block also reads points from global memory each
// epoch), with epoch counts that leave epochs over after the graph launches; and on 1,000,003 points whose only
// signal is in the last three, so that a version that drops a leftover point fails at once.
//
//     make test        (or: make build/08/test_regression_ladder && build/08/test_regression_ladder --verbose)
//
// A version this GPU cannot run (no cooperative launches) is reported skipped with the reason, not passed.
// Without a GPU every test reports itself skipped.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <cuda_runtime_api.h>

#include "data.h"

#define GPU_SUITE_NAME "regression_ladder"
#include "gpu/skip_report.h"

// From 08-persistent-kernels/regression_ladder.cu, compiled with -DLADDER_NO_MAIN. index counts from 0 (0: graphs,
// the baseline); losses: the train MSE of the logged epochs, regression_ladder_logged(epochs) of them.
int regression_ladder_version_count(void);
const char *regression_ladder_version_name(int index);
int regression_ladder_logged(int epochs);
int regression_ladder_generate(int64_t n, RegressionSet *set, char *err, size_t err_len);
void regression_ladder_reference(const float *x, const float *y, int64_t n, int epochs, float params[2],
                                 float *losses);
const char *regression_ladder_run(int index, const float *x, const float *y, int64_t n, int epochs, float params[2],
                                  float *losses);
int regression_ladder_check(int epochs, const float expected_params[2], const float *expected_losses,
                            const float params[2], const float *losses, char *why, size_t why_len);

typedef struct {
    int64_t n;
    int epochs;  // 25: graphs runs 2 graph launches of 10 epochs, then 5 epochs eagerly; 20: graph launches alone
    int tail;    // 1: x = y = 0 but for the last three points
} Shape;

static const Shape SHAPES[] = {{37, 25, 0}, {1000003, 25, 0}, {6000000, 20, 0}, {1000003, 25, 1}};
#define SHAPE_COUNT ((int)(sizeof(SHAPES) / sizeof(SHAPES[0])))

typedef struct {
    int version;
    Shape shape;
} Case;

static void free_cases(struct criterion_test_params *params) { cr_free(params->params); }

ParameterizedTestParameters(regression_ladder, matches_cpu) {
    size_t count = (size_t)regression_ladder_version_count() * SHAPE_COUNT;
    Case *cases = cr_malloc(sizeof(Case) * count);
    if (!cases) return cr_make_param_array(Case, NULL, 0, NULL);
    for (size_t i = 0; i < count; i++) {
        cases[i].version = (int)(i / SHAPE_COUNT);
        cases[i].shape = SHAPES[i % SHAPE_COUNT];
    }
    return cr_make_param_array(Case, cases, count, free_cases);
}

// Points whose every x and y is 0 but for the last three (y = 2 x + 0.5 there): only they move w.
static void tail_points(float *x, float *y, int64_t n) {
    static const float tail_x[3] = {1000.0f, -1000.0f, 500.0f};
    for (int64_t i = 0; i < n; i++) x[i] = y[i] = 0.0f;
    for (int t = 0; t < 3; t++) {
        x[n - 3 + t] = tail_x[t];
        y[n - 3 + t] = 2.0f * tail_x[t] + 0.5f;
    }
}

ParameterizedTest(Case *tc, regression_ladder, matches_cpu) {
    // No check macro here: without a GPU this call fails, and the test must skip, not exit.
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) cr_skip_test("no CUDA device: GPU suite skipped");

    const Shape *s = &tc->shape;
    const char *name = regression_ladder_version_name(tc->version);
    RegressionSet set;
    char err[256];
    cr_assert_eq(regression_ladder_generate(s->n, &set, err, sizeof(err)), 0, "%s", err);
    if (s->tail) tail_points(set.x, set.y, s->n);
    int logged = regression_ladder_logged(s->epochs);
    float *losses = malloc(sizeof(float) * (size_t)logged), *expected_losses = malloc(sizeof(float) * (size_t)logged);
    cr_assert(losses && expected_losses, "out of host memory");
    float params[2] = {NAN, NAN}, expected[2];
    for (int k = 0; k < logged; k++) losses[k] = NAN;  // anything the version does not write fails
    const char *why = regression_ladder_run(tc->version, set.x, set.y, s->n, s->epochs, params, losses);
    if (why) {
        regression_free(&set);
        free(losses);
        free(expected_losses);
        cr_skip_test("version %d %s not checked: %s", tc->version, name, why);
    }
    regression_ladder_reference(set.x, set.y, s->n, s->epochs, expected, expected_losses);
    if (s->tail)
        cr_expect(fabsf(expected[0] - REGRESSION_W_INIT) > 0.1f, "the tail must move w (the CPU's w %g)", expected[0]);
    char wrong[256] = "";
    cr_expect(regression_ladder_check(s->epochs, expected, expected_losses, params, losses, wrong, sizeof(wrong)),
              "version %d %s, %lld points%s, %d epochs: %s", tc->version, name, (long long)s->n,
              s->tail ? " (signal in the last three)" : "", s->epochs, wrong);
    regression_free(&set);
    free(losses);
    free(expected_losses);
}
