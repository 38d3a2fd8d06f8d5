// common/mnist_main.c: the main of build/NN/mnist, compiled once per stage with -DSTAGE_NAME='"03"' and
// linked with that stage's mnist.cu, so that every stage takes the same flags and prints the same report
// (docs/DESIGN.md, "Who owns what"). Every failure is one line on stderr and an exit code of exit_codes.h.
//
//     make data && build/02/mnist --hidden 1024,1024 --epochs 3 --csv results.csv
//     build/02/mnist --reference --hidden 0 --epochs 1     (the CPU reference; no GPU needed)
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "args.h"
#include "data.h"
#include "device.h"
#include "divergence.h"
#include "gates.h"
#include "host.h"
#include "exit_codes.h"
#include "idx.h"
#include "message.h"
#include "reference.h"
#include "report.h"
#include "trainer.h"

#ifndef STAGE_NAME
#error "compile with -DSTAGE_NAME='\"02\"' (the Makefile does)"
#endif

#define CHANCE_ACCURACY 0.15  // ten classes: guessing scores 0.1; a run that ends at or below this learned nothing

// ----------------------------------------------------------------------------
// device memory: checked before anything is allocated, so that a model, batch or epoch count too large
// for this GPU is one line up front rather than an allocation failure inside the stage

// An upper bound over the stages (each keeps a subset of these): per parameter, fp32 parameters and
// gradients or an evaluation snapshot, and bf16 copies of both (12 bytes); the training set (its bytes
// and their floats), its labels and every epoch's batch order (stages 05-07 upload them once); per layer width, fp32 and bf16
// activations and their gradients for a batch (16 bytes per row, ReLU masks included) and for the
// test set (8 bytes per row); the per-step losses; two 32 MiB cuBLASLt workspaces. The CUDA context,
// cuBLAS/cuDNN handles and kernels are covered by a fixed 256 MiB.
static double mnist_device_bytes(const MnistConfig *cfg, int n_train, int n_test) {
    double widths = 0.0;
    for (int l = 0; l <= cfg->n_layers; l++) widths += cfg->sizes[l];
    double steps = (double)cfg->epochs * mnist_steps_per_epoch(cfg, n_train);
    return 12.0 * (double)mnist_param_count(cfg) + (double)n_train * (5.0 * MNIST_PIXELS + 1.0) +
           (double)n_test * (5.0 * MNIST_PIXELS + 1.0) + 4.0 * cfg->epochs * (double)n_train +
           (16.0 * cfg->batch + 8.0 * n_test) * widths + 4.0 * steps + (64.0 + 256.0) * (1 << 20);
}

// ----------------------------------------------------------------------------
// --export: the same initial parameters, batch order and settings for the PyTorch baseline in bench/

// A JSON string literal of text (quotes, backslashes and control characters escaped).
static void json_string(const char *text, char *out, size_t len) {
    size_t used = 0;
    out[used++] = '"';
    for (const unsigned char *c = (const unsigned char *)text; *c && used + 8 < len; c++) {
        if (*c == '"' || *c == '\\') {
            out[used++] = '\\';
            out[used++] = (char)*c;
        } else if (*c < 0x20) {
            used += (size_t)snprintf(out + used, len - used, "\\u%04x", *c);
        } else {
            out[used++] = (char)*c;
        }
    }
    out[used++] = '"';
    out[used] = '\0';
}

static int export_mnist(const char *dir, const MnistConfig *cfg, const MnistData *data, const char *hidden,
                        uint64_t seed, const char *data_dir, int quiet) {
    char tag[64], init_name[128], order_name[128], json_name[128], sizes[128], data_dir_json[2048];
    char json[4096];
    snprintf(tag, sizeof(tag), "%s", hidden);
    for (char *c = tag; *c; c++)
        if (*c == ',') *c = '-';
    unsigned long long s = (unsigned long long)seed;
    snprintf(init_name, sizeof(init_name), "mnist-h%s-s%llu.init.f32", tag, s);
    snprintf(order_name, sizeof(order_name), "mnist-s%llu-e%d-b%d.order.i32", s, cfg->epochs, cfg->batch);
    snprintf(json_name, sizeof(json_name), "mnist-h%s.json", tag);

    int no_hidden = cfg->n_layers == 1;
    snprintf(sizes, sizeof(sizes), "%d,%s%s%d", MNIST_PIXELS, no_hidden ? "" : hidden, no_hidden ? "" : ",",
             MNIST_CLASSES);
    json_string(data_dir, data_dir_json, sizeof(data_dir_json));
    int len = snprintf(json, sizeof(json),
                       "{\"trainer\":\"mnist\",\"sizes\":[%s],\"hidden\":\"%s\",\"batch\":%d,\"epochs\":%d,\"lr\":%.9g,"
                       "\"seed\":%llu,\"n_train\":%d,\"n_test\":%d,\"data_dir\":%s,\"init\":\"%s\",\"order\":\"%s\"}\n",
                       sizes, hidden, cfg->batch, cfg->epochs, cfg->lr, s, data->n_train, data->n_test, data_dir_json,
                       init_name, order_name);

    // raw float32 / int32 in host byte order: little-endian on every machine CUDA runs on
    size_t init_bytes = sizeof(float) * (size_t)mnist_param_count(cfg);
    size_t order_bytes = sizeof(int32_t) * (size_t)cfg->epochs * (size_t)data->n_train;
    ExportFile files[3] = {{init_name, data->init_params, init_bytes}, {order_name, data->batch_order, order_bytes},
                           {json_name, json, (size_t)len}};
    return report_export(dir, files, quiet);
}

