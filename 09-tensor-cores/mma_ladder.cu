/*
Kernel ladder, stage 09: the product out = relu(in @ W + bias) on tensor cores, written by hand with the
warp-wide instruction mma.sync, one idea per version, at the MNIST trainer's product shapes (m x k x n):
128 x 784 x 128 (the first layer forward at --hidden 128), 784 x 128 x 128 (the size of that layer's weight
gradient, x^T (784, 128) @ dH (128, 128)) and 128 x 1024 x 1024 (a hidden layer of --hidden 1024,1024).

    1 fma-tile        stage 04's tiled kernel on the CUDA cores (04-shared-memory/gemm_ladder.cu, version 4)
    2 mma-tf32        a block of 4 warps owns a 32 x 16 tile of out; per slice of 64 along K it copies in
                      (32, 64) and W (64, 16) into shared memory, then each warp multiplies its 16 x 8 corner
                      with mma.sync.m16n8k8 on tf32 inputs (10 mantissa bits), accumulating in fp32
    3 mma-padded      2 with every shared row 4 (in) or 8 (W) floats longer: a warp's fragment loads then hit
                      32 different banks instead of 4 (in: 8 lanes a bank) or 16 (W: 2 lanes a bank)
    4 mma-async       3 with the slices copied by cp.async into two buffers: the next slice travels while the
                      warps multiply this one
    5 mma-3xtf32      4 at fp32 accuracy: each input split into a tf32 high part and a tf32 low part, three
                      products (hi hi, hi lo, lo hi) instead of one
    6 cublas-tf32     cuBLAS's own tf32 tensor-core product (CUBLAS_TF32_TENSOR_OP_MATH), then the bias and
                      ReLU: the library to race for versions 2 to 4

    make stage 9 ladder
    build/09/mma_ladder --m 128 --k 1024 --n 1024 --version mma-3xtf32 --repeat 50 --csv ladders.csv

A timed run is 10 calls back to back (ms per call), median of --repeat runs after 3 warm-ups, min-max as the
spread; GFLOP/s = 2 m n k / time. The ceiling is cublasSgemm in fp32 on the CUDA cores, the product alone, in
the same run: version 5 must beat it at the same accuracy. Every out is poisoned first and checked against
the CPU in double precision (common/ladder.h, ladder_gemm_tolerance, with the rounding of each version's
inputs). Versions 2 to 6 need tensor-core tf32 (compute capability 8.0) and a build that carries it; below
that they are skipped with the reason.

Exit codes: 0 ok; 1 a wrong result; 2 an invalid flag or an unwritable --csv file; 3 out of host memory;
4 no GPU or any CUDA or cuBLAS error.
*/
#define GEMM_LADDER_KERNELS_ONLY  // version 1's kernel, sgemm_row_major and bias_relu, not the stage-04 program
#include "../04-shared-memory/gemm_ladder.cu"

#include <cuda_pipeline_primitives.h>

#include "gates.h"
#include "mma_tf32.cuh"  // to_tf32, mma_tf32: the fragment layout

#define CALLS_PER_RUN 10
#define MMA_TILE_M 32    // rows of out a block owns
#define MMA_TILE_N 16    // columns of out a block owns
#define MMA_TILE_K 64    // the slice of K a block stages in shared memory per step
#define MMA_THREADS 128  // 4 warps, 2 x 2, each owning a quarter of the tile
#define WARP_TILE_M (MMA_TILE_M / 2)  // a warp's corner of the tile: 16 x 8,
#define WARP_TILE_N (MMA_TILE_N / 2)
#define M_FRAGS (WARP_TILE_M / 16)    // one m16 product high and one n8 product wide (the loops over
#define N_FRAGS (WARP_TILE_N / 8)     // them serve larger tiles: README, "The tile")
#define TF32_ROUNDING 9.765625e-4       // 2^-10: an input rounded to tf32 (10 mantissa bits), with room to spare
#define THREE_TF32_ROUNDING 4.76837158203125e-7  // 2^-21: hi + lo misses an input by ~2^-22, and lo lo is dropped

// ----------------------------------------------------------------------------
// copying a slice into shared memory: the ROWS x COLS tile of a row-major matrix (rows, cols) at (row0, col0)
// to `to`, whose rows are `stride` floats apart; zeros past the matrix's edges. A slice is two such tiles:
// in (MMA_TILE_M, MMA_TILE_K) at (row0, k0) and W (MMA_TILE_K, MMA_TILE_N) at (k0, col0).

