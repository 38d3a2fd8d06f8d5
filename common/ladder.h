// common/ladder.h: what the kernel ladders (NN-*/*_ladder.cu; docs/DESIGN.md, "Kernel ladders") share on
// the host: their flags, statistics, table and CSV rows, and the CPU check of their GEMMs. The GPU side
// they share is in ladder_gpu.h.
#ifndef LADDER_H
#define LADDER_H

#include <stdint.h>
#include <stdio.h>
#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

// One CSV row per version and shape; bench/make_tables.py (LADDER_COLUMNS) reads them back. rate: unit at the
// median time; ceiling_*: the ceiling (or baseline, LadderTable.baseline) of the same run and shape; setup_ms: host time before the version could
// run (plans, autotuning), empty if none; commit and run as in the trainers' rows (a table is drawn from one run).
#define LADDER_CSV_HEADER                                                                            \
    "stage,ladder,shape,version,name,median_ms,min_ms,max_ms,setup_ms,rate,unit,ceiling,ceiling_ms," \
    "ceiling_rate,repeats,device,cc,cuda,driver,commit,run"

#define LADDER_WARMUP_RUNS 3
#define LADDER_DEFAULT_REPEATS 20
#define LADDER_MAX_REPEATS 1000

// ----------------------------------------------------------------------------
// the command line: each mistake prints one "error: ..." line and exits with EXIT_USAGE

// A size flag (--n, --m, --k): value holds the default until the command line gives another (given: 1).
typedef struct {
    const char *flag;
    int64_t min, max;
    int64_t value;
    int given;
} LadderSize;

typedef struct {
    int first, last;       // the versions to run, [first, last) counted from 0
    int repeats;           // timed runs per version
    const char *csv_path;  // --csv FILE, or NULL
} LadderOptions;

typedef const char *(*LadderNameFn)(int index);  // a version's name, index counted from 0

// -h/--help (usage, a printf format of the program's name, then the lines of the common flags; exits 0), the
// size flags, --version 1..count|NAME|all, --repeat R and --csv FILE (ladder_check_csv). calls_per_run: the
// calls a timed run makes, for the usage text.
void ladder_parse_args(int argc, char **argv, const char *usage, LadderSize *sizes, int size_count, int version_count,
                       LadderNameFn version_name, int calls_per_run, LadderOptions *options);

// The GEMM ladders' shape flags and the first lines of their usage.
#define LADDER_GEMM_SIZES {{"--m", 1, 8192, 128, 0}, {"--k", 1, 8192, 784, 0}, {"--n", 1, 8192, 128, 0}}
#define LADDER_GEMM_USAGE                                                                                 \
    "usage: %s [--m M] [--k K] [--n N] [--version V|NAME|all] [--repeat R] [--csv FILE]\n"               \
    "  out (M, N) = relu(in (M, K) @ W (K, N) + bias), version by version, each checked against the CPU.\n" \
    "  --m --k --n  the shape, 1 .. 8192 each (a flag left out: 128, 784, 128, the MNIST trainer's first\n"  \
    "               layer at batch 128, --hidden 128)\n"

// The upload ladder's flags (05-streams/upload_ladder.cu); --threads 0: copy_pool_create's default.
#define LADDER_UPLOAD_SIZES \
    {{"--n", 1, 250000000, 4000000, 0}, {"--threads", 0, 64, 0, 0}, {"--chunk-kib", 4, 1048576, 4096, 0}}
#define LADDER_UPLOAD_USAGE                                                                                     \
    "usage: %s [--n N] [--threads T] [--chunk-kib C] [--version V|NAME|all] [--repeat R] [--csv FILE]\n"         \
    "  N points of x and y (8 B a point) from pageable host memory to the device, version by version, each\n"   \
    "  checked byte for byte.\n"                                                                               \
    "  --n N          points, 1 .. 250000000 (default 4000000: the regression trainer's training set, 32 MB)\n" \
    "  --threads T    version 3's copy threads, 1 .. 64; 0 (default): the online CPUs, at most 8\n"            \
    "  --chunk-kib C  version 3's pinned slot, 4 .. 1048576 KiB (default 4096, the trainer's)\n"
// The upload ladder's shape: "4000000 points, 8 threads x 4096 KiB" (the settings version 3 ran with).
void ladder_upload_shape(char *out, size_t len, int64_t points, int threads, int64_t chunk_kib);

void ladder_usage_error(const char *program, const char *message, const char *value);
// A whole decimal number in [min, max] (1e6 and 4,000,000 are refused: digits only).
int64_t ladder_parse_count(const char *program, const char *flag, const char *text, int64_t min, int64_t max);
// "all", a version number or a version name -> the versions [*first, *last) of 0 .. count - 1.
void ladder_parse_version(const char *program, const char *text, int count, LadderNameFn version_name, int *first,
                          int *last);