// The epoch (1-based) in which a loss first diverged (divergence.h: NaN, Inf, or past 1e6 times the
// first loss of its series) or an accuracy or a parameter went NaN/Inf, or -1 when none did.
static int first_bad_epoch(const MnistConfig *cfg, int steps, const MnistResult *out, const char **what, char *text,
                           size_t len) {
    double first_step = out->step_loss[0], first_test = out->test_loss[0];
    for (int e = 0; e < cfg->epochs; e++) {
        for (int s = 0; s < steps; s++)
            if (loss_diverged_as(out->step_loss[(int64_t)e * steps + s], first_step, what, text, len)) return e + 1;
        // an accuracy is checked for NaN and Inf only (words as for a loss)
        if (loss_diverged_as(out->test_loss[e], first_test, what, text, len) ||
            (!isfinite(out->test_acc[e]) && loss_diverged_as(out->test_acc[e], 0.0, what, text, len)))
            return e + 1;
    }
    int64_t n_params = mnist_param_count(cfg);
    for (int64_t i = 0; i < n_params; i++)
        if (!isfinite(out->params[i]) && loss_diverged_as(out->params[i], 0.0, what, text, len)) return cfg->epochs;
    return -1;
}

static double mean_step_loss(const float *step_loss, int epoch, int steps) {
    double sum = 0.0;
    for (int s = 0; s < steps; s++) sum += step_loss[(int64_t)epoch * steps + s];
    return sum / steps;
}

// ----------------------------------------------------------------------------
// main, in the order of its checks: the flags, the data, the device, then --export or the runs and the report

// A run as the flags and the data define it, built before any training.
typedef struct {
    Options opt;
    int variant;          // index into MNIST_VARIANTS
    Precision precision;
    MnistConfig cfg;
    char hidden[64];      // --hidden as the row and the messages spell it: "128", "1024,1024", "0"
    DeviceInfo device;    // the GPU, or the host CPU for --reference and --export
} Run;

