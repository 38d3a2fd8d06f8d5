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

#include "ladder.h"

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

Test(ladder, a_flag_of_another_ladder_exits_2, .exit_code = 2) {
    char *argv[] = {"p", "--m", "5", NULL};
    LadderSize size = {"--n", 1, 100, 10, 0};
    LadderOptions options;
    ladder_parse_args(3, argv, "usage: %s\n", &size, 1, 3, version_name, 1, &options);
}

Test(ladder, a_flag_without_its_value_exits_2, .exit_code = 2) {
    char *argv[] = {"p", "--repeat", NULL};
    LadderOptions options;
    ladder_parse_args(2, argv, "usage: %s\n", NULL, 0, 3, version_name, 1, &options);
}

Test(ladder, help_exits_0, .exit_code = 0) {
    char *argv[] = {"p", "--help", "--flags-after-help-are-not-read", NULL};
    LadderOptions options;
    ladder_parse_args(3, argv, "usage: %s\n", NULL, 0, 3, version_name, 1, &options);
    cr_assert_fail("--help returned");
}

Test(ladder, count_with_an_exponent_exits_2, .exit_code = 2) { ladder_parse_count("p", "--n", "1e6", 1, 10000000); }
Test(ladder, negative_count_exits_2, .exit_code = 2) { ladder_parse_count("p", "--n", "-5", 1, 100); }
Test(ladder, count_past_the_limit_exits_2, .exit_code = 2) { ladder_parse_count("p", "--m", "8193", 1, 8192); }
Test(ladder, empty_count_exits_2, .exit_code = 2) { ladder_parse_count("p", "--k", "", 1, 8192); }

Test(ladder, unknown_version_exits_2, .exit_code = 2) {
    int first, last;
    ladder_parse_version("p", "4", 3, version_name, &first, &last);
}

Test(ladder, unwritable_csv_exits_2, .exit_code = 2) { ladder_check_csv("/nonexistent-dir/ladders.csv"); }
Test(ladder, csv_that_is_a_folder_exits_2, .exit_code = 2) { ladder_check_csv("/tmp"); }

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
    cr_expect(strstr(line[2], ladder_run_id()) != NULL, "both rows name the run");
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

Test(ladder, upload_threads_past_the_pool_exit_2, .exit_code = 2) {
    char *argv[] = {"p", "--threads", "65", NULL};
    LadderSize sizes[] = LADDER_UPLOAD_SIZES;
    LadderOptions options;
    ladder_parse_args(3, argv, LADDER_UPLOAD_USAGE, sizes, 3, 5, upload_version_name, 1, &options);
}

Test(ladder, upload_chunk_below_4_kib_exits_2, .exit_code = 2) {
    char *argv[] = {"p", "--chunk-kib", "3", NULL};
    LadderSize sizes[] = LADDER_UPLOAD_SIZES;
    LadderOptions options;
    ladder_parse_args(3, argv, LADDER_UPLOAD_USAGE, sizes, 3, 5, upload_version_name, 1, &options);
}

Test(ladder, upload_shape) {
    char shape[48];
    ladder_upload_shape(shape, sizeof(shape), 4000000, 8, 4096);
    cr_expect_str_eq(shape, "4000000 points, 8 threads x 4096 KiB");
    ladder_upload_shape(shape, sizeof(shape), 250000000, 64, 1048576);  // the longest fits the table's field
    cr_expect_str_eq(shape, "250000000 points, 64 threads x 1048576 KiB");
}
