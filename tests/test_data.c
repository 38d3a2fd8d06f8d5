// tests/test_data.c: Criterion suite "data" for the shared deterministic inputs (common/data.c):
// the random number generator, the regression set, MNIST initial parameters and batch order.
//
// Built into build/tests/test_cpu by `make test`; run alone with build/tests/test_cpu --filter 'data/*'.
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"

// ----------------------------------------------------------------------------
// random numbers

Test(data, splitmix64_reference_values) {
    // the published splitmix64 outputs for seed 1234567, so the stream is the same on every machine
    Rng rng;
    rng_seed(&rng, 1234567);
    cr_assert_eq(rng_next(&rng), 6457827717110365317ULL);
    cr_assert_eq(rng_next(&rng), 3203168211198807973ULL);
    cr_assert_eq(rng_next(&rng), 9817491932198370423ULL);
}

Test(data, uniform_in_unit_interval) {
    Rng rng;
    rng_seed(&rng, 42);
    const int n = 1000000;
    double sum = 0.0, sum_sq = 0.0, lo = 1.0, hi = 0.0;
    for (int i = 0; i < n; i++) {
        double u = rng_uniform(&rng);
        cr_assert(u >= 0.0 && u < 1.0, "draw %d = %.17g is outside [0, 1)", i, u);
        sum += u;
        sum_sq += u * u;
        if (u < lo) lo = u;
        if (u > hi) hi = u;
    }
    double mean = sum / n, var = sum_sq / n - mean * mean;
    cr_assert_float_eq(mean, 0.5, 2e-3, "mean %f", mean);       // std error 2.9e-4
    cr_assert_float_eq(var, 1.0 / 12.0, 1e-3, "variance %f", var);
    cr_assert_lt(lo, 1e-4);
    cr_assert_gt(hi, 1.0 - 1e-4);
}

Test(data, normal_moments) {
    Rng rng;
    rng_seed(&rng, 7);
    const int n = 1000000;
    double sum = 0.0, sum_sq = 0.0, sum_4 = 0.0;
    int within_one = 0;
    for (int i = 0; i < n; i++) {
        double z = rng_normal(&rng);
        cr_assert(isfinite(z), "draw %d is not finite", i);
        sum += z;
        sum_sq += z * z;
        sum_4 += z * z * z * z;
        within_one += fabs(z) < 1.0;
    }
    double mean = sum / n, var = sum_sq / n - mean * mean;
    cr_assert_float_eq(mean, 0.0, 5e-3, "mean %f", mean);  // std error 1e-3
    cr_assert_float_eq(var, 1.0, 5e-3, "variance %f", var);
    cr_assert_float_eq(sum_4 / n, 3.0, 0.05, "fourth moment %f", sum_4 / n);
    cr_assert_float_eq((double)within_one / n, 0.682689, 3e-3, "P(|z| < 1) = %f", (double)within_one / n);
}

Test(data, normal_follows_documented_recipe) {
    // Box-Muller on two uniforms from the same stream, with 1 - u1 so that log never sees 0
    Rng rng, twin;
    rng_seed(&rng, 2024);
    rng_seed(&twin, 2024);
    for (int i = 0; i < 1000; i++) {
        double u1 = rng_uniform(&twin), u2 = rng_uniform(&twin);
        double expected = sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
        double z = rng_normal(&rng);
        cr_assert_float_eq(z, expected, 1e-12, "draw %d: %.17g, recipe gives %.17g", i, z, expected);
    }
}

// ----------------------------------------------------------------------------
// regression set

static RegressionSet generate(int64_t n, uint64_t seed) {
    RegressionSet set;
    char err[256] = "";
    cr_assert_eq(regression_generate(n, seed, &set, err, sizeof(err)), 0, "%s", err);
    return set;
}

Test(data, regression_deterministic) {
    RegressionSet a = generate(10000, 1), b = generate(10000, 1), c = generate(10000, 2);
    cr_assert_eq(memcmp(a.x, b.x, 10000 * sizeof(float)), 0);
    cr_assert_eq(memcmp(a.y, b.y, 10000 * sizeof(float)), 0);
    cr_assert_eq(memcmp(a.x, c.x, 10000 * sizeof(float)), 0, "x does not depend on the seed");
    int differ = 0;
    for (int i = 0; i < 10000; i++) differ += a.y[i] != c.y[i];
    cr_assert_gt(differ, 9900, "only %d of 10000 y values change with the seed", differ);
    regression_free(&a);
    regression_free(&b);
    regression_free(&c);
    cr_assert_null(a.x);
}

