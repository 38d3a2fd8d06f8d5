// tests/test_ladder.c: Criterion suite "ladder": what the kernel ladders share (common/ladder.c): flag
// parsing (a bad value exits 2), the statistics of timed runs, the CSV rows bench/make_tables.py reads,
// and the GEMM check the GPU suites rely on (it must pass a right fp32 result and catch a wrong one).
//
//     make test          (part of build/tests/test_cpu)
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "child_output.h"
#include "exit_codes.h"
#include "ladder.h"
#include "provenance.h"

// ----------------------------------------------------------------------------
// flags

static const char *version_name(int index) {
    static const char *const names[] = {"naive", "tile16", "tile64"};
    return names[index];
}

Test(ladder, counts_and_versions) {
    cr_expect_eq(ladder_parse_count("p", "--n", "4000000", 1, 1000000000), 4000000);
    cr_expect_eq(ladder_parse_count("p", "--n", "1", 1, 10), 1);
    int first = -1, last = -1;
    ladder_parse_version("p", "all", 3, version_name, &first, &last);
    cr_expect(first == 0 && last == 3);
    ladder_parse_version("p", "2", 3, version_name, &first, &last);
    cr_expect(first == 1 && last == 2);
    ladder_parse_version("p", "tile64", 3, version_name, &first, &last);
    cr_expect(first == 2 && last == 3);
}

Test(ladder, command_line) {
    char *argv[] = {"p", "--k", "785", "--version", "tile16", "--repeat", "7", NULL};
    LadderSize sizes[] = {{"--m", 1, 8192, 128, 0}, {"--k", 1, 8192, 784, 0}};
    LadderOptions options;
    ladder_parse_args(7, argv, "usage: %s\n", sizes, 2, 3, version_name, 1, &options);
    cr_expect(sizes[0].value == 128 && !sizes[0].given);
    cr_expect(sizes[1].value == 785 && sizes[1].given);
    cr_expect(options.first == 1 && options.last == 2 && options.repeats == 7 && options.csv_path == NULL);
}

// A bad flag or value ends the program: the calls below run in a child (child_output.h), which must exit 2
// with one line on stderr, "error: ...", that names the problem, and nothing on stdout.
static void expect_usage_error(void (*body)(void *ctx), void *ctx, const char *key) {
    char err[1024], out[1024];
    int code = child_output(body, ctx, err, sizeof(err), out, sizeof(out));
    cr_assert_eq(code, EXIT_USAGE, "exit %d, stderr: %s", code, err);
    cr_assert_eq(strncmp(err, "error: ", 7), 0, "not an error line: %s", err);
    const char *newline = strchr(err, '\n');
    cr_assert(newline && newline[1] == '\0', "not exactly one line: %s", err);
    cr_assert_not_null(strstr(err, key), "'%s' is not in: %s", key, err);
    cr_assert_str_empty(out);
}

// ladder_parse_args' arguments, but for calls_per_run (1) and the options it fills
typedef struct {
    int argc;
    char **argv;
    const char *usage;
    LadderSize *sizes;
    int size_count, version_count;
    LadderNameFn version_name;
} ArgsCall;

static void parse_args(void *ctx) {
    ArgsCall *call = ctx;
    LadderOptions options;
    ladder_parse_args(call->argc, call->argv, call->usage, call->sizes, call->size_count, call->version_count,
                      call->version_name, 1, &options);
}

typedef struct {
    const char *flag, *text;
    int64_t min, max;
} CountCall;

static void parse_count(void *ctx) {
    CountCall *call = ctx;
    ladder_parse_count("p", call->flag, call->text, call->min, call->max);
}

static void parse_version(void *text) {
    int first, last;
    ladder_parse_version("p", text, 3, version_name, &first, &last);
}

static void check_csv(void *path) { ladder_check_csv(path); }

Test(ladder, a_flag_of_another_ladder_exits_2) {
    char *argv[] = {"p", "--m", "5", NULL};
    LadderSize size = {"--n", 1, 100, 10, 0};
    ArgsCall call = {3, argv, "usage: %s\n", &size, 1, 3, version_name};
    expect_usage_error(parse_args, &call, "unknown flag '--m'");
}