// The IDX files, and the flags that only their sizes can check. EXIT_OK with set loaded (the caller
// frees it), else the exit status with nothing held.
static int load_data(const Options *opt, MnistSet *set) {
    char err[1024];
    if (mnist_load(opt->data_dir, set, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return EXIT_DATA;
    }
    // the directory is quoted through error_message: a newline in its name stays one line
    if (opt->batch > set->n_train)
        error_message(err, sizeof(err), "--batch %d is larger than the %d training images in %s (valid: 1 .. %d)",
                      opt->batch, set->n_train, opt->data_dir, set->n_train);
    else if ((int64_t)opt->epochs * set->n_train > INT32_MAX)  // the batch order's int32 step and row counts
        error_message(err, sizeof(err), "--epochs %d is too many for %d training images (valid: 1 .. %d)", opt->epochs,
                      set->n_train, (int)(INT32_MAX / set->n_train));
    else
        return EXIT_OK;
    fprintf(stderr, "error: %s\n", err);
    mnist_free(set);
    return EXIT_USAGE;
}

// The trainer's settings from the flags: layer sizes 784, --hidden..., 10, and --hidden as text.
static void build_config(Run *run) {
    const Options *opt = &run->opt;
    run->cfg = (MnistConfig){.n_layers = opt->n_hidden + 1, .batch = opt->batch, .epochs = opt->epochs,
                             .lr = opt->lr, .precision = run->precision, .breakdown = opt->breakdown,
                             .variant = run->variant, .variant_given = opt->variant != NULL};
    snprintf(run->hidden, sizeof(run->hidden), "0");
    run->cfg.sizes[0] = MNIST_PIXELS;
    for (int l = 0, used = 0; l < opt->n_hidden; l++) {
        run->cfg.sizes[l + 1] = opt->hidden[l];
        used += snprintf(run->hidden + used, sizeof(run->hidden) - (size_t)used, "%s%d", l ? "," : "", opt->hidden[l]);
    }
    run->cfg.sizes[run->cfg.n_layers] = MNIST_CLASSES;
}

// The GPU before the host work that follows: without one, or without room for this run, stop here.
// EXIT_OK, or EXIT_CUDA for a missing GPU or --precision (too little memory ends the program inside).
static int check_device(Run *run, const MnistSet *set) {
    if (run->opt.reference || run->opt.export_dir) {
        host_describe(&run->device);
        return EXIT_OK;
    }
    if (device_query(&run->device) != 0) return EXIT_CUDA;
    char what[160];
    snprintf(what, sizeof(what), "this run (--hidden %s, --batch %d, --epochs %d, %d training images)", run->hidden,
             run->cfg.batch, run->cfg.epochs, set->n_train);
    device_check_memory(mnist_device_bytes(&run->cfg, set->n_train, set->n_test), what,
                        "try a smaller --hidden, --batch or --epochs");
    // tf32 or bf16 asked for by name: without it, one line (cuBLAS would quietly compute in fp32, and
    // the row would say tf32)
    char why[160];
    Feature feature = run->precision == PRECISION_TF32 ? FEATURE_TF32 : FEATURE_BF16;
    if (run->precision != PRECISION_FP32 && !feature_available(feature, NULL, why, sizeof(why))) {
        fprintf(stderr, "error: --precision %s needs %s: %s; --precision fp32 runs here\n",
                PRECISION_NAMES[run->precision], feature_description(feature), why);
        return EXIT_CUDA;
    }
    return EXIT_OK;
}

// The progress lines from the last run's arrays (the trainer never syncs to print), the outcome, then
// the row: stdout, the chance-level warning, --csv and --curve. The exit status.
static int report_run(const Run *run, int n_train, const double *runs_ms, const MnistResult *out) {
    const MnistConfig *cfg = &run->cfg;
    const Options *opt = &run->opt;
    int steps = mnist_steps_per_epoch(cfg, n_train);
    if (!opt->quiet)
        for (int e = 0; e < cfg->epochs; e++)
            printf("epoch %d  train_loss %.6f  test_loss %.6f  test_acc %.2f%%\n", e + 1,
                   mean_step_loss(out->step_loss, e, steps), out->test_loss[e], 100.0 * out->test_acc[e]);

    const char *bad = NULL;
    char bad_text[128];
    int bad_epoch = first_bad_epoch(cfg, steps, out, &bad, bad_text, sizeof(bad_text));
    int status = report_training_outcome(bad_epoch, bad, &out->timing, opt->quiet, opt->breakdown);
    if (status != EXIT_OK) return status;

    ResultRow row;
    result_row_init(&row);
    result_row_name(&row, opt->reference, STAGE_NAME, "mnist", MNIST_VARIANTS[run->variant],
                    PRECISION_NAMES[run->precision]);
    snprintf(row.hidden, sizeof(row.hidden), "%s", run->hidden);
    row.batch = cfg->batch;
    row.epochs = cfg->epochs;
    row.lr = cfg->lr;
    result_row_set_runs(&row, &run->device, runs_ms, opt->repeat);
    row.train_loss = mean_step_loss(out->step_loss, cfg->epochs - 1, steps);
    row.test_loss = out->test_loss[cfg->epochs - 1];
    row.test_acc = out->test_acc[cfg->epochs - 1];
    report_print(&row, stdout);
    // a learning rate that trains nothing is the user's choice, but it should not look like success
    if (row.test_acc <= CHANCE_ACCURACY && fflush(stdout) == 0)  // the warning after the result line
        fprintf(stderr, "warning: the final test accuracy, %.1f%%, is chance level (10 classes): this run did not "
                        "learn; try a smaller --lr\n", 100.0 * row.test_acc);

    // step losses by global step (0-based: before that step's update), test figures by epochs done
    const CurveSeries series[] = {
        {"step_loss", out->step_loss, NULL, 0, cfg->epochs * steps},
        {"test_loss", out->test_loss, NULL, 1, cfg->epochs},
        {"test_acc", out->test_acc, NULL, 1, cfg->epochs},
    };
    return report_append_outputs(&row, opt->csv_path, opt->curve_path, series, 3);
}

// Warm-up runs of one epoch (GPU only: handles, module loading, clocks), then the timed runs, each into outputs
// allocated here and poisoned first, so that anything the trainer leaves unwritten shows as NaN; then their
// report. The exit status.
static int train_and_report(const Run *run, const MnistData *data) {
    const MnistConfig *cfg = &run->cfg;
    int repeat = run->opt.repeat;
    size_t epochs = (size_t)cfg->epochs, steps = (size_t)mnist_steps_per_epoch(cfg, data->n_train);
    size_t n_params = (size_t)mnist_param_count(cfg);
    MnistResult out = {.params = host_malloc(n_params * sizeof(float), "the trained parameters"),
                       .step_loss = host_malloc(epochs * steps * sizeof(float), "the step losses"),
                       .test_loss = host_malloc(epochs * sizeof(float), "the test losses"),
                       .test_acc = host_malloc(epochs * sizeof(float), "the test accuracies"),
                       .timing.epoch_ms = host_malloc(epochs * sizeof(double), "epoch times")};
    double *runs_ms = host_malloc((size_t)repeat * REPORT_RUN_FIGURES * sizeof(double), "run times");

    MnistConfig warmup_cfg = *cfg;
    warmup_cfg.epochs = 1;
    for (int r = run->opt.reference ? 0 : -run->opt.warmup; r < repeat; r++) {  // r < 0: the warm-ups
        for (size_t i = 0; i < n_params; i++) out.params[i] = NAN;
        for (size_t i = 0; i < epochs * steps; i++) out.step_loss[i] = NAN;
        for (size_t e = 0; e < epochs; e++) out.test_loss[e] = out.test_acc[e] = NAN;
        report_reset_timing(&out.timing, cfg->epochs);
        if (run->opt.reference) {
            reference_train_mnist(cfg, data, &out, -1);
        } else if (train_mnist(r < 0 ? &warmup_cfg : cfg, data, &out) != 0) {
            fprintf(stderr, "error: stage %s train_mnist failed\n", STAGE_NAME);
            exit(EXIT_CUDA);
        }
        if (r >= 0) report_record_run(runs_ms, repeat, r, &out.timing, cfg->epochs);
    }
    int status = report_run(run, data->n_train, runs_ms, &out);
    free(runs_ms);
    free(out.timing.epoch_ms);
    free(out.test_acc);
    free(out.test_loss);
    free(out.step_loss);
    free(out.params);
    return status;
}

int main(int argc, char **argv) {
    Run run;
    int status = args_driver_flags(argc, argv, TRAINER_MNIST, STAGE_NAME, MNIST_VARIANTS, MNIST_PRECISIONS, &run.opt,
                                   &run.variant, &run.precision);
    if (status >= 0) return status;
    MnistSet set;
    status = load_data(&run.opt, &set);
    if (status != EXIT_OK) return status;
    build_config(&run);
    if (check_device(&run, &set) != EXIT_OK) {
        mnist_free(&set);
        return EXIT_CUDA;
    }

    // the same initial parameters and batch order for every run, and for --export
    const MnistConfig *cfg = &run.cfg;
    float *init_params = host_malloc((size_t)mnist_param_count(cfg) * sizeof(float), "the initial parameters");
    int32_t *batch_order = host_malloc((size_t)cfg->epochs * (size_t)set.n_train * sizeof(int32_t), "the batch order");
    mnist_init_params(cfg, run.opt.seed, init_params);
    mnist_batch_order(set.n_train, cfg->epochs, run.opt.seed, batch_order);
    MnistData data = {.train_pixels = set.train_pixels, .train_images = set.train_images,
                      .train_labels = set.train_labels, .n_train = set.n_train, .test_pixels = set.test_pixels,
                      .test_images = set.test_images, .test_labels = set.test_labels, .n_test = set.n_test,
                      .batch_order = batch_order, .init_params = init_params};

    if (run.opt.export_dir)
        status = export_mnist(run.opt.export_dir, cfg, &data, run.hidden, run.opt.seed, run.opt.data_dir,
                              run.opt.quiet);
    else
        status = train_and_report(&run, &data);
    free(batch_order);
    free(init_params);
    mnist_free(&set);
    // the result line too: a full disk or /dev/full on stdout is a failed run, not exit 0
    return report_exit_status(status);
}