Test(data, regression_follows_documented_recipe) {
    const int64_t n = 2000;
    RegressionSet set = generate(n, 77);
    Rng rng;
    rng_seed(&rng, 77);
    for (int64_t i = 0; i < n; i++) {
        float x = (float)(10.0 * (double)i / (double)n);
        float y = (float)(0.7 * (double)x + 0.3 + 0.1 * rng_normal(&rng));
        cr_assert_eq(set.y[i], y, "y[%lld] = %.9g, recipe gives %.9g", (long long)i, set.y[i], y);
    }
    regression_free(&set);
}

Test(data, regression_x_spacing) {
    const int64_t n = 5000;
    RegressionSet set = generate(n, 3);
    for (int64_t i = 0; i < n; i++) {
        cr_assert_eq(set.x[i], (float)(10.0 * (double)i / (double)n), "x[%lld]", (long long)i);
        if (i > 0) {
            double step = (double)set.x[i] - (double)set.x[i - 1];
            cr_assert_float_eq(step, 10.0 / n, 2e-6, "step %lld = %g", (long long)i, step);  // float rounding near 10
        }
    }
    cr_assert_eq(set.x[0], 0.0f);
    cr_assert_lt(set.x[n - 1], 10.0f);
    regression_free(&set);
}

Test(data, regression_split) {
    const int64_t sizes[][2] = {{10, 8}, {11, 8}, {14, 11}, {1000, 800}, {1001, 800}, {12345, 9876}, {5000000, 4000000}};
    for (size_t c = 0; c < sizeof(sizes) / sizeof(sizes[0]); c++) {
        RegressionSet set = generate(sizes[c][0], 1);
        cr_assert_eq(set.n, sizes[c][0]);
        cr_assert_eq(set.n_train, sizes[c][1], "n = %lld: n_train %lld", (long long)set.n, (long long)set.n_train);
        RegressionData view = regression_data_view(&set);
        cr_assert_eq(view.n_train, sizes[c][1]);
        cr_assert_eq(view.n_test, sizes[c][0] - sizes[c][1]);
        cr_assert_eq(view.x_train, set.x);
        cr_assert_eq(view.y_train, set.y);
        cr_assert_eq(view.x_test, set.x + sizes[c][1]);
        cr_assert_eq(view.y_test, set.y + sizes[c][1]);
        cr_assert_eq(view.w_init, 0.83f);
        cr_assert_eq(view.b_init, 0.7645f);
        regression_free(&set);
    }
}

Test(data, regression_rejects_bad_sizes) {
    const int64_t bad[] = {-5, 0, 9, 2000000001LL};
    for (size_t c = 0; c < sizeof(bad) / sizeof(bad[0]); c++) {
        RegressionSet set;
        char err[256] = "";
        cr_assert_eq(regression_generate(bad[c], 1, &set, err, sizeof(err)), -1, "n = %lld accepted", (long long)bad[c]);
        cr_assert_gt(strlen(err), 0);
        cr_assert_null(strchr(err, '\n'), "%s", err);
        cr_assert_not_null(strstr(err, "range"), "%s", err);
        cr_assert_null(set.x);
    }
}

Test(data, regression_noise_statistics) {
    const int64_t n = 1000000;
    RegressionSet set = generate(n, 1234);
    // residuals from the true line, and an ordinary least-squares fit of y on x
    double sum_r = 0.0, sum_r2 = 0.0, sx = 0.0, sy = 0.0, sxx = 0.0, sxy = 0.0;
    for (int64_t i = 0; i < n; i++) {
        cr_assert(isfinite(set.y[i]), "y[%lld] is not finite", (long long)i);
        double x = set.x[i], y = set.y[i];
        double r = y - 0.7 * x - 0.3;
        sum_r += r;
        sum_r2 += r * r;
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
    }
    double mean = sum_r / n, std = sqrt(sum_r2 / n - mean * mean);
    cr_assert_float_eq(mean, 0.0, 5e-4, "residual mean %f", mean);  // std error 1e-4
    cr_assert_float_eq(std, 0.1, 5e-4, "residual std %f", std);     // std error 7e-5
    double w = (n * sxy - sx * sy) / (n * sxx - sx * sx), b = (sy - w * sx) / n;
    cr_assert_float_eq(w, 0.7, 1e-3, "fitted w %f", w);
    cr_assert_float_eq(b, 0.3, 2e-3, "fitted b %f", b);
    regression_free(&set);
}