Test(ladder, a_flag_without_its_value_exits_2) {
    char *argv[] = {"p", "--repeat", NULL};
    ArgsCall call = {2, argv, "usage: %s\n", NULL, 0, 3, version_name};
    expect_usage_error(parse_args, &call, "missing value after '--repeat'");
}

// --help prints the usage on stdout, nothing on stderr, and exits 0 without reading further flags
Test(ladder, help_exits_0) {
    char *argv[] = {"p", "--help", "--flags-after-help-are-not-read", NULL};
    ArgsCall call = {3, argv, "usage: %s\n", NULL, 0, 3, version_name};
    char err[1024], out[1024];
    int code = child_output(parse_args, &call, err, sizeof(err), out, sizeof(out));
    cr_assert_eq(code, EXIT_OK, "exit %d (%d: --help returned), stderr: %s", code, CHILD_RETURNED, err);
    cr_assert_str_empty(err);
    cr_assert_eq(strncmp(out, "usage: p\n", 9), 0, "%s", out);
    cr_assert_not_null(strstr(out, "--version    1..3, a name, or all (default): 1 naive, 2 tile16, 3 tile64\n"), "%s", out);
}

Test(ladder, count_with_an_exponent_exits_2) {
    CountCall call = {"--n", "1e6", 1, 10000000};
    expect_usage_error(parse_count, &call, "--n wants a whole number from 1 to 10000000, got '1e6'");
}

Test(ladder, negative_count_exits_2) {
    CountCall call = {"--n", "-5", 1, 100};
    expect_usage_error(parse_count, &call, "--n wants a whole number from 1 to 100, got '-5'");
}

Test(ladder, count_past_the_limit_exits_2) {
    CountCall call = {"--m", "8193", 1, 8192};
    expect_usage_error(parse_count, &call, "--m wants a whole number from 1 to 8192, got '8193'");
}

Test(ladder, empty_count_exits_2) {
    CountCall call = {"--k", "", 1, 8192};
    expect_usage_error(parse_count, &call, "--k wants a whole number from 1 to 8192, got ''");
}

Test(ladder, unknown_version_exits_2) {
    expect_usage_error(parse_version, "4", "--version wants 1..3, a version name or all, got '4'");
}

Test(ladder, unwritable_csv_exits_2) {
    expect_usage_error(check_csv, "/nonexistent-dir/ladders.csv",
                       "cannot append rows to --csv /nonexistent-dir/ladders.csv: No such file or directory");
}

Test(ladder, csv_that_is_a_folder_exits_2) {
    expect_usage_error(check_csv, "/tmp", "cannot append rows to --csv /tmp: it is a folder");
}

// the rows go through common/report.c's append, which never mixes schemas: refused before the runs
Test(ladder, csv_of_another_schema_exits_2) {
    char path[] = "/tmp/test_ladder_schema_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, "stage,trainer\n", 14), 14);
    close(fd);
    expect_usage_error(check_csv, path, "holds another kind of rows");
    remove(path);
}

// ----------------------------------------------------------------------------
// statistics and rows

Test(ladder, stats) {
    double ms[] = {3.0, 1.0, 2.0, 10.0};
    LadderStats s = ladder_stats(ms, 4);
    cr_expect_float_eq(s.median_ms, 2.5, 1e-12);
    cr_expect_float_eq(s.min_ms, 1.0, 1e-12);
    cr_expect_float_eq(s.max_ms, 10.0, 1e-12);
}

static int count_fields(const char *line) {
    int fields = 1, quoted = 0;
    for (const char *c = line; *c && *c != '\n'; c++) {
        if (*c == '"') quoted = !quoted;
        if (*c == ',' && !quoted) fields++;
    }
    return fields;
}

