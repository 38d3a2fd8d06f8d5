// common/reference.c: the CPU reference trainers in double precision, the definition every GPU stage
// is tested against (see reference.h).
//
// Parameters, activations and every sum are double; the float inputs are widened where they are read
// and the results narrowed to float only when they are handed back. Built into build/common/libcommon.a
// by the top Makefile and reached through either driver with --reference, e.g.
//
//     make stage 2 run ARGS=--reference          (or: build/02/mnist --reference --epochs 1)
//
// The MLP's matrix products are plain loops in i-k-j order over row-major arrays, so the innermost loop
// walks contiguous memory and the compiler can vectorize it.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "divergence.h"
#include "exit_codes.h"
#include "host.h"
#include "reference.h"

// ----------------------------------------------------------------------------
// helpers

static void *xmalloc(size_t bytes, const char *what) {
    void *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "error: out of host memory for the CPU reference's %s (%zu bytes): try a smaller "
                        "--points or --hidden\n", what, bytes);
        exit(EXIT_HOST_MEMORY);
    }
    return p;
}

// ----------------------------------------------------------------------------
// progress: a long run says how far it is and how long it has left (see reference.h)

static FILE *progress_out = NULL;
static double progress_every_ms = 10000.0;

void reference_set_progress(FILE *out, double every_seconds) {
    progress_out = out;
    progress_every_ms = every_seconds * 1e3;
}

typedef struct {
    double start_ms, next_ms;
} Progress;

static void progress_start(Progress *p) {
    p->start_ms = host_ms();
    p->next_ms = p->start_ms + progress_every_ms;
}

static const char *fmt_duration(double ms, char *buf, size_t len) {
    double s = ms / 1e3;
    if (!isfinite(s)) snprintf(buf, len, "?");
    else if (s < 90.0) snprintf(buf, len, "%.0f s", s);
    else if (s < 5400.0) snprintf(buf, len, "%.1f min", s / 60.0);
    else snprintf(buf, len, "%.1f h", s / 3600.0);
    return buf;
}

// epoch (1-based) of epochs is under way, done (0..1) of the whole run finished.
static void progress_update(Progress *p, const char *trainer, int epoch, int epochs, double done) {
    if (!progress_out) return;
    double now = host_ms();
    if (now < p->next_ms) return;
    p->next_ms = now + progress_every_ms;
    double elapsed = now - p->start_ms;
    char a[32], b[32];
    fprintf(progress_out, "progress: CPU reference %s, epoch %d of %d (%.1f%% done), %s elapsed, about %s left\n",
            trainer, epoch, epochs, 100.0 * done, fmt_duration(elapsed, a, sizeof(a)),
            fmt_duration(done > 0.0 ? elapsed * (1.0 - done) / done : NAN, b, sizeof(b)));
    fflush(progress_out);
}

// The host clock has one figure: e2e = loop, nothing uploaded, no phases.
static void set_host_timing(TrainTiming *timing, double total_ms) {
    timing->e2e_ms = total_ms;
    timing->loop_ms = total_ms;
    timing->h2d_ms = 0.0;
    timing->setup_ms = 0.0;
    for (int p = 0; p < PHASE_COUNT; p++) timing->phase_ms[p] = 0.0;
}

// ----------------------------------------------------------------------------
// regression

typedef struct {
    double r2, rx, r;  // sums of r^2, r x and r over the points, with r = w x + b - y
} ResidualSums;

// Points are summed in blocks and the block sums added up, so rounding error grows with the number of
// blocks instead of the number of points (5e6 points: ~1e3 blocks).
#define SUM_BLOCK 4096

static ResidualSums residual_sums(const float *x, const float *y, int64_t n, double w, double b) {
    ResidualSums total = {0.0, 0.0, 0.0};
    for (int64_t start = 0; start < n; start += SUM_BLOCK) {
        int64_t end = n - start < SUM_BLOCK ? n : start + SUM_BLOCK;
        ResidualSums block = {0.0, 0.0, 0.0};
        for (int64_t i = start; i < end; i++) {
            double xi = x[i];
            double r = w * xi + b - (double)y[i];
            block.r2 += r * r;
            block.rx += r * xi;
            block.r += r;
        }
        total.r2 += block.r2;
        total.rx += block.rx;
        total.r += block.r;
    }
    return total;
}

static double mse(const float *x, const float *y, int64_t n, double w, double b) {
    return residual_sums(x, y, n, w, b).r2 / (double)n;
}

