// tests/test_reference.c: Criterion suite "reference": the CPU reference trainers (common/reference.c)
// checked against computations that share no code with them: gradient descent iterated on the 2x2
// moment matrix in long double, a naive MLP forward pass with central finite differences, and SGD
// steps replayed by hand.
//
//     make test          (part of build/tests/test_cpu), or alone:
//     gcc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -Icommon -I/usr/local/cuda/include tests/test_reference.c
//         common/reference.c common/data.c -lcriterion -lm -o /tmp/tref && /tmp/tref
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "reference.h"

// Narrowing a double to float moves it by at most half an ulp: 2^-24 of its magnitude.
#define FLOAT_ROUNDING 0x1.0p-24

// got (a float the reference narrowed) agrees with want to within float rounding plus rel.
static int float_matches(float got, long double want, double rel) {
    if (!isfinite(got)) return 0;
    return fabsl((long double)got - want) <= (FLOAT_ROUNDING + rel) * fabsl(want);
}

static void poison(float *values, int64_t n) {
    for (int64_t i = 0; i < n; i++) values[i] = NAN;
}

static void poison_timing(TrainTiming *timing, double *epoch_ms, int epochs) {
    for (int e = 0; e < epochs; e++) epoch_ms[e] = NAN;
    timing->epoch_ms = epoch_ms;
    timing->e2e_ms = timing->loop_ms = timing->h2d_ms = timing->setup_ms = NAN;
    for (int p = 0; p < PHASE_COUNT; p++) timing->phase_ms[p] = NAN;
}

// A host-clock timing: every figure written, e2e = loop, no upload, no phases.
static void assert_host_timing(const TrainTiming *timing, int epochs_timed) {
    cr_assert(isfinite(timing->e2e_ms) && timing->e2e_ms >= 0.0, "e2e_ms = %g", timing->e2e_ms);
    cr_assert_eq(timing->loop_ms, timing->e2e_ms);
    cr_assert_eq(timing->h2d_ms, 0.0);
    cr_assert_eq(timing->setup_ms, 0.0);
    for (int p = 0; p < PHASE_COUNT; p++) cr_assert_eq(timing->phase_ms[p], 0.0, "phase %d", p);
    for (int e = 0; e < epochs_timed; e++) {
        cr_assert(isfinite(timing->epoch_ms[e]) && timing->epoch_ms[e] >= 0.0, "epoch_ms[%d] = %g", e,
                  timing->epoch_ms[e]);
    }
}

// ----------------------------------------------------------------------------
// regression: gradient descent on MSE is linear in theta = (w, b):
//     theta_{t+1} = theta_t - lr (2/n) (A theta_t - c),  A = [[Sxx, Sx], [Sx, n]],  c = [Sxy, Sy]
// so the moment sums alone give every iterate and every loss.

typedef struct {
    long double sxx, sx, sxy, sy, syy, n;
} Moments;

static Moments moments_of(const float *x, const float *y, int64_t n) {
    Moments m = {0, 0, 0, 0, 0, (long double)n};
    for (int64_t i = 0; i < n; i++) {
        long double xi = x[i], yi = y[i];
        m.sxx += xi * xi;
        m.sx += xi;
        m.sxy += xi * yi;
        m.sy += yi;
        m.syy += yi * yi;
    }
    return m;
}

// mean((w x + b - y)^2) expanded into the moments
static long double moments_mse(const Moments *m, long double w, long double b) {
    return (w * w * m->sxx + 2 * w * b * m->sx + b * b * m->n - 2 * w * m->sxy - 2 * b * m->sy + m->syy) / m->n;
}

static void moments_step(const Moments *m, long double lr, long double *w, long double *b) {
    long double dw = 2 / m->n * (m->sxx * *w + m->sx * *b - m->sxy);
    long double db = 2 / m->n * (m->sx * *w + m->n * *b - m->sy);
    *w -= lr * dw;
    *b -= lr * db;
}

typedef struct {
    RegressionSet set;
    RegressionData data;
    RegressionConfig cfg;
    RegressionResult result;
    float *train_loss, *test_loss;  // [logged count + 1]: one guard slot past the end
    double *epoch_ms;
    int logged;
} RegressionRun;

static void regression_run(RegressionRun *run, int64_t points, int epochs, float lr, int log_every) {
    char err[256];
    cr_assert_eq(regression_generate(points, 42, &run->set, err, sizeof(err)), 0, "%s", err);
    run->data = regression_data_view(&run->set);
    run->cfg = (RegressionConfig){.epochs = epochs, .lr = lr, .log_every = log_every};
    run->logged = regression_logged_count(epochs, log_every);
    run->train_loss = malloc(sizeof(float) * (run->logged + 1));
    run->test_loss = malloc(sizeof(float) * (run->logged + 1));
    run->epoch_ms = malloc(sizeof(double) * epochs);
    cr_assert(run->train_loss && run->test_loss && run->epoch_ms);
    poison(run->train_loss, run->logged + 1);
    poison(run->test_loss, run->logged + 1);
    memset(&run->result, 0, sizeof(run->result));
    run->result.w = run->result.b = run->result.final_test_loss = NAN;
    run->result.train_loss = run->train_loss;
    run->result.test_loss = run->test_loss;
    poison_timing(&run->result.timing, run->epoch_ms, epochs);
    reference_train_regression(&run->cfg, &run->data, &run->result);
    cr_assert(isnan(run->train_loss[run->logged]) && isnan(run->test_loss[run->logged]),
              "wrote past the %d logged losses", run->logged);
    assert_host_timing(&run->result.timing, epochs);
}

