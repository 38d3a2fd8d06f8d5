// common/ladder.c: see ladder.h; tested by tests/test_ladder.c. The rows go through common/report.c's append
// and name the commit and run of common/provenance.c, as the trainers' rows do.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cuda_runtime_api.h>

#include "exit_codes.h"
#include "flags.h"
#include "host.h"
#include "ladder.h"
#include "message.h"
#include "provenance.h"
#include "report.h"

// ----------------------------------------------------------------------------
// flags

void ladder_usage_error(const char *program, const char *message, const char *value) {
    char shown[64];  // error_message shows a control character of the value as '?': the line stays one line
    error_message(shown, sizeof(shown), "%s", value);
    fprintf(stderr, "error: %s '%s' (see %s --help)\n", message, shown, program);
    exit(EXIT_USAGE);
}

int64_t ladder_parse_count(const char *program, const char *flag, const char *text, int64_t min, int64_t max) {
    uint64_t value = 0;
    if (flags_digits(text, &value) != 0 || value > INT64_MAX || (int64_t)value < min || (int64_t)value > max) {
        char message[128];
        snprintf(message, sizeof(message), "%s wants a whole number from %lld to %lld, got", flag, (long long)min,
                 (long long)max);
        ladder_usage_error(program, message, text);
    }
    return (int64_t)value;
}

void ladder_parse_version(const char *program, const char *text, int count, LadderNameFn version_name, int *first,
                          int *last) {
    *first = 0;
    *last = count;
    if (strcmp(text, "all") == 0) return;
    for (int v = 0; v < count; v++) {
        char number[16];
        snprintf(number, sizeof(number), "%d", v + 1);
        if (strcmp(text, number) == 0 || strcmp(text, version_name(v)) == 0) {
            *first = v;
            *last = v + 1;
            return;
        }
    }
    char message[96];
    snprintf(message, sizeof(message), "--version wants 1..%d, a version name or all, got", count);
    ladder_usage_error(program, message, text);
}

static void print_usage(const char *usage, const char *program, int version_count, LadderNameFn version_name,
                        int calls_per_run) {
    printf(usage, program);
    printf("  --version    1..%d, a name, or all (default):", version_count);
    for (int v = 0; v < version_count; v++) printf(" %d %s%s", v + 1, version_name(v), v + 1 < version_count ? "," : "\n");
    printf("  --repeat R   timed runs per version (of %d call%s each) after %d warm-ups: median, min and max\n"
           "               (default %d, 1 .. %d)\n"
           "  --csv FILE   append one row per version and shape (bench/make_tables.py draws the README tables)\n",
           calls_per_run, calls_per_run == 1 ? "" : "s", LADDER_WARMUP_RUNS, LADDER_DEFAULT_REPEATS,
           LADDER_MAX_REPEATS);
}

// The flags every ladder takes, before its sizes' (sizes[s].flag without its "--").
enum { L_VERSION, L_REPEAT, L_CSV, L_HELP, L_SIZES, L_MAX = 32 };

void ladder_parse_args(int argc, char **argv, const char *usage, LadderSize *sizes, int size_count, int version_count,
                       LadderNameFn version_name, int calls_per_run, LadderOptions *options) {
    const char *program = argv[0];
    *options = (LadderOptions){0, version_count, LADDER_DEFAULT_REPEATS, NULL};
    struct option flags[L_MAX + 1] = {
        [L_VERSION] = {"version", required_argument, NULL, 0}, [L_REPEAT] = {"repeat", required_argument, NULL, 0},
        [L_CSV] = {"csv", required_argument, NULL, 0}, [L_HELP] = {"help", no_argument, NULL, 0}};  // help: also -h
    for (int s = 0; s < size_count && L_SIZES + s < L_MAX; s++)
        flags[L_SIZES + s] = (struct option){sizes[s].flag + 2, required_argument, NULL, 0};
    FlagScan scan = {.argc = argc, .argv = argv, .options = flags};
    for (int status; (status = flags_next(&scan)) != FLAG_END;) {
        if (status == FLAG_MISSING) ladder_usage_error(program, "missing value after", scan.word);
        if (status != FLAG_OK) ladder_usage_error(program, "unknown flag", scan.word);
        LadderSize *size = scan.flag >= L_SIZES ? &sizes[scan.flag - L_SIZES] : NULL;
        if (size) {
            size->value = ladder_parse_count(program, size->flag, scan.value, size->min, size->max);
            size->given = 1;
        } else if (scan.flag == L_VERSION) {
            ladder_parse_version(program, scan.value, version_count, version_name, &options->first, &options->last);
        } else if (scan.flag == L_REPEAT) {
            options->repeats = (int)ladder_parse_count(program, "--repeat", scan.value, 1, LADDER_MAX_REPEATS);
        } else if (scan.flag == L_CSV) {
            options->csv_path = scan.value;
        } else {
            print_usage(usage, program, version_count, version_name, calls_per_run);
            exit(EXIT_OK);
        }
    }
    if (options->csv_path) ladder_check_csv(options->csv_path);
}