// Versions 2 and 3: plain loads and stores, neighbouring threads on neighbouring addresses (coalesced).
template <int ROWS, int COLS>
static __device__ __forceinline__ void copy_tile(float *to, int stride, const float *from, int rows, int cols,
                                                 int row0, int col0) {
#pragma unroll
    for (int e = threadIdx.x; e < ROWS * COLS; e += MMA_THREADS) {
        int r = e / COLS, c = e % COLS;
        to[r * stride + c] = row0 + r < rows && col0 + c < cols ? from[(size_t)(row0 + r) * cols + col0 + c] : 0.0f;
    }
}

// Versions 4 and 5: the same tile by cp.async, which lands in shared memory without passing through registers
// while the thread goes on. 16 bytes a copy where the matrix's rows are whole float4s (cols a multiple of 4:
// every source is then 16-byte aligned, and a float4 is either inside the matrix or wholly past its edge),
// else 4; what lies past an edge is plain stores of zero. The common case is one cp.async and two compares:
// the warps issue every instruction of this for every slice, and 4 warps a block hide little.
template <int ROWS, int COLS>
static __device__ __forceinline__ void copy_tile_async(float *to, int stride, const float *from, int rows, int cols,
                                                       int row0, int col0) {
    if (cols % 4 == 0) {
#pragma unroll
        for (int e = 4 * threadIdx.x; e < ROWS * COLS; e += 4 * MMA_THREADS) {
            int r = e / COLS, c = e % COLS;
            float *dst = to + r * stride + c;
            if (row0 + r < rows && col0 + c < cols)
                __pipeline_memcpy_async(dst, from + (size_t)(row0 + r) * cols + col0 + c, 16);
            else *(float4 *)dst = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    } else {
#pragma unroll
        for (int e = threadIdx.x; e < ROWS * COLS; e += MMA_THREADS) {
            int r = e / COLS, c = e % COLS;
            if (row0 + r < rows && col0 + c < cols)
                __pipeline_memcpy_async(to + r * stride + c, from + (size_t)(row0 + r) * cols + col0 + c, 4);
            else to[r * stride + c] = 0.0f;
        }
    }
}

// ----------------------------------------------------------------------------
// where a lane's share of one mma.sync lies: the layout of common/mma_tf32.cuh, as index arithmetic

// The three matrices of one product: A (16 x 8) and B (8 x 8), which a lane loads, and C (16 x 8), which it stores.
enum Fragment { FRAGMENT_A, FRAGMENT_B, FRAGMENT_C };

// A cell of one of them.
struct FragmentCell {
    int row, col;
};

// Where element e of lane's fragment of `matrix` lies in that matrix: a[e] of A and c[e] of C (e = 0 .. 3), b[e] of
// B (e = 0 .. 1). The kernels call it with a constant matrix and e (unrolled loops): it folds into a few integer
// instructions per slice, and each load and store into a constant offset from them. The host calls it through
// mma_fragment_cell (the exercise's CPU check).
static __host__ __device__ __forceinline__ FragmentCell fragment_cell(Fragment matrix, int lane, int e) {
    FragmentCell cell = {0, 0};
    // EXERCISE(fragment-load-store) begin: cell = the row and column of element e of lane's fragment of matrix, as
    //: common/mma_tf32.cuh's table gives them (g = lane / 4, t = lane % 4): over the 32 lanes, every cell of A, of B
    //: and of C exactly once
    int g = lane / 4, t = lane % 4;
    if (matrix == FRAGMENT_A) cell = {g + 8 * (e % 2), t + 4 * (e / 2)};
    else if (matrix == FRAGMENT_B) cell = {t + 4 * e, g};
    else cell = {g + 8 * (e / 2), 2 * t + e % 2};
    // EXERCISE end
    return cell;
}

// ----------------------------------------------------------------------------
// the kernel of versions 2 to 5

// The warp's products on one staged slice: MMA_TILE_K / 8 steps along K; per step the A fragments of its
// WARP_TILE_M rows (M_FRAGS of 16) and the B fragments of its WARP_TILE_N columns (N_FRAGS of 8), read from
// shared memory at the cells fragment_cell gives, rounded to tf32 (PRODUCTS 1) or split into tf32 high and
// low parts (PRODUCTS 3). acc[i][j]: the C fragment of the warp's row block i and column block j.
template <int PRODUCTS>
static __device__ __forceinline__ void multiply_slice(float acc[M_FRAGS][N_FRAGS][4], const float *in_slice,
                                                      const float *w_slice, int in_stride, int w_stride) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const float *a_rows = in_slice + (warp / 2) * WARP_TILE_M * in_stride;  // in (WARP_TILE_M, MMA_TILE_K)
    const float *b_cols = w_slice + (warp % 2) * WARP_TILE_N;               // W (MMA_TILE_K, WARP_TILE_N)
#pragma unroll
    for (int kk = 0; kk < MMA_TILE_K; kk += 8) {
        uint32_t a_hi[M_FRAGS][4], a_lo[M_FRAGS][4], b_hi[N_FRAGS][2], b_lo[N_FRAGS][2];
#pragma unroll
        for (int i = 0; i < M_FRAGS; i++) {
            const float *a = a_rows + 16 * i * in_stride + kk;
            float x[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                FragmentCell at = fragment_cell(FRAGMENT_A, lane, e);
                x[e] = a[at.row * in_stride + at.col];
            }
#pragma unroll
            for (int e = 0; e < 4; e++) {
                a_hi[i][e] = to_tf32(x[e]);
                if (PRODUCTS == 3) a_lo[i][e] = to_tf32(x[e] - __uint_as_float(a_hi[i][e]));  // what hi missed
            }
        }
#pragma unroll
        for (int j = 0; j < N_FRAGS; j++) {
            const float *b = b_cols + kk * w_stride + 8 * j;
            float x[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                FragmentCell at = fragment_cell(FRAGMENT_B, lane, e);
                x[e] = b[at.row * w_stride + at.col];
            }
#pragma unroll
            for (int e = 0; e < 2; e++) {
                b_hi[j][e] = to_tf32(x[e]);
                if (PRODUCTS == 3) b_lo[j][e] = to_tf32(x[e] - __uint_as_float(b_hi[j][e]));
            }
        }
#pragma unroll
        for (int i = 0; i < M_FRAGS; i++) {
#pragma unroll
            for (int j = 0; j < N_FRAGS; j++) {
                if (PRODUCTS == 3) {  // the small products first, then the large one
                    mma_tf32(acc[i][j], a_lo[i], b_hi[j]);
                    mma_tf32(acc[i][j], a_hi[i], b_lo[j]);
                }
                mma_tf32(acc[i][j], a_hi[i], b_hi[j]);
            }
        }
    }
}