static void regression_run_free(RegressionRun *run) {
    regression_free(&run->set);
    free(run->train_loss);
    free(run->test_loss);
    free(run->epoch_ms);
}

// Replays the run from the moments and checks every logged loss, the final parameters and test loss.
static void assert_matches_moments(const RegressionRun *run) {
    Moments train = moments_of(run->data.x_train, run->data.y_train, run->data.n_train);
    Moments test = moments_of(run->data.x_test, run->data.y_test, run->data.n_test);
    long double w = run->data.w_init, b = run->data.b_init;
    int k = 0;
    for (int e = 0; e < run->cfg.epochs; e++) {
        if (regression_epoch_logged(e, run->cfg.epochs, run->cfg.log_every)) {
            long double train_mse = moments_mse(&train, w, b), test_mse = moments_mse(&test, w, b);
            cr_assert(float_matches(run->train_loss[k], train_mse, 1e-10), "train_loss[%d] (epoch %d) = %.9g, want %.12Lg",
                      k, e, run->train_loss[k], train_mse);
            cr_assert(float_matches(run->test_loss[k], test_mse, 1e-10), "test_loss[%d] (epoch %d) = %.9g, want %.12Lg", k,
                      e, run->test_loss[k], test_mse);
            k++;
        }
        moments_step(&train, run->cfg.lr, &w, &b);
    }
    cr_assert_eq(k, run->logged);
    cr_assert(float_matches(run->result.w, w, 1e-10), "w = %.9g, want %.15Lg", run->result.w, w);
    cr_assert(float_matches(run->result.b, b, 1e-10), "b = %.9g, want %.15Lg", run->result.b, b);
    long double final_mse = moments_mse(&test, w, b);
    cr_assert(float_matches(run->result.final_test_loss, final_mse, 1e-10), "final test loss = %.9g, want %.12Lg",
              run->result.final_test_loss, final_mse);
}

Test(reference, regression_matches_closed_form) {
    // 20,000 points: the 16,000 train points span several of the reference's summation blocks
    RegressionRun run;
    regression_run(&run, 20000, 200, 0.01f, 10);
    cr_assert_eq(run.logged, 21);
    assert_matches_moments(&run);
    for (int k = 1; k < run.logged; k++) {
        cr_assert_lt(run.train_loss[k], run.train_loss[k - 1], "train loss rose at logged epoch %d", k);
        cr_assert_lt(run.test_loss[k], run.test_loss[k - 1], "test loss rose at logged epoch %d", k);
    }
    regression_run_free(&run);
}

Test(reference, regression_logs_every_tenth_and_last_epoch) {
    // epochs 0, 10, 20 and the last one, 24
    RegressionRun run;
    regression_run(&run, 1000, 25, 0.01f, 10);
    cr_assert_eq(run.logged, 4);
    assert_matches_moments(&run);
    regression_run_free(&run);

    regression_run(&run, 1000, 7, 0.02f, 1);
    cr_assert_eq(run.logged, 7);
    assert_matches_moments(&run);
    regression_run_free(&run);
}

Test(reference, regression_converges_to_least_squares) {
    RegressionRun run;
    regression_run(&run, 200, 5000, 0.01f, 10);
    // the least-squares line from the normal equations A theta = c
    Moments m = moments_of(run.data.x_train, run.data.y_train, run.data.n_train);
    long double det = m.sxx * m.n - m.sx * m.sx;
    long double w_ls = (m.n * m.sxy - m.sx * m.sy) / det, b_ls = (m.sxx * m.sy - m.sx * m.sxy) / det;
    cr_assert(float_matches(run.result.w, w_ls, 1e-6), "w = %.9g, least squares %.9Lg", run.result.w, w_ls);
    cr_assert(float_matches(run.result.b, b_ls, 1e-6), "b = %.9g, least squares %.9Lg", run.result.b, b_ls);
    // and that line is the true one up to the noise (slope standard error here ~0.005)
    cr_assert(fabsf(run.result.w - 0.7f) < 0.02f, "w = %g, want ~0.7", run.result.w);
    cr_assert(fabsf(run.result.b - 0.3f) < 0.1f, "b = %g, want ~0.3", run.result.b);
    // the noise floor: MSE ~ 0.1^2
    cr_assert(run.result.final_test_loss > 0.005f && run.result.final_test_loss < 0.02f, "final test loss %g",
              run.result.final_test_loss);
    regression_run_free(&run);
}

