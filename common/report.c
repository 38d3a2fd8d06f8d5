// common/report.c: see report.h; tested by tests/test_report.c. The CSV is the only source of every table and
// plot in this repository, so it is written with enough digits to be re-read exactly.
#define _XOPEN_SOURCE 700  // realpath
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "report.h"
#include "exit_codes.h"
#include "message.h"
#include "provenance.h"


// ----------------------------------------------------------------------------
// the row

void result_row_init(ResultRow *row) {
    *row = (ResultRow){.points = -1, .batch = -1, .epochs = -1, .threads = -1, .repeats = -1};
    double *empty[] = {&row->lr, &row->setup_ms, &row->e2e_ms, &row->loop_ms, &row->ms_per_epoch, &row->h2d_ms,
                       &row->setup_min_ms, &row->setup_max_ms, &row->e2e_min_ms, &row->e2e_max_ms, &row->loop_min_ms,
                       &row->loop_max_ms, &row->epoch_min_ms, &row->epoch_max_ms, &row->train_loss, &row->test_loss,
                       &row->test_acc, &row->w, &row->b};
    for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++) *empty[i] = NAN;
    // provenance: this build's commit and dirty flag, this run, this moment
    snprintf(row->commit, sizeof(row->commit), "%s", provenance_commit());
    snprintf(row->dirty, sizeof(row->dirty), "%s", provenance_dirty());
    snprintf(row->run_id, sizeof(row->run_id), "%s", provenance_run_id());
    provenance_utc(row->utc, sizeof(row->utc));
}

// ----------------------------------------------------------------------------
// repeats: medians and ranges of the timed runs

void result_row_set_repeats(ResultRow *row, const double *setup_ms, const double *e2e_ms, const double *loop_ms,
                            const double *per_epoch_ms, int runs) {
    row->repeats = runs;
    row->setup_ms = setup_ms ? median(setup_ms, runs) : NAN;
    min_max(setup_ms, runs, &row->setup_min_ms, &row->setup_max_ms);
    min_max(e2e_ms, runs, &row->e2e_min_ms, &row->e2e_max_ms);
    min_max(loop_ms, runs, &row->loop_min_ms, &row->loop_max_ms);
    min_max(per_epoch_ms, runs, &row->epoch_min_ms, &row->epoch_max_ms);
}

