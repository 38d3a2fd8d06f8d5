// common/regression_main.c: the main of build/NN/regression, compiled once per stage with -DSTAGE_NAME='"03"'
// and linked with that stage's regression.cu, so that every stage takes the same flags and prints the same
// report (docs/DESIGN.md, "Who owns what"). Every failure is one line on stderr and an exit code of exit_codes.h.
//
//     build/02/regression --epochs 50 --csv results.csv
//     build/02/regression --reference          (the CPU reference; no GPU needed)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "args.h"
#include "data.h"
#include "device.h"
#include "divergence.h"
#include "exit_codes.h"
#include "host.h"
#include "reference.h"
#include "report.h"
#include "trainer.h"

#ifndef STAGE_NAME
#error "compile with -DSTAGE_NAME='\"02\"' (the Makefile does)"
#endif

#define LOG_EVERY 10

// ----------------------------------------------------------------------------
// device memory: checked before anything is allocated, so that a --points too large for this GPU is
// one line up front rather than an allocation failure inside the stage

// Per point, every stage keeps x and y on the device (8 bytes) and at most two float arrays more
// (stage 02's predictions; stage 06's residual and ones vector): 16 bytes covers them all. The CUDA
// context, cuBLAS handles and workspaces are covered by a fixed 256 MiB.
#define BYTES_PER_POINT 16.0
#define FIXED_DEVICE_BYTES (256.0 * (1 << 20))

// ----------------------------------------------------------------------------
// --export: the same points and settings for the PyTorch baseline in bench/

static int export_regression(const char *dir, const RegressionConfig *cfg, const RegressionSet *set,
                             const RegressionData *data, uint64_t seed, int quiet) {
    char x_name[64], y_name[64], json_name[64], json[1024];
    long long points = (long long)set->n;
    snprintf(x_name, sizeof(x_name), "regression-%lld.x.f32", points);
    snprintf(y_name, sizeof(y_name), "regression-%lld.y.f32", points);
    snprintf(json_name, sizeof(json_name), "regression-%lld.json", points);
    int len = snprintf(json, sizeof(json),
                       "{\"trainer\":\"regression\",\"points\":%lld,\"n_train\":%lld,\"epochs\":%d,\"lr\":%.9g,"
                       "\"log_every\":%d,\"w_init\":%.9g,\"b_init\":%.9g,\"seed\":%llu,\"x\":\"%s\",\"y\":\"%s\"}\n",
                       points, (long long)set->n_train, cfg->epochs, cfg->lr, cfg->log_every, data->w_init,
                       data->b_init, (unsigned long long)seed, x_name, y_name);
    // raw float32 in host byte order: little-endian on every machine CUDA runs on
    size_t bytes = sizeof(float) * (size_t)set->n;
    ExportFile files[3] = {{x_name, set->x, bytes}, {y_name, set->y, bytes}, {json_name, json, (size_t)len}};
    return report_export(dir, files, quiet);
}

// The number of epochs done when a loss first diverged (divergence.h: NaN, Inf, or past 1e6 times the
// first loss of its series), or -1 when none did; *what says what it became. Logged losses are taken at
// the start of their epoch; the final test loss and w, b after the last one.
static int first_bad_epoch(const RegressionConfig *cfg, const RegressionResult *out, const char **what, char *text,
                           size_t len) {
    double first_train = out->train_loss[0], first_test = out->test_loss[0];
    for (int e = 0, i = 0; e < cfg->epochs; e++) {
        if (!regression_epoch_logged(e, cfg->epochs, cfg->log_every)) continue;
        if (loss_diverged_as(out->train_loss[i], first_train, what, text, len) ||
            loss_diverged_as(out->test_loss[i], first_test, what, text, len))
            return e;
        i++;
    }
    if (loss_diverged_as(out->final_test_loss, first_test, what, text, len)) return cfg->epochs;
    if (!isfinite(out->w) || !isfinite(out->b)) {
        *what = isnan(out->w) || isnan(out->b) ? "NaN" : "Inf";
        return cfg->epochs;
    }
    return -1;
}

// ----------------------------------------------------------------------------
// main, in the order of its checks: the flags, the device, the points, then --export or the runs and the report

// A run as the flags define it, built before any training.
typedef struct {
    Options opt;
    int variant;          // index into REGRESSION_VARIANTS
    RegressionConfig cfg;
    DeviceInfo device;    // the GPU, or the host CPU for --reference and --export
} Run;

// The GPU first: without one, or without room for the points, there is nothing to generate them for.
// EXIT_OK or EXIT_CUDA (too little memory ends the program inside).
static int check_device(Run *run) {
    if (run->opt.reference || run->opt.export_dir) {
        host_describe(&run->device);
        return EXIT_OK;
    }
    if (device_query(&run->device) != 0) return EXIT_CUDA;
    char what[64];
    snprintf(what, sizeof(what), "--points %lld", (long long)run->opt.points);
    device_check_memory(BYTES_PER_POINT * (double)run->opt.points + FIXED_DEVICE_BYTES, what, "try a smaller --points");
    return EXIT_OK;
}