// ----------------------------------------------------------------------------
// MLP: a naive forward pass of our own (dot products, no max shift, no skipping), used both to check the
// reference's loss and as the function the finite differences differentiate

static MnistConfig mlp_config(int n_layers, const int *sizes) {
    MnistConfig cfg = {.n_layers = n_layers, .batch = 128, .epochs = 1, .lr = 0.1f};
    for (int l = 0; l <= n_layers; l++) cfg.sizes[l] = sizes[l];
    return cfg;
}

static int hidden_units(const MnistConfig *cfg) {
    int units = 0;
    for (int l = 1; l < cfg->n_layers; l++) units += cfg->sizes[l];
    return units;
}

// Mean cross-entropy over n rows; counts correct argmax predictions (lowest index among ties) and, when
// active is not NULL, records which hidden units had a positive pre-activation: (n, hidden_units).
static double naive_loss(const MnistConfig *cfg, const double *params, const float *images, const uint8_t *labels,
                         int n, int *n_correct, unsigned char *active) {
    int widest = 0;
    for (int l = 0; l <= cfg->n_layers; l++) widest = cfg->sizes[l] > widest ? cfg->sizes[l] : widest;
    double *in = malloc(sizeof(double) * widest), *out = malloc(sizeof(double) * widest);
    cr_assert(in && out);
    double loss = 0.0;
    int correct = 0, units = hidden_units(cfg);
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < cfg->sizes[0]; k++) in[k] = images[(size_t)i * cfg->sizes[0] + k];
        int unit = 0;
        for (int l = 0; l < cfg->n_layers; l++) {
            const double *weight = params + mnist_weight_offset(cfg, l), *bias = params + mnist_bias_offset(cfg, l);
            for (int j = 0; j < cfg->sizes[l + 1]; j++) {
                double z = bias[j];
                for (int k = 0; k < cfg->sizes[l]; k++) z += in[k] * weight[(size_t)k * cfg->sizes[l + 1] + j];
                if (l < cfg->n_layers - 1) {
                    if (active) active[(size_t)i * units + unit++] = z > 0.0;
                    z = z > 0.0 ? z : 0.0;
                }
                out[j] = z;
            }
            double *swap = in;
            in = out;
            out = swap;
        }
        int classes = cfg->sizes[cfg->n_layers], predicted = 0;
        double sum = 0.0;
        for (int j = 0; j < classes; j++) {
            sum += exp(in[j]);
            if (in[j] > in[predicted]) predicted = j;
        }
        loss += log(sum) - in[labels[i]];
        correct += predicted == labels[i];
    }
    free(in);
    free(out);
    if (n_correct) *n_correct = correct;
    return loss / n;
}

typedef struct {
    MnistConfig cfg;
    int n;
    int64_t n_params;
    double *params;   // (n_params,)
    float *images;    // (n, sizes[0])
    uint8_t *labels;  // (n,)
} MlpProblem;

// Random weights in +-1, images in [0, 1) with about a third of the pixels exactly 0 (the reference
// skips zeros, so both paths get exercised), labels below the class count.
static MlpProblem mlp_problem(int n_layers, const int *sizes, int n, uint64_t seed) {
    MlpProblem problem = {.cfg = mlp_config(n_layers, sizes), .n = n};
    problem.n_params = mnist_param_count(&problem.cfg);
    problem.params = malloc(sizeof(double) * problem.n_params);
    problem.images = malloc(sizeof(float) * n * sizes[0]);
    problem.labels = malloc(n);
    cr_assert(problem.params && problem.images && problem.labels);
    Rng rng;
    rng_seed(&rng, seed);
    for (int64_t p = 0; p < problem.n_params; p++) problem.params[p] = 2.0 * rng_uniform(&rng) - 1.0;
    for (int i = 0; i < n * sizes[0]; i++) {
        problem.images[i] = rng_uniform(&rng) < 0.33 ? 0.0f : (float)rng_uniform(&rng);
    }
    for (int i = 0; i < n; i++) problem.labels[i] = (uint8_t)(rng_next(&rng) % (uint64_t)sizes[n_layers]);
    return problem;
}

static void mlp_problem_free(MlpProblem *problem) {
    free(problem->params);
    free(problem->images);
    free(problem->labels);
}

