// common/report.c: result rows for humans (stdout) and for tools (CSV), plus the drivers' other
// outputs: --curve rows, the --breakdown table and the --export files (see report.h).
//
// The CSV is the only source of every table and plot in this repository, so it is written with
// enough digits to be re-read exactly and quoted wherever a field holds a comma ("1024,1024").
// Built into build/common/libcommon.a; tested by tests/test_report.c.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "report.h"
#include "exit_codes.h"
#include "message.h"
#include "provenance.h"


// ----------------------------------------------------------------------------
// the row

void result_row_init(ResultRow *row) {
    memset(row, 0, sizeof(*row));
    row->points = -1;
    row->batch = -1;
    row->epochs = -1;
    row->lr = NAN;
    row->threads = -1;
    row->repeats = -1;
    row->setup_ms = row->e2e_ms = row->loop_ms = row->ms_per_epoch = row->h2d_ms = NAN;
    row->setup_min_ms = row->setup_max_ms = row->e2e_min_ms = row->e2e_max_ms = NAN;
    row->loop_min_ms = row->loop_max_ms = row->epoch_min_ms = row->epoch_max_ms = NAN;
    row->train_loss = row->test_loss = row->test_acc = row->w = row->b = NAN;
    result_row_stamp(row);
}

// ----------------------------------------------------------------------------
// provenance and repeats (the columns of schema 2 that say where a figure comes from and how it varied)

void result_row_stamp(ResultRow *row) {
    snprintf(row->commit, sizeof(row->commit), "%s", provenance_commit());
    snprintf(row->dirty, sizeof(row->dirty), "%s", provenance_dirty());
    snprintf(row->run_id, sizeof(row->run_id), "%s", provenance_run_id());
    provenance_utc(row->utc, sizeof(row->utc));
}

// Smallest and largest of values[0..n), NaN ignored; both NaN when there is no number.
static void min_max(const double *values, int n, double *lo, double *hi) {
    *lo = *hi = NAN;
    for (int i = 0; values && i < n; i++) {
        if (isnan(values[i])) continue;
        if (isnan(*lo) || values[i] < *lo) *lo = values[i];
        if (isnan(*hi) || values[i] > *hi) *hi = values[i];
    }
}

void result_row_set_repeats(ResultRow *row, const double *setup_ms, const double *e2e_ms, const double *loop_ms,
                            const double *per_epoch_ms, int runs) {
    row->repeats = runs;
    row->setup_ms = setup_ms ? median(setup_ms, runs) : NAN;
    min_max(setup_ms, runs, &row->setup_min_ms, &row->setup_max_ms);
    min_max(e2e_ms, runs, &row->e2e_min_ms, &row->e2e_max_ms);
    min_max(loop_ms, runs, &row->loop_min_ms, &row->loop_max_ms);
    min_max(per_epoch_ms, runs, &row->epoch_min_ms, &row->epoch_max_ms);
}

// ----------------------------------------------------------------------------
// the human line

// Milliseconds to read at a glance: 4 significant digits, no exponent for long runs.
static const char *fmt_ms(double ms, char *buf, size_t len) {
    snprintf(buf, len, ms >= 1000.0 ? "%.0f" : "%.4g", ms);
    return buf;
}