void reference_train_regression(const RegressionConfig *cfg, const RegressionData *data, RegressionResult *out) {
    double start_ms = host_ms();
    double w = data->w_init, b = data->b_init, lr = cfg->lr;
    double n = (double)data->n_train;
    double first_loss = NAN;
    int logged = 0;
    Progress progress;
    progress_start(&progress);
    for (int e = 0; e < cfg->epochs; e++) {
        double epoch_start_ms = host_ms();
        ResidualSums sums = residual_sums(data->x_train, data->y_train, data->n_train, w, b);
        if (regression_epoch_logged(e, cfg->epochs, cfg->log_every)) {
            double loss = sums.r2 / n;
            out->train_loss[logged] = (float)loss;
            out->test_loss[logged] = (float)mse(data->x_test, data->y_test, data->n_test, w, b);
            logged++;
            if (e == 0) first_loss = loss;
            if (loss_diverged(loss, first_loss)) break;  // diverged (divergence.h): the driver reports this epoch
        }
        w -= lr * (2.0 / n * sums.rx);
        b -= lr * (2.0 / n * sums.r);
        out->timing.epoch_ms[e] = host_ms() - epoch_start_ms;
        progress_update(&progress, "regression", e + 1, cfg->epochs, (double)(e + 1) / cfg->epochs);
    }
    out->final_test_loss = (float)mse(data->x_test, data->y_test, data->n_test, w, b);
    out->w = (float)w;
    out->b = (float)b;
    set_host_timing(&out->timing, host_ms() - start_ms);
}

// ----------------------------------------------------------------------------
// GEMM precision. With --precision tf32 or bf16 the GPU's GEMMs read their two inputs rounded to 10 or 7
// mantissa bits and accumulate in fp32; everything else stays fp32. The reference rounds the same operands
// the same way (to float, then to nearest, ties to even: __float2bfloat16's rounding) and keeps double
// accumulation, so what separates it from a GPU is summation order, not the precision itself.

static double round_mantissa(double v, int dropped_bits) {
    float f = (float)v;
    if (!isfinite(f)) return f;
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    uint32_t half = 1u << (dropped_bits - 1), lowest_kept = (bits >> dropped_bits) & 1u;
    bits = (bits + half - 1 + lowest_kept) & ~((1u << dropped_bits) - 1);
    memcpy(&f, &bits, sizeof(f));
    return f;
}

// out[i] = in[i] as the GEMM reads it; returns in itself (nothing copied) for fp32
static const double *gemm_operand(const double *in, double *out, size_t n, Precision precision) {
    if (precision == PRECISION_FP32) return in;
    int dropped_bits = precision == PRECISION_TF32 ? 13 : 16;
    for (size_t i = 0; i < n; i++) out[i] = round_mantissa(in[i], dropped_bits);
    return out;
}

// ----------------------------------------------------------------------------
// MLP building blocks. A layer maps in (n, fan_in) to out (n, fan_out) with W (fan_in, fan_out).
// Rows of the input that are exactly zero (most MNIST pixels, about half the ReLU outputs) are skipped:
// adding 0 * w changes nothing while the weights are finite.

// out = in @ W + b, then ReLU when relu is set
static void linear_forward(const double *restrict in, const double *restrict weight, const double *restrict bias,
                           double *restrict out, int n, int fan_in, int fan_out, int relu) {
    for (int i = 0; i < n; i++) {
        const double *in_row = in + (size_t)i * fan_in;
        double *out_row = out + (size_t)i * fan_out;
        for (int j = 0; j < fan_out; j++) out_row[j] = bias[j];
        for (int k = 0; k < fan_in; k++) {
            double a = in_row[k];
            if (a == 0.0) continue;
            const double *w_row = weight + (size_t)k * fan_out;
            for (int j = 0; j < fan_out; j++) out_row[j] += a * w_row[j];
        }
        if (relu) {
            for (int j = 0; j < fan_out; j++) out_row[j] = out_row[j] > 0.0 ? out_row[j] : 0.0;
        }
    }
}