// The reference's loss against the naive one, and its gradient against central differences of the naive
// loss. Components whose perturbation flips any ReLU (a kink within h) have no derivative to compare
// and are skipped; the test insists that almost all components were checked.
static void assert_gradient_matches(int n_layers, const int *sizes, int n, uint64_t seed) {
    const double h = 1e-6;
    MlpProblem pb = mlp_problem(n_layers, sizes, n, seed);
    double *grad = malloc(sizeof(double) * pb.n_params);
    size_t active_bytes = (size_t)n * hidden_units(&pb.cfg) + 1;
    unsigned char *active = malloc(active_bytes), *active_plus = malloc(active_bytes),
                  *active_minus = malloc(active_bytes);
    cr_assert(grad && active && active_plus && active_minus);
    for (int64_t p = 0; p < pb.n_params; p++) grad[p] = NAN;

    double loss = reference_mnist_loss(&pb.cfg, pb.params, pb.images, pb.labels, n, grad);
    double naive = naive_loss(&pb.cfg, pb.params, pb.images, pb.labels, n, NULL, active);
    cr_assert(isfinite(loss) && fabs(loss - naive) <= 1e-12 * naive, "loss %.17g, naive %.17g", loss, naive);

    int64_t skipped = 0;
    for (int64_t p = 0; p < pb.n_params; p++) {
        cr_assert(isfinite(grad[p]), "grad[%lld] = %g", (long long)p, grad[p]);
        double saved = pb.params[p];
        pb.params[p] = saved + h;
        double loss_plus = naive_loss(&pb.cfg, pb.params, pb.images, pb.labels, n, NULL, active_plus);
        pb.params[p] = saved - h;
        double loss_minus = naive_loss(&pb.cfg, pb.params, pb.images, pb.labels, n, NULL, active_minus);
        pb.params[p] = saved;
        if (memcmp(active, active_plus, active_bytes - 1) || memcmp(active, active_minus, active_bytes - 1)) {
            skipped++;
            continue;
        }
        double numeric = (loss_plus - loss_minus) / (2 * h);
        // relative to the component, with a floor where central differences lose digits to roundoff
        double scale = fmax(fmax(fabs(grad[p]), fabs(numeric)), 1e-2);
        cr_assert(fabs(grad[p] - numeric) <= 1e-6 * scale, "sizes[1]=%d: grad[%lld] = %.12g, finite difference %.12g",
                  sizes[1], (long long)p, grad[p], numeric);
    }
    cr_assert(skipped <= pb.n_params / 20, "%lld of %lld components skipped at ReLU kinks", (long long)skipped,
              (long long)pb.n_params);
    free(grad);
    free(active);
    free(active_plus);
    free(active_minus);
    mlp_problem_free(&pb);
}

Test(reference, mlp_gradient_two_hidden_layers) {
    assert_gradient_matches(3, (const int[]){6, 5, 4, 3}, 7, 1);
}

Test(reference, mlp_gradient_three_hidden_layers) {
    assert_gradient_matches(4, (const int[]){8, 7, 6, 5, 4}, 5, 2);
}

Test(reference, mlp_gradient_one_hidden_layer_ten_classes) {
    assert_gradient_matches(2, (const int[]){20, 16, 10}, 9, 3);
}

Test(reference, mlp_gradient_softmax_regression) {
    // --hidden 0: the 784 -> 10 model
    assert_gradient_matches(1, (const int[]){MNIST_PIXELS, MNIST_CLASSES}, 4, 4);
}

Test(reference, mlp_uniform_logits) {
    // all-zero parameters: every logit 0, loss log(10); gradient only in the last bias, 0.1 - label share
    MlpProblem pb = mlp_problem(2, (const int[]){MNIST_PIXELS, 128, MNIST_CLASSES}, 20, 5);
    for (int64_t p = 0; p < pb.n_params; p++) pb.params[p] = 0.0;
    double *grad = malloc(sizeof(double) * pb.n_params);
    cr_assert(grad);
    for (int64_t p = 0; p < pb.n_params; p++) grad[p] = NAN;
    double loss = reference_mnist_loss(&pb.cfg, pb.params, pb.images, pb.labels, pb.n, grad);
    cr_assert(fabs(loss - log(10.0)) <= 4e-16 * log(10.0), "loss %.17g, want log(10)", loss);
    int64_t last_bias = mnist_bias_offset(&pb.cfg, 1);
    for (int64_t p = 0; p < last_bias; p++) cr_assert_eq(grad[p], 0.0, "grad[%lld] = %g", (long long)p, grad[p]);
    for (int j = 0; j < MNIST_CLASSES; j++) {
        int count = 0;
        for (int i = 0; i < pb.n; i++) count += pb.labels[i] == j;
        double want = 0.1 - (double)count / pb.n;
        cr_assert(fabs(grad[last_bias + j] - want) <= 1e-15, "db[%d] = %.17g, want %.17g", j, grad[last_bias + j],
                  want);
    }
    free(grad);
    mlp_problem_free(&pb);
}

// ----------------------------------------------------------------------------
// the MNIST trainer, replayed step by step with reference_mnist_loss

typedef struct {
    MnistConfig cfg;
    int n_train, n_test, steps;
    float *train_images, *test_images;   // (n_train, sizes[0]), (n_test, sizes[0])
    uint8_t *train_labels, *test_labels;
    int32_t *order;                      // (epochs, n_train)
    float *init;                         // (n_params,)
    MnistData data;
    MnistResult result;                  // every output array poisoned with NaN
    double *epoch_ms;
} MnistRun;