void ladder_check_csv(const char *path) {
    // the file, or else the folder it would be created in, must be writable (the two messages the tests
    // and the smoke suite name); then what the append itself needs, so that it fails now, not after the runs
    char folder[4096];
    const char *slash = strrchr(path, '/');
    snprintf(folder, sizeof(folder), "%.*s", slash ? (int)(slash - path) + 1 : 1, slash ? path : ".");
    struct stat info;
    int exists = stat(path, &info) == 0;
    const char *problem = NULL;
    char why[1024];
    if (exists && S_ISDIR(info.st_mode)) problem = "it is a folder";
    else if (exists ? access(path, W_OK) != 0 : access(folder, W_OK | X_OK) != 0) problem = strerror(errno);
    else if (report_check_rows(path, LADDER_CSV_HEADER, why, sizeof(why)) != 0) problem = why;
    if (!problem) return;
    fprintf(stderr, "error: cannot append rows to --csv %s: %s\n", path, problem);
    exit(EXIT_USAGE);
}

void ladder_require_gpu(const char *program, DeviceInfo *device) {
    char advice[4200];
    snprintf(advice, sizeof(advice), ": %s needs an NVIDIA GPU and its driver", program);
    if (device_query_or(device, advice) != 0) exit(EXIT_CUDA);
}

void ladder_upload_shape(char *out, size_t len, int64_t points, int threads, int64_t chunk_kib) {
    snprintf(out, len, "%lld points, %d threads x %lld KiB", (long long)points, threads, (long long)chunk_kib);
}

// ----------------------------------------------------------------------------
// statistics

LadderStats ladder_stats(const double *ms, int runs) {
    LadderStats s = {median(ms, runs), NAN, NAN};
    min_max(ms, runs, &s.min_ms, &s.max_ms);
    return s;
}

// ----------------------------------------------------------------------------
// the table and the CSV rows

static double rate_of(const LadderTable *t, double ms) { return ms > 0.0 ? t->work / ms / 1e6 : NAN; }

void ladder_table_begin(LadderTable *t) {
    t->first_ms = t->previous_ms = NAN;
    double ceiling_rate = rate_of(t, t->ceiling_time.median_ms);
    printf("\n%s, %s: %s %s %.4g ms (%.3g-%.3g) = %.1f %s\n", t->ladder, t->shape,
           t->baseline ? "baseline" : "ceiling", t->ceiling,
           t->ceiling_time.median_ms, t->ceiling_time.min_ms, t->ceiling_time.max_ms, ceiling_rate, t->unit);
    printf("ms per call: median of %d timed runs after %d warm-ups (min-max); each version checked against the CPU "
           "first\n", t->repeats, LADDER_WARMUP_RUNS);
    char titles[160];
    int width = snprintf(titles, sizeof(titles), "  %2s %-18s %10s %19s %9s %8s %8s %8s", "#", "version", "median ms",
                         "(min-max)", t->unit, t->baseline ? "% base" : "% ceil", "step", "cumul.");
    if (t->show_setup) width += snprintf(titles + width, sizeof(titles) - (size_t)width, " %10s", "setup ms");
    printf("%s\n  ", titles);
    for (int i = 2; i < width; i++) putchar('-');
    printf("\n");
}