// dW = in^T @ delta_gemm, db = column sums of delta (delta_gemm: delta as the weight GEMM reads it). k runs
// outermost so that one row of dW stays in cache while the (n, fan_out) delta, small enough for L2,
// streams past it.
static void linear_backward_params(const double *restrict in, const double *restrict delta_gemm,
                                   const double *restrict delta, double *restrict dweight, double *restrict dbias,
                                   int n, int fan_in, int fan_out) {
    for (int k = 0; k < fan_in; k++) {
        double *dw_row = dweight + (size_t)k * fan_out;
        for (int j = 0; j < fan_out; j++) dw_row[j] = 0.0;
        for (int i = 0; i < n; i++) {
            double a = in[(size_t)i * fan_in + k];
            if (a == 0.0) continue;
            const double *d_row = delta_gemm + (size_t)i * fan_out;
            for (int j = 0; j < fan_out; j++) dw_row[j] += a * d_row[j];
        }
    }
    for (int j = 0; j < fan_out; j++) dbias[j] = 0.0;
    for (int i = 0; i < n; i++) {
        const double *d_row = delta + (size_t)i * fan_out;
        for (int j = 0; j < fan_out; j++) dbias[j] += d_row[j];
    }
}

// delta_in = (delta @ W^T) * ReLU'(in), with W^T given as weight_t (fan_out, fan_in) so that the inner
// loop runs along contiguous rows. in is the layer's input after ReLU: positive exactly where its
// pre-activation was.
static void linear_backward_input(const double *restrict delta, const double *restrict weight_t,
                                  const double *restrict in, double *restrict delta_in, int n, int fan_in, int fan_out) {
    for (int i = 0; i < n; i++) {
        const double *d_row = delta + (size_t)i * fan_out;
        const double *in_row = in + (size_t)i * fan_in;
        double *out_row = delta_in + (size_t)i * fan_in;
        for (int k = 0; k < fan_in; k++) out_row[k] = 0.0;
        for (int j = 0; j < fan_out; j++) {
            double d = d_row[j];
            const double *wt_row = weight_t + (size_t)j * fan_in;
            for (int k = 0; k < fan_in; k++) out_row[k] += d * wt_row[k];
        }
        for (int k = 0; k < fan_in; k++) out_row[k] = in_row[k] > 0.0 ? out_row[k] : 0.0;
    }
}

// Turns each row of logits (n, classes) into softmax probabilities in place; returns the summed
// cross-entropy and counts the rows whose argmax (the lowest index among ties) is the label.
static double softmax_cross_entropy(double *restrict logits, const uint8_t *restrict labels, int n, int classes,
                                    int *n_correct) {
    double loss_sum = 0.0;
    int correct = 0;
    for (int i = 0; i < n; i++) {
        double *row = logits + (size_t)i * classes;
        int argmax = 0;
        for (int j = 1; j < classes; j++) {
            if (row[j] > row[argmax]) argmax = j;
        }
        double max = row[argmax];
        double label_shifted = row[labels[i]] - max;
        double sum = 0.0;
        for (int j = 0; j < classes; j++) {
            row[j] = exp(row[j] - max);
            sum += row[j];
        }
        for (int j = 0; j < classes; j++) row[j] /= sum;
        loss_sum += log(sum) - label_shifted;  // log-sum-exp minus the label's logit, both shifted by max
        correct += argmax == labels[i];
    }
    *n_correct = correct;
    return loss_sum;
}

// ----------------------------------------------------------------------------
// the MLP's forward and backward pass over a block of rows, with scratch allocated once by the caller

typedef struct {
    int rows;                               // capacity: the most rows one call may take
    double *act[MNIST_MAX_LAYERS + 1];      // act[l]: (rows, sizes[l]) layer l's input after ReLU (act[0]:
                                            // the images); act[n_layers]: the logits, then the probabilities
    double *delta, *delta_next;             // (rows, widest layer) gradient w.r.t. a layer's output
    double *weight_t;                       // (largest W) one hidden layer's W transposed
    // tf32/bf16 only (NULL for fp32): the GEMM operands, rounded (gemm_operand)
    double *act_gemm[MNIST_MAX_LAYERS];     // act_gemm[l]: (rows, sizes[l]) act[l] as layer l's GEMMs read it
    double *weight_gemm;                    // (largest W) one W or W^T as a GEMM reads it
    double *delta_gemm;                     // (rows, widest layer) delta as a GEMM reads it
} Workspace;