Test(ladder, csv_rows) {
    char dir[] = "/tmp/test_ladder_XXXXXX", path[64];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/ladders.csv", dir);
    DeviceInfo device = {"GPU, with a comma", "9.0", "13.0", "13.0"};
    LadderTable table;
    memset(&table, 0, sizeof(table));
    table.stage = "04";
    table.ladder = "reduce";
    snprintf(table.shape, sizeof(table.shape), "1000 points");
    table.unit = "GB/s";
    table.work = 8000.0;
    table.ceiling = "read-only kernel";
    LadderStats ceiling = {0.001, 0.0009, 0.002}, v1 = {0.004, 0.003, 0.005}, v2 = {0.002, 0.002, 0.003};
    table.ceiling_time = ceiling;
    table.repeats = 5;
    table.device = &device;
    table.csv_path = path;
    ladder_table_begin(&table);
    ladder_table_row(&table, 1, "atomic", v1, NAN);
    ladder_table_row(&table, 2, "shared-tree", v2, 1.5);

    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char line[3][512];
    for (int i = 0; i < 3; i++) cr_assert_not_null(fgets(line[i], sizeof(line[i]), f));
    cr_expect_null(fgets(line[0], sizeof(line[0]), f), "one header and two rows");
    fclose(f);
    cr_expect_str_eq(line[0], LADDER_CSV_HEADER "\n");
    int columns = count_fields(LADDER_CSV_HEADER);
    cr_expect_eq(columns, 21);
    cr_expect_eq(count_fields(line[1]), columns, "%s", line[1]);
    cr_expect_eq(count_fields(line[2]), columns, "%s", line[2]);
    // rate = 8000 B / 0.004 ms = 2 GB/s; the empty setup; the quoted device; the run column
    cr_expect(strncmp(line[1], "04,reduce,1000 points,1,atomic,0.004,0.003,0.005,,2,GB/s,read-only kernel,0.001,8,5,"
                               "\"GPU, with a comma\",9.0,13.0,13.0,",
                      strlen("04,reduce,1000 points,1,atomic,0.004,0.003,0.005,,2,GB/s,read-only kernel,0.001,8,5,"
                             "\"GPU, with a comma\",9.0,13.0,13.0,")) == 0,
              "%s", line[1]);
    cr_expect(strstr(line[2], ",1.5,4,GB/s,") != NULL, "%s", line[2]);
    cr_expect(strstr(line[2], provenance_run_id()) != NULL, "both rows name the run");
    remove(path);
    rmdir(dir);
}

// ----------------------------------------------------------------------------
// the GEMM check

// fp32 on the CPU, in the plain k order: a right result, with rounding errors the bound must allow
static void gemm_fp32(const float *in, const float *weight, const float *bias, int m, int k, int n, float *out) {
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int p = 0; p < k; p++) acc += in[(size_t)i * k + p] * weight[(size_t)p * n + j];
            acc += bias[j];
            out[(size_t)i * n + j] = acc > 0.0f ? acc : 0.0f;
        }
    }
}

Test(ladder, gemm_check_passes_fp32_and_catches_errors) {
    enum { M = 9, K = 785, N = 13 };
    static float in[M * K], weight[K * N], bias[N], out[M * N];
    static double expected[M * N], scale[M * N];
    ladder_fill_uniform(in, M * K, 0.0f, 1.0f, 1);
    ladder_fill_uniform(weight, K * N, -0.05f, 0.05f, 2);
    ladder_fill_uniform(bias, N, -0.05f, 0.3f, 3);
    gemm_fp32(in, weight, bias, M, K, N, out);
    ladder_gemm_reference(in, weight, bias, M, K, N, expected, scale);
    cr_expect_eq(ladder_gemm_first_wrong(out, expected, scale, M, K, N, 0.0), -1);

    // a missing last product (K = 785: the last, one-element slice of a tiled kernel) must fail
    double tolerance = ladder_gemm_tolerance(K, 0.0);
    int at = -1;
    for (int e = 0; e < M * N && at < 0; e++) {
        double product = (double)in[(e / N) * K + K - 1] * weight[(K - 1) * N + e % N];
        if (expected[e] > 0.0 && fabs(product) > 10.0 * tolerance * scale[e]) at = e;
    }
    cr_assert_geq(at, 0, "the fixture has an output whose last product matters");
    float saved = out[at];
    out[at] -= in[(at / N) * K + K - 1] * weight[(K - 1) * N + at % N];
    cr_expect_eq(ladder_gemm_first_wrong(out, expected, scale, M, K, N, 0.0), at);
    out[at] = NAN;
    cr_expect_eq(ladder_gemm_first_wrong(out, expected, scale, M, K, N, 0.0), at, "NaN fails");
    out[at] = (float)(expected[at] + 1e-3 * scale[at]);  // inside bf16's bound (7.8e-3), outside fp32's (4.7e-5)
    cr_expect_eq(ladder_gemm_first_wrong(out, expected, scale, M, K, N, 0.0), at);
    cr_expect_eq(ladder_gemm_first_wrong(out, expected, scale, M, K, N, ldexp(1.0, -8)), -1);
    out[at] = saved;
    cr_expect_eq(ladder_gemm_first_wrong(out, expected, scale, M, K, N, 0.0), -1);
}