// out (m, n) = relu(in (m, k) @ weight (k, n) + bias (n)), all row-major. Block (x, y) owns the MMA_TILE_M x
// MMA_TILE_N tile of out at (MMA_TILE_M y, MMA_TILE_N x); warp w its corner at (WARP_TILE_M (w / 2),
// WARP_TILE_N (w % 2)).
// PAD_IN, PAD_W: floats added to each shared row of the in and W slices; STAGES: slice buffers (1: plain
// copies, 2: cp.async into one buffer while the warps read the other); PRODUCTS: 1 (tf32) or 3 (3xTF32).
template <int PAD_IN, int PAD_W, int STAGES, int PRODUCTS>
__global__ void __launch_bounds__(MMA_THREADS)
    gemm_mma_kernel(float *out, const float *in, const float *weight, const float *bias, int m, int k, int n) {
    const int IN_STRIDE = MMA_TILE_K + PAD_IN, W_STRIDE = MMA_TILE_N + PAD_W;
    __shared__ __align__(16) float in_slices[STAGES][MMA_TILE_M * IN_STRIDE];  // in (row0 + r, k0 + c) at [r][c]
    __shared__ __align__(16) float w_slices[STAGES][MMA_TILE_K * W_STRIDE];    // W (k0 + r, col0 + c) at [r][c]
    int row0 = blockIdx.y * MMA_TILE_M, col0 = blockIdx.x * MMA_TILE_N;
    int slices = (k + MMA_TILE_K - 1) / MMA_TILE_K;
    float acc[M_FRAGS][N_FRAGS][4] = {};

    if (STAGES == 1) {
        for (int s = 0; s < slices; s++) {
            int k0 = s * MMA_TILE_K;
            copy_tile<MMA_TILE_M, MMA_TILE_K>(in_slices[0], IN_STRIDE, in, m, k, row0, k0);
            copy_tile<MMA_TILE_K, MMA_TILE_N>(w_slices[0], W_STRIDE, weight, k, n, k0, col0);
            __syncthreads();  // the slices are complete
            multiply_slice<PRODUCTS>(acc, in_slices[0], w_slices[0], IN_STRIDE, W_STRIDE);
            __syncthreads();  // everyone is done with them before the next copy overwrites them
        }
    } else {
        // slice s goes to buffer s % STAGES, one commit group a slice (empty past the last slice, so that
        // "all but the newest STAGES - 1 groups" always means "slice s")
        for (int s = 0; s < STAGES - 1; s++) {
            if (s < slices) {
                copy_tile_async<MMA_TILE_M, MMA_TILE_K>(in_slices[s], IN_STRIDE, in, m, k, row0, s * MMA_TILE_K);
                copy_tile_async<MMA_TILE_K, MMA_TILE_N>(w_slices[s], W_STRIDE, weight, k, n, s * MMA_TILE_K, col0);
            }
            __pipeline_commit();
        }
        for (int s = 0; s < slices; s++) {
            int ahead = s + STAGES - 1;  // into the buffer the warps finished reading at slice s - 1
            if (ahead < slices) {
                int k0 = ahead * MMA_TILE_K, b = ahead % STAGES;
                copy_tile_async<MMA_TILE_M, MMA_TILE_K>(in_slices[b], IN_STRIDE, in, m, k, row0, k0);
                copy_tile_async<MMA_TILE_K, MMA_TILE_N>(w_slices[b], W_STRIDE, weight, k, n, k0, col0);
            }
            __pipeline_commit();
            __pipeline_wait_prior(STAGES - 1);  // my copies of slice s have landed,
            __syncthreads();                    // and everyone's
            multiply_slice<PRODUCTS>(acc, in_slices[s % STAGES], w_slices[s % STAGES], IN_STRIDE, W_STRIDE);
            __syncthreads();  // everyone is done with buffer s % STAGES before a copy overwrites it
        }
    }

    // each lane's C fragments: c[e] of each of the warp's 16 x 8 blocks, at its cell of that block
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int i = 0; i < M_FRAGS; i++) {
#pragma unroll
        for (int j = 0; j < N_FRAGS; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                FragmentCell at = fragment_cell(FRAGMENT_C, lane, e);
                int row = row0 + WARP_TILE_M * (warp / 2) + 16 * i + at.row;
                int col = col0 + WARP_TILE_N * (warp % 2) + 8 * j + at.col;
                if (row < m && col < n) out[(size_t)row * n + col] = fmaxf(acc[i][j][e] + bias[col], 0.0f);
            }
        }
    }
}