// 10 training rows in batches of 4: two steps per epoch, two rows of each epoch's order unused.
static void mnist_run_init(MnistRun *run, int n_layers, const int *sizes, int epochs, float lr) {
    MnistRun r = {.cfg = mlp_config(n_layers, sizes), .n_train = 10, .n_test = 5};
    r.cfg.batch = 4;
    r.cfg.epochs = epochs;
    r.cfg.lr = lr;
    r.steps = mnist_steps_per_epoch(&r.cfg, r.n_train);
    int pixels = r.cfg.sizes[0], classes = r.cfg.sizes[r.cfg.n_layers];
    int64_t n_params = mnist_param_count(&r.cfg);
    r.train_images = malloc(sizeof(float) * r.n_train * pixels);
    r.test_images = malloc(sizeof(float) * r.n_test * pixels);
    r.train_labels = malloc(r.n_train);
    r.test_labels = malloc(r.n_test);
    r.order = malloc(sizeof(int32_t) * epochs * r.n_train);
    r.init = malloc(sizeof(float) * n_params);
    r.result.params = malloc(sizeof(float) * n_params);
    r.result.step_loss = malloc(sizeof(float) * epochs * r.steps);
    r.result.test_loss = malloc(sizeof(float) * epochs);
    r.result.test_acc = malloc(sizeof(float) * epochs);
    r.epoch_ms = malloc(sizeof(double) * epochs);
    cr_assert(r.train_images && r.test_images && r.train_labels && r.test_labels && r.order && r.init &&
              r.result.params && r.result.step_loss && r.result.test_loss && r.result.test_acc && r.epoch_ms);
    Rng rng;
    rng_seed(&rng, 7);
    for (int i = 0; i < r.n_train * pixels; i++) r.train_images[i] = (float)rng_uniform(&rng);
    for (int i = 0; i < r.n_test * pixels; i++) r.test_images[i] = (float)rng_uniform(&rng);
    for (int i = 0; i < r.n_train; i++) r.train_labels[i] = (uint8_t)(rng_next(&rng) % (uint64_t)classes);
    for (int i = 0; i < r.n_test; i++) r.test_labels[i] = (uint8_t)(rng_next(&rng) % (uint64_t)classes);
    mnist_batch_order(r.n_train, epochs, 11, r.order);
    mnist_init_params(&r.cfg, 13, r.init);
    r.data = (MnistData){.train_images = r.train_images, .train_labels = r.train_labels, .n_train = r.n_train,
                         .test_images = r.test_images, .test_labels = r.test_labels, .n_test = r.n_test,
                         .batch_order = r.order, .init_params = r.init};
    poison(r.result.params, n_params);
    poison(r.result.step_loss, (int64_t)epochs * r.steps);
    poison(r.result.test_loss, epochs);
    poison(r.result.test_acc, epochs);
    poison_timing(&r.result.timing, r.epoch_ms, epochs);
    *run = r;
}

static void mnist_run_free(MnistRun *run) {
    free(run->train_images);
    free(run->test_images);
    free(run->train_labels);
    free(run->test_labels);
    free(run->order);
    free(run->init);
    free(run->result.params);
    free(run->result.step_loss);
    free(run->result.test_loss);
    free(run->result.test_acc);
    free(run->epoch_ms);
}

// One SGD step by hand: gather the batch, take the loss and gradient at params, params -= lr * grad.
static double sgd_step_by_hand(const MnistRun *run, int epoch, int step, double *params) {
    int batch = run->cfg.batch, pixels = run->cfg.sizes[0];
    int64_t n_params = mnist_param_count(&run->cfg);
    float *images = malloc(sizeof(float) * batch * pixels);
    uint8_t *labels = malloc(batch);
    double *grad = malloc(sizeof(double) * n_params);
    cr_assert(images && labels && grad);
    for (int i = 0; i < batch; i++) {
        int row = run->order[epoch * run->n_train + step * batch + i];
        memcpy(images + i * pixels, run->train_images + row * pixels, sizeof(float) * pixels);
        labels[i] = run->train_labels[row];
    }
    double loss = reference_mnist_loss(&run->cfg, params, images, labels, batch, grad);
    for (int64_t p = 0; p < n_params; p++) params[p] -= (double)run->cfg.lr * grad[p];
    free(images);
    free(labels);
    free(grad);
    return loss;
}

static void assert_params_match(const MnistRun *run, const double *params) {
    for (int64_t p = 0; p < mnist_param_count(&run->cfg); p++) {
        cr_assert(float_matches(run->result.params[p], params[p], 1e-12), "params[%lld] = %.9g, want %.12g",
                  (long long)p, run->result.params[p], params[p]);
    }
}