void report_print(const ResultRow *row, FILE *out) {
    char a[32], b[32], c[32], d[32];
    fprintf(out, "stage %s %s (", row->stage, row->trainer);
    if (row->variant[0]) fprintf(out, "%s, ", row->variant);
    if (row->points >= 0) fprintf(out, "%lld points, ", (long long)row->points);
    if (row->hidden[0]) fprintf(out, "hidden %s, ", row->hidden);
    if (row->batch >= 0) fprintf(out, "batch %d, ", row->batch);
    fprintf(out, "%d epoch%s, lr %g", row->epochs, row->epochs == 1 ? "" : "s", row->lr);
    if (row->precision[0]) fprintf(out, ", %s", row->precision);
    fprintf(out, ") on %s:", row->device[0] ? row->device : "unknown device");
    if (!isnan(row->setup_ms)) fprintf(out, " setup %s ms,", fmt_ms(row->setup_ms, a, sizeof(a)));
    fprintf(out, " e2e %s ms, loop %s ms, %s ms/epoch, h2d %s ms", fmt_ms(row->e2e_ms, a, sizeof(a)),
            fmt_ms(row->loop_ms, b, sizeof(b)), fmt_ms(row->ms_per_epoch, c, sizeof(c)),
            fmt_ms(row->h2d_ms, d, sizeof(d)));
    fprintf(out, " | train_loss %.6g test_loss %.6g", row->train_loss, row->test_loss);
    if (!isnan(row->test_acc)) fprintf(out, " test_acc %.2f%%", 100.0 * row->test_acc);
    if (!isnan(row->w) || !isnan(row->b)) fprintf(out, " | w %.6g b %.6g", row->w, row->b);
    fprintf(out, "\n");
}

// ----------------------------------------------------------------------------
// CSV

// Opens path for appending; writes header first when the file is new or empty.
static FILE *open_csv(const char *path, const char *header, char *err, size_t err_len) {
    FILE *f = fopen(path, "a");
    if (!f) {
        error_message(err, err_len, "cannot open %s for appending: %s", path, strerror(errno));
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) == 0 && ftell(f) == 0) fprintf(f, "%s\n", header);
    return f;
}

static int close_csv(FILE *f, const char *path, char *err, size_t err_len) {
    int failed = ferror(f);
    if (fclose(f) != 0) failed = 1;
    if (failed) error_message(err, err_len, "cannot write %s: %s", path, strerror(errno));
    return failed ? -1 : 0;
}

// A text field, quoted (with quotes doubled) only when it holds a comma, quote or line break.
static void csv_text(FILE *f, const char *text, int last) {
    if (strpbrk(text, ",\"\r\n")) {
        fputc('"', f);
        for (const char *c = text; *c; c++) {
            if (*c == '"') fputc('"', f);
            fputc(*c, f);
        }
        fputc('"', f);
    } else {
        fputs(text, f);
    }
    fputc(last ? '\n' : ',', f);
}

static void csv_int(FILE *f, int64_t value) {
    if (value >= 0) fprintf(f, "%lld", (long long)value);
    fputc(',', f);
}

static void csv_real(FILE *f, const char *format, double value) {
    if (!isnan(value)) fprintf(f, format, value);
    fputc(',', f);
}

// The fields of one result row, in the order of REPORT_CSV_HEADER (schema 2), ending the line.
static void csv_result_fields(FILE *f, const ResultRow *row) {
    csv_text(f, row->stage, 0);
    csv_text(f, row->trainer, 0);
    csv_text(f, row->variant, 0);
    csv_int(f, row->points);
    csv_text(f, row->hidden, 0);
    csv_int(f, row->batch);
    csv_int(f, row->epochs);
    csv_real(f, "%.7g", row->lr);  // a float flag: 7 digits give back what was typed (0.01, not 0.00999999978)
    csv_text(f, row->precision, 0);
    csv_text(f, row->device, 0);
    csv_text(f, row->cc, 0);
    csv_text(f, row->cuda, 0);
    csv_text(f, row->driver, 0);
    csv_int(f, row->threads);
    csv_text(f, "", 0);  // torch: PyTorch rows only
    csv_real(f, "%.6g", row->setup_ms);
    csv_real(f, "%.6g", row->e2e_ms);
    csv_real(f, "%.6g", row->loop_ms);
    csv_real(f, "%.6g", row->ms_per_epoch);
    csv_real(f, "%.6g", row->h2d_ms);
    csv_int(f, row->repeats);
    csv_real(f, "%.6g", row->setup_min_ms);
    csv_real(f, "%.6g", row->setup_max_ms);
    csv_real(f, "%.6g", row->e2e_min_ms);
    csv_real(f, "%.6g", row->e2e_max_ms);
    csv_real(f, "%.6g", row->loop_min_ms);
    csv_real(f, "%.6g", row->loop_max_ms);
    csv_real(f, "%.6g", row->epoch_min_ms);
    csv_real(f, "%.6g", row->epoch_max_ms);
    csv_real(f, "%.9g", row->train_loss);
    csv_real(f, "%.9g", row->test_loss);
    csv_real(f, "%.9g", row->test_acc);
    csv_real(f, "%.9g", row->w);
    csv_real(f, "%.9g", row->b);
    csv_text(f, "", 0);  // graph_breaks: torch.compile rows only
    csv_text(f, "", 0);  // recompiles: torch.compile rows only
    csv_text(f, row->commit, 0);
    csv_text(f, row->dirty, 0);
    csv_text(f, row->run_id, 0);
    csv_text(f, row->utc, 1);
}