template <int PAD_IN, int PAD_W, int STAGES, int PRODUCTS>
static void launch_mma(float *out, const float *in, const float *weight, const float *bias, int m, int k, int n) {
    dim3 grid(tiles(n, MMA_TILE_N), tiles(m, MMA_TILE_M));
    gemm_mma_kernel<PAD_IN, PAD_W, STAGES, PRODUCTS><<<grid, MMA_THREADS>>>(out, in, weight, bias, m, k, n);
    launchCheck();
}

// ----------------------------------------------------------------------------
// the versions, in the order the ladder climbs

// Device buffers and cuBLAS handles of one shape.
typedef struct {
    float *in, *weight, *bias, *out;  // (m, k), (k, n), (n,), (m, n)
    int m, k, n;
    cublasHandle_t cublas;       // fp32 on the CUDA cores: the ceiling
    cublasHandle_t cublas_tf32;  // CUBLAS_TF32_TENSOR_OP_MATH: version 6
} Problem;

// Version 6: cuBLAS's tf32 product, then stage 04's bias and ReLU kernel (two launches, out written twice).
static void call_cublas_tf32(const Problem *p) {
    sgemm_row_major(p->cublas_tf32, p->out, p->in, p->weight, p->m, p->k, p->n);
    launch_bias_relu(p->out, p->bias, p->m, p->n);
}

typedef struct {
    const char *name;
    GemmLaunchFn launch;    // NULL: version 6, cuBLAS
    const void *kernel;     // the kernel it launches, for the check that the build carries tensor-core code
    int tensor_cores;       // needs tf32 tensor-core math (FEATURE_TF32)
    double input_rounding;  // relative rounding of each input before the products (the check's bound)
} Version;