Test(ladder, gemm_rows_checked) {
    cr_expect(ladder_gemm_checked_row(77, 1000, 1000, 1000));  // 10^9 <= 2^31: every row
    int checked = 0;
    for (int row = 0; row < 10000; row++) checked += ladder_gemm_checked_row(row, 10000, 1000, 1000);
    cr_expect_eq(checked, 64);
    cr_expect(ladder_gemm_checked_row(0, 10000, 1000, 1000) && ladder_gemm_checked_row(9999, 10000, 1000, 1000));
}

// ----------------------------------------------------------------------------
// the upload ladder's flags and shape (05-streams/upload_ladder.cu)

static const char *upload_version_name(int index) {
    static const char *const names[] = {"pageable", "staged", "staged-threads", "streaming", "host-register"};
    return names[index];
}

Test(ladder, upload_flags) {
    char *argv[] = {"p", "--threads", "16", "--chunk-kib", "8192", "--version", "staged-threads", NULL};
    LadderSize sizes[] = LADDER_UPLOAD_SIZES;
    LadderOptions options;
    ladder_parse_args(7, argv, LADDER_UPLOAD_USAGE, sizes, 3, 5, upload_version_name, 1, &options);
    cr_expect(sizes[0].value == 4000000 && !sizes[0].given, "--n defaults to the trainer's training set");
    cr_expect(sizes[1].value == 16 && sizes[2].value == 8192);
    cr_expect(options.first == 2 && options.last == 3);
    char *defaults[] = {"p", NULL};
    LadderSize fresh[] = LADDER_UPLOAD_SIZES;
    ladder_parse_args(1, defaults, LADDER_UPLOAD_USAGE, fresh, 3, 5, upload_version_name, 1, &options);
    cr_expect(fresh[1].value == 0 && fresh[2].value == 4096, "threads: the pool's default; slots: the trainer's");
}

Test(ladder, upload_threads_past_the_pool_exit_2) {
    char *argv[] = {"p", "--threads", "65", NULL};
    LadderSize sizes[] = LADDER_UPLOAD_SIZES;
    ArgsCall call = {3, argv, LADDER_UPLOAD_USAGE, sizes, 3, 5, upload_version_name};
    expect_usage_error(parse_args, &call, "--threads wants a whole number from 0 to 64, got '65'");
}

Test(ladder, upload_chunk_below_4_kib_exits_2) {
    char *argv[] = {"p", "--chunk-kib", "3", NULL};
    LadderSize sizes[] = LADDER_UPLOAD_SIZES;
    ArgsCall call = {3, argv, LADDER_UPLOAD_USAGE, sizes, 3, 5, upload_version_name};
    expect_usage_error(parse_args, &call, "--chunk-kib wants a whole number from 4 to 1048576, got '3'");
}

Test(ladder, upload_shape) {
    char shape[48];
    ladder_upload_shape(shape, sizeof(shape), 4000000, 8, 4096);
    cr_expect_str_eq(shape, "4000000 points, 8 threads x 4096 KiB");
    ladder_upload_shape(shape, sizeof(shape), 250000000, 64, 1048576);  // the longest fits the table's field
    cr_expect_str_eq(shape, "250000000 points, 64 threads x 1048576 KiB");
}