Test(reference, mnist_one_step_is_params_minus_lr_grad) {
    MnistRun run;
    mnist_run_init(&run, 2, (const int[]){6, 5, 3}, 2, 0.5f);
    int64_t n_params = mnist_param_count(&run.cfg);
    double *params = malloc(sizeof(double) * n_params);
    cr_assert(params);
    for (int64_t p = 0; p < n_params; p++) params[p] = run.init[p];
    double loss = sgd_step_by_hand(&run, 0, 0, params);

    reference_train_mnist(&run.cfg, &run.data, &run.result, 1);
    cr_assert(float_matches(run.result.step_loss[0], loss, 1e-12), "step_loss[0] = %.9g, want %.12g",
              run.result.step_loss[0], loss);
    assert_params_match(&run, params);
    // the step moved the parameters by more than rounding
    float largest_move = 0.0f;
    for (int64_t p = 0; p < n_params; p++) largest_move = fmaxf(largest_move, fabsf(run.result.params[p] - run.init[p]));
    cr_assert_gt(largest_move, 1e-3f);
    for (int s = 1; s < 2 * run.steps; s++) cr_assert(isnan(run.result.step_loss[s]), "step_loss[%d] written", s);
    for (int e = 0; e < 2; e++) {
        cr_assert(isnan(run.result.test_loss[e]) && isnan(run.result.test_acc[e]), "epoch %d did not complete", e);
    }
    free(params);
    mnist_run_free(&run);
}

Test(reference, mnist_steps_cross_an_epoch_in_the_shared_order) {
    // three steps: both steps of epoch 0, its test metrics, then the first step of epoch 1
    MnistRun run;
    mnist_run_init(&run, 2, (const int[]){6, 5, 3}, 2, 0.5f);
    int64_t n_params = mnist_param_count(&run.cfg);
    double *params = malloc(sizeof(double) * n_params);
    cr_assert(params);
    for (int64_t p = 0; p < n_params; p++) params[p] = run.init[p];
    double losses[3];
    losses[0] = sgd_step_by_hand(&run, 0, 0, params);
    losses[1] = sgd_step_by_hand(&run, 0, 1, params);
    int correct;
    double test_loss = naive_loss(&run.cfg, params, run.test_images, run.test_labels, run.n_test, &correct, NULL);
    losses[2] = sgd_step_by_hand(&run, 1, 0, params);

    reference_train_mnist(&run.cfg, &run.data, &run.result, 3);
    for (int s = 0; s < 3; s++) {
        cr_assert(float_matches(run.result.step_loss[s], losses[s], 1e-12), "step_loss[%d] = %.9g, want %.12g", s,
                  run.result.step_loss[s], losses[s]);
    }
    cr_assert(isnan(run.result.step_loss[3]), "step 4 was not to run");
    cr_assert(float_matches(run.result.test_loss[0], test_loss, 1e-12), "test_loss[0] = %.9g, want %.12g",
              run.result.test_loss[0], test_loss);
    cr_assert(float_matches(run.result.test_acc[0], (double)correct / run.n_test, 0.0), "test_acc[0] = %g, want %d/%d",
              run.result.test_acc[0], correct, run.n_test);
    cr_assert(isnan(run.result.test_loss[1]) && isnan(run.result.test_acc[1]), "epoch 1 did not complete");
    assert_host_timing(&run.result.timing, 1);
    assert_params_match(&run, params);
    free(params);
    mnist_run_free(&run);
}

Test(reference, mnist_full_run_fills_everything) {
    MnistRun run;
    mnist_run_init(&run, 2, (const int[]){6, 5, 3}, 3, 0.5f);
    reference_train_mnist(&run.cfg, &run.data, &run.result, -1);
    for (int s = 0; s < 3 * run.steps; s++) {
        cr_assert(isfinite(run.result.step_loss[s]) && run.result.step_loss[s] > 0.0f, "step_loss[%d] = %g", s,
                  run.result.step_loss[s]);
    }
    for (int e = 0; e < 3; e++) {
        cr_assert(isfinite(run.result.test_loss[e]) && run.result.test_loss[e] > 0.0f, "test_loss[%d] = %g", e,
                  run.result.test_loss[e]);
        cr_assert(run.result.test_acc[e] >= 0.0f && run.result.test_acc[e] <= 1.0f, "test_acc[%d] = %g", e,
                  run.result.test_acc[e]);
    }
    for (int64_t p = 0; p < mnist_param_count(&run.cfg); p++) {
        cr_assert(isfinite(run.result.params[p]), "params[%lld] = %g", (long long)p, run.result.params[p]);
    }
    assert_host_timing(&run.result.timing, 3);
    mnist_run_free(&run);
}

