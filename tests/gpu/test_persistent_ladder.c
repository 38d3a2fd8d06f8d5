// tests/gpu/test_persistent_ladder.c: every version of 08-persistent-kernels/persistent_ladder.cu against
// common/reference.c's MNIST trainer (double precision) on the same synthetic steps, at hidden 0 and at a
// hidden width that is no power of 2 (100), with batches that are no multiple of a warp or of the 32 warps
// of a block (100, 37) and runs that cross an epoch boundary (a new permutation).
//
//     make test        (or: make build/08/test_persistent_ladder && build/08/test_persistent_ladder --verbose)
//
// A version this GPU cannot run (clusters below compute capability 9.0) is reported skipped with the
// reason, not passed. With CUDA_STAGES_CC=8.0, versions 3 and 4 must skip and 0-2 still match. Without a
// GPU every test reports itself skipped.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <cuda_runtime_api.h>

#define GPU_SUITE_NAME "persistent_ladder"
#include "gpu/skip_report.h"

// From 08-persistent-kernels/persistent_ladder.cu, compiled with -DLADDER_NO_MAIN. index counts from 0
// (0: kernel-graph, the baseline); parameters packed as common/trainer.h.
int persistent_ladder_version_count(void);
const char *persistent_ladder_version_name(int index);
void persistent_ladder_problem(int hidden, int batch, int steps, int n_rows, uint64_t seed, float *images,
                               uint8_t *labels, int32_t *rows, float *init_params);
void persistent_ladder_reference(int hidden, int batch, int steps, const float *images, const uint8_t *labels,
                                 const int32_t *rows, const float *init_params, float *params, float *losses);
const char *persistent_ladder_run(int index, int hidden, int batch, int steps, const float *images,
                                  const uint8_t *labels, int n_rows, const int32_t *rows, const float *init_params,
                                  float *params, float *losses);
int persistent_ladder_check(int hidden, int steps, const float *expected_params, const float *expected_losses,
                            const float *params, const float *losses, char *why, size_t why_len);

#define PIXELS 784
#define CLASSES 10

typedef struct {
    int hidden, batch, steps, n_rows;  // n_rows / batch steps an epoch: `steps` crosses into a second
} Shape;

static const Shape SHAPES[] = {{0, 100, 12, 1000}, {100, 37, 9, 300}};
#define SHAPE_COUNT ((int)(sizeof(SHAPES) / sizeof(SHAPES[0])))

typedef struct {
    int version;
    Shape shape;
} Case;

static void free_cases(struct criterion_test_params *params) { cr_free(params->params); }

static void require_gpu(void) {
    // No check macro here: without a GPU this call fails, and the test must skip, not exit.
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) cr_skip_test("no CUDA device: GPU suite skipped");
}

static int64_t param_count(int hidden) {
    return hidden ? (int64_t)PIXELS * hidden + hidden + (int64_t)hidden * CLASSES + CLASSES
                  : (int64_t)PIXELS * CLASSES + CLASSES;
}

// Version `version` on shape s against the reference: 1 checked, 0 skipped (why in skipped, when given).
static int check_version(int version, const Shape *s, char *skipped, size_t skipped_len) {
    int64_t count = param_count(s->hidden);
    float *images = malloc(sizeof(float) * (size_t)s->n_rows * PIXELS);
    uint8_t *labels = malloc((size_t)s->n_rows);
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)s->steps * s->batch);
    float *init = malloc(sizeof(float) * (size_t)count), *params = malloc(sizeof(float) * (size_t)count);
    float *expected = malloc(sizeof(float) * (size_t)count);
    float *losses = malloc(sizeof(float) * (size_t)s->steps), *expected_losses = malloc(sizeof(float) * s->steps);
    cr_assert(images && labels && rows && init && params && expected && losses && expected_losses, "out of memory");
    persistent_ladder_problem(s->hidden, s->batch, s->steps, s->n_rows, 5, images, labels, rows, init);
    const char *why = persistent_ladder_run(version, s->hidden, s->batch, s->steps, images, labels, s->n_rows, rows,
                                            init, params, losses);
    if (!why) {
        persistent_ladder_reference(s->hidden, s->batch, s->steps, images, labels, rows, init, expected,
                                    expected_losses);
        char wrong[256] = "";
        cr_expect(persistent_ladder_check(s->hidden, s->steps, expected, expected_losses, params, losses, wrong,
                                          sizeof(wrong)),
                  "version %d %s, hidden %d, batch %d, %d steps: %s", version, persistent_ladder_version_name(version),
                  s->hidden, s->batch, s->steps, wrong);
    } else if (skipped) {
        snprintf(skipped, skipped_len, "%s", why);
    }
    void *owned[] = {images, labels, rows, init, params, expected, losses, expected_losses};
    for (size_t i = 0; i < sizeof(owned) / sizeof(owned[0]); i++) free(owned[i]);
    return why == NULL;
}

ParameterizedTestParameters(persistent_ladder, matches_cpu) {
    size_t count = (size_t)persistent_ladder_version_count() * SHAPE_COUNT;
    Case *cases = cr_malloc(sizeof(Case) * count);
    if (!cases) return cr_make_param_array(Case, NULL, 0, NULL);
    for (size_t i = 0; i < count; i++) {
        cases[i].version = (int)(i / SHAPE_COUNT);
        cases[i].shape = SHAPES[i % SHAPE_COUNT];
    }
    return cr_make_param_array(Case, cases, count, free_cases);
}

ParameterizedTest(Case *tc, persistent_ladder, matches_cpu) {
    require_gpu();
    char why[256];
    if (!check_version(tc->version, &tc->shape, why, sizeof(why)))
        cr_skip_test("version %d %s not checked at hidden %d: %s", tc->version,
                     persistent_ladder_version_name(tc->version), tc->shape.hidden, why);
}

// An H100 rehearsing an A100: the cluster versions skip with the override named, the others still match.
Test(persistent_ladder, cc_override_skips_clusters) {
    require_gpu();
    int major = 0;
    cr_assert_eq(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
    if (major < 8) cr_skip_test("CUDA_STAGES_CC=8.0 cannot lower this GPU's own capability (%d.x)", major);
    setenv("CUDA_STAGES_CC", "8.0", 1);  // this test's own process (Criterion forks one per test)
    for (int v = 0; v < persistent_ladder_version_count(); v++) {
        char why[256] = "";
        int ran = check_version(v, &SHAPES[1], why, sizeof(why));
        if (v <= 2) cr_expect(ran, "version %d skipped under CUDA_STAGES_CC=8.0: %s", v, why);
        else cr_expect(!ran && strstr(why, "CUDA_STAGES_CC"), "version %d under CUDA_STAGES_CC=8.0: ran %d, why '%s'",
                       v, ran, why);
    }
}