static const Version VERSIONS[] = {
    {"fma-tile", launch_prefetch<16, 1>, NULL, 0, 0.0},
    {"mma-tf32", launch_mma<0, 0, 1, 1>, (const void *)gemm_mma_kernel<0, 0, 1, 1>, 1, TF32_ROUNDING},
    {"mma-padded", launch_mma<4, 8, 1, 1>, (const void *)gemm_mma_kernel<4, 8, 1, 1>, 1, TF32_ROUNDING},
    {"mma-async", launch_mma<4, 8, 2, 1>, (const void *)gemm_mma_kernel<4, 8, 2, 1>, 1, TF32_ROUNDING},
    {"mma-3xtf32", launch_mma<4, 8, 2, 3>, (const void *)gemm_mma_kernel<4, 8, 2, 3>, 1, THREE_TF32_ROUNDING},
    {"cublas-tf32", NULL, NULL, 1, TF32_ROUNDING},
};
#define VERSION_COUNT ((int)(sizeof(VERSIONS) / sizeof(VERSIONS[0])))

// Why version v cannot run on this GPU or from this build, or NULL.
static const char *version_skipped(const Version *v) {
    static char why[200];
    char gate[120];
    if (!v->tensor_cores || feature_available(FEATURE_TF32, v->kernel, gate, sizeof(gate))) return NULL;
    snprintf(why, sizeof(why), "needs %s: %s", feature_description(FEATURE_TF32), gate);
    return why;
}

static void call_version(const Problem *p, const Version *v) {
    if (v->launch) v->launch(p->out, p->in, p->weight, p->bias, p->m, p->k, p->n);
    else call_cublas_tf32(p);
}

static Problem problem_upload(const float *in, const float *weight, const float *bias, int m, int k, int n) {
    Problem p;
    memset(&p, 0, sizeof(p));
    p.m = m;
    p.k = k;
    p.n = n;
    p.in = (float *)ladder_to_device(in, sizeof(float) * (size_t)m * k);
    p.weight = (float *)ladder_to_device(weight, sizeof(float) * (size_t)k * n);
    p.bias = (float *)ladder_to_device(bias, sizeof(float) * (size_t)n);
    cudaCheck(cudaMalloc(&p.out, sizeof(float) * (size_t)m * n));
    cublasCheck(cublasCreate(&p.cublas));
    cublasCheck(cublasCreate(&p.cublas_tf32));
    cublasCheck(cublasSetMathMode(p.cublas_tf32, CUBLAS_TF32_TENSOR_OP_MATH));
    return p;
}

static void problem_free(Problem *p) {
    cublasCheck(cublasDestroy(p->cublas));
    cublasCheck(cublasDestroy(p->cublas_tf32));
    cudaCheck(cudaFree(p->in));
    cudaCheck(cudaFree(p->weight));
    cudaCheck(cudaFree(p->bias));
    cudaCheck(cudaFree(p->out));
}

// out poisoned with NaN (all bits set), one call, out back in host memory: an output no thread wrote fails.
static void run_once(const Problem *p, const Version *v, float *out) {
    cudaCheck(cudaMemset(p->out, 0xff, sizeof(float) * (size_t)p->m * p->n));
    call_version(p, v);
    cudaCheck(cudaMemcpy(out, p->out, sizeof(float) * (size_t)p->m * p->n, cudaMemcpyDeviceToHost));
}

// For tests/exercise/test_mma_ladder.c, the CPU check of the exercise fragment-load-store: fragment_cell on the
// host, matrix 0, 1, 2 for A, B, C.
extern "C" void mma_fragment_cell(int matrix, int lane, int e, int *row, int *col) {
    FragmentCell cell = fragment_cell((Fragment)matrix, lane, e);
    *row = cell.row;
    *col = cell.col;
}

// For tests/gpu/test_mma_ladder.c (tests/gpu/test_gemm_ladder.c's cases: the GEMM ladders of stages 04 and 06
// export the same four). index counts from 0.
extern "C" int gemm_ladder_version_count(void) { return VERSION_COUNT; }

extern "C" const char *gemm_ladder_version_name(int index) { return VERSIONS[index].name; }

extern "C" double gemm_ladder_input_rounding(int index) { return VERSIONS[index].input_rounding; }