// ----------------------------------------------------------------------------
// MNIST initial parameters

static MnistConfig mlp_config(int hidden) {
    MnistConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.sizes[0] = 784;
    if (hidden > 0) {
        cfg.n_layers = 2;
        cfg.sizes[1] = hidden;
        cfg.sizes[2] = 10;
    } else {
        cfg.n_layers = 1;
        cfg.sizes[1] = 10;
    }
    cfg.batch = 128;
    cfg.epochs = 10;
    cfg.lr = 0.1f;
    return cfg;
}

Test(data, init_params_bounds) {
    MnistConfig cfg = mlp_config(128);
    int64_t count = mnist_param_count(&cfg);
    cr_assert_eq(count, 784 * 128 + 128 + 128 * 10 + 10);
    float *params = malloc((size_t)count * sizeof(float));
    cr_assert_not_null(params);
    mnist_init_params(&cfg, 5, params);
    for (int l = 0; l < cfg.n_layers; l++) {
        float bound = (float)(1.0 / sqrt((double)cfg.sizes[l]));
        // W_l and b_l each span the layer's range and average about zero
        int64_t starts[2] = {mnist_weight_offset(&cfg, l), mnist_bias_offset(&cfg, l)};
        int64_t ends[2] = {mnist_bias_offset(&cfg, l), mnist_weight_offset(&cfg, l + 1)};
        for (int part = 0; part < 2; part++) {
            float lo = bound, hi = -bound;
            double sum = 0.0, sum_sq = 0.0;
            int64_t len = ends[part] - starts[part];
            for (int64_t i = starts[part]; i < ends[part]; i++) {
                float v = params[i];
                cr_assert(isfinite(v) && v >= -bound && v <= bound, "layer %d param %lld = %g outside +-%g", l,
                          (long long)i, v, bound);
                if (v < lo) lo = v;
                if (v > hi) hi = v;
                sum += v;
                sum_sq += (double)v * v;
            }
            double spread = len >= 1000 ? 0.99 : 0.6;  // the 10 output biases cover less of the range
            cr_assert_lt(lo, -spread * bound, "layer %d part %d min %g", l, part, lo);
            cr_assert_gt(hi, spread * bound, "layer %d part %d max %g", l, part, hi);
            if (len >= 1000) {
                // five standard errors: uniform(-k, k) has variance k^2 / 3, its square's is 4 k^4 / 45
                double mean = sum / len, var = sum_sq / len - mean * mean;
                double mean_tol = 5.0 * bound / sqrt(3.0 * len), var_tol = 5.0 * bound * bound * sqrt(4.0 / 45.0 / len);
                cr_assert_float_eq(mean, 0.0, mean_tol, "layer %d mean %g", l, mean);
                cr_assert_float_eq(var, bound * bound / 3.0, var_tol, "layer %d variance %g", l, var);
            }
        }
    }
    free(params);
}

Test(data, init_params_deterministic) {
    MnistConfig cfg = mlp_config(64);
    size_t count = (size_t)mnist_param_count(&cfg);
    float *a = malloc(count * sizeof(float)), *b = malloc(count * sizeof(float)), *c = malloc(count * sizeof(float));
    cr_assert(a && b && c);
    mnist_init_params(&cfg, 11, a);
    mnist_init_params(&cfg, 11, b);
    mnist_init_params(&cfg, 12, c);
    cr_assert_eq(memcmp(a, b, count * sizeof(float)), 0);
    size_t differ = 0;
    for (size_t i = 0; i < count; i++) differ += a[i] != c[i];
    cr_assert_gt(differ, count * 99 / 100, "only %zu of %zu params change with the seed", differ, count);
    free(a);
    free(b);
    free(c);

    // softmax regression (--hidden 0): one layer, 784 * 10 + 10 values, all within 1/28
    MnistConfig soft = mlp_config(0);
    cr_assert_eq(mnist_param_count(&soft), 7850);
    float params[7850];
    mnist_init_params(&soft, 11, params);
    for (int i = 0; i < 7850; i++) cr_assert(fabsf(params[i]) <= 1.0f / 28.0f, "param %d = %g", i, params[i]);
}