void min_max(const double *values, int n, double *lo, double *hi) {
    *lo = *hi = NAN;
    for (int i = 0; values && i < n; i++) {
        if (isnan(values[i])) continue;
        if (isnan(*lo) || values[i] < *lo) *lo = values[i];
        if (isnan(*hi) || values[i] > *hi) *hi = values[i];
    }
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
// whole files: a temporary file beside the target, renamed over it once complete

// A temporary file in the directory of target (".NAME.tmp-XXXXXX"): its descriptor, or -1 with a message.
static int create_temp(const char *target, char *temp, size_t temp_len, char *err, size_t err_len) {
    const char *slash = strrchr(target, '/');
    int dir_len = slash ? (int)(slash - target) + 1 : 0;
    const char *base = slash ? slash + 1 : target;
    if (snprintf(temp, temp_len, "%.*s.%s.tmp-XXXXXX", dir_len, target, base) >= (int)temp_len) {
        error_message(err, err_len, "path too long: %.64s...", target);
        return -1;
    }
    int fd = mkstemp(temp);
    if (fd < 0) {
        error_message(err, err_len, "cannot write into the directory of %s: %s", target, strerror(errno));
        return -1;
    }
    return fd;
}

// The mode a new file gets from fopen: 0666 less the umask.
static mode_t new_file_mode(void) {
    mode_t mask = umask(0);
    umask(mask);
    return 0666 & ~mask;
}

// Once every write, the fsync and the close succeeded (failed: one before did not), the temporary file is
// renamed over the target with its mode; otherwise it is removed, and the target is left as it was.
static int replace_end(ReportFile *out, int failed, char *err, size_t err_len) {
    int fd = fileno(out->f);
    failed = failed || ferror(out->f) || fflush(out->f) != 0 || fchmod(fd, out->mode) != 0 || fsync(fd) != 0;
    int saved = errno, closed = fclose(out->f);
    if (!failed && (closed != 0 || rename(out->temp, out->target) != 0)) {
        failed = 1;
        saved = errno;
    }
    if (!failed) return 0;
    unlink(out->temp);
    error_message(err, err_len, "cannot write %s: %s (left as it was)", out->target, strerror(saved));
    return -1;
}

int report_file_close(ReportFile *out, char *err, size_t err_len) { return replace_end(out, 0, err, err_len); }

// Starts replacing out->target: out->f, a temporary file beside it, gets the rest of old_fd (when >= 0), then
// head and a newline (when not NULL). -1 with a message, and nothing left behind, otherwise.
static int replace_begin(ReportFile *out, int old_fd, const char *head, mode_t mode, char *err, size_t err_len) {
    char buf[1 << 16];
    int fd = create_temp(out->target, out->temp, sizeof(out->temp), err, err_len);
    if (fd < 0) return -1;
    out->mode = mode;
    if (!(out->f = fdopen(fd, "w"))) {
        error_message(err, err_len, "cannot write %s: %s (left as it was)", out->target, strerror(errno));
        close(fd);
        unlink(out->temp);
        return -1;
    }
    int failed = 0;
    for (ssize_t got; old_fd >= 0 && !failed && (got = read(old_fd, buf, sizeof(buf))) != 0;)
        failed = got < 0 ? errno != EINTR : fwrite(buf, 1, (size_t)got, out->f) != (size_t)got;
    if (!failed && head) failed = fprintf(out->f, "%s\n", head) < 0;
    return failed ? replace_end(out, 1, err, err_len) : 0;
}

// An existing output must start with header and end with a newline (or be empty): -1 with a message
// otherwise.
static int check_header(int fd, const struct stat *info, const char *path, const char *header, char *err,
                        size_t err_len) {
    if (info->st_size == 0) return 0;
    char first[1024];
    size_t len = strlen(header);
    ssize_t got = pread(fd, first, sizeof(first) - 1, 0);
    if (got < 0) {
        error_message(err, err_len, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    first[got] = '\0';
    size_t line = strcspn(first, "\r\n");
    if (line != len || memcmp(first, header, len) != 0) {
        error_message(err, err_len, "%s holds another kind of rows (its first line is '%.*s%s', not the header '%.40s...'): "
                      "give a new file, or one written by the same flag",
                      path, (int)(line > 60 ? 60 : line), first, line > 60 ? "..." : "", header);
        return -1;
    }
    char last;
    if (pread(fd, &last, 1, info->st_size - 1) != 1 || last != '\n') {
        error_message(err, err_len, "%s does not end with a newline (a row cut off?): repair or remove its last line", path);
        return -1;
    }
    return 0;
}

// Where rows for path go: target is path, or the file a symbolic link at path names. That file, when it
// exists, is opened for reading (without blocking on a FIFO; else *fd = -1) and must be a regular file
// under header (check_header): 0, or -1 with a message.
static int open_rows(const char *path, const char *header, char target[PATH_MAX], int *fd, struct stat *info,
                     char *err, size_t err_len) {
    struct stat link_info;
    *fd = -1;
    if (lstat(path, &link_info) == 0 && S_ISLNK(link_info.st_mode)) {
        if (!realpath(path, target)) {
            error_message(err, err_len, "%s is a symbolic link to nothing (%s)", path, strerror(errno));
            return -1;
        }
    } else if (snprintf(target, PATH_MAX, "%s", path) >= PATH_MAX) {
        error_message(err, err_len, "path too long: %.64s...", path);
        return -1;
    }
    *fd = open(target, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (*fd < 0) {
        if (errno == ENOENT) return 0;
        error_message(err, err_len, "cannot read %s: %s", target, strerror(errno));
        return -1;
    }
    if (fstat(*fd, info) != 0 || !S_ISREG(info->st_mode))
        error_message(err, err_len, "%s is not a regular file: results go to a plain file", target);
    else if (check_header(*fd, info, target, header, err, err_len) == 0)
        return 0;
    close(*fd);
    *fd = -1;
    return -1;
}

int report_check_rows(const char *path, const char *header, char *err, size_t err_len) {
    char target[PATH_MAX], temp[PATH_MAX + 32];
    int fd;
    struct stat info;
    if (open_rows(path, header, target, &fd, &info, err, err_len) != 0) return -1;
    if (fd >= 0) close(fd);
    int probe = create_temp(target, temp, sizeof(temp), err, err_len);
    if (probe < 0) return -1;
    close(probe);
    unlink(temp);
    return 0;
}

int report_check_outputs(const char *csv_path, const char *curve_path, char *err, size_t err_len) {
    const char *paths[] = {csv_path, curve_path}, *headers[] = {REPORT_CSV_HEADER, REPORT_CURVE_HEADER};
    char why[1024];
    for (int i = 0; i < 2; i++)
        if (paths[i] && report_check_rows(paths[i], headers[i], why, sizeof(why)) != 0) {
            error_message(err, err_len, "%s: %s", i ? "--curve" : "--csv", why);
            return -1;
        }
    struct stat a, b;
    if (csv_path && curve_path && (strcmp(csv_path, curve_path) == 0 || (stat(csv_path, &a) == 0 &&
                                   stat(curve_path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino))) {
        error_message(err, err_len, "--csv and --curve name the same file (%s): result rows and curve rows need a file each",
                      csv_path);
        return -1;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// CSV

void report_csv_text(FILE *f, const char *text, int last) {
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

void report_csv_real(FILE *f, const char *format, double value) {
    if (!isnan(value)) fprintf(f, format, value);
    fputc(',', f);
}

int report_rows_open(ReportFile *out, const char *path, const char *header, char *err, size_t err_len) {
    int old_fd;
    struct stat info;
    if (open_rows(path, header, out->target, &old_fd, &info, err, err_len) != 0) return -1;
    int status = replace_begin(out, old_fd, old_fd < 0 || info.st_size == 0 ? header : NULL,
                               old_fd < 0 ? new_file_mode() : info.st_mode & 07777, err, err_len);
    if (old_fd >= 0) close(old_fd);
    return status;
}

// The fields in the order of REPORT_CSV_HEADER (schema 2).
int report_append_csv(const ResultRow *row, const char *path, char *err, size_t err_len) {
    const double timed[] = {row->setup_ms, row->e2e_ms, row->loop_ms, row->ms_per_epoch, row->h2d_ms};
    const double spread[] = {row->setup_min_ms, row->setup_max_ms, row->e2e_min_ms, row->e2e_max_ms,
                             row->loop_min_ms,  row->loop_max_ms,  row->epoch_min_ms, row->epoch_max_ms};
    const double fit[] = {row->train_loss, row->test_loss, row->test_acc, row->w, row->b};
    const char *const machine[] = {row->device, row->cc, row->cuda, row->driver};
    ReportFile out;
    if (report_rows_open(&out, path, REPORT_CSV_HEADER, err, err_len) != 0) return -1;
    FILE *f = out.f;
    report_csv_text(f, row->stage, 0);
    report_csv_text(f, row->trainer, 0);
    report_csv_text(f, row->variant, 0);
    csv_int(f, row->points);
    report_csv_text(f, row->hidden, 0);
    csv_int(f, row->batch);
    csv_int(f, row->epochs);
    report_csv_real(f, "%.7g", row->lr);  // a float flag: 7 digits give back what was typed (0.01, not 0.00999999978)
    report_csv_text(f, row->precision, 0);
    for (int i = 0; i < 4; i++) report_csv_text(f, machine[i], 0);
    csv_int(f, row->threads);
    report_csv_text(f, "", 0);  // torch: PyTorch rows only
    for (int i = 0; i < 5; i++) report_csv_real(f, "%.6g", timed[i]);
    csv_int(f, row->repeats);
    for (int i = 0; i < 8; i++) report_csv_real(f, "%.6g", spread[i]);
    for (int i = 0; i < 5; i++) report_csv_real(f, "%.9g", fit[i]);
    report_csv_text(f, "", 0);  // graph_breaks: torch.compile rows only
    report_csv_text(f, "", 0);  // recompiles: torch.compile rows only
    report_csv_text(f, row->commit, 0);
    report_csv_text(f, row->dirty, 0);
    report_csv_text(f, row->run_id, 0);
    report_csv_text(f, row->utc, 1);
    return report_file_close(&out, err, err_len);
}

int report_append_curves(const char *path, const ResultRow *row, const CurveSeries *series, int n_series, char *err,
                         size_t err_len) {
    ReportFile out;
    if (report_rows_open(&out, path, REPORT_CURVE_HEADER, err, err_len) != 0) return -1;
    for (const CurveSeries *c = series; c < series + n_series; c++)
        for (int i = 0; i < c->count; i++) {
            report_csv_text(out.f, row->stage, 0);
            report_csv_text(out.f, row->trainer, 0);
            report_csv_text(out.f, row->variant, 0);
            report_csv_text(out.f, row->hidden, 0);
            report_csv_text(out.f, c->series, 0);
            fprintf(out.f, "%d,%.9g,", c->index ? c->index[i] : c->first_index + i, c->values[i]);
            report_csv_text(out.f, row->device, 0);
            report_csv_text(out.f, row->commit, 0);
            report_csv_text(out.f, row->run_id, 1);
        }
    return report_file_close(&out, err, err_len);
}

int report_flush_stdout(void) {
    errno = 0;
    int failed = fflush(stdout) != 0 || ferror(stdout);
    if (failed) {
        int saved = errno;
        fprintf(stderr, "error: cannot write the results to standard output: %s\n",
                saved ? strerror(saved) : "write error");
        return -1;
    }
    return 0;
}

int report_exit_status(int status) {
    if (report_flush_stdout() != 0 && status == EXIT_OK) status = EXIT_USAGE;
    return status;
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
    ReportFile out;
    struct stat info;
    if (make_dirs(dir, err, err_len) != 0) return -1;
    if (snprintf(out.target, sizeof(out.target), "%s/%s", dir, name) >= (int)sizeof(out.target)) {
        error_message(err, err_len, "export path too long: %.64s...", dir);
        return -1;
    }
    if (stat(out.target, &info) == 0 && !S_ISREG(info.st_mode)) {
        error_message(err, err_len, "%s is not a regular file: cannot replace it", out.target);
        return -1;
    }
    if (replace_begin(&out, -1, NULL, new_file_mode(), err, err_len) != 0) return -1;
    fwrite(data, 1, bytes, out.f);
    return report_file_close(&out, err, err_len);
}

int report_export(const char *dir, const ExportFile files[3], int quiet) {
    char err[512];
    for (int i = 0; i < 3; i++)
        if (report_write_file(dir, files[i].name, files[i].data, files[i].bytes, err, sizeof(err)) != 0) {
            fprintf(stderr, "error: --export: %s\n", err);
            return EXIT_USAGE;
        }
    if (!quiet) printf("exported %s/%s (with %s, %s)\n", dir, files[2].name, files[0].name, files[1].name);
    return EXIT_OK;
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
        fflush(stdout);  // the epoch lines before the error line, also where stdout is a pipe
        fprintf(stderr, "error: loss became %s at epoch %d (try a smaller --lr)\n", bad, bad_epoch);
        return EXIT_DIVERGED;
    }
    if (!quiet && timing->setup_ms > 0)
        printf("setup (untimed: handles, graph instantiation): %.3f ms\n", timing->setup_ms);
    if (!breakdown) return EXIT_OK;
    double total = 0.0;
    for (int p = 0; p < PHASE_COUNT; p++) total += timing->phase_ms[p];
    printf("breakdown (last run; timing each phase adds a synchronization after it, so e2e and loop grow):\n");
    if (!(total > 0.0)) {
        printf("  no phase times recorded by this trainer\n");
        return EXIT_OK;
    }
    printf("  %-10s %12s %7s\n", "phase", "ms", "share");
    for (int p = 0; p < PHASE_COUNT; p++)
        printf("  %-10s %12.3f %6.1f%%\n", PHASE_NAMES[p], timing->phase_ms[p], 100.0 * timing->phase_ms[p] / total);
    printf("  %-10s %12.3f %6.1f%%\n", "sum", total, 100.0);
    return EXIT_OK;
}

// The block's rows, in order: e2e, loop, h2d, median epoch, setup; each `runs` long.
void report_record_run(double *runs_ms, int runs, int run, const TrainTiming *timing, int epochs) {
    runs_ms[run] = timing->e2e_ms;
    runs_ms[runs + run] = timing->loop_ms;
    runs_ms[2 * runs + run] = timing->h2d_ms;
    runs_ms[3 * runs + run] = median(timing->epoch_ms, epochs);
    runs_ms[4 * runs + run] = timing->setup_ms;
}

void report_reset_timing(TrainTiming *timing, int epochs) {
    *timing = (TrainTiming){.e2e_ms = NAN, .loop_ms = NAN, .h2d_ms = NAN, .setup_ms = NAN, .epoch_ms = timing->epoch_ms};
    for (int e = 0; e < epochs; e++) timing->epoch_ms[e] = NAN;
}

void result_row_set_runs(ResultRow *row, const DeviceInfo *device, const double *runs_ms, int runs) {
    const double *e2e_ms = runs_ms, *loop_ms = runs_ms + runs, *per_epoch_ms = runs_ms + 3 * runs;
    snprintf(row->device, sizeof(row->device), "%s", device->name);
    snprintf(row->cc, sizeof(row->cc), "%s", device->cc);
    snprintf(row->cuda, sizeof(row->cuda), "%s", device->cuda);
    snprintf(row->driver, sizeof(row->driver), "%s", device->driver);
    row->e2e_ms = median(e2e_ms, runs);
    row->loop_ms = median(loop_ms, runs);
    row->h2d_ms = median(runs_ms + 2 * runs, runs);
    row->ms_per_epoch = median(per_epoch_ms, runs);
    result_row_set_repeats(row, runs_ms + 4 * runs, e2e_ms, loop_ms, per_epoch_ms, runs);
}

int report_append_outputs(const ResultRow *row, const char *csv_path, const char *curve_path,
                          const CurveSeries *series, int n_series) {
    char err[1024];
    if (csv_path && report_append_csv(row, csv_path, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: --csv: %s\n", err);
        return EXIT_USAGE;
    }
    if (curve_path && report_append_curves(curve_path, row, series, n_series, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: --curve: %s\n", err);
        return EXIT_USAGE;
    }
    return EXIT_OK;
}
