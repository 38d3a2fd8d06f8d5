// tests/test_report.c: Criterion suite "report": result rows (common/report.c) as the CSV readers in
// bench/ (results_csv.py, report_rows.py) needs them: the exact header once, 40 columns (schema 2), quoting, empty
// fields, the median and spread of the repeats the drivers report, and the provenance of every row.
//
//     make test          (part of build/tests/test_cpu), or alone:
//     gcc -std=c11 -D_POSIX_C_SOURCE=200809L -Icommon -I/usr/local/cuda/include tests/test_report.c
//         common/report.c common/provenance.c common/timing.c -L/usr/local/cuda/lib64 -lcudart -lcriterion -lm -o /tmp/treport && /tmp/treport
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exit_codes.h"
#include "provenance.h"
#include "report.h"

#define COLUMNS 40
#define MAX_FIELDS 64

static char dir[64];
static char csv_path[128];
static char err[512];

static void make_dir(void) {
    snprintf(dir, sizeof(dir), "/tmp/test_report_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(csv_path, sizeof(csv_path), "%s/rows.csv", dir);
}

static void remove_dir(void) {
    const char *names[] = {"rows.csv", "curve.csv", "old.csv", "a/b/blob.bin"};
    char path[512];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        remove(path);
    }
    snprintf(path, sizeof(path), "%s/a/b", dir);
    rmdir(path);
    snprintf(path, sizeof(path), "%s/a", dir);
    rmdir(path);
    DIR *d = opendir(dir);
    struct dirent *entry;
    while (d && (entry = readdir(d)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
        snprintf(path, sizeof(path), "%s/%s", dir, entry->d_name);
        if (unlink(path) != 0) rmdir(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

TestSuite(report, .init = make_dir, .fini = remove_dir);

// The file's lines (at most 8), each without its newline.
static int read_lines(const char *path, char lines[8][1024]) {
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot read %s", path);
    int n = 0;
    while (n < 8 && fgets(lines[n], 1024, f)) {
        lines[n][strcspn(lines[n], "\n")] = '\0';
        n++;
    }
    fclose(f);
    return n;
}

// Splits one CSV line (quoted fields with doubled quotes) into fields; returns their count.
static int split_csv(const char *line, char fields[MAX_FIELDS][256]) {
    int n = 0, len = 0, quoted = 0;
    for (const char *c = line;; c++) {
        if (quoted && *c == '"' && c[1] == '"') {
            fields[n][len++] = '"';
            c++;
        } else if (*c == '"') {
            quoted = !quoted;
        } else if ((*c == ',' && !quoted) || *c == '\0') {
            fields[n][len] = '\0';
            n++;
            len = 0;
            if (*c == '\0' || n == MAX_FIELDS) return n;
        } else {
            fields[n][len++] = *c;
        }
    }
}

// The field under the column called name (the test fails when there is none).
static const char *field_named(char header[MAX_FIELDS][256], char fields[MAX_FIELDS][256], const char *name) {
    for (int c = 0; c < COLUMNS; c++)
        if (strcmp(header[c], name) == 0) return fields[c];
    cr_assert_fail("no column %s in the header", name);
    return NULL;
}

static ResultRow mnist_row(void) {
    ResultRow row;
    result_row_init(&row);
    snprintf(row.stage, sizeof(row.stage), "03");
    snprintf(row.trainer, sizeof(row.trainer), "mnist");
    snprintf(row.variant, sizeof(row.variant), "fused");
    snprintf(row.hidden, sizeof(row.hidden), "1024,1024");
    snprintf(row.precision, sizeof(row.precision), "fp32");
    snprintf(row.device, sizeof(row.device), "NVIDIA H100 80GB HBM3");
    row.batch = 128;
    row.epochs = 10;
    row.lr = 0.1;
    row.e2e_ms = 1234.5678;
    row.train_loss = 0.123456789;
    row.test_acc = 0.9812;
    return row;
}

// ----------------------------------------------------------------------------
// the row

Test(report, init_leaves_every_column_empty) {
    ResultRow row;
    memset(&row, 0x7f, sizeof(row));
    result_row_init(&row);
    cr_assert(isnan(row.lr) && isnan(row.e2e_ms) && isnan(row.loop_ms) && isnan(row.ms_per_epoch) && isnan(row.h2d_ms));
    cr_assert(isnan(row.train_loss) && isnan(row.test_loss) && isnan(row.test_acc) && isnan(row.w) && isnan(row.b));
    cr_assert_eq(row.points, -1);
    cr_assert_eq(row.batch, -1);
    cr_assert_eq(row.epochs, -1);
    cr_assert_str_empty(row.stage);
    cr_assert_str_empty(row.hidden);
    cr_assert_str_empty(row.device);
    cr_assert_str_not_empty(row.commit);
}

// ----------------------------------------------------------------------------
// CSV

Test(report, header_exactly_once) {
    ResultRow row = mnist_row();
    cr_assert_eq(report_append_csv(&row, csv_path, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(report_append_csv(&row, csv_path, err, sizeof(err)), 0, "%s", err);
    char lines[8][1024];
    cr_assert_eq(read_lines(csv_path, lines), 3);
    cr_assert_str_eq(lines[0], REPORT_CSV_HEADER);
    cr_assert_str_eq(lines[1], lines[2]);
    cr_assert_neq(strcmp(lines[1], REPORT_CSV_HEADER), 0);
}

Test(report, header_written_into_an_empty_file) {
    fclose(fopen(csv_path, "w"));
    ResultRow row = mnist_row();
    cr_assert_eq(report_append_csv(&row, csv_path, err, sizeof(err)), 0, "%s", err);
    char lines[8][1024];
    cr_assert_eq(read_lines(csv_path, lines), 2);
    cr_assert_str_eq(lines[0], REPORT_CSV_HEADER);
}

Test(report, columns_quoting_and_empty_fields) {
    ResultRow row = mnist_row();
    cr_assert_eq(report_append_csv(&row, csv_path, err, sizeof(err)), 0, "%s", err);
    char lines[8][1024], header[MAX_FIELDS][256], fields[MAX_FIELDS][256];
    read_lines(csv_path, lines);
    cr_assert_eq(split_csv(lines[0], header), COLUMNS);
    cr_assert_eq(split_csv(lines[1], fields), COLUMNS, "row: %s", lines[1]);
    cr_assert_not_null(strstr(lines[1], ",\"1024,1024\","), "hidden not quoted: %s", lines[1]);

    // by column name, so that a reordered header cannot hide a shifted value
    const char *want[][2] = {
        {"stage", "03"},     {"trainer", "mnist"}, {"variant", "fused"},  {"points", ""},
        {"hidden", "1024,1024"}, {"batch", "128"}, {"epochs", "10"},      {"lr", "0.1"},
        {"precision", "fp32"}, {"cc", ""},         {"e2e_ms", "1234.57"}, {"loop_ms", ""},
        {"train_loss", "0.123456789"}, {"test_loss", ""}, {"test_acc", "0.9812"}, {"w", ""}, {"b", ""},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        int column = -1;
        for (int c = 0; c < COLUMNS; c++)
            if (strcmp(header[c], want[i][0]) == 0) column = c;
        cr_assert_geq(column, 0, "no column %s", want[i][0]);
        cr_assert_str_eq(fields[column], want[i][1], "column %s: '%s', want '%s'", want[i][0], fields[column],
                         want[i][1]);
    }
    cr_assert_str_not_empty(field_named(header, fields, "commit"), "commit column empty");
}

Test(report, quotes_inside_a_field_are_doubled) {
    ResultRow row = mnist_row();
    snprintf(row.device, sizeof(row.device), "GPU \"x\", rev 2");
    cr_assert_eq(report_append_csv(&row, csv_path, err, sizeof(err)), 0, "%s", err);
    char lines[8][1024], fields[MAX_FIELDS][256];
    read_lines(csv_path, lines);
    cr_assert_not_null(strstr(lines[1], "\"GPU \"\"x\"\", rev 2\""), "%s", lines[1]);
    cr_assert_eq(split_csv(lines[1], fields), COLUMNS);
    cr_assert_str_eq(fields[9], "GPU \"x\", rev 2");
}

Test(report, unwritable_path_is_an_error) {
    ResultRow row = mnist_row();
    cr_assert_eq(report_append_csv(&row, "/nonexistent/dir/rows.csv", err, sizeof(err)), -1);
    cr_assert_not_null(strstr(err, "/nonexistent/dir/rows.csv"), "%s", err);
}

Test(report, curve_rows) {
    char path[160];
    snprintf(path, sizeof(path), "%s/curve.csv", dir);
    ResultRow row = mnist_row();
    snprintf(row.commit, sizeof(row.commit), "c0ffee123456");
    snprintf(row.run_id, sizeof(row.run_id), "bench-1");
    const float values[] = {2.5f, 1.25f};
    const int epochs[] = {0, 10};
    cr_assert_eq(report_append_curves(path, &row, &(CurveSeries){"test_loss", values, NULL, 1, 2}, 1, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(report_append_curves(path, &row, &(CurveSeries){"train_loss", values, epochs, 0, 2}, 1, err, sizeof(err)), 0, "%s", err);
    char lines[8][1024];
    cr_assert_eq(read_lines(path, lines), 5);
    cr_assert_str_eq(lines[0], REPORT_CURVE_HEADER);
    // every point names the device, commit and run of its result row
    cr_assert_str_eq(lines[1], "03,mnist,fused,\"1024,1024\",test_loss,1,2.5,NVIDIA H100 80GB HBM3,c0ffee123456,bench-1");
    cr_assert_str_eq(lines[2], "03,mnist,fused,\"1024,1024\",test_loss,2,1.25,NVIDIA H100 80GB HBM3,c0ffee123456,bench-1");
    cr_assert_str_eq(lines[4], "03,mnist,fused,\"1024,1024\",train_loss,10,1.25,NVIDIA H100 80GB HBM3,c0ffee123456,bench-1");
}

// ----------------------------------------------------------------------------
// schema 2: setup, repeats and provenance

Test(report, init_stamps_provenance_and_leaves_new_columns_empty) {
    ResultRow row;
    memset(&row, 0x7f, sizeof(row));
    result_row_init(&row);
    cr_assert(isnan(row.setup_ms) && isnan(row.e2e_min_ms) && isnan(row.e2e_max_ms) && isnan(row.setup_min_ms));
    cr_assert(isnan(row.loop_min_ms) && isnan(row.loop_max_ms) && isnan(row.epoch_min_ms) && isnan(row.epoch_max_ms));
    cr_assert_eq(row.repeats, -1);
    cr_assert_eq(row.threads, -1);
    cr_assert_str_not_empty(row.commit);
    cr_assert(strcmp(row.dirty, "") == 0 || strcmp(row.dirty, "0") == 0 || strcmp(row.dirty, "1") == 0, "dirty '%s'",
              row.dirty);
    cr_assert_str_not_empty(row.run_id);
    // 2025-01-01T12:00:00Z
    cr_assert_eq(strlen(row.utc), 20, "utc '%s'", row.utc);
    cr_assert(row.utc[4] == '-' && row.utc[10] == 'T' && row.utc[13] == ':' && row.utc[19] == 'Z', "utc '%s'", row.utc);
}

Test(report, run_id_from_the_environment) {
    // Criterion runs each test in a process of its own: the run id is made on first use, after this
    cr_assert_eq(setenv(PROVENANCE_RUN_ID_ENV, "bench-20250101T000000Z-42", 1), 0);
    ResultRow a, b;
    result_row_init(&a);
    result_row_init(&b);
    cr_assert_str_eq(a.run_id, "bench-20250101T000000Z-42");
    cr_assert_str_eq(b.run_id, a.run_id);
}

Test(report, run_id_made_once_per_process) {
    cr_assert_eq(unsetenv(PROVENANCE_RUN_ID_ENV), 0);
    ResultRow a, b;
    result_row_init(&a);
    result_row_init(&b);
    cr_assert_str_eq(a.run_id, b.run_id, "two rows of one program, two runs: %s %s", a.run_id, b.run_id);
    char suffix[32];
    snprintf(suffix, sizeof(suffix), "Z-p%ld", (long)getpid());
    cr_assert_not_null(strstr(a.run_id, suffix), "run id '%s' does not end in %s", a.run_id, suffix);
    cr_assert_eq(strlen(a.run_id), 16 + strlen(suffix) - 1, "run id '%s'", a.run_id);  // 20250101T120000Z-p<pid>
}

Test(report, repeats_median_min_max) {
    ResultRow row = mnist_row();
    const double setup[] = {50.0, 70.0, 60.0};
    const double e2e[] = {130.0, 150.0, NAN};  // a failed run's NaN is neither the min nor the max
    const double loop[] = {120.0, 110.0, 140.0};
    const double epoch[] = {12.0, 11.0, 14.0};
    result_row_set_repeats(&row, setup, e2e, loop, epoch, 3);
    cr_assert_eq(row.repeats, 3);
    cr_assert_float_eq(row.setup_ms, 60.0, 0.0);
    cr_assert_float_eq(row.setup_min_ms, 50.0, 0.0);
    cr_assert_float_eq(row.setup_max_ms, 70.0, 0.0);
    cr_assert_float_eq(row.e2e_min_ms, 130.0, 0.0);
    cr_assert_float_eq(row.e2e_max_ms, 150.0, 0.0);
    cr_assert_float_eq(row.loop_min_ms, 110.0, 0.0);
    cr_assert_float_eq(row.loop_max_ms, 140.0, 0.0);
    cr_assert_float_eq(row.epoch_min_ms, 11.0, 0.0);
    cr_assert_float_eq(row.epoch_max_ms, 14.0, 0.0);
    result_row_set_repeats(&row, NULL, e2e, loop, epoch, 1);
    cr_assert(isnan(row.setup_ms) && isnan(row.setup_min_ms) && isnan(row.setup_max_ms));
    cr_assert_eq(row.repeats, 1);
    cr_assert_float_eq(row.e2e_max_ms, 130.0, 0.0);
}

// The drivers' timed runs: each run's figures in its place in the block, the row's medians and spread from them.
Test(report, runs_recorded_into_the_row) {
    ResultRow row = mnist_row();
    DeviceInfo device;
    memset(&device, 0, sizeof(device));
    snprintf(device.name, sizeof(device.name), "Test GPU");
    double epochs[3][2] = {{10.0, 14.0}, {9.0, 11.0}, {12.0, 12.0}};
    const double e2e[] = {130.0, 150.0, 140.0}, setup[] = {50.0, 70.0, 60.0};
    double runs_ms[REPORT_RUN_FIGURES * 3];
    for (int r = 0; r < 3; r++) {
        TrainTiming timing = {.e2e_ms = e2e[r], .loop_ms = e2e[r] - 20.0, .h2d_ms = 5.0 + r, .setup_ms = setup[r],
                              .epoch_ms = epochs[r]};
        report_record_run(runs_ms, 3, r, &timing, 2);
    }
    result_row_set_runs(&row, &device, runs_ms, 3);
    cr_assert_str_eq(row.device, "Test GPU");
    cr_assert_eq(row.repeats, 3);
    cr_assert_float_eq(row.e2e_ms, 140.0, 0.0);
    cr_assert_float_eq(row.loop_ms, 120.0, 0.0);
    cr_assert_float_eq(row.h2d_ms, 6.0, 0.0);
    cr_assert_float_eq(row.ms_per_epoch, 12.0, 0.0);  // the median of the runs' medians 12, 10, 12
    cr_assert_float_eq(row.epoch_min_ms, 10.0, 0.0);
    cr_assert_float_eq(row.setup_ms, 60.0, 0.0);
    cr_assert_float_eq(row.setup_max_ms, 70.0, 0.0);
    cr_assert_float_eq(row.e2e_min_ms, 130.0, 0.0);
}

// --csv first, then --curve; a --csv that fails leaves the curve file unwritten.
Test(report, outputs_csv_then_curve) {
    ResultRow row = mnist_row();
    const float values[] = {2.5f, 1.5f};
    const CurveSeries series[] = {{"test_loss", values, NULL, 1, 2}};
    char curve[160];
    snprintf(curve, sizeof(curve), "%s/curve.csv", dir);
    cr_assert_eq(report_append_outputs(&row, csv_path, curve, series, 1), EXIT_OK);
    char lines[8][1024];
    cr_assert_eq(read_lines(csv_path, lines), 2);
    cr_assert_eq(read_lines(curve, lines), 3);
    cr_assert_eq(report_append_outputs(&row, NULL, NULL, series, 1), EXIT_OK);
    remove(curve);
    cr_assert_not_null(freopen("/dev/null", "w", stderr));  // the error line it prints
    cr_assert_eq(report_append_outputs(&row, dir, curve, series, 1), EXIT_USAGE, "a directory took a result row");
    cr_assert_eq(access(curve, F_OK), -1, "the curve was written after the --csv failed");
}

Test(report, new_columns_by_name) {
    ResultRow row = mnist_row();
    const double setup[] = {49.5, 78.25};
    const double e2e[] = {140.0, 150.0};
    const double loop[] = {100.0, 120.0};
    const double epoch[] = {10.0, 12.0};
    result_row_set_repeats(&row, setup, e2e, loop, epoch, 2);
    snprintf(row.commit, sizeof(row.commit), "c0ffee123456");
    snprintf(row.dirty, sizeof(row.dirty), "0");
    snprintf(row.run_id, sizeof(row.run_id), "bench-7");
    snprintf(row.utc, sizeof(row.utc), "2025-01-02T03:04:05Z");
    cr_assert_eq(report_append_csv(&row, csv_path, err, sizeof(err)), 0, "%s", err);
    char lines[8][1024], header[MAX_FIELDS][256], fields[MAX_FIELDS][256];
    read_lines(csv_path, lines);
    cr_assert_eq(split_csv(lines[0], header), COLUMNS);
    cr_assert_eq(split_csv(lines[1], fields), COLUMNS, "row: %s", lines[1]);
    const char *want[][2] = {
        {"setup_ms", "63.875"},      {"repeats", "2"},          {"setup_min_ms", "49.5"}, {"setup_max_ms", "78.25"},
        {"e2e_min_ms", "140"},       {"e2e_max_ms", "150"},     {"loop_min_ms", "100"},   {"loop_max_ms", "120"},
        {"epoch_min_ms", "10"},      {"epoch_max_ms", "12"},    {"threads", ""},          {"torch", ""},
        {"graph_breaks", ""},        {"recompiles", ""},        {"commit", "c0ffee123456"}, {"dirty", "0"},
        {"run_id", "bench-7"},       {"utc", "2025-01-02T03:04:05Z"}, {"e2e_ms", "1234.57"}, {"device", "NVIDIA H100 80GB HBM3"},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        cr_assert_str_eq(field_named(header, fields, want[i][0]), want[i][1], "column %s: '%s', want '%s'", want[i][0],
                         field_named(header, fields, want[i][0]), want[i][1]);
}

Test(report, reference_rows_say_one_thread) {
    ResultRow row;
    result_row_init(&row);
    result_row_name(&row, 1, "05", "mnist", "tile16", "fp32");
    cr_assert_eq(row.threads, 1);
    cr_assert_str_eq(row.stage, "cpu-reference");
    result_row_name(&row, 0, "05", "mnist", "tile16", "fp32");
    cr_assert_eq(row.threads, -1);
    cr_assert_eq(report_append_csv(&row, csv_path, err, sizeof(err)), 0, "%s", err);
    result_row_name(&row, 1, "05", "mnist", "tile16", "fp32");
    cr_assert_eq(report_append_csv(&row, csv_path, err, sizeof(err)), 0, "%s", err);
    char lines[8][1024], header[MAX_FIELDS][256], fields[MAX_FIELDS][256];
    cr_assert_eq(read_lines(csv_path, lines), 3);
    split_csv(lines[0], header);
    split_csv(lines[1], fields);
    cr_assert_str_eq(field_named(header, fields, "threads"), "");
    split_csv(lines[2], fields);
    cr_assert_str_eq(field_named(header, fields, "threads"), "1");
}

Test(report, a_file_of_another_header_is_not_appended_to) {
    char old_path[160], curve_path[160];
    snprintf(old_path, sizeof(old_path), "%s/old.csv", dir);
    snprintf(curve_path, sizeof(curve_path), "%s/curve.csv", dir);
    const char *schema1 = "stage,trainer,variant,points,hidden,batch,epochs,lr,precision,device,cc,cuda,driver,"
                          "e2e_ms,loop_ms,ms_per_epoch,h2d_ms,train_loss,test_loss,test_acc,w,b,commit\n";
    FILE *f = fopen(old_path, "w");
    fputs(schema1, f);
    fclose(f);
    f = fopen(curve_path, "w");
    fputs("stage,trainer,variant,hidden,series,index,value\n", f);
    fclose(f);
    ResultRow row = mnist_row();
    cr_assert_eq(report_append_csv(&row, old_path, err, sizeof(err)), -1);
    cr_assert_not_null(strstr(err, "another kind of rows"), "%s", err);
    const float value = 1.0f;
    cr_assert_eq(report_append_curves(curve_path, &row, &(CurveSeries){"test_loss", &value, NULL, 1, 1}, 1, err, sizeof(err)), -1);
    char lines[8][1024];
    cr_assert_eq(read_lines(old_path, lines), 1, "a row was appended under the old header");
    cr_assert_eq(read_lines(curve_path, lines), 1, "a point was appended under the old header");
}

Test(report, write_file_creates_directories) {
    char sub[160], path[200];
    snprintf(sub, sizeof(sub), "%s/a/b", dir);
    const unsigned char bytes[] = {1, 2, 3, 0, 5};
    cr_assert_eq(report_write_file(sub, "blob.bin", bytes, sizeof(bytes), err, sizeof(err)), 0, "%s", err);
    snprintf(path, sizeof(path), "%s/blob.bin", sub);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    unsigned char back[16];
    cr_assert_eq(fread(back, 1, sizeof(back), f), sizeof(bytes));
    fclose(f);
    cr_assert_eq(memcmp(back, bytes, sizeof(bytes)), 0);
}

// ----------------------------------------------------------------------------
// output files are whole or untouched: temporary file + rename, every write checked, the
// header matched before an append, the paths checked before any training

// The whole file as a string (caller frees); NULL when it does not exist.
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = calloc(1, 1 << 16);
    cr_assert_not_null(text);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

// Entries of dir other than the names given (NULL-terminated): none may be a leftover temporary file.
static void assert_no_leftovers(void) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    struct dirent *entry;
    while ((entry = readdir(d)) != NULL)
        cr_assert_null(strstr(entry->d_name, ".tmp-"), "temporary file left behind: %s", entry->d_name);
    closedir(d);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fputs(text, f) >= 0, 1);
    cr_assert_eq(fclose(f), 0);
}

// Files may grow only to limit bytes from here on; a write beyond fails with EFBIG (not a signal).
static void limit_file_size(size_t limit) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {limit, limit};
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
}

Test(report, csv_of_another_header_is_refused_untouched) {
    char curve[160];
    snprintf(curve, sizeof(curve), "%s/curve.csv", dir);
    write_text(curve, REPORT_CURVE_HEADER "\n03,mnist,fused,128,step_loss,0,2.3\n");
    char *before = slurp(curve);
    ResultRow row = mnist_row();
    cr_assert_eq(report_append_csv(&row, curve, err, sizeof(err)), -1, "a result row went into a curve file");
    cr_assert_not_null(strstr(err, "another kind of rows"), "%s", err);
    cr_assert_null(strchr(err, '\n'), "%s", err);
    char *after = slurp(curve);
    cr_assert_str_eq(after, before);
    // and the other way round: curve rows into a result-row file
    cr_assert_eq(report_append_csv(&row, csv_path, err, sizeof(err)), 0, "%s", err);
    free(before);
    before = slurp(csv_path);
    const float values[] = {1.0f};
    cr_assert_eq(report_append_curves(csv_path, &row, &(CurveSeries){"test_loss", values, NULL, 1, 1}, 1, err, sizeof(err)), -1);
    free(after);
    after = slurp(csv_path);
    cr_assert_str_eq(after, before);
    // a file that is not a CSV at all, and one whose last row was cut off
    write_text(csv_path, "hello\n");
    cr_assert_eq(report_append_csv(&row, csv_path, err, sizeof(err)), -1);
    write_text(csv_path, REPORT_CSV_HEADER "\n03,mnist,fu");
    cr_assert_eq(report_append_csv(&row, csv_path, err, sizeof(err)), -1);
    cr_assert_not_null(strstr(err, "newline"), "%s", err);
    free(before);
    free(after);
}

Test(report, failed_append_leaves_the_file_as_it_was) {
    ResultRow row = mnist_row();
    for (int i = 0; i < 8; i++) cr_assert_eq(report_append_csv(&row, csv_path, err, sizeof(err)), 0, "%s", err);
    char *before = slurp(csv_path);
    struct stat info;
    cr_assert_eq(stat(csv_path, &info), 0);
    // the disk fills up in the middle of the next row
    limit_file_size((size_t)info.st_size + 40);
    cr_assert_eq(report_append_csv(&row, csv_path, err, sizeof(err)), -1, "a failed write was reported as success");
    cr_assert_not_null(strstr(err, csv_path), "%s", err);
    char *after = slurp(csv_path);
    cr_assert_str_eq(after, before, "a half-written row was left in the file");
    assert_no_leftovers();
    free(before);
    free(after);
}

Test(report, failed_curve_leaves_no_series_behind) {
    char curve[160];
    snprintf(curve, sizeof(curve), "%s/curve.csv", dir);
    ResultRow row = mnist_row();
    static float values[400];
    const CurveSeries series[] = {{"step_loss", values, NULL, 0, 400}, {"test_loss", values, NULL, 1, 4}};
    limit_file_size(4096);  // room for some of the step losses, not for all of them
    cr_assert_eq(report_append_curves(curve, &row, series, 2, err, sizeof(err)), -1);
    cr_assert_null(slurp(curve), "a partial curve file was left");
    assert_no_leftovers();
}

Test(report, export_file_whole_or_not_at_all) {
    char sub[160], path[200];
    snprintf(sub, sizeof(sub), "%s/a/b", dir);
    static unsigned char big[64 * 1024];
    memset(big, 7, sizeof(big));
    const unsigned char old[] = {1, 2, 3};
    cr_assert_eq(report_write_file(sub, "blob.bin", old, sizeof(old), err, sizeof(err)), 0, "%s", err);
    limit_file_size(16 * 1024);
    cr_assert_eq(report_write_file(sub, "blob.bin", big, sizeof(big), err, sizeof(err)), -1);
    cr_assert_not_null(strstr(err, "blob.bin"), "%s", err);
    snprintf(path, sizeof(path), "%s/blob.bin", sub);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    unsigned char back[16];
    cr_assert_eq(fread(back, 1, sizeof(back), f), sizeof(old), "a truncated export replaced the old file");
    fclose(f);
}

Test(report, non_regular_outputs_refused_without_blocking, .timeout = 10) {
    char fifo[160];
    snprintf(fifo, sizeof(fifo), "%s/fifo.csv", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    ResultRow row = mnist_row();
    cr_assert_eq(report_append_csv(&row, fifo, err, sizeof(err)), -1);
    cr_assert_not_null(strstr(err, "not a regular file"), "%s", err);
    cr_assert_eq(report_check_outputs("/dev/full", NULL, err, sizeof(err)), -1);
    cr_assert_not_null(strstr(err, "--csv"), "%s", err);
    cr_assert_eq(report_check_outputs(NULL, fifo, err, sizeof(err)), -1);
    cr_assert_not_null(strstr(err, "--curve"), "%s", err);
}

Test(report, outputs_checked_before_training) {
    char curve[160], link[160];
    snprintf(curve, sizeof(curve), "%s/curve.csv", dir);
    cr_assert_eq(report_check_outputs(csv_path, curve, err, sizeof(err)), 0, "%s", err);
    cr_assert_null(slurp(csv_path), "checking created the file");
    assert_no_leftovers();
    cr_assert_eq(report_check_outputs("/nonexistent/dir/rows.csv", NULL, err, sizeof(err)), -1);
    cr_assert_eq(report_check_outputs(csv_path, csv_path, err, sizeof(err)), -1);
    cr_assert_not_null(strstr(err, "same file"), "%s", err);
    write_text(curve, REPORT_CURVE_HEADER "\n");
    cr_assert_eq(report_check_outputs(curve, NULL, err, sizeof(err)), -1, "a curve file accepted as --csv");
    cr_assert_eq(report_check_outputs(NULL, curve, err, sizeof(err)), 0, "%s", err);
    // the same file under two names
    snprintf(link, sizeof(link), "%s/link.csv", dir);
    cr_assert_eq(symlink(curve, link), 0);
    cr_assert_eq(report_check_outputs(link, curve, err, sizeof(err)), -1);
    // an append through a symbolic link goes to the file it names, and the link stays
    ResultRow row = mnist_row();
    const float values[] = {1.5f};
    cr_assert_eq(report_append_curves(link, &row, &(CurveSeries){"test_loss", values, NULL, 1, 1}, 1, err, sizeof(err)), 0, "%s", err);
    struct stat info;
    cr_assert_eq(lstat(link, &info), 0);
    cr_assert(S_ISLNK(info.st_mode), "the link was replaced");
    char lines[8][1024];
    cr_assert_eq(read_lines(curve, lines), 2);
}

Test(report, stdout_write_errors_are_reported) {
    cr_assert_not_null(freopen("/dev/null", "w", stderr));  // the error line it prints
    cr_assert_not_null(freopen("/dev/full", "w", stdout));
    printf("a result line\n");
    cr_assert_eq(report_flush_stdout(), -1, "a result lost to a full disk counted as written");
}

Test(report, exit_status_after_a_lost_result) {
    cr_assert_not_null(freopen("/dev/null", "w", stderr));
    cr_assert_not_null(freopen("/dev/full", "w", stdout));
    printf("a result line\n");
    cr_assert_eq(report_exit_status(EXIT_DIVERGED), EXIT_DIVERGED, "a failure kept its own code");
    printf("another\n");
    cr_assert_eq(report_exit_status(EXIT_OK), EXIT_USAGE, "a result lost to a full disk exited 0");
}

// ----------------------------------------------------------------------------
// the human line

Test(report, print_mnist_line) {
    ResultRow row = mnist_row();
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    report_print(&row, f);
    fclose(f);
    cr_assert_not_null(strstr(text, "stage 03 mnist"), "%s", text);
    cr_assert_not_null(strstr(text, "NVIDIA H100 80GB HBM3"), "%s", text);
    cr_assert_not_null(strstr(text, "test_acc 98.12%"), "%s", text);
    cr_assert_null(strstr(text, " w "), "%s", text);
    cr_assert_null(strstr(text, "setup"), "no setup measured, none printed: %s", text);
    cr_assert_eq(strchr(text, '\n'), text + len - 1, "not one line: %s", text);
    free(text);
}

// ----------------------------------------------------------------------------
// median

Test(report, median_odd_even_one_zero) {
    const double odd[] = {3.0, 1.0, 2.0};
    const double even[] = {4.0, 1.0, 3.0, 2.0};
    const double one[] = {7.5};
    cr_assert_float_eq(median(odd, 3), 2.0, 0.0);
    cr_assert_float_eq(median(even, 4), 2.5, 0.0);
    cr_assert_float_eq(median(one, 1), 7.5, 0.0);
    cr_assert(isnan(median(one, 0)));
    cr_assert_float_eq(odd[0], 3.0, 0.0, "median sorted its input");
}

Test(report, print_line_shows_setup_before_e2e) {
    ResultRow row = mnist_row();
    row.setup_ms = 78.5;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    report_print(&row, f);
    fclose(f);
    cr_assert_not_null(strstr(text, "setup 78.5 ms, e2e 1235 ms"), "%s", text);
    free(text);
}
