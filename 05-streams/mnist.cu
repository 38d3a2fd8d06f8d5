/*
Stage 05, MNIST: stage 04's trainer with the host taken out of the training loop. The whole training set
(60,000 x 784 floats, 188 MB), its labels and every epoch's batch order go up once, before the loop,
through two pinned staging buffers on a copy stream (the host fills one while the copy engine drains the
other); each step then gathers its batch's rows on the device with one kernel instead of gathering them
on the host and copying them from pageable memory. Step losses are summed into a device array and copied
back once, after the last epoch. The test evaluation of epoch k runs on a second stream, from a snapshot
of the parameters, while epoch k+1 trains. Events order the streams; the host never waits inside the
epoch loop. The kernels are stage 04's.

Build and run from the repository root (make data fetches MNIST once):
    make stage 5 run TRAINER=mnist                 (or: make build/05/mnist && build/05/mnist --hidden 128)
    make stage 5 diff                              (what this stage changed, against stage 04)
    make stage 5 test                              (agreement with common/reference.c, every variant)
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
#define UPLOAD_CHUNK ((size_t)8 << 20)  // bytes per pinned staging buffer (two of them)
#define GEMM_THREADS 256     // the most threads a tiled GEMM block runs (16 x 16)
#define MICRO_MAX 4          // the largest per-thread square of outputs (tile64)
#define TILE_K 32            // the slice of the shared dimension K staged in shared memory per step
#define SLICE_LOADS_MAX 8    // the most floats of one operand's slice a thread copies (tile * TILE_K / threads)

// ----------------------------------------------------------------------------
// batch gather: the training set lives on the device; each step copies its batch's rows out of it

// for i < batch, p < pixels: batch_images[i][p] = images[rows[i]][p], and batch_labels[i] = labels[rows[i]]
// (rows: this step's slice of the device-resident batch order, checked on the host before the upload)
__global__ void gather_batch_kernel(float *batch_images, uint8_t *batch_labels, const float *images,
                                    const uint8_t *labels, const int32_t *rows, int batch, int pixels) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)batch * pixels) return;
    int i = (int)(idx / pixels), p = (int)(idx % pixels);
    int64_t row = rows[i];
    batch_images[idx] = images[row * pixels + p];
    if (p == 0) batch_labels[i] = labels[row];
}

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
static void mlp_forward(const MnistConfig *cfg, const float *params, float *const *act, int rows,
                        cudaStream_t stream) {
    const GemmVariant *gemm = &GEMM_VARIANTS[cfg->variant];
    dim3 block(gemm->t, gemm->t);
    size_t smem = gemm_smem_bytes(gemm->t * gemm->micro);
    for (int l = 0; l < cfg->n_layers; l++) {
        int in_dim = cfg->sizes[l], out_dim = cfg->sizes[l + 1];
        const float *weight = params + mnist_weight_offset(cfg, l);
        const float *bias = params + mnist_bias_offset(cfg, l);
        int relu = l < cfg->n_layers - 1;  // no ReLU on the logits
        gemm->forward<<<grid_tiles(gemm, rows, out_dim), block, smem, stream>>>(act[l + 1], act[l], weight, bias, rows,
                                                                                in_dim, out_dim, relu);
        launchCheck();
    }
}

// dact[l]: (rows, sizes[l]) for l >= 1, dact[n_layers] holds dlogits. Updates params in place.
// Every gradient must come from the pre-update params, as in the reference. Layer l's din needs W_l,
// so it runs before W_l's update; layer l's updates touch only W_l and b_l, and every later launch of the
// step works on the layers below l, which read their own W, never W_l. Launches on one stream run in
// order, so this launch order is the whole guarantee.
static void mlp_backward_sgd(const MnistConfig *cfg, float *params, float *const *act, float *const *dact, int rows,
                             cudaStream_t stream) {
    const GemmVariant *gemm = &GEMM_VARIANTS[cfg->variant];
    dim3 block(gemm->t, gemm->t);
    size_t smem = gemm_smem_bytes(gemm->t * gemm->micro);
    for (int l = cfg->n_layers - 1; l >= 0; l--) {
        int in_dim = cfg->sizes[l], out_dim = cfg->sizes[l + 1];
        float *weight = params + mnist_weight_offset(cfg, l);
        if (l > 0) {  // the images need no gradient
            gemm->backward_input<<<grid_tiles(gemm, rows, in_dim), block, smem, stream>>>(dact[l], dact[l + 1], weight,
                                                                                          act[l], rows, in_dim, out_dim);
            launchCheck();
        }
        gemm->backward_weight_sgd<<<grid_tiles(gemm, in_dim, out_dim), block, smem, stream>>>(
            weight, act[l], dact[l + 1], cfg->lr, rows, in_dim, out_dim);
        launchCheck();
        bias_backward_sgd_kernel<<<column_blocks(out_dim), dim3(WARP_SIZE, WARPS_PER_BLOCK), 0, stream>>>(
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
        fprintf(stderr, "error: out of host memory for the MNIST results (%zu bytes): try fewer --epochs\n", bytes);
        exit(EXIT_USAGE);
    }
    return p;
}

// Uploads from pageable memory through two pinned buffers. The copy engine reads only pinned (page-
// locked) memory: from pageable memory the driver stages through a buffer of its own and the call
// returns when the copy is done. Here the host fills one buffer while the copy engine drains the other,
// and the copies are asynchronous, on their own stream.
typedef struct {
    char *buffer[2];         // (UPLOAD_CHUNK,) each, pinned
    cudaEvent_t drained[2];  // the last copy out of buffer[b] has finished
    int next;                // the buffer to fill next
} Staging;

// dst (device) <- src (host, pageable), chunk by chunk, asynchronously on copy_stream. The host waits
// only for a buffer's previous copy before refilling it.
static void upload_chunked(void *dst, const void *src, size_t bytes, Staging *staging, cudaStream_t copy_stream) {
    for (size_t offset = 0; offset < bytes; offset += UPLOAD_CHUNK) {
        size_t chunk = bytes - offset < UPLOAD_CHUNK ? bytes - offset : UPLOAD_CHUNK;
        int b = staging->next;
        staging->next = 1 - b;
        cudaCheck(cudaEventSynchronize(staging->drained[b]));
        memcpy(staging->buffer[b], (const char *)src + offset, chunk);
        cudaCheck(cudaMemcpyAsync((char *)dst + offset, staging->buffer[b], chunk, cudaMemcpyHostToDevice, copy_stream));
        cudaCheck(cudaEventRecord(staging->drained[b], copy_stream));
    }
}

// ----------------------------------------------------------------------------
// training

int train_mnist(const MnistConfig *cfg, const MnistData *data, MnistResult *out) {
    int n_layers = cfg->n_layers, batch = cfg->batch, classes = cfg->sizes[n_layers];
    int pixels = cfg->sizes[0], n_train = data->n_train, n_test = data->n_test;
    int steps = mnist_steps_per_epoch(cfg, n_train);
    int64_t n_params = mnist_param_count(cfg), n_steps = (int64_t)cfg->epochs * steps;

    // every row a batch will gather must exist: checked once here, so that the gather kernel can trust it
    for (int epoch = 0; epoch < cfg->epochs; epoch++) {
        for (int s = 0; s < steps * batch; s++) {
            int32_t row = data->batch_order[(int64_t)epoch * n_train + s];
            if (row < 0 || row >= n_train) {
                fprintf(stderr, "error: batch order entry %d of epoch %d is %d, outside 0..%d\n", s, epoch, row,
                        n_train - 1);
                exit(EXIT_DATA);
            }
        }
    }

    // setup (not timed): device buffers, streams, events and the pinned staging buffers
    double setup_start_ms = host_ms();
    float *d_params;                          // (n_params,) packed as trainer.h
    float *d_snapshot;                        // (n_params,) the parameters an evaluation reads while training goes on
    float *d_train_images;                    // (n_train, pixels) the whole training set, uploaded once
    uint8_t *d_train_labels;                  // (n_train,)
    int32_t *d_order;                         // (epochs, n_train) data->batch_order
    float *d_act[MNIST_MAX_LAYERS + 1];       // [l]: (batch, sizes[l]); [0] the gathered batch, [n_layers] the logits
    float *d_dact[MNIST_MAX_LAYERS + 1];      // [l], l >= 1: (batch, sizes[l]) dloss/dact[l]; [n_layers] dlogits
    uint8_t *d_labels;                        // (batch,) the gathered labels
    float *d_test_act[MNIST_MAX_LAYERS + 1];  // [l]: (n_test, sizes[l]); [0] the test images
    uint8_t *d_test_labels;                   // (n_test,)
    float *d_step_loss_sum;                   // (epochs, steps) summed cross-entropy of every batch
    float *d_test_loss_sum;                   // (epochs,) summed test cross-entropy after each epoch
    int *d_test_correct;                      // (epochs,) correct test predictions after each epoch
    cudaCheck(cudaMalloc(&d_params, n_params * sizeof(float)));
    cudaCheck(cudaMalloc(&d_snapshot, n_params * sizeof(float)));
    cudaCheck(cudaMalloc(&d_train_images, (size_t)n_train * pixels * sizeof(float)));
    cudaCheck(cudaMalloc(&d_train_labels, n_train));
    cudaCheck(cudaMalloc(&d_order, (size_t)cfg->epochs * n_train * sizeof(int32_t)));
    d_dact[0] = NULL;
    for (int l = 0; l <= n_layers; l++) {
        cudaCheck(cudaMalloc(&d_act[l], (size_t)batch * cfg->sizes[l] * sizeof(float)));
        if (l > 0) cudaCheck(cudaMalloc(&d_dact[l], (size_t)batch * cfg->sizes[l] * sizeof(float)));
        cudaCheck(cudaMalloc(&d_test_act[l], (size_t)n_test * cfg->sizes[l] * sizeof(float)));
    }
    cudaCheck(cudaMalloc(&d_labels, batch));
    cudaCheck(cudaMalloc(&d_test_labels, n_test));
    cudaCheck(cudaMalloc(&d_step_loss_sum, n_steps * sizeof(float)));
    cudaCheck(cudaMalloc(&d_test_loss_sum, cfg->epochs * sizeof(float)));
    cudaCheck(cudaMalloc(&d_test_correct, cfg->epochs * sizeof(int)));
    int *test_correct = (int *)host_malloc(cfg->epochs * sizeof(int));  // (epochs,)
    // Non-blocking streams: the legacy default stream would serialize with all three.
    cudaStream_t stream, copy_stream, eval_stream;  // training; uploads; evaluation
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&eval_stream, cudaStreamNonBlocking));
    cudaEvent_t upload_done, snapshot_ready, eval_done;  // ordering only: no timing
    cudaCheck(cudaEventCreateWithFlags(&upload_done, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&snapshot_ready, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&eval_done, cudaEventDisableTiming));
    Staging staging = {{NULL, NULL}, {NULL, NULL}, 0};
    for (int b = 0; b < 2; b++) {
        cudaCheck(cudaMallocHost(&staging.buffer[b], UPLOAD_CHUNK));
        cudaCheck(cudaEventCreateWithFlags(&staging.drained[b], cudaEventDisableTiming));
    }
    TrainClock clock;
    train_clock_init(&clock, cfg->epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start_ms;

    // e2e starts with the data in host memory: everything goes up once, on the copy stream, and the
    // training stream waits for it by event
    train_clock_e2e_start(&clock, stream);
    train_clock_phase_begin(&clock, stream);
    cudaCheck(cudaStreamWaitEvent(copy_stream, clock.e2e_start, 0));  // the upload is inside e2e
    upload_chunked(d_params, data->init_params, n_params * sizeof(float), &staging, copy_stream);
    upload_chunked(d_train_images, data->train_images, (size_t)n_train * pixels * sizeof(float), &staging, copy_stream);
    upload_chunked(d_train_labels, data->train_labels, n_train, &staging, copy_stream);
    upload_chunked(d_order, data->batch_order, (size_t)cfg->epochs * n_train * sizeof(int32_t), &staging, copy_stream);
    upload_chunked(d_test_act[0], data->test_images, (size_t)n_test * pixels * sizeof(float), &staging, copy_stream);
    upload_chunked(d_test_labels, data->test_labels, n_test, &staging, copy_stream);
    cudaCheck(cudaEventRecord(upload_done, copy_stream));
    cudaCheck(cudaMemsetAsync(d_step_loss_sum, 0, n_steps * sizeof(float), stream));  // the losses are summed
    cudaCheck(cudaMemsetAsync(d_test_loss_sum, 0, cfg->epochs * sizeof(float), stream));
    cudaCheck(cudaMemsetAsync(d_test_correct, 0, cfg->epochs * sizeof(int), stream));
    cudaCheck(cudaStreamWaitEvent(stream, upload_done, 0));
    train_clock_phase_end(&clock, PHASE_H2D, stream);
    train_clock_loop_start(&clock, stream);

    // Only enqueueing from here to the end of the loop: the host runs ahead of the GPU, never waits for it.
    for (int epoch = 0; epoch < cfg->epochs; epoch++) {
        for (int step = 0; step < steps; step++) {
            // gather the batch's rows on the device (reported as h2d: it replaces the per-batch copy)
            train_clock_phase_begin(&clock, stream);
            const int32_t *rows = d_order + (int64_t)epoch * n_train + (int64_t)step * batch;
            gather_batch_kernel<<<blocks_for((int64_t)batch * pixels), BLOCK_SIZE, 0, stream>>>(
                d_act[0], d_labels, d_train_images, d_train_labels, rows, batch, pixels);
            launchCheck();
            train_clock_phase_end(&clock, PHASE_H2D, stream);

            train_clock_phase_begin(&clock, stream);
            mlp_forward(cfg, d_params, d_act, batch, stream);
            train_clock_phase_end(&clock, PHASE_FORWARD, stream);

            train_clock_phase_begin(&clock, stream);
            float *loss_sum = d_step_loss_sum + (int64_t)epoch * steps + step;
            softmax_cross_entropy_kernel<<<blocks_for((int64_t)batch * WARP_SIZE), BLOCK_SIZE, 0, stream>>>(
                d_dact[n_layers], loss_sum, NULL, d_act[n_layers], d_labels, batch, classes);
            launchCheck();
            train_clock_phase_end(&clock, PHASE_LOSS, stream);

            // the update is fused into the backward pass: its time is reported as backward
            train_clock_phase_begin(&clock, stream);
            mlp_backward_sgd(cfg, d_params, d_act, d_dact, batch, stream);
            train_clock_phase_end(&clock, PHASE_BACKWARD, stream);
        }

        // test loss and accuracy of this epoch's parameters, on the eval stream while the next epoch
        // trains. The evaluation reads a snapshot, since training updates d_params in place; the snapshot
        // is taken once the previous evaluation is done reading it (eval_done: a no-op the first time).
        cudaCheck(cudaStreamWaitEvent(stream, eval_done, 0));
        cudaCheck(cudaMemcpyAsync(d_snapshot, d_params, n_params * sizeof(float), cudaMemcpyDeviceToDevice, stream));
        cudaCheck(cudaEventRecord(snapshot_ready, stream));
        cudaCheck(cudaStreamWaitEvent(eval_stream, snapshot_ready, 0));
        train_clock_phase_begin(&clock, eval_stream);
        mlp_forward(cfg, d_snapshot, d_test_act, n_test, eval_stream);
        softmax_cross_entropy_kernel<<<blocks_for((int64_t)n_test * WARP_SIZE), BLOCK_SIZE, 0, eval_stream>>>(
            NULL, d_test_loss_sum + epoch, d_test_correct + epoch, d_test_act[n_layers], d_test_labels, n_test, classes);
        launchCheck();
        train_clock_phase_end(&clock, PHASE_EVAL, eval_stream);
        cudaCheck(cudaEventRecord(eval_done, eval_stream));

        // the loop (and its last epoch) ends when the last evaluation has, so loop_ms covers all the work
        if (epoch == cfg->epochs - 1) cudaCheck(cudaStreamWaitEvent(stream, eval_done, 0));
        train_clock_epoch_end(&clock, epoch, stream);
    }

    // one copy back of everything the loop produced (D2H into pageable memory: each returns when done)
    train_clock_phase_begin(&clock, stream);
    cudaCheck(cudaMemcpyAsync(out->params, d_params, n_params * sizeof(float), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaMemcpyAsync(out->step_loss, d_step_loss_sum, n_steps * sizeof(float), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaMemcpyAsync(out->test_loss, d_test_loss_sum, cfg->epochs * sizeof(float), cudaMemcpyDeviceToHost,
                              stream));
    cudaCheck(cudaMemcpyAsync(test_correct, d_test_correct, cfg->epochs * sizeof(int), cudaMemcpyDeviceToHost, stream));
    train_clock_phase_end(&clock, PHASE_D2H, stream);
    train_clock_e2e_stop(&clock, stream);
    train_clock_finish(&clock, &out->timing);

    // sums to means, as stage 04 did after every copy
    for (int64_t s = 0; s < n_steps; s++) out->step_loss[s] /= (float)batch;
    for (int epoch = 0; epoch < cfg->epochs; epoch++) {
        out->test_loss[epoch] /= (float)n_test;
        out->test_acc[epoch] = (float)test_correct[epoch] / (float)n_test;
    }

    cudaCheck(cudaFree(d_params));
    cudaCheck(cudaFree(d_snapshot));
    cudaCheck(cudaFree(d_train_images));
    cudaCheck(cudaFree(d_train_labels));
    cudaCheck(cudaFree(d_order));
    for (int l = 0; l <= n_layers; l++) {
        cudaCheck(cudaFree(d_act[l]));
        if (l > 0) cudaCheck(cudaFree(d_dact[l]));
        cudaCheck(cudaFree(d_test_act[l]));
    }
    cudaCheck(cudaFree(d_labels));
    cudaCheck(cudaFree(d_test_labels));
    cudaCheck(cudaFree(d_step_loss_sum));
    cudaCheck(cudaFree(d_test_loss_sum));
    cudaCheck(cudaFree(d_test_correct));
    free(test_correct);
    cudaCheck(cudaStreamDestroy(stream));
    cudaCheck(cudaStreamDestroy(copy_stream));
    cudaCheck(cudaStreamDestroy(eval_stream));
    cudaCheck(cudaEventDestroy(upload_done));
    cudaCheck(cudaEventDestroy(snapshot_ready));
    cudaCheck(cudaEventDestroy(eval_done));
    for (int b = 0; b < 2; b++) {
        cudaCheck(cudaFreeHost(staging.buffer[b]));
        cudaCheck(cudaEventDestroy(staging.drained[b]));
    }
    return 0;
}