// A file that exists and starts with another header (an older schema's) is not appended to: its
// readers would take the new fields for the old columns. Returns -1 with a message in err.
static int check_existing_header(const char *path, const char *header, char *err, size_t err_len) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;  // absent (or unreadable: opening it for appending reports that)
    char line[1024];
    int empty = !fgets(line, sizeof(line), f);
    fclose(f);
    if (empty) return 0;  // an empty file gets the header
    line[strcspn(line, "\r\n")] = '\0';
    if (strcmp(line, header) == 0) return 0;
    error_message(err, err_len, "%s starts with another header (an older schema?): move it aside or write another file",
                  path);
    return -1;
}

int report_append_csv(const ResultRow *row, const char *path, char *err, size_t err_len) {
    if (check_existing_header(path, REPORT_CSV_HEADER, err, err_len) != 0) return -1;
    FILE *f = open_csv(path, REPORT_CSV_HEADER, err, err_len);
    if (!f) return -1;
    csv_result_fields(f, row);
    return close_csv(f, path, err, err_len);
}

int report_append_curve(const char *path, const ResultRow *row, const char *series, const float *values,
                        const int *index, int first_index, int count, char *err, size_t err_len) {
    if (check_existing_header(path, REPORT_CURVE_HEADER, err, err_len) != 0) return -1;
    FILE *f = open_csv(path, REPORT_CURVE_HEADER, err, err_len);
    if (!f) return -1;
    for (int i = 0; i < count; i++) {
        csv_text(f, row->stage, 0);
        csv_text(f, row->trainer, 0);
        csv_text(f, row->variant, 0);
        csv_text(f, row->hidden, 0);
        csv_text(f, series, 0);
        fprintf(f, "%d,%.9g,", index ? index[i] : first_index + i, values[i]);
        csv_text(f, row->device, 0);
        csv_text(f, row->commit, 0);
        csv_text(f, row->run_id, 1);
    }
    return close_csv(f, path, err, err_len);
}

// ----------------------------------------------------------------------------
// statistics

// Ascending, NaN last, so that a failed run cannot become the median by accident.
static int compare_doubles(const void *pa, const void *pb) {
    double a = *(const double *)pa, b = *(const double *)pb;
    if (isnan(a) || isnan(b)) return isnan(a) - isnan(b);
    return (a > b) - (a < b);
}

double median(const double *values, int n) {
    if (n <= 0) return NAN;
    double *sorted = malloc(sizeof(double) * (size_t)n);
    if (!sorted) return NAN;
    memcpy(sorted, values, sizeof(double) * (size_t)n);
    qsort(sorted, (size_t)n, sizeof(double), compare_doubles);
    double mid = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    free(sorted);
    return mid;
}

// ----------------------------------------------------------------------------
// --breakdown