Test(reference, mnist_accuracy_ties_go_to_the_lowest_class) {
    // one input fixed at 1 and W = the logits: classes 2 and 5 tie at the top, so every prediction is 2
    const float logits[MNIST_CLASSES] = {0, 0, 3, 0, 1, 3, 0, 0, 2, 0};
    const uint8_t test_labels[4] = {2, 5, 2, 0};
    MnistRun run;
    mnist_run_init(&run, 1, (const int[]){1, MNIST_CLASSES}, 1, 0.0f);  // lr 0: the parameters stay as given
    for (int i = 0; i < run.n_train; i++) run.train_images[i] = 1.0f;
    for (int i = 0; i < 4; i++) {
        run.test_images[i] = 1.0f;
        run.test_labels[i] = test_labels[i];
    }
    run.data.n_test = 4;
    for (int j = 0; j < MNIST_CLASSES; j++) {
        run.init[j] = logits[j];
        run.init[MNIST_CLASSES + j] = 0.0f;
    }
    reference_train_mnist(&run.cfg, &run.data, &run.result, -1);
    cr_assert_eq(run.result.test_acc[0], 0.5f, "test_acc = %g, want 2 of 4", run.result.test_acc[0]);
    double lse = log(2 * exp(3.0) + exp(2.0) + exp(1.0) + 6.0);
    double want = (4 * lse - 3 - 3 - 3 - 0) / 4;
    cr_assert(float_matches(run.result.test_loss[0], want, 1e-12), "test_loss = %.9g, want %.12g",
              run.result.test_loss[0], want);
    mnist_run_free(&run);
}

Test(reference, mnist_uniform_logits_through_the_trainer) {
    // zero parameters and lr 0: test loss log(10), and every prediction is class 0 (a ten-way tie)
    MnistRun run;
    mnist_run_init(&run, 2, (const int[]){6, 5, MNIST_CLASSES}, 1, 0.0f);
    const uint8_t test_labels[5] = {0, 3, 0, 9, 1};
    for (int i = 0; i < 5; i++) run.test_labels[i] = test_labels[i];
    float *zeros = calloc(mnist_param_count(&run.cfg), sizeof(float));
    cr_assert(zeros);
    run.data.init_params = zeros;
    reference_train_mnist(&run.cfg, &run.data, &run.result, -1);
    cr_assert(float_matches(run.result.test_loss[0], log(10.0), 1e-12), "test_loss = %.9g", run.result.test_loss[0]);
    cr_assert(float_matches(run.result.step_loss[0], log(10.0), 1e-12), "step_loss = %.9g", run.result.step_loss[0]);
    cr_assert_eq(run.result.test_acc[0], 0.4f, "test_acc = %g, want 2 of 5", run.result.test_acc[0]);
    free(zeros);
    mnist_run_free(&run);
}

// ----------------------------------------------------------------------------
// GEMM precision: tf32 and bf16 round the GEMM inputs (10 and 7 mantissa bits, to nearest, ties to even)

static double one_weight_loss(Precision precision, double w) {
    MnistConfig cfg = mlp_config(1, (const int[]){1, 2});
    cfg.precision = precision;
    double params[4] = {w, 0.0, 0.0, 0.0};  // W (1, 2), b (2,)
    float image = 1.0f;
    uint8_t label = 0;
    return reference_mnist_loss(&cfg, params, &image, &label, 1, NULL);
}

Test(reference, bf16_rounds_gemm_inputs_to_nearest_even) {
    // 1 + 2^-8 lies halfway between the bf16 neighbours 1 and 1 + 2^-7: the even one is 1
    cr_expect_eq(one_weight_loss(PRECISION_BF16, 1.0 + 0x1p-8), one_weight_loss(PRECISION_FP32, 1.0));
    // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: the even one is 1 + 2^-6
    cr_expect_eq(one_weight_loss(PRECISION_BF16, 1.0 + 0x3p-8), one_weight_loss(PRECISION_FP32, 1.0 + 0x1p-6));
    // just above the halfway point rounds up
    cr_expect_eq(one_weight_loss(PRECISION_BF16, 1.0 + 0x1p-8 + 0x1p-20), one_weight_loss(PRECISION_FP32, 1.0 + 0x1p-7));
    // tf32 keeps 2^-10, drops 2^-12 (a tie at 2^-11 goes to the even 1)
    cr_expect_eq(one_weight_loss(PRECISION_TF32, 1.0 + 0x1p-10), one_weight_loss(PRECISION_FP32, 1.0 + 0x1p-10));
    cr_expect_eq(one_weight_loss(PRECISION_TF32, 1.0 + 0x1p-11), one_weight_loss(PRECISION_FP32, 1.0));
    cr_expect_neq(one_weight_loss(PRECISION_FP32, 1.0 + 0x1p-12), one_weight_loss(PRECISION_FP32, 1.0));
}