// The progress lines from the last run's arrays (the trainer never syncs to print), the outcome, then the
// row of a run that trained: stdout, --csv and --curve. The exit status.
static int report_run(const Run *run, int64_t points, const double *runs_ms, const RegressionResult *out) {
    const RegressionConfig *cfg = &run->cfg;
    int n_logged = regression_logged_count(cfg->epochs, cfg->log_every);
    int *logged_epoch = host_malloc((size_t)n_logged * sizeof(int), "the loss curve");
    for (int e = 0, i = 0; e < cfg->epochs; e++)
        if (regression_epoch_logged(e, cfg->epochs, cfg->log_every)) logged_epoch[i++] = e;
    // the epochs up to the first that diverged, if one did: none after the error line
    const char *bad = NULL;
    char bad_text[128];
    int bad_epoch = first_bad_epoch(cfg, out, &bad, bad_text, sizeof(bad_text));
    if (!run->opt.quiet)
        for (int i = 0; i < n_logged && (bad_epoch < 0 || logged_epoch[i] <= bad_epoch); i++)
            printf("epoch %4d  train_loss %.6f  test_loss %.6f\n", logged_epoch[i], out->train_loss[i], out->test_loss[i]);
    int status = report_training_outcome(bad_epoch, bad, &out->timing, run->opt.quiet, run->opt.breakdown);
    if (status == EXIT_OK) {
        ResultRow row;
        result_row_init(&row);
        result_row_name(&row, run->opt.reference, STAGE_NAME, "regression", REGRESSION_VARIANTS[run->variant], "fp32");
        row.points = points;
        row.epochs = cfg->epochs;
        row.lr = cfg->lr;
        result_row_set_runs(&row, &run->device, runs_ms, run->opt.repeat);
        row.train_loss = out->train_loss[n_logged - 1];
        row.test_loss = out->final_test_loss;
        row.w = out->w;
        row.b = out->b;
        report_print(&row, stdout);
        // the test-loss series ends with the loss of the trained parameters, after the last epoch
        float final_test_loss = out->final_test_loss;
        int final_epoch = cfg->epochs;
        const CurveSeries series[] = {
            {"train_loss", out->train_loss, logged_epoch, 0, n_logged},
            {"test_loss", out->test_loss, logged_epoch, 0, n_logged},
            {"test_loss", &final_test_loss, &final_epoch, 0, 1},
        };
        status = report_append_outputs(&row, run->opt.csv_path, run->opt.curve_path, series, 3);
    }
    free(logged_epoch);
    return status;
}

// Warm-up runs of one epoch (GPU only: handles, module loading, clocks), then the timed runs, each into outputs
// allocated here and poisoned first, so that anything the trainer leaves unwritten shows as NaN; then their
// report. The exit status.
static int train_and_report(const Run *run, const RegressionData *data, int64_t points) {
    const RegressionConfig *cfg = &run->cfg;
    int repeat = run->opt.repeat;
    size_t n_logged = (size_t)regression_logged_count(cfg->epochs, cfg->log_every);
    RegressionResult out = {.train_loss = host_malloc(n_logged * sizeof(float), "the loss curve"),
                            .test_loss = host_malloc(n_logged * sizeof(float), "the loss curve"),
                            .timing.epoch_ms = host_malloc((size_t)cfg->epochs * sizeof(double), "epoch times")};
    double *runs_ms = host_malloc((size_t)repeat * REPORT_RUN_FIGURES * sizeof(double), "run times");

    RegressionConfig warmup_cfg = *cfg;
    warmup_cfg.epochs = 1;
    for (int r = run->opt.reference ? 0 : -run->opt.warmup; r < repeat; r++) {  // r < 0: the warm-ups
        for (size_t i = 0; i < n_logged; i++) out.train_loss[i] = out.test_loss[i] = NAN;
        out.w = out.b = out.final_test_loss = NAN;
        report_reset_timing(&out.timing, cfg->epochs);
        if (run->opt.reference) {
            reference_train_regression(cfg, data, &out);
        } else if (train_regression(r < 0 ? &warmup_cfg : cfg, data, &out) != 0) {
            fprintf(stderr, "error: stage %s train_regression failed\n", STAGE_NAME);
            exit(EXIT_CUDA);
        }
        if (r >= 0) report_record_run(runs_ms, repeat, r, &out.timing, cfg->epochs);
    }
    int status = report_run(run, points, runs_ms, &out);
    free(runs_ms);
    free(out.timing.epoch_ms);
    free(out.test_loss);
    free(out.train_loss);
    return status;
}

int main(int argc, char **argv) {
    Run run;
    Precision fp32;
    int status = args_driver_flags(argc, argv, TRAINER_REGRESSION, STAGE_NAME, REGRESSION_VARIANTS, NULL, &run.opt,
                                   &run.variant, &fp32);
    if (status >= 0) return status;
    run.cfg = (RegressionConfig){.epochs = run.opt.epochs, .lr = run.opt.lr, .log_every = LOG_EVERY,
                                 .breakdown = run.opt.breakdown, .variant = run.variant,
                                 .variant_given = run.opt.variant != NULL};
    if (check_device(&run) != EXIT_OK) return EXIT_CUDA;

    char err[1024];
    RegressionSet set;
    if (regression_generate(run.opt.points, run.opt.seed, &set, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return EXIT_HOST_MEMORY;  // the only way generation fails once --points is valid
    }
    RegressionData data = regression_data_view(&set);

    if (run.opt.export_dir)
        status = export_regression(run.opt.export_dir, &run.cfg, &set, &data, run.opt.seed, run.opt.quiet);
    else
        status = train_and_report(&run, &data, set.n);
    regression_free(&set);
    // the result line too: a full disk or /dev/full on stdout is a failed run, not exit 0
    return report_exit_status(status);
}
