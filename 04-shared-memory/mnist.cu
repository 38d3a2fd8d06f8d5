/*
Stage 04, MNIST: stage 03's fused trainer with its three GEMMs (forward, input gradient, weight gradient)
tiled through shared memory. A block of threads computes one square tile of the output; it walks the
shared dimension K in slices, copies each slice of both operands into shared memory once with coalesced
loads (issued one slice ahead, so they travel while the current slice is computed), and every thread then
reads its operands from there and accumulates a small square of outputs in registers. Each value loaded
from global memory is reused by a whole row or column of the tile instead of by one thread. The fused
epilogues of stage 03 (bias + ReLU, ReLU mask, SGD update) are kept, applied to the registers before the
tile is stored. Four tile shapes are offered as variants (tile16 = default, picked by measurement on an H200; tile16-2x2, tile32, tile64:
--variant NAME); everything outside the GEMMs is stage 03's.

Build and run from the repository root (make data fetches MNIST once):
    make stage 4 run TRAINER=mnist                 (or: make build/04/mnist && build/04/mnist --hidden 128)
    build/04/mnist --variant tile64                (another tile shape)
    make stage 4 diff                              (what this stage changed, against stage 03)
    make stage 4 test                              (agreement with common/reference.c, every variant)
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime.h>

#include "check.h"
#include "timing.h"
#include "trainer.h"

const char *const MNIST_VARIANTS[] = {"tile16", "tile16-2x2", "tile32", "tile64", NULL};  // order of GEMM_VARIANTS
const char *const MNIST_PRECISIONS[] = {"fp32", NULL};

#define BLOCK_SIZE 256
#define WARP_SIZE 32
#define WARPS_PER_BLOCK (BLOCK_SIZE / WARP_SIZE)  // loss kernel: rows per block; bias kernel: partial sums per column
#define GEMM_THREADS 256     // the most threads a tiled GEMM block runs (16 x 16)
#define MICRO_MAX 4          // the largest per-thread square of outputs (tile64)
#define TILE_K 32            // the slice of the shared dimension K staged in shared memory per step
#define SLICE_LOADS_MAX 8    // the most floats of one operand's slice a thread copies (tile * TILE_K / threads)

// ----------------------------------------------------------------------------
// tiled GEMM: C (M, N) = A (M, K) @ B (K, N), either operand possibly stored transposed
//
// A block of t x t threads owns one tile x tile square of C, tile = t * micro. It walks K in slices
// of TILE_K: each step copies A's (tile, TILE_K) slice and B's (TILE_K, tile) slice into shared memory,
// every element loaded once by one thread with neighbouring threads on neighbouring addresses; then each
// thread accumulates its micro x micro outputs from shared memory. Per slice a block loads
// 2 * tile * TILE_K floats and does tile * tile * TILE_K FMAs: each loaded float feeds tile FMAs, where
// the naive kernel loaded two floats for every FMA. Larger tiles reuse more but make fewer blocks: a
// (128, 128) output is 64 tiles of 16 but only 4 of 64, on a GPU with 132 SMs.
//
// Shared memory has its own limit: per k a thread reads micro floats of A and micro of B to do micro^2
// FMAs, 2 shared loads per FMA at micro 1, 1 at 2 x 2, 1/2 at 4 x 4, and an SM serves one warp-wide
// shared load per cycle against four warp-wide FMAs. The variants (t, micro): tile16-2x2 (8, 2),
// tile16 (16, 1), tile32 (16, 2), tile64 (16, 4). tile16-2x2 keeps tile16's many blocks with half its
// shared loads per FMA, on a quarter of the threads.
//
// Thread (tx, ty) owns the outputs at rows ty + t r and columns tx + t c (r, c < micro): strided, not a
// contiguous square, so that for every (r, c) the t threads of a row of the block store t neighbouring
// floats (one coalesced store) and read t neighbouring floats of B's slice.
//
// Prefetch: the loads of the next slice are issued into registers before the FMAs of the current one
// and stored into shared memory after them, so the round trip to L2 (hundreds of cycles) runs during
// the FMAs instead of before them. The first-layer forward at batch 128 walks K = 784 in 25 slices one
// after another, on one block per SM: without it, every slice waited for its loads with nothing to do.
//
// Each slice is stored in shared memory in the layout it has in global memory, so the copy is a plain
// coalesced row-by-row copy. The reads then go down a column of the slice when that operand is stored
// transposed (B^T, as W in din = dout @ W^T): the t threads of a row of the block read t floats one row,
// TILE_K = 32 floats, apart. Shared memory has 32 banks of 4 bytes, float i in bank i % 32, and a bank
// serves one address per cycle: all t reads fall into the same bank, a t-way conflict. One float of
// padding per row (rows of 33 floats) puts them in t different banks. The A slice (M, K) has the same
// problem, milder: a warp's 32 / t rows of threads read rows 32 floats apart, a 2-way (t = 16) or 4-way
// (t = 8) conflict without the padding. Every slice is padded the same way; where reads run along rows it
// costs nothing.

// The row and the column of C that a thread's output (r, c) lands on.
__device__ __forceinline__ int tile_row(int r, int t, int micro) {
    return blockIdx.y * t * micro + threadIdx.y + t * r;
}
__device__ __forceinline__ int tile_col(int c, int t, int micro) {
    return blockIdx.x * t * micro + threadIdx.x + t * c;
}

// Shared memory a block needs for one slice of each operand, padded as above.
static size_t gemm_smem_bytes(int tile) { return 2 * (size_t)(tile + 1) * (TILE_K + 1) * sizeof(float); }

// Both operands as X (outer, K), outer being M for A and N for B, stored row-major as (outer_dim, k_dim)
// or, if k_major, as (k_dim, outer_dim) (A^T for a_trans, B for not b_trans). A slice keeps the stored
// layout: (tile, TILE_K), or (TILE_K, tile) if k_major, rows padded to one float more than they hold.

// X(outer, k) in a slice
__device__ __forceinline__ float slice_at(const float *slice, int outer, int k, int k_major, int tile) {
    return k_major ? slice[k * (tile + 1) + outer] : slice[outer * (TILE_K + 1) + k];
}

// A thread's share of the slice of X at outer indices outer0.. and K indices k0..: the elements tid,
// tid + t * t, ... of the slice counted row by row (neighbouring threads, neighbouring addresses), into
// registers, zeros outside X (so partial tiles and a partial last slice add nothing).
__device__ __forceinline__ void fetch_slice(float regs[SLICE_LOADS_MAX], const float *x, int outer_dim, int k_dim,
                                            int outer0, int k0, int k_major, int t, int micro) {
    int tile = t * micro, cols = k_major ? tile : TILE_K, tid = threadIdx.y * t + threadIdx.x;
#pragma unroll
    for (int e = 0; e < tile * TILE_K / (t * t); e++) {
        int idx = tid + e * t * t, r = idx / cols, c = idx % cols;
        int outer = outer0 + (k_major ? c : r), k = k0 + (k_major ? r : c);
        size_t at = k_major ? (size_t)k * outer_dim + outer : (size_t)outer * k_dim + k;
        regs[e] = outer < outer_dim && k < k_dim ? x[at] : 0.0f;
    }
}

// ... and the same elements from the registers into the slice in shared memory
__device__ __forceinline__ void store_slice(float *slice, const float regs[SLICE_LOADS_MAX], int k_major, int t,
                                            int micro) {
    int tile = t * micro, cols = k_major ? tile : TILE_K, tid = threadIdx.y * t + threadIdx.x;
#pragma unroll
    for (int e = 0; e < tile * TILE_K / (t * t); e++) {
        int idx = tid + e * t * t;
        slice[idx / cols * (cols + 1) + idx % cols] = regs[e];
    }
}

// acc[r][c] = sum_k A(tile_row(r), k) * B(k, tile_col(c)) for r, c < micro (0 outside C).
// a_trans: A is stored (K, M) row-major, else (M, K); b_trans: B is stored (N, K), else (K, N).
// t, micro, a_trans and b_trans are literal constants at every call: the function is inlined into each
// small __global__ kernel below, which so gets its own fully unrolled copy with acc in registers (C has
// no templates; this is how the tile shape stays a compile-time constant).
__device__ __forceinline__ void gemm_tile(float acc[MICRO_MAX][MICRO_MAX], const float *a, const float *b, int m_dim,
                                          int n_dim, int k_dim, int a_trans, int b_trans, int t, int micro) {
    extern __shared__ float smem[];
    int tile = t * micro;
    float *a_slice = smem;                               // A(m, k) at [m][k] (tile, TILE_K + 1), or at
                                                         // [k][m] (TILE_K, tile + 1) if a_trans
    float *b_slice = smem + (tile + 1) * (TILE_K + 1);  // B(k, n) at [k][n] (TILE_K, tile + 1), or at
                                                         // [n][k] (tile, TILE_K + 1) if b_trans
    int row0 = blockIdx.y * tile, col0 = blockIdx.x * tile;
    float a_next[SLICE_LOADS_MAX], b_next[SLICE_LOADS_MAX];  // this thread's share of the next slices
#pragma unroll
    for (int r = 0; r < micro; r++) {
#pragma unroll
        for (int c = 0; c < micro; c++) acc[r][c] = 0.0f;
    }

    fetch_slice(a_next, a, m_dim, k_dim, row0, 0, a_trans, t, micro);
    fetch_slice(b_next, b, n_dim, k_dim, col0, 0, !b_trans, t, micro);
    for (int k0 = 0; k0 < k_dim; k0 += TILE_K) {
        store_slice(a_slice, a_next, a_trans, t, micro);
        store_slice(b_slice, b_next, !b_trans, t, micro);
        __syncthreads();  // the slices are complete

        if (k0 + TILE_K < k_dim) {  // the next slices' loads: in flight during the FMAs below
            fetch_slice(a_next, a, m_dim, k_dim, row0, k0 + TILE_K, a_trans, t, micro);
            fetch_slice(b_next, b, n_dim, k_dim, col0, k0 + TILE_K, !b_trans, t, micro);
        }
#pragma unroll
        for (int k = 0; k < TILE_K; k++) {
            float a_frag[MICRO_MAX], b_frag[MICRO_MAX];
#pragma unroll
            for (int r = 0; r < micro; r++) a_frag[r] = slice_at(a_slice, threadIdx.y + t * r, k, a_trans, tile);
#pragma unroll
            for (int c = 0; c < micro; c++) b_frag[c] = slice_at(b_slice, threadIdx.x + t * c, k, !b_trans, tile);
#pragma unroll
            for (int r = 0; r < micro; r++) {
#pragma unroll
                for (int c = 0; c < micro; c++) acc[r][c] += a_frag[r] * b_frag[c];
            }
        }
        __syncthreads();  // everyone is done with the slices before the next store overwrites them
    }
}

// ----------------------------------------------------------------------------
// forward: out = in @ W + b, then ReLU, as one tiled GEMM with the bias and ReLU applied to the
// registers before the store

// for i < rows, j < out_dim: out[i][j] = sum_k in[i][k] * weight[k][j] + bias[j], then max(., 0) if relu
__device__ __forceinline__ void matmul_forward(float *out, const float *in, const float *weight, const float *bias,
                                               int rows, int in_dim, int out_dim, int relu, int t, int micro) {
    float acc[MICRO_MAX][MICRO_MAX];
    gemm_tile(acc, in, weight, rows, out_dim, in_dim, 0, 0, t, micro);
#pragma unroll
    for (int r = 0; r < micro; r++) {
#pragma unroll
        for (int c = 0; c < micro; c++) {
            int i = tile_row(r, t, micro), j = tile_col(c, t, micro);
            if (i >= rows || j >= out_dim) continue;
            float value = acc[r][c] + bias[j];
            out[(size_t)i * out_dim + j] = relu ? fmaxf(value, 0.0f) : value;
        }
    }
}

// One kernel per tile shape: the variants of this stage (t x t threads, tile = t micro).
__global__ void __launch_bounds__(GEMM_THREADS)
    matmul_forward_tile16_2x2_kernel(float *out, const float *in, const float *weight, const float *bias, int rows,
                                     int in_dim, int out_dim, int relu) {
    matmul_forward(out, in, weight, bias, rows, in_dim, out_dim, relu, 8, 2);
}
__global__ void __launch_bounds__(GEMM_THREADS)
    matmul_forward_tile16_kernel(float *out, const float *in, const float *weight, const float *bias, int rows,
                                 int in_dim, int out_dim, int relu) {
    matmul_forward(out, in, weight, bias, rows, in_dim, out_dim, relu, 16, 1);
}
__global__ void __launch_bounds__(GEMM_THREADS)
    matmul_forward_tile32_kernel(float *out, const float *in, const float *weight, const float *bias, int rows,
                                 int in_dim, int out_dim, int relu) {
    matmul_forward(out, in, weight, bias, rows, in_dim, out_dim, relu, 16, 2);
}
__global__ void __launch_bounds__(GEMM_THREADS)
    matmul_forward_tile64_kernel(float *out, const float *in, const float *weight, const float *bias, int rows,
                                 int in_dim, int out_dim, int relu) {
    matmul_forward(out, in, weight, bias, rows, in_dim, out_dim, relu, 16, 4);
}

// ----------------------------------------------------------------------------
// loss: softmax, cross-entropy, accuracy and the gradient of the loss in one kernel, one warp per row.
// Every row is shifted by its largest logit before exp, so exp never overflows.
//
// A row is 10 logits. One thread per row would walk its row three times in series, and a batch of 128
// rows would be 128 threads of one block: one SM running a chain of dependent loads. Instead lane j of
// the row's warp holds logits j, j + 32, ..., the max, argmax and sum of exp take 5 shuffle steps each,
// and a batch of 128 rows is 16 blocks of 8 warps. The losses and hits of a block's rows meet in shared
// memory: one atomic per block, not per row.

// The sum over the warp's 32 lanes, in every lane. Each step adds the value of the lane `offset` away
// (xor: a butterfly), so every lane ends with the same total.
__device__ __forceinline__ float warp_sum(float value) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffff, value, offset);
    return value;
}

// The largest value over the warp and the lowest index that holds it, in every lane.
__device__ __forceinline__ void warp_argmax(float *value, int *index) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        float other = __shfl_xor_sync(0xffffffff, *value, offset);
        int other_index = __shfl_xor_sync(0xffffffff, *index, offset);
        if (other > *value || (other == *value && other_index < *index)) {
            *value = other;
            *index = other_index;
        }
    }
}

// for each row i, with p = softmax(logits[i]):
//     loss_sum += log(sum_j exp(logits[i][j])) - logits[i][label[i]]
//     correct  += (argmax_j logits[i][j] == label[i]), ties going to the lowest index      (if correct)
//     dlogits[i][j] = (p[j] - (j == label[i])) / rows                                       (if dlogits)
// Training asks for dlogits, evaluation for the count. The probabilities never go to memory (each exp is
// recomputed for dlogits instead): stage 02 wrote them out and read them back, and three kernels read the
// logits. Launch BLOCK_SIZE threads a block, one warp per row.
__global__ void softmax_cross_entropy_kernel(float *dlogits, float *loss_sum, int *correct, const float *logits,
                                             const uint8_t *labels, int rows, int classes) {
    __shared__ float block_loss[WARPS_PER_BLOCK];  // [w]: the loss of warp w's row (0 past the last row)
    __shared__ int block_hits[WARPS_PER_BLOCK];    // [w]: 1 if warp w's row was predicted right
    int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    int i = blockIdx.x * WARPS_PER_BLOCK + warp;
    float loss = 0.0f;
    int hit = 0;
    if (i < rows) {  // the same for the whole warp, so every shuffle sees all 32 lanes
        const float *row = logits + (size_t)i * classes;
        int label = labels[i];
        float max = -INFINITY;
        int argmax = classes;  // a lane with no logit loses every comparison
        for (int j = lane; j < classes; j += WARP_SIZE) {
            if (row[j] > max) {
                max = row[j];
                argmax = j;
            }
        }
        warp_argmax(&max, &argmax);
        float sum = 0.0f;
        for (int j = lane; j < classes; j += WARP_SIZE) sum += expf(row[j] - max);
        sum = warp_sum(sum);
        // from the logits, not from p: log of a probability that underflowed to 0 would be -inf
        loss = logf(sum) - (row[label] - max);
        hit = argmax == label;
        if (dlogits) {
            float *dlogits_row = dlogits + (size_t)i * classes;
            for (int j = lane; j < classes; j += WARP_SIZE) {
                float onehot = j == label ? 1.0f : 0.0f;
                dlogits_row[j] = (expf(row[j] - max) / sum - onehot) / (float)rows;
            }
        }
    }
    if (lane == 0) {
        block_loss[warp] = loss;
        block_hits[warp] = hit;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    float block_sum = 0.0f;
    int block_correct = 0;
    for (int w = 0; w < WARPS_PER_BLOCK; w++) {
        block_sum += block_loss[w];
        block_correct += block_hits[w];
    }
    atomicAdd(loss_sum, block_sum);
    if (correct) atomicAdd(correct, block_correct);
}

// ----------------------------------------------------------------------------
// backward and update: for out = in @ W + b, given dout, compute din (through the ReLU), then apply
// SGD to W and b in place. No gradient buffer: the thread that sums one element of dW subtracts
// lr times the sum from that weight at once.

// for k < in_dim, j < out_dim: weight[k][j] -= lr * sum_i in[i][k] * dout[i][j], i.e. W -= lr * in^T @ dout
// (A = in read transposed). In place is safe within the kernel: each thread writes only its own weights
// and no thread reads a weight. Across kernels, the launcher orders it after the one kernel that needs
// this layer's pre-update W (the din GEMM).
__device__ __forceinline__ void matmul_backward_weight_sgd(float *weight, const float *in, const float *dout, float lr,
                                                           int rows, int in_dim, int out_dim, int t, int micro) {
    float acc[MICRO_MAX][MICRO_MAX];
    gemm_tile(acc, in, dout, in_dim, out_dim, rows, 1, 0, t, micro);
#pragma unroll
    for (int r = 0; r < micro; r++) {
#pragma unroll
        for (int c = 0; c < micro; c++) {
            int k = tile_row(r, t, micro), j = tile_col(c, t, micro);
            if (k >= in_dim || j >= out_dim) continue;
            weight[(size_t)k * out_dim + j] -= lr * acc[r][c];
        }
    }
}

__global__ void __launch_bounds__(GEMM_THREADS)
    matmul_backward_weight_sgd_tile16_2x2_kernel(float *weight, const float *in, const float *dout, float lr, int rows,
                                                 int in_dim, int out_dim) {
    matmul_backward_weight_sgd(weight, in, dout, lr, rows, in_dim, out_dim, 8, 2);
}
__global__ void __launch_bounds__(GEMM_THREADS)
    matmul_backward_weight_sgd_tile16_kernel(float *weight, const float *in, const float *dout, float lr, int rows,
                                             int in_dim, int out_dim) {
    matmul_backward_weight_sgd(weight, in, dout, lr, rows, in_dim, out_dim, 16, 1);
}
__global__ void __launch_bounds__(GEMM_THREADS)
    matmul_backward_weight_sgd_tile32_kernel(float *weight, const float *in, const float *dout, float lr, int rows,
                                             int in_dim, int out_dim) {
    matmul_backward_weight_sgd(weight, in, dout, lr, rows, in_dim, out_dim, 16, 2);
}
__global__ void __launch_bounds__(GEMM_THREADS)
    matmul_backward_weight_sgd_tile64_kernel(float *weight, const float *in, const float *dout, float lr, int rows,
                                             int in_dim, int out_dim) {
    matmul_backward_weight_sgd(weight, in, dout, lr, rows, in_dim, out_dim, 16, 4);
}

// for j < dim: bias[j] -= lr * sum_i dout[i][j]
// The thread that completes a column's sum holds the whole gradient and can apply it: with stage 02's
// atomicAdd per element no thread knows when the sum is done (and the sum needed a zeroed buffer and a
// second kernel). A block of 32 x 8 threads owns 32 columns: thread (x, y) sums rows y, y + 8, ... of
// column x (a warp reads 32 neighbouring floats of a row), and thread (x, 0) adds the 8 partial sums
// from shared memory in a fixed order, so every run sums alike. (One thread per column would add a batch
// of 128 rows in series, all in one block.)
__global__ void bias_backward_sgd_kernel(float *bias, const float *dout, float lr, int rows, int dim) {
    __shared__ float partial[WARPS_PER_BLOCK][WARP_SIZE];  // [y][x]: thread (x, y)'s share of its column
    int j = blockIdx.x * WARP_SIZE + threadIdx.x;
    float sum = 0.0f;
    if (j < dim) {
        for (int i = threadIdx.y; i < rows; i += WARPS_PER_BLOCK) sum += dout[(size_t)i * dim + j];
    }
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y != 0 || j >= dim) return;
    for (int y = 1; y < WARPS_PER_BLOCK; y++) sum += partial[y][threadIdx.x];
    bias[j] -= lr * sum;
}

// for i < rows, k < in_dim: din[i][k] = act[i][k] > 0 ? sum_j dout[i][j] * weight[k][j] : 0, i.e.
// din = (dout @ W^T) * (act > 0) (B = W read transposed: the padded slice of the notes above)
// (act is the layer's input, a ReLU output: positive exactly where its pre-activation was)
__device__ __forceinline__ void matmul_backward_input(float *din, const float *dout, const float *weight,
                                                      const float *act, int rows, int in_dim, int out_dim, int t,
                                                      int micro) {
    float acc[MICRO_MAX][MICRO_MAX];
    gemm_tile(acc, dout, weight, rows, in_dim, out_dim, 0, 1, t, micro);
#pragma unroll
    for (int r = 0; r < micro; r++) {
#pragma unroll
        for (int c = 0; c < micro; c++) {
            int i = tile_row(r, t, micro), k = tile_col(c, t, micro);
            if (i >= rows || k >= in_dim) continue;
            size_t idx = (size_t)i * in_dim + k;
            din[idx] = act[idx] > 0.0f ? acc[r][c] : 0.0f;
        }
    }
}

__global__ void __launch_bounds__(GEMM_THREADS)
    matmul_backward_input_tile16_2x2_kernel(float *din, const float *dout, const float *weight, const float *act,
                                            int rows, int in_dim, int out_dim) {
    matmul_backward_input(din, dout, weight, act, rows, in_dim, out_dim, 8, 2);
}
__global__ void __launch_bounds__(GEMM_THREADS)
    matmul_backward_input_tile16_kernel(float *din, const float *dout, const float *weight, const float *act, int rows,
                                        int in_dim, int out_dim) {
    matmul_backward_input(din, dout, weight, act, rows, in_dim, out_dim, 16, 1);
}
__global__ void __launch_bounds__(GEMM_THREADS)
    matmul_backward_input_tile32_kernel(float *din, const float *dout, const float *weight, const float *act, int rows,
                                        int in_dim, int out_dim) {
    matmul_backward_input(din, dout, weight, act, rows, in_dim, out_dim, 16, 2);
}
__global__ void __launch_bounds__(GEMM_THREADS)
    matmul_backward_input_tile64_kernel(float *din, const float *dout, const float *weight, const float *act, int rows,
                                        int in_dim, int out_dim) {
    matmul_backward_input(din, dout, weight, act, rows, in_dim, out_dim, 16, 4);
}

// ----------------------------------------------------------------------------
// launchers

static unsigned int blocks_for(int64_t n) { return (unsigned int)((n + BLOCK_SIZE - 1) / BLOCK_SIZE); }

// bias_backward_sgd_kernel: a block of WARP_SIZE x WARPS_PER_BLOCK threads per WARP_SIZE columns
static unsigned int column_blocks(int dim) { return (unsigned int)((dim + WARP_SIZE - 1) / WARP_SIZE); }

// One tile shape: its three GEMM kernels (in MNIST_VARIANTS order, so cfg->variant indexes the table)
typedef struct {
    int t, micro;  // a block of t x t threads computes a (t micro) x (t micro) tile of C
    void (*forward)(float *, const float *, const float *, const float *, int, int, int, int);
    void (*backward_input)(float *, const float *, const float *, const float *, int, int, int);
    void (*backward_weight_sgd)(float *, const float *, const float *, float, int, int, int);
} GemmVariant;

static const GemmVariant GEMM_VARIANTS[] = {
    {16, 1, matmul_forward_tile16_kernel, matmul_backward_input_tile16_kernel,
     matmul_backward_weight_sgd_tile16_kernel},
    {8, 2, matmul_forward_tile16_2x2_kernel, matmul_backward_input_tile16_2x2_kernel,
     matmul_backward_weight_sgd_tile16_2x2_kernel},
    {16, 2, matmul_forward_tile32_kernel, matmul_backward_input_tile32_kernel,
     matmul_backward_weight_sgd_tile32_kernel},
    {16, 4, matmul_forward_tile64_kernel, matmul_backward_input_tile64_kernel,
     matmul_backward_weight_sgd_tile64_kernel},
};

// one block per tile of the (rows, cols) output
static dim3 grid_tiles(const GemmVariant *gemm, int rows, int cols) {
    int tile = gemm->t * gemm->micro;
    return dim3((cols + tile - 1) / tile, (rows + tile - 1) / tile);
}

// act[l]: (rows, sizes[l]); act[0] is the input, act[n_layers] receives the logits
static void mlp_forward(const MnistConfig *cfg, const float *params, float *const *act, int rows) {
    const GemmVariant *gemm = &GEMM_VARIANTS[cfg->variant];
    dim3 block(gemm->t, gemm->t);
    size_t smem = gemm_smem_bytes(gemm->t * gemm->micro);
    for (int l = 0; l < cfg->n_layers; l++) {
        int in_dim = cfg->sizes[l], out_dim = cfg->sizes[l + 1];
        const float *weight = params + mnist_weight_offset(cfg, l);
        const float *bias = params + mnist_bias_offset(cfg, l);
        int relu = l < cfg->n_layers - 1;  // no ReLU on the logits
        gemm->forward<<<grid_tiles(gemm, rows, out_dim), block, smem>>>(act[l + 1], act[l], weight, bias, rows, in_dim,
                                                                        out_dim, relu);
        launchCheck();
    }
}

// dact[l]: (rows, sizes[l]) for l >= 1, dact[n_layers] holds dlogits. Updates params in place.
// Every gradient must come from the pre-update params, as in the reference. Layer l's din needs W_l,
// so it runs before W_l's update; layer l's updates touch only W_l and b_l, and every later launch of the
// step works on the layers below l, which read their own W, never W_l. Launches on one stream run in
// order, so this launch order is the whole guarantee.
static void mlp_backward_sgd(const MnistConfig *cfg, float *params, float *const *act, float *const *dact, int rows) {
    const GemmVariant *gemm = &GEMM_VARIANTS[cfg->variant];
    dim3 block(gemm->t, gemm->t);
    size_t smem = gemm_smem_bytes(gemm->t * gemm->micro);
    for (int l = cfg->n_layers - 1; l >= 0; l--) {
        int in_dim = cfg->sizes[l], out_dim = cfg->sizes[l + 1];
        float *weight = params + mnist_weight_offset(cfg, l);
        if (l > 0) {  // the images need no gradient
            gemm->backward_input<<<grid_tiles(gemm, rows, in_dim), block, smem>>>(dact[l], dact[l + 1], weight, act[l],
                                                                                  rows, in_dim, out_dim);
            launchCheck();
        }
        gemm->backward_weight_sgd<<<grid_tiles(gemm, in_dim, out_dim), block, smem>>>(weight, act[l], dact[l + 1],
                                                                                      cfg->lr, rows, in_dim, out_dim);
        launchCheck();
        bias_backward_sgd_kernel<<<column_blocks(out_dim), dim3(WARP_SIZE, WARPS_PER_BLOCK)>>>(
            params + mnist_bias_offset(cfg, l), dact[l + 1], cfg->lr, rows, out_dim);
        launchCheck();
    }
}

static double host_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static void *host_malloc(size_t bytes) {
    void *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "error: out of host memory for the MNIST batch buffer (%zu bytes): try a smaller --batch\n",
                bytes);
        exit(EXIT_USAGE);
    }
    return p;
}

// ----------------------------------------------------------------------------
// training

int train_mnist(const MnistConfig *cfg, const MnistData *data, MnistResult *out) {
    int n_layers = cfg->n_layers, batch = cfg->batch, classes = cfg->sizes[n_layers];
    int pixels = cfg->sizes[0], n_test = data->n_test;
    int steps = mnist_steps_per_epoch(cfg, data->n_train);
    int64_t n_params = mnist_param_count(cfg);

    // setup (not timed): device buffers and the host staging buffer for one batch
    double setup_start_ms = host_ms();
    float *d_params;                          // (n_params,) packed as trainer.h
    float *d_act[MNIST_MAX_LAYERS + 1];       // [l]: (batch, sizes[l]); [0] the batch images, [n_layers] the logits
    float *d_dact[MNIST_MAX_LAYERS + 1];      // [l], l >= 1: (batch, sizes[l]) dloss/dact[l]; [n_layers] dlogits
    uint8_t *d_labels;                        // (batch,)
    float *d_test_act[MNIST_MAX_LAYERS + 1];  // [l]: (n_test, sizes[l]); [0] the test images
    uint8_t *d_test_labels;                   // (n_test,)
    float *d_loss_sum;                        // (1,) summed cross-entropy of one batch
    float *d_test_loss_sum;                   // (1,) summed cross-entropy of the test set
    int *d_test_correct;                      // (1,) correct test predictions
    cudaCheck(cudaMalloc(&d_params, n_params * sizeof(float)));
    d_dact[0] = NULL;
    for (int l = 0; l <= n_layers; l++) {
        cudaCheck(cudaMalloc(&d_act[l], (size_t)batch * cfg->sizes[l] * sizeof(float)));
        if (l > 0) cudaCheck(cudaMalloc(&d_dact[l], (size_t)batch * cfg->sizes[l] * sizeof(float)));
        cudaCheck(cudaMalloc(&d_test_act[l], (size_t)n_test * cfg->sizes[l] * sizeof(float)));
    }
    cudaCheck(cudaMalloc(&d_labels, batch));
    cudaCheck(cudaMalloc(&d_test_labels, n_test));
    cudaCheck(cudaMalloc(&d_loss_sum, sizeof(float)));
    cudaCheck(cudaMalloc(&d_test_loss_sum, sizeof(float)));
    cudaCheck(cudaMalloc(&d_test_correct, sizeof(int)));
    float *batch_images = (float *)host_malloc((size_t)batch * pixels * sizeof(float));  // (batch, pixels) pageable
    uint8_t *batch_labels = (uint8_t *)host_malloc(batch);                               // (batch,)
    TrainClock clock;
    train_clock_init(&clock, cfg->epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start_ms;

    // e2e starts with the data in host memory; before the loop only what never changes goes up
    cudaStream_t stream = 0;
    train_clock_e2e_start(&clock, stream);
    train_clock_phase_begin(&clock, stream);
    cudaCheck(cudaMemcpy(d_params, data->init_params, n_params * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(
        cudaMemcpy(d_test_act[0], data->test_images, (size_t)n_test * pixels * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_test_labels, data->test_labels, n_test, cudaMemcpyHostToDevice));
    train_clock_phase_end(&clock, PHASE_H2D, stream);
    train_clock_loop_start(&clock, stream);

    for (int epoch = 0; epoch < cfg->epochs; epoch++) {
        for (int step = 0; step < steps; step++) {
            // gather the batch's rows on the host, then copy it up from pageable memory
            train_clock_phase_begin(&clock, stream);
            const int32_t *rows = data->batch_order + (int64_t)epoch * data->n_train + (int64_t)step * batch;
            for (int i = 0; i < batch; i++) {
                if (rows[i] < 0 || rows[i] >= data->n_train) {
                    fprintf(stderr, "error: batch order entry %d of epoch %d is %d, outside 0..%d\n", step * batch + i,
                            epoch, rows[i], data->n_train - 1);
                    exit(EXIT_DATA);
                }
                memcpy(batch_images + (size_t)i * pixels, data->train_images + (size_t)rows[i] * pixels,
                       pixels * sizeof(float));
                batch_labels[i] = data->train_labels[rows[i]];
            }
            cudaCheck(
                cudaMemcpy(d_act[0], batch_images, (size_t)batch * pixels * sizeof(float), cudaMemcpyHostToDevice));
            cudaCheck(cudaMemcpy(d_labels, batch_labels, batch, cudaMemcpyHostToDevice));
            train_clock_phase_end(&clock, PHASE_H2D, stream);

            train_clock_phase_begin(&clock, stream);
            mlp_forward(cfg, d_params, d_act, batch);
            train_clock_phase_end(&clock, PHASE_FORWARD, stream);

            train_clock_phase_begin(&clock, stream);
            cudaCheck(cudaMemset(d_loss_sum, 0, sizeof(float)));
            softmax_cross_entropy_kernel<<<blocks_for((int64_t)batch * WARP_SIZE), BLOCK_SIZE>>>(
                d_dact[n_layers], d_loss_sum, NULL, d_act[n_layers], d_labels, batch, classes);
            launchCheck();
            train_clock_phase_end(&clock, PHASE_LOSS, stream);

            // the update is fused into the backward pass: its time is reported as backward
            train_clock_phase_begin(&clock, stream);
            mlp_backward_sgd(cfg, d_params, d_act, d_dact, batch);
            train_clock_phase_end(&clock, PHASE_BACKWARD, stream);

            // wait for the step, then read its loss back, as a progress print would
            train_clock_phase_begin(&clock, stream);
            cudaCheck(cudaDeviceSynchronize());
            float loss_sum = 0.0f;
            cudaCheck(cudaMemcpy(&loss_sum, d_loss_sum, sizeof(float), cudaMemcpyDeviceToHost));
            train_clock_phase_end(&clock, PHASE_D2H, stream);
            out->step_loss[(int64_t)epoch * steps + step] = loss_sum / (float)batch;
        }

        // test loss and accuracy after the epoch, the whole test set in one pass
        train_clock_phase_begin(&clock, stream);
        mlp_forward(cfg, d_params, d_test_act, n_test);
        cudaCheck(cudaMemset(d_test_loss_sum, 0, sizeof(float)));
        cudaCheck(cudaMemset(d_test_correct, 0, sizeof(int)));
        softmax_cross_entropy_kernel<<<blocks_for((int64_t)n_test * WARP_SIZE), BLOCK_SIZE>>>(
            NULL, d_test_loss_sum, d_test_correct, d_test_act[n_layers], d_test_labels, n_test, classes);
        launchCheck();
        float test_loss_sum = 0.0f;
        int test_correct = 0;
        cudaCheck(cudaMemcpy(&test_loss_sum, d_test_loss_sum, sizeof(float), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(&test_correct, d_test_correct, sizeof(int), cudaMemcpyDeviceToHost));
        train_clock_phase_end(&clock, PHASE_EVAL, stream);
        out->test_loss[epoch] = test_loss_sum / (float)n_test;
        out->test_acc[epoch] = (float)test_correct / (float)n_test;

        train_clock_epoch_end(&clock, epoch, stream);
    }

    train_clock_phase_begin(&clock, stream);
    cudaCheck(cudaMemcpy(out->params, d_params, n_params * sizeof(float), cudaMemcpyDeviceToHost));
    train_clock_phase_end(&clock, PHASE_D2H, stream);
    train_clock_e2e_stop(&clock, stream);
    train_clock_finish(&clock, &out->timing);

    cudaCheck(cudaFree(d_params));
    for (int l = 0; l <= n_layers; l++) {
        cudaCheck(cudaFree(d_act[l]));
        if (l > 0) cudaCheck(cudaFree(d_dact[l]));
        cudaCheck(cudaFree(d_test_act[l]));
    }
    cudaCheck(cudaFree(d_labels));
    cudaCheck(cudaFree(d_test_labels));
    cudaCheck(cudaFree(d_loss_sum));
    cudaCheck(cudaFree(d_test_loss_sum));
    cudaCheck(cudaFree(d_test_correct));
    free(batch_images);
    free(batch_labels);
    return 0;
}