// One version's row, in the order of LADDER_CSV_HEADER.
static void append_row(const LadderTable *t, int number, const char *name, LadderStats time, double setup_ms) {
    const double figures[] = {time.median_ms, time.min_ms, time.max_ms, setup_ms, rate_of(t, time.median_ms)};
    const char *const machine[] = {t->device->name, t->device->cc, t->device->cuda, t->device->driver};
    char err[1024];
    ReportFile out;
    if (report_rows_open(&out, t->csv_path, LADDER_CSV_HEADER, err, sizeof(err)) == 0) {
        FILE *f = out.f;
        report_csv_text(f, t->stage, 0);
        report_csv_text(f, t->ladder, 0);
        report_csv_text(f, t->shape, 0);
        fprintf(f, "%d,", number);
        report_csv_text(f, name, 0);
        for (int i = 0; i < 5; i++) report_csv_real(f, "%.6g", figures[i]);
        report_csv_text(f, t->unit, 0);
        report_csv_text(f, t->ceiling, 0);
        report_csv_real(f, "%.6g", t->ceiling_time.median_ms);
        report_csv_real(f, "%.6g", rate_of(t, t->ceiling_time.median_ms));
        fprintf(f, "%d,", t->repeats);
        for (int i = 0; i < 4; i++) report_csv_text(f, machine[i], 0);
        report_csv_text(f, provenance_commit(), 0);
        report_csv_text(f, provenance_run_id(), 1);
        if (report_file_close(&out, err, sizeof(err)) == 0) return;
    }
    fprintf(stderr, "error: %s\n", err);
    exit(EXIT_USAGE);
}

static void print_speedup(double before_ms, double ms) {
    if (isnan(before_ms)) printf(" %8s", "-");
    else printf(" %7.2fx", before_ms / ms);
}

void ladder_table_row(LadderTable *t, int number, const char *name, LadderStats time, double setup_ms) {
    double rate = rate_of(t, time.median_ms), ceiling_rate = rate_of(t, t->ceiling_time.median_ms);
    char spread[48];
    snprintf(spread, sizeof(spread), "(%.3g-%.3g)", time.min_ms, time.max_ms);
    printf("  %2d %-18s %10.4g %19s %9.1f %7.1f%%", number, name, time.median_ms, spread, rate,
           100.0 * rate / ceiling_rate);
    print_speedup(t->previous_ms, time.median_ms);
    print_speedup(t->first_ms, time.median_ms);
    if (t->show_setup) {
        if (isnan(setup_ms)) printf(" %10s", "-");
        else printf(" %10.2f", setup_ms);
    }
    printf("\n");
    fflush(stdout);
    if (isnan(t->first_ms)) t->first_ms = time.median_ms;
    t->previous_ms = time.median_ms;
    if (t->csv_path) append_row(t, number, name, time, setup_ms);
}

void ladder_table_skip(LadderTable *t, int number, const char *name, const char *why) {
    printf("  %2d %-18s skipped: %s\n", number, name, why);
    t->previous_ms = NAN;
}

// ----------------------------------------------------------------------------
// the GEMM check

void ladder_fill_uniform(float *values, int64_t count, float lo, float hi, uint64_t seed) {
    uint64_t state = seed * 2654435761u + 1;
    for (int64_t i = 0; i < count; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        double unit = (double)(state >> 11) / 9007199254740992.0;  // [0, 1), 53 bits
        values[i] = (float)(lo + (hi - lo) * unit);
        if (values[i] >= hi) values[i] = lo;  // the rounding to float can reach hi
    }
}