// out (m, n) = relu(in (m, k) @ weight (k, n) + bias (n)) by version index, on host buffers; returns why the
// version cannot run on this GPU, or NULL.
extern "C" const char *gemm_ladder_run(int index, const float *in, const float *weight, const float *bias, float *out,
                                       int m, int k, int n) {
    const char *skipped = version_skipped(&VERSIONS[index]);
    if (skipped) return skipped;
    Problem p = problem_upload(in, weight, bias, m, k, n);
    run_once(&p, &VERSIONS[index], out);
    problem_free(&p);
    return NULL;
}

#ifndef LADDER_NO_MAIN
// ----------------------------------------------------------------------------
// the program: flags, the ceiling, one table per shape, the check, the CSV rows

// The trainer's products (m, k, n): the first layer forward and its weight gradient at --hidden 128, batch 128;
// a hidden layer of --hidden 1024,1024.
static const int SHAPES[][3] = {{128, 784, 128}, {784, 128, 128}, {128, 1024, 1024}};
#define SHAPE_COUNT ((int)(sizeof(SHAPES) / sizeof(SHAPES[0])))

// What ladder_time_runs calls: one version, or cublasSgemm alone (the ceiling) when version is NULL.
typedef struct {
    const Problem *problem;
    const Version *version;
} Timed;

static void call_timed(void *ctx) {
    const Timed *t = (const Timed *)ctx;
    const Problem *p = t->problem;
    if (t->version) call_version(p, t->version);
    else sgemm_row_major(p->cublas, p->out, p->in, p->weight, p->m, p->k, p->n);
}

// Every chosen version on one shape: a table, and its rows in the CSV. Exits 1 on a wrong result.
static void run_shape(int m, int k, int n, const LadderOptions *options, const DeviceInfo *device) {
    LadderGemm g;
    ladder_gemm_init(&g, m, k, n);
    Problem p = problem_upload(g.in, g.weight, g.bias, m, k, n);

    LadderTable table;
    memset(&table, 0, sizeof(table));
    table.stage = "09";
    table.ladder = "mma";
    snprintf(table.shape, sizeof(table.shape), "%dx%dx%d", m, k, n);
    table.unit = "GFLOP/s";
    table.work = 2.0 * m * n * k;
    table.ceiling = "cublasSgemm";
    Timed ceiling = {&p, NULL};
    table.ceiling_time = ladder_time_runs(NULL, call_timed, &ceiling, CALLS_PER_RUN, options->repeats);
    table.repeats = options->repeats;
    table.device = device;
    table.csv_path = options->csv_path;
    ladder_table_begin(&table);
    for (int v = options->first; v < options->last; v++) {
        const Version *version = &VERSIONS[v];
        const char *skipped = version_skipped(version);
        if (skipped) {
            ladder_table_skip(&table, v + 1, version->name, skipped);
            continue;
        }
        run_once(&p, version, g.out);
        ladder_gemm_check(&g, v + 1, version->name, version->input_rounding);
        Timed timed = {&p, version};
        LadderStats time = ladder_time_runs(NULL, call_timed, &timed, CALLS_PER_RUN, options->repeats);
        ladder_table_row(&table, v + 1, version->name, time, NAN);
    }
    problem_free(&p);
    ladder_gemm_free(&g);
}

int main(int argc, char **argv) {
    LadderSize sizes[3] = LADDER_GEMM_SIZES;
    LadderOptions options;
    ladder_parse_args(argc, argv,
                      LADDER_GEMM_USAGE "               Without any of them: 128 x 784 x 128, 784 x 128 x 128 and "
                                        "128 x 1024 x 1024 (m x k x n)\n",
                      sizes, 3, VERSION_COUNT, gemm_ladder_version_name, CALLS_PER_RUN, &options);
    DeviceInfo device;
    ladder_require_gpu(argv[0], &device);
    printf("GEMM on tensor cores: out (m, n) = relu(in (m, k) @ W (k, n) + bias), shapes as m x k x n\n");
    printf("GPU: %s (cc %s, CUDA %s, driver %s); a timed run is %d calls back to back\n", device.name, device.cc,
           device.cuda, device.driver, CALLS_PER_RUN);
    if (sizes[0].given || sizes[1].given || sizes[2].given) {
        run_shape((int)sizes[0].value, (int)sizes[1].value, (int)sizes[2].value, &options, &device);
        return EXIT_OK;
    }
    for (int s = 0; s < SHAPE_COUNT; s++) run_shape(SHAPES[s][0], SHAPES[s][1], SHAPES[s][2], &options, &device);
    return EXIT_OK;
}
#endif  // LADDER_NO_MAIN
