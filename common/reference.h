// common/reference.h: CPU trainers in double precision, the yardstick for every stage.
// Same data, initial parameters, batch order and loss definitions as the GPU trainers; the float
// inputs are widened to double and the results narrowed back to float at the end.
#ifndef REFERENCE_H
#define REFERENCE_H

#include <stdio.h>
#include "trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

// Fills everything a GPU trainer fills; timings come from the host clock (e2e = loop, no h2d). Both
// trainers stop at the first loss that has diverged (divergence.h: NaN, Inf, or past 1e6 times the first
// loss; for regression, checked at the logged epochs), leaving what follows as the caller poisoned it.
void reference_train_regression(const RegressionConfig *cfg, const RegressionData *data, RegressionResult *out);

// cfg->precision tf32 or bf16 rounds the GEMMs' inputs as the GPU's GEMMs read them (reference.c, "GEMM
// precision"); the accumulation stays double. max_steps < 0 trains every epoch; otherwise training stops after max_steps steps in total: step_loss
// is filled up to there, and test_loss/test_acc only for the epochs that completed.
void reference_train_mnist(const MnistConfig *cfg, const MnistData *data, MnistResult *out, int max_steps);

// Progress of long runs: with out set, a line "progress: CPU reference TRAINER, epoch E of N (P% done),
// T elapsed, about T left" every every_seconds (the first after every_seconds too, so that a short run
// prints nothing). out NULL (the default) prints nothing; the drivers set stderr unless --quiet.
void reference_set_progress(FILE *out, double every_seconds);

// The building block, exposed for tests: mean cross-entropy of the MLP with params (packed as in
// trainer.h) over n images; if grad is not NULL, its gradient with respect to params (same packing).
double reference_mnist_loss(const MnistConfig *cfg, const double *params, const float *images,
                            const uint8_t *labels, int n, double *grad);

#ifdef __cplusplus
}
#endif

#endif