// Softmax regression whose weights are k/64 + 2^-12 with 16 <= |k| < 32: exact in tf32 (ulp 2^-12 there),
// not in bf16 (ulp 2^-9), with images exact in both: tf32 must equal fp32 bit for bit, bf16 must not.
Test(reference, gemm_precision_rounds_only_what_it_must) {
    MlpProblem pb = mlp_problem(1, (const int[]){MNIST_PIXELS, MNIST_CLASSES}, 16, 5);
    Rng rng;
    rng_seed(&rng, 11);
    for (int64_t p = 0; p < pb.n_params; p++) {
        int k = 16 + (int)(rng_next(&rng) % 16);
        pb.params[p] = (rng_next(&rng) % 2 ? -1.0 : 1.0) * (k / 64.0 + 0x1p-12);
    }
    for (int i = 0; i < pb.n * MNIST_PIXELS; i++) pb.images[i] = (float)(rng_next(&rng) % 64) / 64.0f;
    double loss[PRECISION_COUNT];
    for (int p = 0; p < PRECISION_COUNT; p++) {
        pb.cfg.precision = (Precision)p;
        loss[p] = reference_mnist_loss(&pb.cfg, pb.params, pb.images, pb.labels, pb.n, NULL);
    }
    cr_expect_eq(loss[PRECISION_TF32], loss[PRECISION_FP32], "tf32 %.17g vs fp32 %.17g", loss[PRECISION_TF32],
                 loss[PRECISION_FP32]);
    cr_expect_neq(loss[PRECISION_BF16], loss[PRECISION_FP32], "bf16 rounded nothing");
    cr_expect(fabs(loss[PRECISION_BF16] - loss[PRECISION_FP32]) < 1e-2 * loss[PRECISION_FP32]);
    mlp_problem_free(&pb);
}

// divergence and progress: a run that has diverged stops there; a long run says how far it is

Test(reference, regression_stops_at_a_diverged_loss) {
    // lr 0.5 on 1000 points: the loss passes 1e6 times its first value by the logged epoch 10
    RegressionSet set;
    char err[256];
    cr_assert_eq(regression_generate(1000, 42, &set, err, sizeof(err)), 0, "%s", err);
    RegressionData data = regression_data_view(&set);
    RegressionConfig cfg = {.epochs = 1000, .lr = 0.5f, .log_every = 10};
    int logged = regression_logged_count(cfg.epochs, cfg.log_every);
    float *train_loss = malloc(sizeof(float) * logged), *test_loss = malloc(sizeof(float) * logged);
    double *epoch_ms = malloc(sizeof(double) * cfg.epochs);
    cr_assert(train_loss && test_loss && epoch_ms);
    poison(train_loss, logged);
    poison(test_loss, logged);
    RegressionResult out = {.train_loss = train_loss, .test_loss = test_loss};
    poison_timing(&out.timing, epoch_ms, cfg.epochs);
    reference_train_regression(&cfg, &data, &out);
    cr_assert(isfinite(train_loss[0]) && train_loss[0] > 0.0f);
    cr_assert_gt(train_loss[1], 1e6 * train_loss[0], "epoch 10: %g", train_loss[1]);
    cr_assert(isnan(train_loss[2]), "the run went on after the loss diverged");
    cr_assert(isnan(epoch_ms[cfg.epochs - 1]), "the last epoch ran");
    cr_assert(isfinite(out.timing.e2e_ms));
    free(train_loss);
    free(test_loss);
    free(epoch_ms);
    regression_free(&set);
}

Test(reference, mnist_stops_at_a_diverged_loss) {
    MnistRun run;
    mnist_run_init(&run, 2, (const int[]){6, 5, MNIST_CLASSES}, 20, 1e8f);
    reference_train_mnist(&run.cfg, &run.data, &run.result, -1);
    float first = run.result.step_loss[0];
    cr_assert(isfinite(first), "step 0: %g", first);
    int bad = -1;
    for (int i = 0; i < run.cfg.epochs * run.steps && bad < 0; i++)
        if (!isfinite(run.result.step_loss[i]) || run.result.step_loss[i] > 1e6 * (first > 1.0f ? first : 1.0f)) bad = i;
    cr_assert_geq(bad, 1, "no step loss diverged with lr 1e8");
    for (int i = bad + 1; i < run.cfg.epochs * run.steps; i++)
        cr_assert(isnan(run.result.step_loss[i]), "step %d ran after the loss diverged at step %d", i, bad);
    cr_assert(isnan(run.epoch_ms[run.cfg.epochs - 1]), "the last epoch ran");
    mnist_run_free(&run);
}

Test(reference, progress_lines_for_long_runs) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_not_null(f);
    reference_set_progress(f, 0.0);  // every epoch; the drivers use CUDA_STAGES_PROGRESS_SECONDS (10)
    RegressionRun run;
    regression_run(&run, 1000, 3, 0.01f, 10);
    MnistRun mnist;
    mnist_run_init(&mnist, 1, (const int[]){6, MNIST_CLASSES}, 2, 0.1f);
    reference_train_mnist(&mnist.cfg, &mnist.data, &mnist.result, -1);
    reference_set_progress(NULL, 10.0);
    fclose(f);
    cr_assert_not_null(strstr(text, "progress: CPU reference regression, epoch 1 of 3 (33.3% done)"), "%s", text);
    cr_assert_not_null(strstr(text, "epoch 3 of 3 (100.0% done)"), "%s", text);
    cr_assert_not_null(strstr(text, "progress: CPU reference mnist, epoch 2 of 2"), "%s", text);
    cr_assert_not_null(strstr(text, "left\n"), "%s", text);
    free(text);
    regression_run_free(&run);
    mnist_run_free(&mnist);
}