static void workspace_alloc(Workspace *ws, const MnistConfig *cfg, int rows) {
    int widest = 0;
    size_t largest_w = 0;
    for (int l = 1; l <= cfg->n_layers; l++) {
        if (cfg->sizes[l] > widest) widest = cfg->sizes[l];
        size_t w_size = (size_t)cfg->sizes[l - 1] * cfg->sizes[l];
        if (w_size > largest_w) largest_w = w_size;
    }
    memset(ws, 0, sizeof(*ws));
    ws->rows = rows;  // act_gemm etc. stay NULL for fp32
    for (int l = 0; l <= cfg->n_layers; l++) ws->act[l] = xmalloc(sizeof(double) * rows * cfg->sizes[l], "activations");
    ws->delta = xmalloc(sizeof(double) * rows * widest, "gradients");
    ws->delta_next = xmalloc(sizeof(double) * rows * widest, "gradients");
    ws->weight_t = xmalloc(sizeof(double) * largest_w, "transposed weights");
    if (cfg->precision == PRECISION_FP32) return;
    for (int l = 0; l < cfg->n_layers; l++) ws->act_gemm[l] = xmalloc(sizeof(double) * rows * cfg->sizes[l], "activations");
    ws->weight_gemm = xmalloc(sizeof(double) * largest_w, "rounded weights");
    ws->delta_gemm = xmalloc(sizeof(double) * rows * widest, "rounded gradients");
}

static void workspace_free(Workspace *ws, const MnistConfig *cfg) {
    for (int l = 0; l <= cfg->n_layers; l++) free(ws->act[l]);
    free(ws->delta);
    free(ws->delta_next);
    free(ws->weight_t);
    for (int l = 0; l < cfg->n_layers; l++) free(ws->act_gemm[l]);
    free(ws->weight_gemm);
    free(ws->delta_gemm);
}

// images: (n, sizes[0]), labels: (n,), n <= ws->rows. Returns the summed cross-entropy over the n rows and
// counts the correct predictions; with grad, writes the gradient of the mean cross-entropy over the n rows.
static double mlp_loss_sum(const MnistConfig *cfg, const double *params, const float *images, const uint8_t *labels,
                           int n, double *grad, int *n_correct, Workspace *ws) {
    const int *sizes = cfg->sizes;
    int last = cfg->n_layers;
    Precision precision = cfg->precision;
    const double *act_gemm[MNIST_MAX_LAYERS];  // act[l] as layer l's GEMMs read it
    for (size_t i = 0; i < (size_t)n * sizes[0]; i++) ws->act[0][i] = images[i];
    for (int l = 0; l < last; l++) {
        size_t w_size = (size_t)sizes[l] * sizes[l + 1];
        act_gemm[l] = gemm_operand(ws->act[l], ws->act_gemm[l], (size_t)n * sizes[l], precision);
        const double *weight = gemm_operand(params + mnist_weight_offset(cfg, l), ws->weight_gemm, w_size, precision);
        linear_forward(act_gemm[l], weight, params + mnist_bias_offset(cfg, l), ws->act[l + 1], n, sizes[l],
                       sizes[l + 1], l < last - 1);
    }
    double loss_sum = softmax_cross_entropy(ws->act[last], labels, n, sizes[last], n_correct);
    if (!grad) return loss_sum;

    // dloss/dlogits = (softmax - onehot) / n, for the mean over the rows
    int classes = sizes[last];
    for (int i = 0; i < n; i++) {
        const double *prob = ws->act[last] + (size_t)i * classes;
        double *d_row = ws->delta + (size_t)i * classes;
        for (int j = 0; j < classes; j++) d_row[j] = (prob[j] - (j == labels[i])) / n;
    }
    for (int l = last - 1; l >= 0; l--) {
        int fan_in = sizes[l], fan_out = sizes[l + 1];
        const double *delta_gemm = gemm_operand(ws->delta, ws->delta_gemm, (size_t)n * fan_out, precision);
        linear_backward_params(act_gemm[l], delta_gemm, ws->delta, grad + mnist_weight_offset(cfg, l),
                               grad + mnist_bias_offset(cfg, l), n, fan_in, fan_out);
        if (l == 0) break;  // no gradient is needed for the images
        const double *weight = params + mnist_weight_offset(cfg, l);
        for (int k = 0; k < fan_in; k++) {
            for (int j = 0; j < fan_out; j++) ws->weight_t[(size_t)j * fan_in + k] = weight[(size_t)k * fan_out + j];
        }
        const double *weight_t = gemm_operand(ws->weight_t, ws->weight_gemm, (size_t)fan_in * fan_out, precision);
        linear_backward_input(delta_gemm, weight_t, ws->act[l], ws->delta_next, n, fan_in, fan_out);
        double *swap = ws->delta;
        ws->delta = ws->delta_next;
        ws->delta_next = swap;
    }
    return loss_sum;
}

