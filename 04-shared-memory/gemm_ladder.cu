/*
Kernel ladder, stage 04: the MNIST forward GEMM out = relu(in @ W + bias), one idea per version, at the
trainer's first layer by default: in (128, 784) a batch of images, W (784, 128), out (128, 128).

    1 naive            one thread per output, its row of in and column of W read from global memory:
                       two loads per multiply-add (stages 02 and 03)
    2 tile16           a block of 16 x 16 threads computes a 16 x 16 tile of out, walking K in slices of
                       32 that it first copies into shared memory: each loaded float now feeds 16 FMAs
    3 tile16-padded    each slice row one float longer: the 16 rows of the in slice that a warp reads at
                       once sat 32 floats apart, all in one shared-memory bank (a 2-way conflict)
    4 tile16-prefetch  the next slice's global loads issued before this slice's FMAs, stored after them,
                       so they travel while the block computes: the kernel the stage-04 trainer keeps
    5 tile16-2x2       the same 16 x 16 tile on 8 x 8 threads, each computing 2 x 2 outputs from
                       registers: half the shared-memory loads per FMA
    6 tile32           16 x 16 threads, 2 x 2 outputs each: a 32 x 32 tile, a quarter of the blocks
    7 tile64           16 x 16 threads, 4 x 4 outputs each: a 64 x 64 tile

    make stage 4 ladder                            (this ladder and reduce_ladder)
    build/04/gemm_ladder --m 128 --k 784 --n 1024 --version tile32 --csv ladders.csv

A timed run is 10 calls back to back (ms per call), median of --repeat runs after 3 warm-ups, min-max
as the spread. GFLOP/s = 2 m n k / time. The ceiling is cublasSgemm on the same shapes in the same run:
the product alone (our kernels also add the bias and apply ReLU). Every version's out is poisoned (NaN)
first and checked against the CPU in double precision with a bound that grows with k (common/ladder.h,
ladder_gemm_tolerance). 06-cublas-cudnn/gemm_ladder.cu includes the kernels above the line marked
GEMM_LADDER_KERNELS_ONLY: its first version is this ladder's 4.

Exit codes: 0 ok; 1 a wrong result; 2 an invalid flag or an unwritable --csv file; 3 out of host memory;
4 no GPU or any CUDA or cuBLAS error.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>

#include "check.h"  // after cublas_v2.h: it defines cublasCheck for it
#include "device.h"
#include "host.h"
#include "ladder.h"
#include "ladder_gpu.h"

#define TILE_K 32  // the slice of the shared dimension K a tiled block stages in shared memory per step

// ----------------------------------------------------------------------------
// kernels. Every one: out (m, n) = relu(in (m, k) @ weight (k, n) + bias (n)), all row-major.

// Version 1: thread (x, y) of the grid computes out[y][x]. Neighbouring threads read neighbouring
// floats of W's row p and all read the same in[y][p]; nothing read is shared between threads.
__global__ void gemm_naive_kernel(float *out, const float *in, const float *weight, const float *bias, int m, int k,
                                  int n) {
    int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m || j >= n) return;
    float acc = 0.0f;
    for (int p = 0; p < k; p++) acc += in[(size_t)i * k + p] * weight[(size_t)p * n + j];
    out[(size_t)i * n + j] = fmaxf(acc + bias[j], 0.0f);
}

// Versions 2 and 3 (PAD = 0, 1): a block of 16 x 16 threads owns the 16 x 16 tile of out at (row0, col0).
// Per slice of K it copies in (16, 32) and W (32, 16) into shared memory, 2 floats of each per thread,
// neighbouring threads on neighbouring addresses (coalesced), zeros past the edges of the matrices; then
// thread (tx, ty) adds 32 products from shared memory. A slice costs the block 1,024 global loads for
// 8,192 FMAs, where version 1 loaded two floats for every FMA.
// Shared memory has 32 banks of 4 bytes, float f in bank f % 32. A warp is two rows of threads (ty, ty + 1),
// which read in_slice[ty][p] and in_slice[ty + 1][p]: 32 floats apart without padding, one bank, so the
// two reads are served one after the other. A row of 33 floats puts them in neighbouring banks.
template <int PAD>
__global__ void __launch_bounds__(256)
    gemm_tile16_kernel(float *out, const float *in, const float *weight, const float *bias, int m, int k, int n) {
    __shared__ float in_slice[16][TILE_K + PAD];  // in (row0 + r, k0 + c) at [r][c]
    __shared__ float w_slice[TILE_K][16 + PAD];   // W (k0 + r, col0 + c) at [r][c]
    int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
    int row0 = blockIdx.y * 16, col0 = blockIdx.x * 16;
    float acc = 0.0f;
    for (int k0 = 0; k0 < k; k0 += TILE_K) {
        for (int e = tid; e < 16 * TILE_K; e += 256) {
            int r = e / TILE_K, c = e % TILE_K;  // in's slice, row by row
            in_slice[r][c] = row0 + r < m && k0 + c < k ? in[(size_t)(row0 + r) * k + k0 + c] : 0.0f;
            r = e / 16, c = e % 16;  // W's slice, row by row
            w_slice[r][c] = k0 + r < k && col0 + c < n ? weight[(size_t)(k0 + r) * n + col0 + c] : 0.0f;
        }
        __syncthreads();  // the slices are complete
        for (int p = 0; p < TILE_K; p++) acc += in_slice[ty][p] * w_slice[p][tx];
        __syncthreads();  // everyone is done with them before the next copy overwrites them
    }
    int i = row0 + ty, j = col0 + tx;
    if (i < m && j < n) out[(size_t)i * n + j] = fmaxf(acc + bias[j], 0.0f);
}

// Versions 4 to 7: a block of T x T threads owns a TILE x TILE tile of out, TILE = T MICRO; thread (tx, ty)
// computes the MICRO x MICRO outputs at rows ty + T r and columns tx + T c (strided, not a contiguous
// square, so that for each (r, c) a row of threads stores T neighbouring floats and reads T neighbouring
// floats of W's slice). Per k each thread reads MICRO floats of each slice from shared memory for MICRO^2
// FMAs: 2 shared loads per FMA at MICRO 1, 1 at 2, 1/2 at 4. Slices are padded as in version 3.
//
// Prefetch: a thread's share of the next slices (LOADS floats of each) is loaded into registers before the
// FMAs of the current slices and stored into shared memory after them, so the round trip to L2 (hundreds
// of cycles) overlaps the FMAs. At batch 128 and K = 784 a block walks 25 slices one after another, and
// without it every slice waited for its loads with nothing else to do.

// Thread tid's LOADS floats of the in slice (TILE, TILE_K) at (row0, k0) and of the W slice (TILE_K, TILE)
// at (k0, col0): the elements tid, tid + T^2, ... of each slice counted row by row; zeros past the edges.
template <int T, int MICRO>
__device__ __forceinline__ void fetch_slices(float in_regs[], float w_regs[], const float *in, const float *weight,
                                             int m, int k, int n, int row0, int col0, int k0) {
    const int TILE = T * MICRO, LOADS = TILE * TILE_K / (T * T);
    int tid = threadIdx.y * T + threadIdx.x;
#pragma unroll
    for (int l = 0; l < LOADS; l++) {
        int e = tid + l * T * T;
        int r = e / TILE_K, c = e % TILE_K;
        in_regs[l] = row0 + r < m && k0 + c < k ? in[(size_t)(row0 + r) * k + k0 + c] : 0.0f;
        r = e / TILE, c = e % TILE;
        w_regs[l] = k0 + r < k && col0 + c < n ? weight[(size_t)(k0 + r) * n + col0 + c] : 0.0f;
    }
}

template <int T, int MICRO>
__global__ void __launch_bounds__(T * T)
    gemm_prefetch_kernel(float *out, const float *in, const float *weight, const float *bias, int m, int k, int n) {
    const int TILE = T * MICRO, LOADS = TILE * TILE_K / (T * T);
    __shared__ float in_slice[TILE][TILE_K + 1];  // in (row0 + r, k0 + c) at [r][c]
    __shared__ float w_slice[TILE_K][TILE + 1];   // W (k0 + r, col0 + c) at [r][c]
    int tx = threadIdx.x, ty = threadIdx.y, tid = ty * T + tx;
    int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
    float in_next[LOADS], w_next[LOADS];  // this thread's share of the next slices
    float acc[MICRO][MICRO];
#pragma unroll
    for (int r = 0; r < MICRO; r++) {
#pragma unroll
        for (int c = 0; c < MICRO; c++) acc[r][c] = 0.0f;
    }

    fetch_slices<T, MICRO>(in_next, w_next, in, weight, m, k, n, row0, col0, 0);
    for (int k0 = 0; k0 < k; k0 += TILE_K) {
#pragma unroll
        for (int l = 0; l < LOADS; l++) {
            int e = tid + l * T * T;
            in_slice[e / TILE_K][e % TILE_K] = in_next[l];
            w_slice[e / TILE][e % TILE] = w_next[l];
        }
        __syncthreads();  // the slices are complete
        if (k0 + TILE_K < k)  // the next slices' loads: in flight during the FMAs below
            fetch_slices<T, MICRO>(in_next, w_next, in, weight, m, k, n, row0, col0, k0 + TILE_K);
#pragma unroll
        for (int p = 0; p < TILE_K; p++) {
            float a[MICRO], b[MICRO];  // in (ty + T r, p) and W (p, tx + T c), from shared memory to registers
#pragma unroll
            for (int r = 0; r < MICRO; r++) a[r] = in_slice[ty + T * r][p];
#pragma unroll
            for (int c = 0; c < MICRO; c++) b[c] = w_slice[p][tx + T * c];
#pragma unroll
            for (int r = 0; r < MICRO; r++) {
#pragma unroll
                for (int c = 0; c < MICRO; c++) acc[r][c] += a[r] * b[c];
            }
        }
        __syncthreads();  // everyone is done with the slices before the next store overwrites them
    }
#pragma unroll
    for (int r = 0; r < MICRO; r++) {
#pragma unroll
        for (int c = 0; c < MICRO; c++) {
            int i = row0 + ty + T * r, j = col0 + tx + T * c;
            if (i < m && j < n) out[(size_t)i * n + j] = fmaxf(acc[r][c] + bias[j], 0.0f);
        }
    }
}

// ----------------------------------------------------------------------------
// launchers: one per version, all with the same signature, on the default stream

typedef void (*GemmLaunchFn)(float *out, const float *in, const float *weight, const float *bias, int m, int k, int n);

static unsigned int tiles(int size, int tile) { return (unsigned int)((size + tile - 1) / tile); }

static void launch_naive(float *out, const float *in, const float *weight, const float *bias, int m, int k, int n) {
    gemm_naive_kernel<<<dim3(tiles(n, 16), tiles(m, 16)), dim3(16, 16)>>>(out, in, weight, bias, m, k, n);
    launchCheck();
}

template <int PAD>
static void launch_tile16(float *out, const float *in, const float *weight, const float *bias, int m, int k, int n) {
    gemm_tile16_kernel<PAD><<<dim3(tiles(n, 16), tiles(m, 16)), dim3(16, 16)>>>(out, in, weight, bias, m, k, n);
    launchCheck();
}

template <int T, int MICRO>
static void launch_prefetch(float *out, const float *in, const float *weight, const float *bias, int m, int k, int n) {
    dim3 grid(tiles(n, T * MICRO), tiles(m, T * MICRO));
    gemm_prefetch_kernel<T, MICRO><<<grid, dim3(T, T)>>>(out, in, weight, bias, m, k, n);
    launchCheck();
}

// out (m, n) = in (m, k) @ weight (k, n), all row-major, by cuBLAS (no bias, no ReLU). cuBLAS is column-
// major: the bytes of our row-major (R, C) matrix are its column-major (C, R) matrix, the transpose, with
// leading dimension C. So it computes out^T (n, m) = W^T (n, k) @ in^T (k, m): the operands swapped.
// (Not static: without main, this file has no caller of it, and an unused static function is a warning.)
void sgemm_row_major(cublasHandle_t cublas, float *out, const float *in, const float *weight, int m, int k, int n) {
    const float one = 1.0f, zero = 0.0f;
    cublasCheck(cublasSgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, weight, n, in, k, &zero, out, n));
}

// out (m, n) = max(out + bias (n), 0), one thread per element: the epilogue after sgemm_row_major for the
// ladders that include this file and race cuBLAS's product plus a kernel (stages 06 and 09).
__global__ void bias_relu_kernel(float *out, const float *bias, int m, int n) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)m * n) return;
    out[idx] = fmaxf(out[idx] + bias[idx % n], 0.0f);
}

void launch_bias_relu(float *out, const float *bias, int m, int n) {
    bias_relu_kernel<<<(unsigned int)(((int64_t)m * n + 255) / 256), 256>>>(out, bias, m, n);
    launchCheck();
}

#ifndef GEMM_LADDER_KERNELS_ONLY
// ----------------------------------------------------------------------------
// the versions, in the order the ladder climbs

typedef struct {
    const char *name;
    GemmLaunchFn launch;
} Version;

static const Version VERSIONS[] = {
    {"naive", launch_naive},
    {"tile16", launch_tile16<0>},
    {"tile16-padded", launch_tile16<1>},
    {"tile16-prefetch", launch_prefetch<16, 1>},
    {"tile16-2x2", launch_prefetch<8, 2>},
    {"tile32", launch_prefetch<16, 2>},
    {"tile64", launch_prefetch<16, 4>},
};
#define VERSION_COUNT ((int)(sizeof(VERSIONS) / sizeof(VERSIONS[0])))
#define CALLS_PER_RUN 10

// Device buffers of one shape.
typedef struct {
    float *in, *weight, *bias, *out;  // (m, k), (k, n), (n,), (m, n)
    int m, k, n;
} Problem;

static Problem problem_upload(const float *in, const float *weight, const float *bias, int m, int k, int n) {
    Problem p = {NULL, NULL, NULL, NULL, m, k, n};
    p.in = (float *)ladder_to_device(in, sizeof(float) * (size_t)m * k);
    p.weight = (float *)ladder_to_device(weight, sizeof(float) * (size_t)k * n);
    p.bias = (float *)ladder_to_device(bias, sizeof(float) * (size_t)n);
    cudaCheck(cudaMalloc(&p.out, sizeof(float) * (size_t)m * n));
    return p;
}

static void problem_free(Problem *p) {
    cudaCheck(cudaFree(p->in));
    cudaCheck(cudaFree(p->weight));
    cudaCheck(cudaFree(p->bias));
    cudaCheck(cudaFree(p->out));
}

// out poisoned with NaN (all bits set), one call, out back in host memory: an output no thread wrote fails.
static void run_once(const Version *v, const Problem *p, float *out) {
    cudaCheck(cudaMemset(p->out, 0xff, sizeof(float) * (size_t)p->m * p->n));
    v->launch(p->out, p->in, p->weight, p->bias, p->m, p->k, p->n);
    cudaCheck(cudaMemcpy(out, p->out, sizeof(float) * (size_t)p->m * p->n, cudaMemcpyDeviceToHost));
}

// For tests/gpu/test_gemm_ladder.c, which declares these itself (06-cublas-cudnn/gemm_ladder.cu exports
// the same four). index counts from 0.
extern "C" int gemm_ladder_version_count(void) { return VERSION_COUNT; }

extern "C" const char *gemm_ladder_version_name(int index) { return VERSIONS[index].name; }

// The relative rounding of each input before it is multiplied: every version here reads fp32.
extern "C" double gemm_ladder_input_rounding(int index) {
    (void)index;
    return 0.0;
}

// out (m, n) = relu(in (m, k) @ weight (k, n) + bias (n)) by version index, on host buffers; returns why
// the version cannot run here, or NULL (all of them can).
extern "C" const char *gemm_ladder_run(int index, const float *in, const float *weight, const float *bias, float *out,
                                       int m, int k, int n) {
    Problem p = problem_upload(in, weight, bias, m, k, n);
    run_once(&VERSIONS[index], &p, out);
    problem_free(&p);
    return NULL;
}

#ifndef LADDER_NO_MAIN
// ----------------------------------------------------------------------------
// the program: flags, the ceiling, the table, the check, the CSV rows

// What ladder_time_runs calls: one version, or cuBLAS (the ceiling) when version is NULL.
typedef struct {
    const Problem *problem;
    const Version *version;
    cublasHandle_t cublas;
} Timed;

static void call_timed(void *ctx) {
    const Timed *t = (const Timed *)ctx;
    const Problem *p = t->problem;
    if (t->version) t->version->launch(p->out, p->in, p->weight, p->bias, p->m, p->k, p->n);
    else sgemm_row_major(t->cublas, p->out, p->in, p->weight, p->m, p->k, p->n);
}

int main(int argc, char **argv) {
    LadderSize sizes[3] = LADDER_GEMM_SIZES;
    LadderOptions options;
    ladder_parse_args(argc, argv, LADDER_GEMM_USAGE, sizes, 3, VERSION_COUNT, gemm_ladder_version_name, CALLS_PER_RUN,
                      &options);
    DeviceInfo device;
    ladder_require_gpu(argv[0], &device);
    LadderGemm g;
    ladder_gemm_init(&g, (int)sizes[0].value, (int)sizes[1].value, (int)sizes[2].value);
    Problem p = problem_upload(g.in, g.weight, g.bias, g.m, g.k, g.n);
    cublasHandle_t cublas;
    cublasCheck(cublasCreate(&cublas));

    LadderTable table;
    memset(&table, 0, sizeof(table));
    table.stage = "04";
    table.ladder = "gemm";
    snprintf(table.shape, sizeof(table.shape), "%dx%dx%d", g.m, g.k, g.n);
    table.unit = "GFLOP/s";
    table.work = 2.0 * g.m * g.n * g.k;
    table.ceiling = "cublasSgemm";
    Timed ceiling = {&p, NULL, cublas};
    table.ceiling_time = ladder_time_runs(NULL, call_timed, &ceiling, CALLS_PER_RUN, options.repeats);
    table.repeats = options.repeats;
    table.device = &device;
    table.csv_path = options.csv_path;
    printf("forward GEMM out (%d, %d) = relu(in (%d, %d) @ W (%d, %d) + bias): %.1f MFLOP per call\n", g.m, g.n, g.m,
           g.k, g.k, g.n, table.work / 1e6);
    printf("GPU: %s (cc %s, CUDA %s, driver %s); a timed run is %d calls back to back\n", device.name, device.cc,
           device.cuda, device.driver, CALLS_PER_RUN);
    ladder_table_begin(&table);
    for (int v = options.first; v < options.last; v++) {
        run_once(&VERSIONS[v], &p, g.out);
        ladder_gemm_check(&g, v + 1, VERSIONS[v].name, 0.0);
        Timed timed = {&p, &VERSIONS[v], cublas};
        LadderStats time = ladder_time_runs(NULL, call_timed, &timed, CALLS_PER_RUN, options.repeats);
        ladder_table_row(&table, v + 1, VERSIONS[v].name, time, NAN);
    }
    cublasCheck(cublasDestroy(cublas));
    problem_free(&p);
    ladder_gemm_free(&g);
    return EXIT_OK;
}
#endif  // LADDER_NO_MAIN
#endif  // GEMM_LADDER_KERNELS_ONLY
