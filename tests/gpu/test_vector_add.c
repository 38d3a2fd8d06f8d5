// tests/gpu/test_vector_add.c: every version of 01-vector-add/vector_add.cu against a CPU add,
// bit-exactly, on sizes that leave a tail for float4 and for the chunks (1, 31, 2^20 + 3) and on
// one that does not (2^22). The output is poisoned with NaN first, so an element no one wrote fails.
//
//     make stage 1 test            # = build/01/test_vector_add
//
// Without a GPU every test reports itself skipped.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/parameterized.h>
#include <cuda_runtime_api.h>

// From 01-vector-add/vector_add.cu, compiled with -DVECTOR_ADD_NO_MAIN. index counts from 0;
// vector_add_run returns why the version cannot run on this machine, or NULL.
int vector_add_version_count(void);
const char *vector_add_version_name(int index);
const char *vector_add_run(int index, float *a, float *b, float *c, int64_t n, int repeats);

static const int64_t SIZES[] = {1, 31, (1 << 20) + 3, 1 << 22};
#define SIZE_COUNT ((int)(sizeof(SIZES) / sizeof(SIZES[0])))

typedef struct {
    int version;
    int64_t n;
} Case;

static void free_cases(struct criterion_test_params *params) { cr_free(params->params); }

ParameterizedTestParameters(vector_add, matches_cpu) {
    size_t count = (size_t)vector_add_version_count() * SIZE_COUNT;
    Case *cases = cr_malloc(sizeof(Case) * count);
    if (!cases) return cr_make_param_array(Case, NULL, 0, NULL);
    for (size_t i = 0; i < count; i++) {
        cases[i].version = (int)(i / SIZE_COUNT);
        cases[i].n = SIZES[i % SIZE_COUNT];
    }
    return cr_make_param_array(Case, cases, count, free_cases);
}

// Criterion's default output does not show skips: one line at the end says how many, and why.
static char skip_reason[256];

ReportHook(POST_TEST)(struct criterion_test_stats *stats) {
    if (stats->test_status == CR_STATUS_SKIPPED && stats->message)
        snprintf(skip_reason, sizeof(skip_reason), "%s", stats->message);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats) {
    if (stats->tests_skipped > 0)
        fprintf(stderr, "vector_add suite: %zu of %zu tests SKIPPED (%s): nothing was checked by them\n",
                stats->tests_skipped, stats->nb_tests, skip_reason);
}

// Mixed signs and magnitudes, so that most sums round: a in [-1, 1), b in [-1024, 1024).
static void fill_inputs(float *a, float *b, int64_t n) {
    uint64_t state = 7;
    for (int64_t i = 0; i < n; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = (float)(int32_t)(state >> 32) / 2147483648.0f;
        b[i] = (float)(int32_t)(state & 0xffffffffu) / 2097152.0f;
    }
}

ParameterizedTest(Case *tc, vector_add, matches_cpu) {
    // No check macro here: without a GPU this call fails, and the test must skip, not exit.
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) cr_skip_test("no CUDA device: GPU suite skipped");

    const char *name = vector_add_version_name(tc->version);
    int64_t n = tc->n;
    size_t bytes = sizeof(float) * (size_t)n;
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes), *expected = malloc(bytes);  // [n] each
    cr_assert(a && b && c && expected, "out of host memory for n = %lld", (long long)n);
    fill_inputs(a, b, n);
    memset(c, 0xff, bytes);  // NaN

    const char *skipped = vector_add_run(tc->version, a, b, c, n, 1);
    if (skipped) cr_skip_test("version %s: %s", name, skipped);

    // After the run: the curand version replaces a and b with the values it generated and added.
    for (int64_t i = 0; i < n; i++) expected[i] = a[i] + b[i];
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&c[i], &expected[i], sizeof(float)) != 0)
            cr_assert_fail("version %s, n = %lld: c[%lld] = %.9g, but a + b = %.9g + %.9g = %.9g", name, (long long)n,
                           (long long)i, c[i], a[i], b[i], expected[i]);
    free(a);
    free(b);
    free(c);
    free(expected);
}
