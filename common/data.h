// common/data.h: everything deterministic that every stage, the reference and PyTorch share:
// the synthetic regression set, MNIST initial parameters and the per-epoch batch order.
#ifndef DATA_H
#define DATA_H

#include <stdint.h>
#include "trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

// ----------------------------------------------------------------------------
// splitmix64: the same numbers on every machine (data.c gives every recipe of this file exactly)

typedef struct {
    uint64_t state;
} Rng;

void rng_seed(Rng *rng, uint64_t seed);
uint64_t rng_next(Rng *rng);
double rng_uniform(Rng *rng);  // [0, 1)
double rng_normal(Rng *rng);   // standard normal (Box-Muller)

// ----------------------------------------------------------------------------
// regression: y = 0.7 x + 0.3 + noise on evenly spaced x; the first 80% of the points train, the rest test

#define REGRESSION_TRUE_W 0.7
#define REGRESSION_TRUE_B 0.3
#define REGRESSION_NOISE 0.1
#define REGRESSION_W_INIT 0.83f
#define REGRESSION_B_INIT 0.7645f
#define REGRESSION_TRAIN_FRACTION 0.8

typedef struct {
    float *x, *y;     // (n,): train is [0, n_train), test is [n_train, n)
    int64_t n, n_train;
} RegressionSet;

// Returns -1 (with a message in err) when n < 10 or memory runs out.
int regression_generate(int64_t n, uint64_t seed, RegressionSet *out, char *err, size_t err_len);
void regression_free(RegressionSet *set);
// The trainer's view of a set: train/test pointers, sizes and initial parameters.
RegressionData regression_data_view(const RegressionSet *set);

// ----------------------------------------------------------------------------
// MNIST MLP: initial parameters (as PyTorch's nn.Linear) and the batch order (a permutation an epoch)

void mnist_init_params(const MnistConfig *cfg, uint64_t seed, float *params);
void mnist_batch_order(int n_train, int epochs, uint64_t seed, int32_t *order);  // order: (epochs, n_train)

#ifdef __cplusplus
}
#endif

#endif