// --csv FILE can take ladder rows (report_check_rows), checked before the runs, not created; else one
// "error: cannot append rows to --csv FILE: ..." line and EXIT_USAGE.
void ladder_check_csv(const char *path);
// Device 0, or one "error: no CUDA device found" line and EXIT_CUDA.
void ladder_require_gpu(const char *program, DeviceInfo *device);

// ----------------------------------------------------------------------------
// timed runs

typedef struct {
    double median_ms, min_ms, max_ms;  // over the timed runs
} LadderStats;

LadderStats ladder_stats(const double *ms, int runs);

// ----------------------------------------------------------------------------
// the table (stdout) and the CSV rows: one table per shape

typedef struct {
    const char *stage;       // "04"
    const char *ladder;      // "reduce", "gemm"
    char shape[48];          // "4000000 points", "128x784x128" (m x k x n)
    const char *unit;        // "GB/s" or "GFLOP/s"
    double work;             // bytes or FLOP of one call: rate = work / ms / 1e6
    const char *ceiling;     // what the ceiling measures: "read kernel", "cublasSgemm"; or the baseline's name
    int baseline;            // 1: that row is a baseline the versions must beat, not a bound (stage 08's ladder)
    LadderStats ceiling_time;
    int repeats;
    int show_setup;          // print a setup column (versions that plan or autotune)
    const DeviceInfo *device;
    const char *csv_path;    // NULL: no CSV rows
    double first_ms, previous_ms;  // speedups: NaN until the first row
} LadderTable;

// Prints the ceiling line and the column titles; resets the speedups.
void ladder_table_begin(LadderTable *table);
// One version's line, and its CSV row when csv_path is set (a file that cannot take it: one line, EXIT_USAGE).
// setup_ms: NaN when the version has no setup worth reporting.
void ladder_table_row(LadderTable *table, int number, const char *name, LadderStats time, double setup_ms);
// A version this GPU or library cannot run: a line that says why, no row, no speedup across it.
void ladder_table_skip(LadderTable *table, int number, const char *name, const char *why);

// ----------------------------------------------------------------------------
// the GEMM versions' check: out = relu(in @ weight + bias) against the CPU in double precision

// Reproducible uniform values in [lo, hi) from seed.
void ladder_fill_uniform(float *values, int64_t count, float lo, float hi, uint64_t seed);

// One GEMM problem in host memory, MNIST-like: in (m, k) pixels in [0, 1), weight (k, n) and bias (n,) as
// nn.Linear initializes them; out (m, n) for a version's result; expected and scale from ladder_gemm_reference.
typedef struct {
    int m, k, n;
    float *in, *weight, *bias, *out;
    double *expected, *scale;
} LadderGemm;

void ladder_gemm_init(LadderGemm *g, int m, int k, int n);  // out of host memory: one line, EXIT_HOST_MEMORY
void ladder_gemm_free(LadderGemm *g);
// Returns if every checked element of g->out is within ladder_gemm_tolerance, else prints one "error:" line
// naming the version, the shape and the first wrong element, and exits with 1.
void ladder_gemm_check(const LadderGemm *g, int number, const char *name, double input_rounding);

// expected (m, n) = relu(in (m, k) @ weight (k, n) + bias (n)) in double precision, all row-major, and
// scale (m, n) = sum_k |in[i][p] weight[p][j]| + |bias[j]|, the size an error is measured against.
// Only the rows ladder_gemm_checked_row says are checked are computed (the others are left as they are).
void ladder_gemm_reference(const float *in, const float *weight, const float *bias, int m, int k, int n,
                           double *expected, double *scale);
// Every row when m k n is at most 2^31 multiply-adds, else 64 rows spread over m (first and last
// included): the CPU reference in double precision would take minutes on the largest shapes.
int ladder_gemm_checked_row(int row, int m, int k, int n);
// The error bound of an fp32 GEMM with k products summed in any order, each input first rounded to
// a relative unit u of input_rounding (0 for fp32 inputs; tf32 2^-10, bf16 2^-8):
//     |out - exact| <= (p + (k + 2) 2^-24 (1 + p)) * scale,   p = (1 + u)^2 - 1
// (p: a product of two rounded inputs; then k + 1 fp32 roundings of the sum and the bias in any order,
// plus one of slack; ReLU cannot increase an error). The bound is rigorous, so it never fails a right
// result, and at k = 784 it is 4.7e-5 of scale (fp32): one missing product of a K-slice is far above it.
double ladder_gemm_tolerance(int k, double input_rounding);
// Index of the first checked element of out that misses expected by more than the tolerance, or -1.
int64_t ladder_gemm_first_wrong(const float *out, const double *expected, const double *scale, int m, int k, int n,
                                double input_rounding);

#ifdef __cplusplus
}
#endif

#endif