void ladder_gemm_init(LadderGemm *g, int m, int k, int n) {
    size_t outputs = (size_t)m * n;
    g->m = m;
    g->k = k;
    g->n = n;
    g->in = host_malloc(sizeof(float) * (size_t)m * k, "in");
    g->weight = host_malloc(sizeof(float) * (size_t)k * n, "W");
    g->bias = host_malloc(sizeof(float) * (size_t)n, "the bias");
    g->out = host_malloc(sizeof(float) * outputs, "out");
    g->expected = host_malloc(sizeof(double) * outputs, "the CPU's out");
    g->scale = host_malloc(sizeof(double) * outputs, "the error scales");
    float bound = 1.0f / sqrtf((float)k);
    ladder_fill_uniform(g->in, (int64_t)m * k, 0.0f, 1.0f, 1);
    ladder_fill_uniform(g->weight, (int64_t)k * n, -bound, bound, 2);
    ladder_fill_uniform(g->bias, n, -bound, bound, 3);
    ladder_gemm_reference(g->in, g->weight, g->bias, m, k, n, g->expected, g->scale);
}

void ladder_gemm_free(LadderGemm *g) {
    free(g->in);
    free(g->weight);
    free(g->bias);
    free(g->out);
    free(g->expected);
    free(g->scale);
}

void ladder_gemm_check(const LadderGemm *g, int number, const char *name, double input_rounding) {
    int64_t at = ladder_gemm_first_wrong(g->out, g->expected, g->scale, g->m, g->k, g->n, input_rounding);
    if (at < 0) return;
    fprintf(stderr, "error: version %d %s is wrong at %dx%dx%d: out[%lld][%lld] = %.9g, but the CPU says %.9g "
            "(tolerance %.3g)\n", number, name, g->m, g->k, g->n, (long long)(at / g->n), (long long)(at % g->n),
            g->out[at], g->expected[at], ladder_gemm_tolerance(g->k, input_rounding) * g->scale[at]);
    exit(EXIT_FAILURE);
}

int ladder_gemm_checked_row(int row, int m, int k, int n) {
    const int sampled = 64;
    if ((double)m * k * n <= 2147483648.0 || m <= sampled) return 1;
    // row i of the sample is floor(i (m - 1) / 63): is row one of them?
    int64_t i = ((int64_t)row * (sampled - 1) + (m - 2)) / (m - 1);  // the first sample at or after row
    return (int64_t)i * (m - 1) / (sampled - 1) == row;
}

void ladder_gemm_reference(const float *in, const float *weight, const float *bias, int m, int k, int n,
                           double *expected, double *scale) {
    for (int i = 0; i < m; i++) {
        if (!ladder_gemm_checked_row(i, m, k, n)) continue;
        double *sum = expected + (size_t)i * n, *size = scale + (size_t)i * n;
        for (int j = 0; j < n; j++) {
            sum[j] = bias[j];
            size[j] = fabs((double)bias[j]);
        }
        for (int p = 0; p < k; p++) {  // row by row of weight: the inner loop runs along memory
            double a = in[(size_t)i * k + p];
            const float *w = weight + (size_t)p * n;
            for (int j = 0; j < n; j++) {
                sum[j] += a * w[j];
                size[j] += fabs(a * w[j]);
            }
        }
        for (int j = 0; j < n; j++) sum[j] = sum[j] > 0.0 ? sum[j] : 0.0;
    }
}

double ladder_gemm_tolerance(int k, double input_rounding) {
    double product = 2.0 * input_rounding + input_rounding * input_rounding;  // (1 + u)^2 - 1
    return product + (k + 2.0) * ldexp(1.0, -24) * (1.0 + product);
}

int64_t ladder_gemm_first_wrong(const float *out, const double *expected, const double *scale, int m, int k, int n,
                                double input_rounding) {
    double tolerance = ladder_gemm_tolerance(k, input_rounding);
    for (int i = 0; i < m; i++) {
        if (!ladder_gemm_checked_row(i, m, k, n)) continue;
        for (int j = 0; j < n; j++) {
            size_t at = (size_t)i * n + j;
            double error = fabs((double)out[at] - expected[at]);
            if (!(error <= tolerance * scale[at])) return (int64_t)at;  // NaN fails too
        }
    }
    return -1;
}
