// common/data.c: the deterministic inputs every stage, the CPU reference and PyTorch share.
//
// The recipes, exactly (the PyTorch baselines receive the bytes these produce, so the recipe matters
// for reproducing a run elsewhere, not for agreement between the C and Python sides):
//
//   Rng            splitmix64: state += 0x9E3779B97F4A7C15, then the usual xor-shift-multiply mix.
//   rng_uniform    (next >> 11) * 2^-53, a double in [0, 1) with 53 random bits.
//   rng_normal     Box-Muller, one draw per call: u1 = 1 - uniform (in (0, 1], so log never sees 0),
//                  u2 = uniform, sqrt(-2 ln u1) * cos(2 pi u2).
//   regression     one Rng seeded with seed; for i = 0..n-1 in order: x_i = (float)(10.0 * i / n),
//                  y_i = (float)(0.7 * x_i + 0.3 + 0.1 * rng_normal) in double from the float x_i.
//                  n_train = (int64_t)(0.8 * n): the first n_train points train, the rest test.
//   MNIST init     one Rng seeded with seed; for each layer l in packing order, W_l then b_l, every
//                  value (float)(k * (2 u - 1)) with k = 1 / sqrt(sizes[l]) (nn.Linear's range).
//   batch order    epoch e gets its own Rng seeded with seed ^ (0x9E3779B97F4A7C15 * (e + 1)) and a
//                  Fisher-Yates shuffle of 0..n_train-1: for i = n_train-1 down to 1, swap i with
//                  j = rng_next % (i + 1). An epoch's order does not depend on how many epochs run.
//
// Built into build/common/libcommon.a by the top Makefile (link with -lm); tested by tests/test_data.c.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"

#define REGRESSION_MIN_POINTS 10
#define REGRESSION_MAX_POINTS 2000000000LL
#define GOLDEN_GAMMA 0x9E3779B97F4A7C15ULL
#define TWO_PI 6.283185307179586476925286766559

// ----------------------------------------------------------------------------
// random numbers

void rng_seed(Rng *rng, uint64_t seed) { rng->state = seed; }

uint64_t rng_next(Rng *rng) {
    rng->state += GOLDEN_GAMMA;
    uint64_t z = rng->state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

double rng_uniform(Rng *rng) { return (double)(rng_next(rng) >> 11) * 0x1.0p-53; }

double rng_normal(Rng *rng) {
    double u1 = 1.0 - rng_uniform(rng);
    double u2 = rng_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(TWO_PI * u2);
}

// ----------------------------------------------------------------------------
// regression

int regression_generate(int64_t n, uint64_t seed, RegressionSet *out, char *err, size_t err_len) {
    memset(out, 0, sizeof(*out));
    if (n < REGRESSION_MIN_POINTS || n > REGRESSION_MAX_POINTS) {
        snprintf(err, err_len, "%lld regression points is out of range: --points takes %d..%lld", (long long)n,
                 REGRESSION_MIN_POINTS, REGRESSION_MAX_POINTS);
        return -1;
    }
    float *x = malloc((size_t)n * sizeof(float));  // (n,)
    float *y = malloc((size_t)n * sizeof(float));  // (n,)
    if (!x || !y) {
        free(x);
        free(y);
        snprintf(err, err_len, "out of host memory for %lld points (%.1f GB): try a smaller --points", (long long)n,
                 2.0 * (double)n * sizeof(float) / 1e9);
        return -1;
    }
    Rng rng;
    rng_seed(&rng, seed);
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)(10.0 * (double)i / (double)n);
        double noise = REGRESSION_NOISE * rng_normal(&rng);
        y[i] = (float)(REGRESSION_TRUE_W * (double)x[i] + REGRESSION_TRUE_B + noise);
    }
    out->x = x;
    out->y = y;
    out->n = n;
    out->n_train = (int64_t)(REGRESSION_TRAIN_FRACTION * (double)n);
    return 0;
}

void regression_free(RegressionSet *set) {
    free(set->x);
    free(set->y);
    memset(set, 0, sizeof(*set));
}

RegressionData regression_data_view(const RegressionSet *set) {
    return (RegressionData){.x_train = set->x, .y_train = set->y, .x_test = set->x + set->n_train,
                            .y_test = set->y + set->n_train, .n_train = set->n_train, .n_test = set->n - set->n_train,
                            .w_init = REGRESSION_W_INIT, .b_init = REGRESSION_B_INIT};
}

// ----------------------------------------------------------------------------
// MNIST

void mnist_init_params(const MnistConfig *cfg, uint64_t seed, float *params) {
    Rng rng;
    rng_seed(&rng, seed);
    float *p = params;
    for (int l = 0; l < cfg->n_layers; l++) {
        double bound = 1.0 / sqrt((double)cfg->sizes[l]);
        // W_l (sizes[l], sizes[l+1]) then b_l (sizes[l+1]): one contiguous run in packing order
        int64_t count = (int64_t)cfg->sizes[l] * cfg->sizes[l + 1] + cfg->sizes[l + 1];
        for (int64_t i = 0; i < count; i++) *p++ = (float)(bound * (2.0 * rng_uniform(&rng) - 1.0));
    }
}

void mnist_batch_order(int n_train, int epochs, uint64_t seed, int32_t *order) {
    for (int e = 0; e < epochs; e++) {
        Rng rng;
        rng_seed(&rng, seed ^ (GOLDEN_GAMMA * (uint64_t)(e + 1)));
        int32_t *perm = order + (size_t)e * (size_t)n_train;  // (n_train,)
        for (int i = 0; i < n_train; i++) perm[i] = i;
        for (int i = n_train - 1; i > 0; i--) {
            int j = (int)(rng_next(&rng) % (uint64_t)(i + 1));
            int32_t tmp = perm[i];
            perm[i] = perm[j];
            perm[j] = tmp;
        }
    }
}