Test(data, init_params_follow_documented_recipe) {
    // one stream through all layers in packing order: value = k (2 u - 1), k = 1 / sqrt(fan_in)
    MnistConfig cfg = mlp_config(32);
    size_t count = (size_t)mnist_param_count(&cfg);
    float *params = malloc(count * sizeof(float));
    cr_assert_not_null(params);
    mnist_init_params(&cfg, 3, params);
    Rng rng;
    rng_seed(&rng, 3);
    size_t i = 0;
    for (int l = 0; l < cfg.n_layers; l++) {
        double k = 1.0 / sqrt((double)cfg.sizes[l]);
        for (; i < (size_t)mnist_weight_offset(&cfg, l + 1); i++) {
            float expected = (float)(k * (2.0 * rng_uniform(&rng) - 1.0));
            cr_assert_eq(params[i], expected, "param %zu = %.9g, recipe gives %.9g", i, params[i], expected);
        }
    }
    cr_assert_eq(i, count);
    free(params);
}

// ----------------------------------------------------------------------------
// batch order

static void assert_permutation(const int32_t *perm, int n, int epoch) {
    char *seen = calloc((size_t)n, 1);
    cr_assert_not_null(seen);
    for (int i = 0; i < n; i++) {
        cr_assert(perm[i] >= 0 && perm[i] < n, "epoch %d: order[%d] = %d out of range", epoch, i, perm[i]);
        cr_assert_eq(seen[perm[i]], 0, "epoch %d: %d appears twice", epoch, perm[i]);
        seen[perm[i]] = 1;
    }
    free(seen);
}

Test(data, batch_order_permutations) {
    const int n = 60000, epochs = 3;
    int32_t *order = malloc((size_t)n * epochs * sizeof(int32_t));
    cr_assert_not_null(order);
    mnist_batch_order(n, epochs, 99, order);
    for (int e = 0; e < epochs; e++) {
        const int32_t *perm = order + (size_t)e * n;
        assert_permutation(perm, n, e);
        int fixed = 0;
        for (int i = 0; i < n; i++) fixed += perm[i] == i;
        cr_assert_lt(fixed, 20, "epoch %d keeps %d indices in place: not shuffled", e, fixed);  // expected about 1
    }
    for (int e = 1; e < epochs; e++) {
        int same = 0;
        for (int i = 0; i < n; i++) same += order[i] == order[(size_t)e * n + i];
        cr_assert_lt(same, 20, "epochs 0 and %d agree at %d positions", e, same);
    }
    free(order);
}

Test(data, batch_order_follows_documented_recipe) {
    // epoch e: Rng seeded with seed ^ (0x9E3779B97F4A7C15 * (e + 1)), Fisher-Yates with j = next % (i + 1)
    const int n = 50, epochs = 2;
    const uint64_t seed = 31;
    int32_t order[2 * 50];
    mnist_batch_order(n, epochs, seed, order);
    for (int e = 0; e < epochs; e++) {
        Rng rng;
        rng_seed(&rng, seed ^ (0x9E3779B97F4A7C15ULL * (uint64_t)(e + 1)));
        int32_t perm[50];
        for (int i = 0; i < n; i++) perm[i] = i;
        for (int i = n - 1; i > 0; i--) {
            int j = (int)(rng_next(&rng) % (uint64_t)(i + 1));
            int32_t tmp = perm[i];
            perm[i] = perm[j];
            perm[j] = tmp;
        }
        cr_assert_eq(memcmp(order + e * n, perm, sizeof(perm)), 0, "epoch %d differs from the recipe", e);
    }
}

Test(data, batch_order_deterministic) {
    const int n = 1000;
    int32_t a[3 * 1000], b[3 * 1000], c[3 * 1000], longer[5 * 1000];
    mnist_batch_order(n, 3, 7, a);
    mnist_batch_order(n, 3, 7, b);
    mnist_batch_order(n, 3, 8, c);
    mnist_batch_order(n, 5, 7, longer);
    cr_assert_eq(memcmp(a, b, sizeof(a)), 0);
    cr_assert_neq(memcmp(a, c, sizeof(a)), 0, "the seed does not change the order");
    cr_assert_eq(memcmp(a, longer, sizeof(a)), 0, "an epoch's order depends on the number of epochs");
    for (int e = 0; e < 5; e++) assert_permutation(longer + e * n, n, e);
}