void report_print_breakdown(const double phase_ms[PHASE_COUNT], FILE *out) {
    double total = 0.0;
    for (int p = 0; p < PHASE_COUNT; p++) total += phase_ms[p];
    fprintf(out, "breakdown (last run; timing each phase adds a synchronization after it, so e2e and loop grow):\n");
    if (!(total > 0.0)) {
        fprintf(out, "  no phase times recorded by this trainer\n");
        return;
    }
    fprintf(out, "  %-10s %12s %7s\n", "phase", "ms", "share");
    for (int p = 0; p < PHASE_COUNT; p++)
        fprintf(out, "  %-10s %12.3f %6.1f%%\n", PHASE_NAMES[p], phase_ms[p], 100.0 * phase_ms[p] / total);
    fprintf(out, "  %-10s %12.3f %6.1f%%\n", "sum", total, 100.0);
}

// ----------------------------------------------------------------------------
// --export

// mkdir -p: every prefix of dir that ends before a '/' and dir itself.
static int make_dirs(const char *dir, char *err, size_t err_len) {
    char path[4096];
    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path)) {
        error_message(err, err_len, "export directory name too long: %.64s...", dir);
        return -1;
    }
    for (char *c = path + 1;; c++) {
        if (*c != '/' && *c != '\0') continue;
        char saved = *c;
        *c = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            error_message(err, err_len, "cannot create directory %s: %s", path, strerror(errno));
            return -1;
        }
        *c = saved;
        if (saved == '\0') break;
    }
    struct stat info;
    if (stat(path, &info) != 0 || !S_ISDIR(info.st_mode)) {
        error_message(err, err_len, "%s is not a directory", dir);
        return -1;
    }
    return 0;
}

int report_write_file(const char *dir, const char *name, const void *data, size_t bytes, char *err, size_t err_len) {
    if (make_dirs(dir, err, err_len) != 0) return -1;
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path)) {
        error_message(err, err_len, "export path too long: %.64s...", dir);
        return -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        error_message(err, err_len, "cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    int failed = fwrite(data, 1, bytes, f) != bytes;
    if (fclose(f) != 0) failed = 1;
    if (failed) {
        error_message(err, err_len, "cannot write %zu bytes to %s: %s", bytes, path, strerror(errno));
        return -1;
    }
    return 0;
}

void result_row_name(ResultRow *row, int reference, const char *stage, const char *trainer, const char *variant,
                     const char *precision) {
    snprintf(row->stage, sizeof(row->stage), "%s", reference ? "cpu-reference" : stage);
    snprintf(row->trainer, sizeof(row->trainer), "%s", trainer);
    snprintf(row->variant, sizeof(row->variant), "%s", reference ? "" : variant);
    snprintf(row->precision, sizeof(row->precision), "%s", reference ? "fp64" : precision);
    row->threads = reference ? 1 : -1;  // common/reference.c trains on one thread
}

int report_training_outcome(int bad_epoch, const char *bad, const TrainTiming *timing, int quiet, int breakdown) {
    if (bad_epoch >= 0) {
        fprintf(stderr, "error: loss became %s at epoch %d (try a smaller --lr)\n", bad, bad_epoch);
        return EXIT_DIVERGED;
    }
    if (!quiet && timing->setup_ms > 0)
        printf("setup (untimed: handles, graph instantiation): %.3f ms\n", timing->setup_ms);
    if (breakdown) report_print_breakdown(timing->phase_ms, stdout);
    return EXIT_OK;
}

void result_row_set_measurements(ResultRow *row, const DeviceInfo *device, const double *e2e_ms,
                                 const double *loop_ms, const double *h2d_ms, const double *per_epoch_ms, int runs) {
    snprintf(row->device, sizeof(row->device), "%s", device->name);
    snprintf(row->cc, sizeof(row->cc), "%s", device->cc);
    snprintf(row->cuda, sizeof(row->cuda), "%s", device->cuda);
    snprintf(row->driver, sizeof(row->driver), "%s", device->driver);
    row->e2e_ms = median(e2e_ms, runs);
    row->loop_ms = median(loop_ms, runs);
    row->h2d_ms = median(h2d_ms, runs);
    row->ms_per_epoch = median(per_epoch_ms, runs);
}
