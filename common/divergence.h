// common/divergence.h: when a training run has diverged (exit 5, EXIT_DIVERGED in exit_codes.h).
//
// A loss has diverged when it is NaN or infinite, or when it has grown past LOSS_GROWTH_LIMIT times the
// first loss of its series (a first loss below 1 counts as 1, so the ceiling is never below 1e6): no
// run that learns comes near that, and a run that does not would otherwise end with exit 0 and a
// result row of 1e22. The drivers (common/*_main.c) apply it to every stage's losses, GPU and
// --reference alike; the CPU reference also stops at the first diverged loss instead of running on.
#ifndef DIVERGENCE_H
#define DIVERGENCE_H

#include <math.h>
#include <stdio.h>

#define LOSS_GROWTH_LIMIT 1e6
#define LOSS_GROWTH_LIMIT_TEXT "1e6"

// 1 when loss has diverged against the first loss of its series.
static inline int loss_diverged(double loss, double first) {
    return !isfinite(loss) || loss > LOSS_GROWTH_LIMIT * (first > 1.0 ? first : 1.0);
}

// loss_diverged, with *what set to what the loss became, for "loss became WHAT at epoch N": "NaN", "Inf",
// or the value and the bound (written into text).
static inline int loss_diverged_as(double loss, double first, const char **what, char *text, size_t len) {
    if (!loss_diverged(loss, first)) return 0;
    snprintf(text, len, "%.3g (over " LOSS_GROWTH_LIMIT_TEXT " times its first value, %.4g)", loss, first);
    *what = isnan(loss) ? "NaN" : isinf(loss) ? "Inf" : text;
    return 1;
}

#endif
