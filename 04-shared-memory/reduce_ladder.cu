/*
Kernel ladder, stage 04: the regression's per-epoch sums, one idea per version. Over n points, with
r = w x + b - y: sum r^2 (the loss), sum r x and sum r (the gradient), accumulated in doubles.

    1 atomic          one thread per point, one atomicAdd per point and sum (stage 03's kernel)
    2 shared-tree     a block adds its 256 points' terms in shared memory, a tree of 8 halving steps;
                      one atomicAdd per block and sum
    3 warp-shuffle    no shared memory: each warp adds its 32 terms register to register
                      (__shfl_down_sync); one atomicAdd per warp and sum, 8 times as many as 2
    4 shuffle-shared  warp shuffles, then the 8 warp sums meet in shared memory: one atomicAdd per block
    5 one-wave        as many blocks as the GPU holds at once, each thread summing many points in a
                      grid-stride loop first: far fewer blocks, so far fewer atomics
    6 float4          the same with 16-byte loads, 4 points each: the kernel the stage-04 trainer keeps

    make stage 4 ladder                            (this ladder and gemm_ladder, n = 4,000,000)
    build/04/reduce_ladder --n 1000003 --version shuffle-shared --repeat 50 --csv ladders.csv

Each call is timed alone (the sums are zeroed before it, outside the timing), median of --repeat runs
after 3 warm-ups, min-max as the spread. GB/s count the bytes the sums must read, x and y once: 8 B a
point. The ceiling is a kernel that only reads x and y (float4, grid-stride, one wave), timed the same
way in the same run. The data is the trainer's (common/data.h: x evenly spaced in [0, 10), y = 0.7 x + 0.3
+ noise) at its initial parameters; every version's sums are checked against the CPU in double precision.

Exit codes: 0 ok; 1 a wrong sum; 2 an invalid flag or an unwritable --csv file; 3 out of host memory;
4 no GPU or any CUDA error.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>

#include "check.h"
#include "data.h"
#include "device.h"
#include "host.h"
#include "ladder.h"
#include "ladder_gpu.h"

#define BLOCK_SIZE 256  // a multiple of WARP_SIZE: the warp reductions assume full warps
#define WARP_SIZE 32
#define WARPS_PER_BLOCK (BLOCK_SIZE / WARP_SIZE)
#define SUMS 3          // sum r^2, sum r x, sum r

// ----------------------------------------------------------------------------
// kernels. Every one: sums (3,) doubles, zeroed before the call; x, y (n,); params (2,) w, b.

// A point's three terms, added to a thread's running fp32 sums s[0..2].
__device__ __forceinline__ void add_terms(float s[SUMS], float x, float y, float w, float b) {
    float r = w * x + b - y;
    s[0] += r * r;
    s[1] += r * x;
    s[2] += r;
}

// Version 1: thread i adds point i's terms straight into the three doubles in global memory. Every
// atomicAdd to one address waits for the one before it: 3 n of them in series.
__global__ void sums_atomic_kernel(double *sums, const float *x, const float *y, const float *params, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s[SUMS] = {0.0f, 0.0f, 0.0f};
    add_terms(s, x[i], y[i], params[0], params[1]);
    for (int j = 0; j < SUMS; j++) atomicAdd(&sums[j], (double)s[j]);
}

// Version 2: the block's 256 terms of each sum go to shared memory, and half the threads add the upper
// half onto the lower half until one value is left (Harris's "sequential addressing": the active threads
// stay contiguous, so whole warps retire and no two threads of a warp hit one bank). Thread 0 adds the
// block's sums to global memory: n / 256 atomics per sum.
__global__ void sums_shared_tree_kernel(double *sums, const float *x, const float *y, const float *params,
                                        int64_t n) {
    __shared__ float partial[SUMS][BLOCK_SIZE];  // [j][t]: thread t's share of sum j
    int t = threadIdx.x;
    int64_t i = (int64_t)blockIdx.x * BLOCK_SIZE + t;
    float s[SUMS] = {0.0f, 0.0f, 0.0f};
    if (i < n) add_terms(s, x[i], y[i], params[0], params[1]);
    for (int j = 0; j < SUMS; j++) partial[j][t] = s[j];
    __syncthreads();
    for (int half = BLOCK_SIZE / 2; half > 0; half /= 2) {
        if (t < half) {
            for (int j = 0; j < SUMS; j++) partial[j][t] += partial[j][t + half];
        }
        __syncthreads();  // every thread, active or not: the next step reads what this one wrote
    }
    if (t == 0) {
        for (int j = 0; j < SUMS; j++) atomicAdd(&sums[j], (double)partial[j][0]);
    }
}

// Lane 0 ends up with the sum of v over its warp: each step adds the value `offset` lanes up, register
// to register. Every lane of the warp must take part (full mask).
__device__ __forceinline__ float warp_total(float v) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

// Version 3: no shared memory and no __syncthreads: 5 shuffle steps per sum, then lane 0 of every warp
// adds its warp's sums to global memory: n / 32 atomics per sum.
__global__ void sums_warp_shuffle_kernel(double *sums, const float *x, const float *y, const float *params,
                                         int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    float s[SUMS] = {0.0f, 0.0f, 0.0f};
    if (i < n) add_terms(s, x[i], y[i], params[0], params[1]);  // no early return: the shuffles need every lane
    for (int j = 0; j < SUMS; j++) s[j] = warp_total(s[j]);
    if (threadIdx.x % WARP_SIZE == 0) {
        for (int j = 0; j < SUMS; j++) atomicAdd(&sums[j], (double)s[j]);
    }
}

// The block's total of each s[j] added to sums[j] with one atomicAdd: shuffles within each warp, the 8
// warp totals through shared memory, and one more round of shuffles in warp 0.
__device__ __forceinline__ void add_block_totals(double *sums, float s[SUMS]) {
    __shared__ float warp_totals[SUMS][WARPS_PER_BLOCK];  // [j][w]: warp w's total of sum j
    int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    for (int j = 0; j < SUMS; j++) {
        float total = warp_total(s[j]);
        if (lane == 0) warp_totals[j][warp] = total;
    }
    __syncthreads();
    if (warp != 0) return;
    for (int j = 0; j < SUMS; j++) {
        float total = warp_total(lane < WARPS_PER_BLOCK ? warp_totals[j][lane] : 0.0f);
        if (lane == 0) atomicAdd(&sums[j], (double)total);
    }
}

// Version 4: one thread per point, block totals as above: n / 256 atomics per sum, as in 2, with 5 + 3
// shuffle steps instead of 8 shared-memory steps and their __syncthreads.
__global__ void sums_shuffle_shared_kernel(double *sums, const float *x, const float *y, const float *params,
                                           int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    float s[SUMS] = {0.0f, 0.0f, 0.0f};
    if (i < n) add_terms(s, x[i], y[i], params[0], params[1]);
    add_block_totals(sums, s);
}

// Version 5: a fixed grid; each thread first sums points i, i + stride, ... in registers (neighbouring
// threads still read neighbouring floats: coalesced), then the block totals as in 4.
__global__ void sums_one_wave_kernel(double *sums, const float *x, const float *y, const float *params, int64_t n) {
    float w = params[0], b = params[1];
    float s[SUMS] = {0.0f, 0.0f, 0.0f};
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        add_terms(s, x[i], y[i], w, b);
    add_block_totals(sums, s);
}

// Version 6: the grid-stride loop over float4s (cudaMalloc'ed x and y are 16-byte aligned): one load
// instruction brings 4 points, a quarter of the loads in flight for the same bytes. The last n % 4 points
// go one each to the first threads.
__global__ void sums_float4_kernel(double *sums, const float *x, const float *y, const float *params, int64_t n) {
    float w = params[0], b = params[1];
    float s[SUMS] = {0.0f, 0.0f, 0.0f};
    int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    int64_t quads = n / 4;
    for (int64_t q = first; q < quads; q += stride) {
        float4 xq = ((const float4 *)x)[q], yq = ((const float4 *)y)[q];
        add_terms(s, xq.x, yq.x, w, b);
        add_terms(s, xq.y, yq.y, w, b);
        add_terms(s, xq.z, yq.z, w, b);
        add_terms(s, xq.w, yq.w, w, b);
    }
    int64_t tail = 4 * quads + first;
    if (tail < n) add_terms(s, x[tail], y[tail], w, b);
    add_block_totals(sums, s);
}

// The ceiling: version 6's reads of x and y and nothing else. store is 0 at every launch, but the
// compiler cannot know that, so it must keep every load.
__global__ void read_only_kernel(float *sink, const float *x, const float *y, int64_t n, int store) {
    float acc = 0.0f;
    int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t q = first; q < n / 4; q += stride) {
        float4 xq = ((const float4 *)x)[q], yq = ((const float4 *)y)[q];
        acc += xq.x + xq.y + xq.z + xq.w + yq.x + yq.y + yq.z + yq.w;
    }
    int64_t tail = 4 * (n / 4) + first;
    if (tail < n) acc += x[tail] + y[tail];
    if (store) sink[first] = acc;
}

// ----------------------------------------------------------------------------
// launchers: each returns how many threads it ran (the check's tolerance grows with the points a thread
// sums in fp32 in series)

typedef struct {
    float *x, *y;    // (n,) device
    float *params;   // (2,) device: w, b
    double *sums;    // (3,) device
    float *sink;     // (one wave of the ceiling kernel's threads,) device: never written
    int64_t n;
} Problem;

typedef int64_t (*LaunchFn)(const Problem *p);

static unsigned int blocks_for(int64_t threads) { return (unsigned int)((threads + BLOCK_SIZE - 1) / BLOCK_SIZE); }

// The blocks of `kernel` the whole GPU holds at once (one wave), or fewer when `threads` need fewer.
static unsigned int one_wave(const void *kernel, int64_t threads) {
    int device = 0, sm_count = 0, per_sm = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, BLOCK_SIZE, 0));
    unsigned int wave = (unsigned int)(sm_count * per_sm), needed = blocks_for(threads);
    return needed < wave ? needed : wave;
}

static int64_t launch_atomic(const Problem *p) {
    unsigned int grid = blocks_for(p->n);
    sums_atomic_kernel<<<grid, BLOCK_SIZE>>>(p->sums, p->x, p->y, p->params, p->n);
    launchCheck();
    return (int64_t)grid * BLOCK_SIZE;
}

static int64_t launch_shared_tree(const Problem *p) {
    unsigned int grid = blocks_for(p->n);
    sums_shared_tree_kernel<<<grid, BLOCK_SIZE>>>(p->sums, p->x, p->y, p->params, p->n);
    launchCheck();
    return (int64_t)grid * BLOCK_SIZE;
}

static int64_t launch_warp_shuffle(const Problem *p) {
    unsigned int grid = blocks_for(p->n);
    sums_warp_shuffle_kernel<<<grid, BLOCK_SIZE>>>(p->sums, p->x, p->y, p->params, p->n);
    launchCheck();
    return (int64_t)grid * BLOCK_SIZE;
}

static int64_t launch_shuffle_shared(const Problem *p) {
    unsigned int grid = blocks_for(p->n);
    sums_shuffle_shared_kernel<<<grid, BLOCK_SIZE>>>(p->sums, p->x, p->y, p->params, p->n);
    launchCheck();
    return (int64_t)grid * BLOCK_SIZE;
}

static int64_t launch_one_wave(const Problem *p) {
    unsigned int grid = one_wave((const void *)sums_one_wave_kernel, p->n);
    sums_one_wave_kernel<<<grid, BLOCK_SIZE>>>(p->sums, p->x, p->y, p->params, p->n);
    launchCheck();
    return (int64_t)grid * BLOCK_SIZE;
}

static int64_t launch_float4(const Problem *p) {
    unsigned int grid = one_wave((const void *)sums_float4_kernel, (p->n + 3) / 4);  // at least one float4 a thread
    sums_float4_kernel<<<grid, BLOCK_SIZE>>>(p->sums, p->x, p->y, p->params, p->n);
    launchCheck();
    return (int64_t)grid * BLOCK_SIZE;
}

static unsigned int read_only_grid(int64_t n) { return one_wave((const void *)read_only_kernel, (n + 3) / 4); }

// ----------------------------------------------------------------------------
// the versions, in the order the ladder climbs

typedef struct {
    const char *name;
    LaunchFn launch;
} Version;

static const Version VERSIONS[] = {
    {"atomic", launch_atomic},
    {"shared-tree", launch_shared_tree},
    {"warp-shuffle", launch_warp_shuffle},
    {"shuffle-shared", launch_shuffle_shared},
    {"one-wave", launch_one_wave},
    {"float4", launch_float4},
};
#define VERSION_COUNT ((int)(sizeof(VERSIONS) / sizeof(VERSIONS[0])))

// For tests/gpu/test_reduce_ladder.c, which declares these itself. index counts from 0.
extern "C" int reduce_ladder_version_count(void) { return VERSION_COUNT; }

extern "C" const char *reduce_ladder_version_name(int index) { return VERSIONS[index].name; }

static Problem problem_upload(const float *x, const float *y, float w, float b, int64_t n) {
    Problem p;
    float params[2] = {w, b};
    p.x = (float *)ladder_to_device(x, sizeof(float) * (size_t)n);
    p.y = (float *)ladder_to_device(y, sizeof(float) * (size_t)n);
    p.params = (float *)ladder_to_device(params, sizeof(params));
    cudaCheck(cudaMalloc(&p.sums, SUMS * sizeof(double)));
    cudaCheck(cudaMalloc(&p.sink, sizeof(float) * (size_t)read_only_grid(n) * BLOCK_SIZE));
    p.n = n;
    return p;
}

static void problem_free(Problem *p) {
    cudaCheck(cudaFree(p->x));
    cudaCheck(cudaFree(p->y));
    cudaCheck(cudaFree(p->params));
    cudaCheck(cudaFree(p->sums));
    cudaCheck(cudaFree(p->sink));
}

// Zeroed sums, one call, the sums back in host memory; returns the threads the call ran.
static int64_t run_once(const Version *v, const Problem *p, double sums[SUMS]) {
    cudaCheck(cudaMemset(p->sums, 0, SUMS * sizeof(double)));
    int64_t threads = v->launch(p);
    cudaCheck(cudaMemcpy(sums, p->sums, SUMS * sizeof(double), cudaMemcpyDeviceToHost));
    return threads;
}

// One call of version index on host arrays x, y (n,) at parameters w, b: sums = {sum r^2, sum r x, sum r}.
// Returns the threads it ran, each of which summed about n / threads points in fp32 in series.
extern "C" int64_t reduce_ladder_run(int index, const float *x, const float *y, float w, float b, int64_t n,
                                     double sums[SUMS]) {
    Problem p = problem_upload(x, y, w, b, n);
    int64_t threads = run_once(&VERSIONS[index], &p, sums);
    problem_free(&p);
    return threads;
}

#ifndef LADDER_NO_MAIN
// ----------------------------------------------------------------------------
// the program: flags, the ceiling, the table, the check, the CSV rows

#define DEFAULT_N 4000000            // the trainer's training set: 80% of its 5,000,000 points
#define MAX_N 1000000000

// What ladder_time_runs calls: one version (or the ceiling's NULL) on one problem.
typedef struct {
    const Problem *problem;
    const Version *version;
} Timed;

static void zero_sums(void *ctx) {
    cudaCheck(cudaMemsetAsync(((const Timed *)ctx)->problem->sums, 0, SUMS * sizeof(double), 0));
}

static void call_version(void *ctx) {
    const Timed *t = (const Timed *)ctx;
    t->version->launch(t->problem);
}

static void call_read_only(void *ctx) {
    const Problem *p = ((const Timed *)ctx)->problem;
    read_only_kernel<<<read_only_grid(p->n), BLOCK_SIZE>>>(p->sink, p->x, p->y, p->n, 0);
    launchCheck();
}

// The trainer's data (common/data.c): x evenly spaced in [0, 10), y = 0.7 x + 0.3 + N(0, 0.1^2).
static void fill_points(float *x, float *y, int64_t n) {
    Rng rng;
    rng_seed(&rng, 42);
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)(10.0 * (double)i / (double)n);
        y[i] = (float)(REGRESSION_TRUE_W * x[i] + REGRESSION_TRUE_B + REGRESSION_NOISE * rng_normal(&rng));
    }
}

// The sums in double from the same float inputs, and the size each is checked against: with
// a = |w x| + |b| + |y| >= |r|, sums of a^2, a |x| and a.
typedef struct {
    double sums[SUMS], size[SUMS];
} Expected;

static Expected expected_sums(const float *x, const float *y, float w, float b, int64_t n) {
    Expected e;
    memset(&e, 0, sizeof(e));
    for (int64_t i = 0; i < n; i++) {
        double r = (double)w * x[i] + b - y[i], a = fabs((double)w * x[i]) + fabs((double)b) + fabs((double)y[i]);
        e.sums[0] += r * r;
        e.sums[1] += r * x[i];
        e.sums[2] += r;
        e.size[0] += a * a;
        e.size[1] += a * fabs((double)x[i]);
        e.size[2] += a;
    }
    return e;
}

// The GPU's error bound: computing each term in fp32 costs at most 7 roundings of its size (r: 3, its
// products: up to 4), and a sum adds at most ceil(n / threads) + 4 points in series per thread, then
// trees of depth 8 (a block's 256 threads); the doubles add at most n values. So
//     |gpu - exact| <= ((ceil(n / threads) + 4 + 8 + 7 + slack 5) 2^-24 + n 2^-53) * size
static void check_sums(const Version *v, int number, const double got[SUMS], const Expected *e, int64_t n,
                       int64_t threads) {
    static const char *const names[SUMS] = {"sum r^2", "sum r x", "sum r"};
    double chain = (double)((n + threads - 1) / threads) + 24.0;
    for (int j = 0; j < SUMS; j++) {
        double tolerance = (chain * ldexp(1.0, -24) + (double)n * ldexp(1.0, -53)) * e->size[j];
        if (fabs(got[j] - e->sums[j]) <= tolerance) continue;  // NaN fails too
        fprintf(stderr, "error: version %d %s is wrong: %s = %.9g, but the CPU says %.9g (tolerance %.3g)\n", number,
                v->name, names[j], got[j], e->sums[j], tolerance);
        exit(EXIT_FAILURE);
    }
}

int main(int argc, char **argv) {
    LadderSize size = {"--n", 1, MAX_N, DEFAULT_N, 0};
    LadderOptions options;
    ladder_parse_args(argc, argv,
                      "usage: %s [--n N] [--version K|NAME|all] [--repeat R] [--csv FILE]\n"
                      "  The regression's sums (r^2, r x, r) over N points, version by version, each checked against"
                      " the CPU.\n"
                      "  --n N        points, 1 .. 1000000000 (default 4000000, the trainer's training set)\n",
                      &size, 1, VERSION_COUNT, reduce_ladder_version_name, 1, &options);
    DeviceInfo device;
    ladder_require_gpu(argv[0], &device);
    int64_t n = size.value;
    device_check_memory(8.0 * (double)n, "the points", "use a smaller --n");

    float *x = (float *)host_malloc(sizeof(float) * (size_t)n, "x");  // (n,)
    float *y = (float *)host_malloc(sizeof(float) * (size_t)n, "y");  // (n,)
    fill_points(x, y, n);
    float w = REGRESSION_W_INIT, b = REGRESSION_B_INIT;
    Expected expected = expected_sums(x, y, w, b, n);
    Problem p = problem_upload(x, y, w, b, n);

    LadderTable table;
    memset(&table, 0, sizeof(table));
    table.stage = "04";
    table.ladder = "reduce";
    snprintf(table.shape, sizeof(table.shape), "%lld points", (long long)n);
    table.unit = "GB/s";
    table.work = 8.0 * (double)n;
    table.ceiling = "read-only kernel";
    Timed ceiling = {&p, NULL};
    table.ceiling_time = ladder_time_runs(NULL, call_read_only, &ceiling, 1, options.repeats);
    table.repeats = options.repeats;
    table.device = &device;
    table.csv_path = options.csv_path;
    printf("regression sums (r^2, r x, r) over n = %lld points at w = %g, b = %g: %.1f MB read per call\n",
           (long long)n, w, b, table.work / 1e6);
    printf("GPU: %s (cc %s, CUDA %s, driver %s); each call timed alone, sums zeroed before it (untimed)\n",
           device.name, device.cc, device.cuda, device.driver);
    ladder_table_begin(&table);
    for (int v = options.first; v < options.last; v++) {
        double sums[SUMS];
        int64_t threads = run_once(&VERSIONS[v], &p, sums);
        check_sums(&VERSIONS[v], v + 1, sums, &expected, n, threads);
        Timed timed = {&p, &VERSIONS[v]};
        LadderStats time = ladder_time_runs(zero_sums, call_version, &timed, 1, options.repeats);
        ladder_table_row(&table, v + 1, VERSIONS[v].name, time, NAN);
    }
    problem_free(&p);
    free(x);
    free(y);
    return EXIT_OK;
}
#endif