double reference_mnist_loss(const MnistConfig *cfg, const double *params, const float *images,
                            const uint8_t *labels, int n, double *grad) {
    Workspace ws;
    workspace_alloc(&ws, cfg, n);
    int n_correct;
    double loss = mlp_loss_sum(cfg, params, images, labels, n, grad, &n_correct, &ws) / n;
    workspace_free(&ws, cfg);
    return loss;
}

// Mean cross-entropy and accuracy over a whole set, in blocks of ws->rows.
static void mlp_evaluate(const MnistConfig *cfg, const double *params, const float *images, const uint8_t *labels,
                         int n, Workspace *ws, float *loss, float *accuracy) {
    double loss_sum = 0.0;
    int64_t correct = 0;
    for (int start = 0; start < n; start += ws->rows) {
        int rows = n - start < ws->rows ? n - start : ws->rows;
        int block_correct;
        loss_sum += mlp_loss_sum(cfg, params, images + (size_t)start * cfg->sizes[0], labels + start, rows, NULL,
                                 &block_correct, ws);
        correct += block_correct;
    }
    *loss = (float)(loss_sum / n);
    *accuracy = (float)((double)correct / n);
}

// ----------------------------------------------------------------------------
// MNIST trainer: minibatch SGD in the shared batch order

void reference_train_mnist(const MnistConfig *cfg, const MnistData *data, MnistResult *out, int max_steps) {
    double start_ms = host_ms();
    int64_t n_params = mnist_param_count(cfg);
    int pixels = cfg->sizes[0], batch = cfg->batch;
    int steps = mnist_steps_per_epoch(cfg, data->n_train);
    double lr = cfg->lr;

    double *params = xmalloc(sizeof(double) * n_params, "parameters");  // (n_params,) packed as trainer.h
    double *grad = xmalloc(sizeof(double) * n_params, "gradients");      // (n_params,)
    float *batch_images = xmalloc(sizeof(float) * batch * pixels, "batch");  // (batch, pixels)
    uint8_t *batch_labels = xmalloc(batch, "batch");                         // (batch,)
    Workspace ws;  // batch rows: one training step, or one block of the test set
    workspace_alloc(&ws, cfg, batch);
    for (int64_t p = 0; p < n_params; p++) params[p] = data->init_params[p];

    int64_t steps_done = 0;
    double first_loss = NAN;
    int diverged = 0;
    Progress progress;
    progress_start(&progress);
    for (int e = 0; e < cfg->epochs && !diverged; e++) {
        double epoch_start_ms = host_ms();
        int s = 0;
        for (; s < steps && (max_steps < 0 || steps_done < max_steps) && !diverged; s++) {
            const int32_t *rows = data->batch_order + (int64_t)e * data->n_train + (int64_t)s * batch;
            for (int i = 0; i < batch; i++) {
                memcpy(batch_images + (size_t)i * pixels, data->train_images + (size_t)rows[i] * pixels,
                       sizeof(float) * pixels);
                batch_labels[i] = data->train_labels[rows[i]];
            }
            int n_correct;
            double loss = mlp_loss_sum(cfg, params, batch_images, batch_labels, batch, grad, &n_correct, &ws) / batch;
            out->step_loss[(int64_t)e * steps + s] = (float)loss;
            if (steps_done == 0) first_loss = loss;
            if (loss_diverged(loss, first_loss)) diverged = 1;  // stop here: the driver reports this step's epoch
            for (int64_t p = 0; p < n_params; p++) params[p] -= lr * grad[p];
            steps_done++;
            progress_update(&progress, "mnist", e + 1, cfg->epochs, (double)steps_done / ((double)cfg->epochs * steps));
        }
        if (s < steps) break;  // max_steps reached (or a diverged loss) inside this epoch: no test metrics
        mlp_evaluate(cfg, params, data->test_images, data->test_labels, data->n_test, &ws, &out->test_loss[e],
                     &out->test_acc[e]);
        out->timing.epoch_ms[e] = host_ms() - epoch_start_ms;
    }
    for (int64_t p = 0; p < n_params; p++) out->params[p] = (float)params[p];
    workspace_free(&ws, cfg);
    free(params);
    free(grad);
    free(batch_images);
    free(batch_labels);
    set_host_timing(&out->timing, host_ms() - start_ms);
}
