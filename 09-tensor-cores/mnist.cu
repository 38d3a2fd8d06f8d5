// Stage 09, MNIST: stage 08's trainer with the first layer's products on tensor cores. A second persistent kernel,
// mma_epoch_kernel, cuts W0 into tiles of 8 hidden units by a range of pixels, one a block, and runs both of its
// products on the tile as mma.sync instructions (common/mma_tf32.cuh): 3xTF32 in fp32, one product under --precision
// tf32. Without a hidden layer barriers, not products, bound a step: softmax_cluster_kernel runs the epoch in one
// thread-block cluster (9.0), with no grid barrier. Stage 08's kernel runs where these cannot (with a note).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cooperative_groups.h>  // stage 08: the grid barrier, grid.sync()
#include <cuda_pipeline_primitives.h>  // stage 09: __pipeline_memcpy_async (cp.async)
#include <cuda_runtime.h>
#include <cublasLt.h>  // before check.h, which defines cublasCheck and cudnnCheck only for headers included
#include <cudnn.h>

#include "check.h"
#include "host.h"
#include "staging.h"
#include "lt_matmul.h"
#include "gates.h"
#include "mma_tf32.cuh"  // stage 09: to_tf32, mma_tf32
#include "timing.h"
#include "trainer.h"

namespace cg = cooperative_groups;

const char *const MNIST_VARIANTS[] = {"persistent", "epoch-graph", "step-graph", NULL};
#define VARIANT_PERSISTENT 0  // index of "persistent" above
#define VARIANT_STEP_GRAPH 2  // index of "step-graph" above
const char *const MNIST_PRECISIONS[] = {"fp32", "tf32", NULL};

#define BLOCK_SIZE 256
#define WARP_SIZE 32
#define WARPS_PER_BLOCK (BLOCK_SIZE / WARP_SIZE)  // loss kernel: rows per block; bias kernel: partial sums per column

// ----------------------------------------------------------------------------
// pixels: the bytes go up (a quarter of the floats' bytes) and become floats on the device, once

// for i < n: images[i] = mnist_pixel_value(pixels[i]), the host's own expression, so bit for bit its floats
__global__ void scale_pixels_kernel(float *images, const uint8_t *pixels, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) images[i] = mnist_pixel_value(pixels[i]);
}

// ----------------------------------------------------------------------------
// batch gather: the training set lives on the device; each step copies its batch's rows out of it

// for i < batch, p < pixels: batch_images[i][p] = images[rows[i]][p], and batch_labels[i] = labels[rows[i]]
// (rows: the batch order's slice for step *step = epoch * steps + s, checked on the host before the upload)
__global__ void gather_batch_kernel(float *batch_images, uint8_t *batch_labels, const float *images,
                                    const uint8_t *labels, const int32_t *order, const int *step, int n_train,
                                    int steps, int batch, int pixels) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)batch * pixels) return;
    int i = (int)(idx / pixels), p = (int)(idx % pixels);
    const int32_t *rows = order + (int64_t)(*step / steps) * n_train + (int64_t)(*step % steps) * batch;
    int64_t row = rows[i];
    batch_images[idx] = images[row * pixels + p];
    if (p == 0) batch_labels[i] = labels[row];
}

// ----------------------------------------------------------------------------
// GEMMs through cuBLASLt
//
// cuBLAS is column-major, so it reads our row-major (R, C) matrix as its (C, R) matrix with ld = C, and
// for our C = A @ B we ask it for C^T = B^T @ A^T, without moving a byte. A layer's three products:
//     forward  out^T (out, rows) = W^T (out, in) @ in^T (in, rows) + b       (BIAS: b runs down out^T's rows)
//     din      din^T (in, rows)  = op_T(W^T) (in, out) @ dout^T (out, rows)
//     dW + SGD W^T (out, in)     = -lr * dout^T (out, rows) @ op_T(in^T) (rows, in) + W^T
// The SGD update stays fused as in stage 03: alpha = -lr, beta = 1 and C = D = W, so dW is never stored.
// Each GEMM is planned once in setup (plan_matmul, common/lt_matmul.c) and run with one call (run_matmul).

// ----------------------------------------------------------------------------
// loss: softmax, cross-entropy, accuracy and the gradient of the loss in one kernel, one warp per row.
// Every row is shifted by its largest logit before exp, so exp never overflows.
//
// A row is 10 logits. Stage 03's one thread per row walks its row three times in series, and a batch of 128
// rows is 128 threads of one block: one SM running a chain of dependent loads. Instead lane j of the row's
// warp holds logits j, j + 32, ..., the max, argmax and sum of exp take 5 shuffle steps each, and a batch of
// 128 rows is 16 blocks of 8 warps. The losses and hits of a block's rows meet in shared memory: one atomic
// per block, not per row.

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

// for each row i, with p = softmax(logits[i]), and loss_sum advanced by *step (if step):
//     loss_sum += log(sum_j exp(logits[i][j])) - logits[i][label[i]]
//     correct  += (argmax_j logits[i][j] == label[i]), ties going to the lowest index      (if correct)
//     dlogits[i][j] = (p[j] - (j == label[i])) / rows                                       (if dlogits)
// Training asks for dlogits, evaluation for the count. dlogits arrives holding p from cuDNN's softmax (cuDNN has
// no cross-entropy) and becomes the gradient in place (cudnnSoftmaxBackward would divide by p, which can underflow
// to 0). Launch BLOCK_SIZE threads a block, one warp per row.
__global__ void softmax_cross_entropy_kernel(float *dlogits, float *loss_sum, int *correct, const float *logits,
                                             const uint8_t *labels, int rows, int classes, const int *step) {
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
                dlogits_row[j] = (dlogits_row[j] - onehot) / (float)rows;
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
    atomicAdd(loss_sum + (step ? *step : 0), block_sum);
    if (correct) atomicAdd(correct, block_correct);
}

// ----------------------------------------------------------------------------
// backward and update: for out = in @ W + b, given dout, compute din (through the ReLU), then apply
// SGD to W and b in place. No gradient buffer: din and W's update are the cuBLASLt GEMMs; db and b's update
// stay one kernel (the BGRADA epilogue would sum db into a buffer, and the update would need a launch of its own).

// for j < dim: bias[j] -= lr * sum_i dout[i][j]; then *step += 1 (if step)
// The thread that completes a column's sum holds the whole gradient and can apply it: with stage 02's
// atomicAdd per element no thread knows when the sum is done (and the sum needed a zeroed buffer and a
// second kernel). A block of 32 x 8 threads owns 32 columns: thread (x, y) sums rows y, y + 8, ... of
// column x (a warp reads 32 neighbouring floats of a row), and thread (x, 0) adds the 8 partial sums
// from shared memory in a fixed order, so every run sums alike. (Stage 03's one thread per column adds a
// batch of 128 rows in series, all in one block.)
// Layer 0's bias update is the step's last kernel, so it also advances the step counter (no one-thread kernel,
// no graph node of its own): every kernel of the step that reads the counter runs before it, in stream order.
__global__ void bias_backward_sgd_kernel(float *bias, const float *dout, float lr, int rows, int dim, int *step) {
    if (step && blockIdx.x == 0 && threadIdx.x == 0 && threadIdx.y == 0) *step += 1;
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

// ----------------------------------------------------------------------------
// the persistent epoch, one launch (picture.svg): block g owns features [g * slice, g * slice + slice) and every
// weight that touches them, in shared memory all epoch; where stage 07 ends a kernel, the blocks meet at a grid
// barrier. A: my values, my share of every logit; B: the shares summed, softmax; C: my gradients, applied.

#define PERSISTENT_THREADS 1024
#define PERSISTENT_WARPS (PERSISTENT_THREADS / WARP_SIZE)
#define PIXEL_SLICE 8  // pixels a block owns without a hidden layer: 98 blocks
#define ROW_THREADS 4  // phase A with a hidden layer: the threads that share a row, a quarter of its pixels each
#define WORDS (PIXELS / 4)  // a row's pixels as 4-byte words
#define PIXELS 784
#define CLASSES 10

typedef struct {
    float *params;          // packed as trainer.h: read into shared memory at the start, written back at the end
    float *partial;         // (batch, CLASSES, blocks) each block's share of every logit
    float *dlogits;         // (batch, CLASSES) this step's dloss/dlogits
    float *loss_sum;        // (steps,) this epoch's summed cross-entropy per step (zeroed)
    const uint8_t *pixels;  // (n_train, PIXELS) the training images' bytes
    const uint8_t *labels;  // (n_train,)
    const int32_t *rows;    // (steps * batch,) this epoch's batch order
    int hidden, slice, steps, batch;
    float lr;
    float *zpart;          // tensor cores: (ranges, batch, hidden) each pixel range's part of every z
    float *values;         // tensor cores: (batch, hidden) the step's hidden values
    int ranges, range_tiles;  // tensor cores: W0's pixel ranges, each range_tiles m16 products (16 pixels) long
    int products;          // tensor cores: 1 tf32, 2 3xTF32 (fp32's accuracy); 0: stage 08's kernel runs
    int cluster;           // without a hidden layer: 1 where softmax_cluster_kernel runs, one cluster
    int blocks;           // the launch (host side): blocks of PERSISTENT_THREADS,
    size_t shared_bytes;  // with this much dynamic shared memory each
} EpochArgs;

// sum over i < n of a[i * a_step] * b[i * b_step]: four chains, four shared-memory loads in flight at once
__device__ float strided_dot(const float *a, int a_step, const float *b, int b_step, int n) {
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int i = 0;
    for (; i + 4 <= n; i += 4)
        for (int c = 0; c < 4; c++) sum[c] = fmaf(a[(i + c) * a_step], b[(i + c) * b_step], sum[c]);
    for (; i < n; i++) sum[0] = fmaf(a[i * a_step], b[i * b_step], sum[0]);
    return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

// Byte b of a word as a float, exactly and with no conversion instruction: the low mantissa bits of 2^23, minus 2^23
__device__ __forceinline__ float pixel_byte(uint32_t word, int b) {
    return __uint_as_float(0x4B000000u | ((word >> 8 * b) & 255)) - 8388608.0f;
}

static __host__ __device__ int round_up(int n, int to) { return (n + to - 1) / to * to; }
// The kernel's dynamic shared memory, in mlp_epoch_kernel's order.
static size_t persistent_shared_bytes(const EpochArgs *a) {
    size_t floats = (a->hidden ? (size_t)a->batch * WORDS : 0) + 2 * a->batch + a->slice * CLASSES + CLASSES +
                    (size_t)a->batch * (a->slice + CLASSES);
    if (a->hidden) floats += (size_t)a->batch * a->slice + a->slice + (size_t)a->slice * PIXELS;
    return floats * sizeof(float);
}

// One epoch of SGD as train_step's graph does it, in one cooperative launch of a.blocks x PERSISTENT_THREADS
__global__ void __launch_bounds__(PERSISTENT_THREADS) mlp_epoch_kernel(EpochArgs a) {
    cg::grid_group grid = cg::this_grid();
    extern __shared__ __align__(16) float shared[];
    int hidden = a.hidden, slice = a.slice, batch = a.batch, blocks = gridDim.x;
    int features = hidden ? hidden : PIXELS, first = blockIdx.x * slice, owned = max(0, min(slice, features - first));
    int tid = threadIdx.x, warp = tid / WARP_SIZE, lane = tid % WARP_SIZE;
    float *w_last = a.params + (hidden ? (int64_t)PIXELS * hidden + hidden : 0);  // (features, CLASSES)
    float *b_last = w_last + (int64_t)features * CLASSES;                         // (CLASSES,)
    float *w0 = a.params, *b0 = a.params + (int64_t)PIXELS * hidden;              // hidden: (PIXELS, hidden), (hidden,)
    uint8_t *x = (uint8_t *)shared;                        // hidden: (batch, PIXELS) this step's pixels
    int32_t *batch_row = (int32_t *)(shared + (hidden ? batch * WORDS : 0));  // (batch,) this step's rows
    int32_t *batch_label = batch_row + batch;             // (batch,) their labels
    float *my_w_last = (float *)(batch_label + batch);    // (slice, CLASSES) W_last's rows I own
    float *my_b_last = my_w_last + slice * CLASSES;       // (CLASSES,) my copy of b_last
    float *value = my_b_last + CLASSES;                   // (batch, slice) my features' values
    float *dlogit = value + batch * slice;                // (batch, CLASSES) this step's dlogits
    float *dvalue = dlogit + batch * CLASSES;             // hidden: (batch, slice) dloss/dvalue
    float *my_b0 = dvalue + batch * slice;                // hidden: (slice,) b0's entries I own
    float *my_w0 = my_b0 + slice;                         // hidden: (slice, PIXELS) W0's columns I own, one a row

    // my weights into shared memory, zeros for the features past the last
    for (int e = tid; e < slice * CLASSES; e += PERSISTENT_THREADS)
        my_w_last[e] = e / CLASSES < owned ? w_last[(int64_t)first * CLASSES + e] : 0.0f;
    for (int j = tid; j < CLASSES; j += PERSISTENT_THREADS) my_b_last[j] = b_last[j];
    if (hidden) {
        for (int f = tid; f < slice; f += PERSISTENT_THREADS) my_b0[f] = f < owned ? b0[first + f] : 0.0f;
        for (int e = tid; e < slice * PIXELS; e += PERSISTENT_THREADS)
            my_w0[e] = e / PIXELS < owned ? w0[(int64_t)(e % PIXELS) * hidden + first + e / PIXELS] : 0.0f;
    }

    for (int step = 0; step < a.steps; step++) {
        for (int i = tid; i < batch; i += PERSISTENT_THREADS) {
            batch_row[i] = a.rows[(int64_t)step * batch + i];
            batch_label[i] = a.labels[batch_row[i]];  // read now, used in phase B
        }
        __syncthreads();
        if (hidden)  // the batch's pixels, 16 bytes a copy, several copies in flight: A and C read them slice times
#pragma unroll 8
            for (int e = tid; e < batch * PIXELS / 16; e += PERSISTENT_THREADS)  // 16 bytes e of x: row e / 49
                ((uint4 *)x)[e] = ((const uint4 *)(a.pixels + (int64_t)batch_row[e / 49] * PIXELS))[e % 49];
        __syncthreads();

        // A: my features' values, then my share of every logit
        if (hidden) {  // ROW_THREADS threads a row, a quarter of its words each; then their sum
            // (whole warps: every lane of a warp shuffles, those past the batch on its last row, unwritten)
            for (int t = tid; t < round_up(batch * ROW_THREADS, WARP_SIZE); t += PERSISTENT_THREADS) {
                int i = min(t / ROW_THREADS, batch - 1), q = t % ROW_THREADS, first_word = q * (WORDS / ROW_THREADS);
                const uint32_t *words = (const uint32_t *)(x + i * PIXELS);
                for (int f = 0; f < slice; f++) {
                    float z = 0.0f;
                    for (int w = first_word; w < first_word + WORDS / ROW_THREADS; w++)
                        for (int b = 0; b < 4; b++)
                            z = fmaf(pixel_byte(words[w], b), my_w0[f * PIXELS + 4 * w + b], z);
                    for (int o = ROW_THREADS / 2; o > 0; o /= 2) z += __shfl_xor_sync(0xffffffff, z, o);  // the row's
                    z = z / 255.0f + my_b0[f];  // x = byte / 255, the 255 taken out
                    if (q == 0 && t / ROW_THREADS < batch) value[i * slice + f] = f < owned ? fmaxf(z, 0.0f) : 0.0f;
                }
            }
        } else {  // my pixels' values
            for (int p = tid; p < batch * slice; p += PERSISTENT_THREADS)  // value[i][f]: pixel first + f of row i
                value[p] = p % slice < owned ? mnist_pixel_value(a.pixels[(int64_t)batch_row[p / slice] * PIXELS +
                                                                          first + p % slice]) : 0.0f;
        }
        __syncthreads();
        // EXERCISE(shares-barrier) begin: end phase A: store my share of every logit e = (i, j) (strided_dot) with
        //: __stcg at a.partial[e][blockIdx.x]; then the grid barrier, before any block sums the shares in phase B
        for (int e = tid; e < batch * CLASSES; e += PERSISTENT_THREADS)  // logit e = (i, j); to L2: others read it
            __stcg(a.partial + (int64_t)e * blocks + blockIdx.x,
                   strided_dot(value + e / CLASSES * slice, 1, my_w_last + e % CLASSES, CLASSES, slice));
        grid.sync();  // every block's shares are in partial (and every block is past the last step's phase C)
        // EXERCISE end

        // B: block g takes rows g, g + blocks, ... A warp a logit: its lanes add the blocks' shares (contiguous, so
        // the loads coalesce) and the warp's sum; then a warp a row: softmax, loss and dlogits
        float *row_logit = dlogit;  // (my_rows, CLASSES) my rows' logits, in dlogit's room until phase C
        int my_rows = (batch - blockIdx.x + blocks - 1) / blocks;
        for (int q = warp; q < my_rows * CLASSES; q += PERSISTENT_WARPS) {
            int i = blockIdx.x + q / CLASSES * blocks, j = q % CLASSES;
            const float *shares = a.partial + ((int64_t)i * CLASSES + j) * blocks;
            float sum = 0.0f;
            // EXERCISE(share-sum) begin: the lanes add logit j's shares of row i, shares[0 .. blocks), read with
            //: __ldcg (other blocks wrote them: past L1, from L2), then sum = the warp's sum of their sums
#pragma unroll 4
            for (int g = lane; g < blocks; g += WARP_SIZE) sum += __ldcg(shares + g);
            sum = warp_sum(sum);
            // EXERCISE end
            if (lane == 0) row_logit[q] = sum + my_b_last[j];
        }
        __syncthreads();
        for (int r = warp; r < my_rows; r += PERSISTENT_WARPS) {
            int i = blockIdx.x + r * blocks;
            float z = lane < CLASSES ? row_logit[r * CLASSES + lane] : -INFINITY;
            float max = z;
            int argmax = lane;
            warp_argmax(&max, &argmax);
            float e = lane < CLASSES ? expf(z - max) : 0.0f, sum = warp_sum(e);
            int label = batch_label[i];
            float label_logit = __shfl_sync(0xffffffff, z, label);
            if (lane < CLASSES) __stcg(a.dlogits + i * CLASSES + lane, (e / sum - (lane == label)) / (float)batch);
            // from the logits, not from p: log of a probability that underflowed to 0 would be -inf
            if (lane == 0) atomicAdd(a.loss_sum + step, logf(sum) - (label_logit - max));
        }
        // EXERCISE(dlogits-barrier) begin: the grid barrier (every block's rows of a.dlogits written); then copy the
        //: whole batch's a.dlogits (batch, CLASSES) into dlogit in shared memory, read with __ldcg (from L2)
        grid.sync();  // every row's dlogits are in a.dlogits (and every block has summed this step's shares)

        // C: the batch's dlogits (from L2), then my gradients, every one from the weights before this step's update
        for (int e = tid; e < batch * CLASSES; e += PERSISTENT_THREADS) dlogit[e] = __ldcg(a.dlogits + e);
        // EXERCISE end
        __syncthreads();
        if (hidden)  // dvalue[i][f]: back through W_last and the ReLU
            for (int p = tid; p < batch * slice; p += PERSISTENT_THREADS) {
                float sum = strided_dot(dlogit + p / slice * CLASSES, 1, my_w_last + p % slice * CLASSES, 1, CLASSES);
                dvalue[p] = value[p] > 0.0f ? sum : 0.0f;
            }
        __syncthreads();  // dvalue has read W_last
        for (int e = tid; e < slice * CLASSES; e += PERSISTENT_THREADS)  // W_last[f][j], e = (f, j)
            my_w_last[e] -= a.lr * strided_dot(value + e / CLASSES, slice, dlogit + e % CLASSES, CLASSES, batch);
        if (warp < CLASSES) {  // b_last: warp j sums column j, in the same order in every block
            float sum = 0.0f;
            for (int i = lane; i < batch; i += WARP_SIZE) sum += dlogit[i * CLASSES + warp];
            sum = warp_sum(sum);
            if (lane == 0) my_b_last[warp] -= a.lr * sum;
        }
        if (hidden) {
            for (int f = warp; f < slice; f += PERSISTENT_WARPS) {  // b0: warp f sums unit f's dvalues
                float sum = 0.0f;
                for (int i = lane; i < batch; i += WARP_SIZE) sum += dvalue[i * slice + f];
                sum = warp_sum(sum);
                if (lane == 0) my_b0[f] -= a.lr * sum;
            }
            // W0: two neighbouring lanes a word (4 weights), over alternate rows, then their sums added (whole warps:
            // every lane shuffles; those past the last word read word 0 and write nothing)
            for (int e = tid; e < round_up(slice * WORDS * 2, WARP_SIZE); e += PERSISTENT_THREADS) {
                int f = min(e / (2 * WORDS), slice - 1), w = e < slice * WORDS * 2 ? e / 2 % WORDS : 0, half = e % 2;
                float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 4
                for (int i = half; i < batch; i += 2) {
                    uint32_t word = ((const uint32_t *)(x + i * PIXELS))[w];
                    for (int b = 0; b < 4; b++) sum[b] = fmaf(pixel_byte(word, b), dvalue[i * slice + f], sum[b]);
                }
                for (int b = 0; b < 4; b++) sum[b] += __shfl_xor_sync(0xffffffff, sum[b], 1);
                if (half == 0 && e < slice * WORDS * 2)
                    for (int b = 0; b < 4; b++) my_w0[f * PIXELS + 4 * w + b] -= a.lr * (sum[b] / 255.0f);
            }
        }
        __syncthreads();  // the next step overwrites batch_row, value and dlogit
    }

    // the epoch's weights go back
    for (int e = tid; e < owned * CLASSES; e += PERSISTENT_THREADS) w_last[(int64_t)first * CLASSES + e] = my_w_last[e];
    if (blockIdx.x == 0)
        for (int j = tid; j < CLASSES; j += PERSISTENT_THREADS) b_last[j] = my_b_last[j];
    if (hidden) {
        for (int f = tid; f < owned; f += PERSISTENT_THREADS) b0[first + f] = my_b0[f];
        for (int e = tid; e < owned * PIXELS; e += PERSISTENT_THREADS)
            w0[(int64_t)(e % PIXELS) * hidden + first + e / PIXELS] = my_w0[e];  // my_w0[f][k] = W0[k][first + f]
    }
}

// ----------------------------------------------------------------------------
// stage 09: the epoch on tensor cores. One hidden unit a block leaves an mma.sync nothing to multiply, so W0
// (PIXELS, hidden) is cut into tiles of MMA_UNITS units by 16 range_tiles pixels, one a block: block b owns units
// 8 (b / ranges) .. and pixel range b % ranges, and both of W0's products become m16n8k8 products on its tile.
// A: my range's part of every z (the batch's rows by my tile); B: ROW_GROUP threads a row: z summed over the
// ranges, its values, logits, softmax, dlogits; C: my tile's gradient (x's columns by dvalue), my W_last rows, b0,
// b_last, while the next step's pixels arrive. Both products split K over the warps an m16 product leaves idle.

#define MMA_THREADS 1024
#define MMA_WARPS (MMA_THREADS / WARP_SIZE)
#define MMA_UNITS 8    // a block's units: one n8 product wide
#define ROW_GROUP 128  // phase B: the threads that take a row, a unit each (and every ROW_GROUP-th after it)
#define ROW_GROUPS (MMA_THREADS / ROW_GROUP)
#define SUM_COLUMNS (MMA_UNITS * CLASSES + CLASSES + MMA_UNITS)  // phase C's sums over the batch: W_last's, b_last, b0
#define SUM_PARTS (MMA_THREADS / SUM_COLUMNS)                     // a column's partial sums, a thread each

// x[i][p] of a block's pixel columns (rows `stride` bytes apart) as a tf32 operand: a byte is exact in tf32, and
// pixel_byte needs no conversion instruction (those run at a quarter of an add's rate)
static __device__ __forceinline__ uint32_t pixel_tf32(const uint8_t *x, int stride, int i, int p) {
    return __float_as_uint(pixel_byte(x[i * stride + p], 0));
}

// c += a @ b, b's tf32 high parts and, with products == 2 (3xTF32; a is exact, so two products, not three), its
// low parts, the small product first
static __device__ __forceinline__ void mma_parts(float c[4], const uint32_t a[4], const uint32_t hi[2],
                                                 const uint32_t lo[2], int products) {
    if (products == 2) mma_tf32(c, a, lo);
    mma_tf32(c, a, hi);
}

// A product of m16 tiles that leaves warps idle splits K over them: this many parts, summed in order after
static __host__ __device__ int k_splits(int tiles) { return max(1, MMA_WARPS / tiles); }

// The tensor-core kernel's dynamic shared memory, in mma_epoch_kernel's order.
static size_t mma_shared_bytes(const EpochArgs *a) {
    int pixels = 16 * a->range_tiles, batch = a->batch, batch16 = round_up(batch, 16);
    size_t parts = max((size_t)k_splits(batch16 / 16) * batch16, (size_t)k_splits(pixels / 16) * pixels);
    size_t floats = (size_t)4 * batch + MMA_UNITS * (pixels + 4) + MMA_UNITS * CLASSES + CLASSES +
                    (size_t)batch * (2 * MMA_UNITS + CLASSES) + 2 * (size_t)round_up(batch, 8) * MMA_UNITS +
                    ROW_GROUPS * (ROW_GROUP / WARP_SIZE) * CLASSES + parts * MMA_UNITS + (size_t)a->hidden * CLASSES +
                    SUM_PARTS * SUM_COLUMNS + MMA_UNITS;
    return (size_t)2 * batch * pixels + floats * sizeof(float);
}

// rows[i] and labels[i] of the step's batch (copied by the first threads)
static __device__ void fetch_rows(const EpochArgs *a, int step, int32_t *rows, int32_t *labels) {
    for (int i = threadIdx.x; i < a->batch; i += blockDim.x) {
        rows[i] = a->rows[(int64_t)step * a->batch + i];
        labels[i] = a->labels[rows[i]];
    }
}

// x[i][c] = pixel first_pixel + c of row rows[i], c < pixels: cp.async, 16 bytes a copy, one batch committed
static __device__ void fetch_pixels(const EpochArgs *a, const int32_t *rows, uint8_t *x, int first_pixel, int pixels) {
    for (int e = threadIdx.x; e < a->batch * pixels / 16; e += blockDim.x) {
        int i = e / (pixels / 16), c = 16 * (e % (pixels / 16));
        __pipeline_memcpy_async(x + i * pixels + c, a->pixels + (int64_t)rows[i] * PIXELS + first_pixel + c, 16);
    }
    __pipeline_commit();
}

// One epoch of SGD, as mlp_epoch_kernel trains it, in one cooperative launch of a.blocks x MMA_THREADS
__global__ void __launch_bounds__(MMA_THREADS) mma_epoch_kernel(EpochArgs a) {
    cg::grid_group grid = cg::this_grid();
    extern __shared__ __align__(16) float shared[];
    int hidden = a.hidden, batch = a.batch, blocks = gridDim.x, range = blockIdx.x % a.ranges;
    int first_unit = blockIdx.x / a.ranges * MMA_UNITS, units = min(MMA_UNITS, hidden - first_unit);
    int first_pixel = range * 16 * a.range_tiles, pixels = min(16 * a.range_tiles, PIXELS - first_pixel);
    int w_stride = pixels + 4;  // my_w0's rows, 4 floats longer: a warp's B loads hit 32 banks
    int tid = threadIdx.x, warp = tid / WARP_SIZE, lane = tid % WARP_SIZE, g = lane / 4, t = lane % 4;
    float *w0 = a.params, *b0 = a.params + (int64_t)PIXELS * hidden;   // (PIXELS, hidden), (hidden,)
    float *w_last = b0 + hidden, *b_last = w_last + hidden * CLASSES;  // (hidden, CLASSES), (CLASSES,)
    uint8_t *x_buffers = (uint8_t *)shared;  // (2, batch, pixels) my pixel columns of a step's rows: this, the next
    int32_t *row_buffers = (int32_t *)(x_buffers + 2 * batch * pixels);  // (2, batch) the steps' rows
    int32_t *label_buffers = row_buffers + 2 * batch;                      // (2, batch) their labels
    float *my_w0 = (float *)(label_buffers + 2 * batch);  // (MMA_UNITS, w_stride) my tile, one unit a row
    float *my_w_last = my_w0 + MMA_UNITS * w_stride;       // (MMA_UNITS, CLASSES) W_last's rows of my units
    float *my_b_last = my_w_last + MMA_UNITS * CLASSES;    // (CLASSES,) my copy of b_last
    float *value = my_b_last + CLASSES;                    // (batch, MMA_UNITS) my units' values, every row
    float *dvalue = value + batch * MMA_UNITS;             // (batch, MMA_UNITS) dloss/dvalue
    float *dlogit = dvalue + batch * MMA_UNITS;            // (batch, CLASSES) this step's dlogits
    uint32_t *dvalue_hi = (uint32_t *)(dlogit + batch * CLASSES);  // (batch8, MMA_UNITS) dvalue's tf32 high parts,
    uint32_t *dvalue_lo = dvalue_hi + round_up(batch, 8) * MMA_UNITS;  // and low parts; rows past the batch 0
    float *group_sums = (float *)(dvalue_lo + round_up(batch, 8) * MMA_UNITS);  // (ROW_GROUPS, 4, CLASSES) phase B
    float *parts = group_sums + ROW_GROUPS * (ROW_GROUP / WARP_SIZE) * CLASSES;  // (splits, m, MMA_UNITS) K's parts
    int batch16 = round_up(batch, 16), a_splits = k_splits(batch16 / 16), c_splits = k_splits(pixels / 16);
    float *all_w_last = parts + max(a_splits * batch16, c_splits * pixels) * MMA_UNITS;  // (hidden, CLASSES) phase B
    float *column_parts = all_w_last + hidden * CLASSES;  // (SUM_PARTS, SUM_COLUMNS) phase C
    float *my_b0 = column_parts + SUM_PARTS * SUM_COLUMNS;  // (MMA_UNITS,) b0's entries of my units

    // my tile, my W_last rows and b_last into shared memory, zeros for the units past the last
    for (int e = tid; e < MMA_UNITS * w_stride; e += MMA_THREADS) {
        int n = e / w_stride, k = e % w_stride;
        my_w0[e] = n < units && k < pixels ? w0[(int64_t)(first_pixel + k) * hidden + first_unit + n] : 0.0f;
    }
    for (int e = tid; e < MMA_UNITS * CLASSES; e += MMA_THREADS)
        my_w_last[e] = e / CLASSES < units ? w_last[(int64_t)first_unit * CLASSES + e] : 0.0f;
    for (int j = tid; j < CLASSES; j += MMA_THREADS) my_b_last[j] = b_last[j];
    for (int f = tid; f < units; f += MMA_THREADS) my_b0[f] = b0[first_unit + f];
    for (int e = tid; e < 2 * round_up(batch, 8) * MMA_UNITS; e += MMA_THREADS) dvalue_hi[e] = 0;
    fetch_rows(&a, 0, row_buffers, label_buffers);  // step 0's batch; each step fetches the next one's in phase C
    __syncthreads();
    fetch_pixels(&a, row_buffers, x_buffers, first_pixel, pixels);

    for (int step = 0; step < a.steps; step++) {
        int buffer = step % 2, next = 1 - buffer;
        uint8_t *x = x_buffers + buffer * batch * pixels;
        int32_t *batch_label = label_buffers + buffer * batch;
        __pipeline_wait_prior(0);  // my copies of this step's pixels have landed,
        __syncthreads();           // and everyone's

        // A: zpart[range][i][first_unit + n] = sum over my pixels k of x[i][k] W0[k][first_unit + n]: a warp an m16
        // product of rows along a part of my pixels (rows past the batch are computed from the last row and
        // dropped), the a_splits parts summed in order
        float *zpart = a.zpart + (int64_t)range * batch * hidden;  // (batch, hidden)
        int split = warp / (batch16 / 16), k_part = round_up((pixels + a_splits - 1) / a_splits, 8);
        for (int m0 = 16 * (warp % (batch16 / 16)); split < a_splits && m0 < batch; m0 += 16 * MMA_WARPS) {
            int i = min(m0 + g, batch - 1), i8 = min(m0 + g + 8, batch - 1);
            const float *w = my_w0 + g * w_stride;  // B[k][g] = W0[first_pixel + k][first_unit + g]
            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int k0 = split * k_part; k0 < min(pixels, split * k_part + k_part); k0 += 8) {
                uint32_t frag[4] = {pixel_tf32(x, pixels, i, k0 + t), pixel_tf32(x, pixels, i8, k0 + t),
                                    pixel_tf32(x, pixels, i, k0 + t + 4), pixel_tf32(x, pixels, i8, k0 + t + 4)};
                float b[2] = {w[k0 + t], w[k0 + t + 4]};
                uint32_t hi[2] = {to_tf32(b[0]), to_tf32(b[1])};
                uint32_t lo[2] = {to_tf32(b[0] - __uint_as_float(hi[0])), to_tf32(b[1] - __uint_as_float(hi[1]))};
                mma_parts(c, frag, hi, lo, a.products);
            }
            for (int e = 0; e < 4; e++)  // C[m][n]: row m0 + g + 8 (e / 2), unit 2t + e % 2
                parts[(split * batch16 + m0 + g + 8 * (e / 2)) * MMA_UNITS + 2 * t + e % 2] = c[e];
        }
        __syncthreads();
        for (int e = tid; e < batch * MMA_UNITS; e += MMA_THREADS) {  // e = (row, unit)
            float z = 0.0f;
            for (int s = 0; s < a_splits; s++) z += parts[s * batch16 * MMA_UNITS + e];
            if (e % MMA_UNITS < units) __stcg(zpart + (int64_t)(e / MMA_UNITS) * hidden + first_unit + e % MMA_UNITS, z);
        }
        grid.sync();  // every range's part of every z is in zpart (and every block is past the last step's phase C)

        // B: block b takes rows b, b + blocks, ..., ROW_GROUP threads a row, a unit each: z summed over the ranges
        // in order, the value (to a.values for phase C), its share of every logit; the group's sums, then a warp
        // the row's softmax. (Every thread runs every round, for the barrier.)
        int group = tid / ROW_GROUP, my_warp = tid % ROW_GROUP / WARP_SIZE;
        for (int e = tid; e < hidden * CLASSES; e += MMA_THREADS) all_w_last[e] = __ldcg(w_last + e);  // one copy a
        __syncthreads();  // block, read coalesced: 128 threads a row reading W_last's rows in L2 queue on its lines
        for (int i0 = blockIdx.x; i0 < batch; i0 += ROW_GROUPS * blocks) {
            int i = i0 + group * blocks;
            float share[CLASSES] = {};
            for (int h = tid % ROW_GROUP; i < batch && h < hidden; h += ROW_GROUP) {
                float z = 0.0f, bias = __ldcg(b0 + h);
#pragma unroll 8
                for (int r = 0; r < a.ranges; r++) z += __ldcg(a.zpart + ((int64_t)r * batch + i) * hidden + h);
                float v = fmaxf(z / 255.0f + bias, 0.0f);  // x = byte / 255, the 255 taken out
                __stcg(a.values + (int64_t)i * hidden + h, v);
#pragma unroll
                for (int j = 0; j < CLASSES; j++) share[j] = fmaf(v, all_w_last[h * CLASSES + j], share[j]);
            }
#pragma unroll
            for (int j = 0; j < CLASSES; j++) {
                float sum = warp_sum(share[j]);
                if (lane == 0) group_sums[(group * (ROW_GROUP / WARP_SIZE) + my_warp) * CLASSES + j] = sum;
            }
            __syncthreads();
            if (i < batch && my_warp == 0) {  // the group's first warp: the row's logits, softmax, loss, dlogits
                float z = -INFINITY;
                if (lane < CLASSES) {
                    z = my_b_last[lane];
                    for (int w = 0; w < ROW_GROUP / WARP_SIZE; w++)
                        z += group_sums[(group * (ROW_GROUP / WARP_SIZE) + w) * CLASSES + lane];
            }
            float max = z;
            int argmax = lane;
            warp_argmax(&max, &argmax);
            float e = lane < CLASSES ? expf(z - max) : 0.0f, sum = warp_sum(e);
            int label = batch_label[i];
            float label_logit = __shfl_sync(0xffffffff, z, label);
            if (lane < CLASSES) __stcg(a.dlogits + i * CLASSES + lane, (e / sum - (lane == label)) / (float)batch);
            if (lane == 0) atomicAdd(a.loss_sum + step, logf(sum) - (label_logit - max));
            }
            __syncthreads();  // group_sums is read
        }
        grid.sync();  // every row's values and dlogits are written (and every block has read this step's zpart)

        // C: the batch's dlogits and my units' values, then my gradients, each from the weights before the update
        if (step + 1 < a.steps) fetch_rows(&a, step + 1, row_buffers + next * batch, label_buffers + next * batch);
        for (int e = tid; e < batch * CLASSES; e += MMA_THREADS) dlogit[e] = __ldcg(a.dlogits + e);
        for (int e = tid; e < batch * MMA_UNITS; e += MMA_THREADS)
            value[e] = e % MMA_UNITS < units ? __ldcg(a.values + (int64_t)(e / MMA_UNITS) * hidden + first_unit +
                                                      e % MMA_UNITS) : 0.0f;
        __syncthreads();
        if (step + 1 < a.steps)  // the next step's pixels travel while this step's gradients are computed
            fetch_pixels(&a, row_buffers + next * batch, x_buffers + next * batch * pixels, first_pixel, pixels);
        for (int p = tid; p < batch * MMA_UNITS; p += MMA_THREADS) {  // dvalue[i][f]: back through W_last and the ReLU
            float sum =
                strided_dot(dlogit + p / MMA_UNITS * CLASSES, 1, my_w_last + p % MMA_UNITS * CLASSES, 1, CLASSES);
            dvalue[p] = value[p] > 0.0f ? sum : 0.0f;
            dvalue_hi[p] = to_tf32(dvalue[p]);  // its tf32 parts, for the tensor cores
            dvalue_lo[p] = to_tf32(dvalue[p] - __uint_as_float(dvalue_hi[p]));
        }
        __syncthreads();  // dvalue has read W_last
        // the gradients of W_last's rows of my units, b_last and b0 of my units, SUM_COLUMNS sums over the batch:
        // column c's part p (thread p * SUM_COLUMNS + c) sums rows p, p + SUM_PARTS, ...; phase C's end adds the parts
        if (tid < SUM_PARTS * SUM_COLUMNS) {
            int c = tid % SUM_COLUMNS, f = c / CLASSES, j = c % CLASSES;
            float sum = 0.0f;
            for (int i = tid / SUM_COLUMNS; i < batch; i += SUM_PARTS)
                sum += c < MMA_UNITS * CLASSES ? value[i * MMA_UNITS + f] * dlogit[i * CLASSES + j]  // W_last[f][j]
                       : c < MMA_UNITS * CLASSES + CLASSES ? dlogit[i * CLASSES + j]                // b_last[j]
                       : dvalue[i * MMA_UNITS + c - MMA_UNITS * CLASSES - CLASSES];                 // b0[f]
            column_parts[tid] = sum;
        }
        // W0 on my tile: dW0 (pixels, MMA_UNITS) = x^T (pixels, batch) @ dvalue (batch, MMA_UNITS), a warp an m16
        // product of pixels along a part of the batch (rows past the batch: dvalue's parts are 0, x's row clamped),
        // the c_splits parts summed in order
        split = warp / (pixels / 16), k_part = round_up((batch + c_splits - 1) / c_splits, 8);
        for (int m0 = 16 * (warp % (pixels / 16)); split < c_splits && m0 < pixels; m0 += 16 * MMA_WARPS) {
            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int k0 = split * k_part; k0 < min(batch, split * k_part + k_part); k0 += 8) {
                int i = min(k0 + t, batch - 1), i4 = min(k0 + t + 4, batch - 1);  // A[m][k] = x[k0 + k][m0 + m]
                uint32_t frag[4] = {pixel_tf32(x, pixels, i, m0 + g), pixel_tf32(x, pixels, i, m0 + g + 8),
                                    pixel_tf32(x, pixels, i4, m0 + g), pixel_tf32(x, pixels, i4, m0 + g + 8)};
                int b = (k0 + t) * MMA_UNITS + g;  // B[k][n] = dvalue[k0 + k][n]
                uint32_t hi[2] = {dvalue_hi[b], dvalue_hi[b + 4 * MMA_UNITS]};
                uint32_t lo[2] = {dvalue_lo[b], dvalue_lo[b + 4 * MMA_UNITS]};
                mma_parts(c, frag, hi, lo, a.products);
            }
            for (int e = 0; e < 4; e++)  // C[m][n]: pixel m0 + g + 8 (e / 2) of unit 2t + e % 2
                parts[(split * pixels + m0 + g + 8 * (e / 2)) * MMA_UNITS + 2 * t + e % 2] = c[e];
        }
        __syncthreads();
        for (int e = tid; e < pixels * MMA_UNITS; e += MMA_THREADS) {  // e = (pixel, unit)
            float dw = 0.0f;
            for (int s = 0; s < c_splits; s++) dw += parts[s * pixels * MMA_UNITS + e];
            my_w0[e % MMA_UNITS * w_stride + e / MMA_UNITS] -= a.lr * (dw / 255.0f);
        }
        for (int c = tid; c < SUM_COLUMNS; c += MMA_THREADS) {  // every block of my units alike; range 0's publish
            float sum = 0.0f;
            for (int p = 0; p < SUM_PARTS; p++) sum += column_parts[p * SUM_COLUMNS + c];
            int f = c - MMA_UNITS * CLASSES - CLASSES;  // b0's unit, for the last MMA_UNITS columns
            if (c < MMA_UNITS * CLASSES) {
                my_w_last[c] -= a.lr * sum;
                if (range == 0 && c / CLASSES < units) w_last[first_unit * CLASSES + c] = my_w_last[c];
            } else if (f < 0) {
                my_b_last[c - MMA_UNITS * CLASSES] -= a.lr * sum;
            } else if (range == 0 && f < units) {
                my_b0[f] -= a.lr * sum;
                b0[first_unit + f] = my_b0[f];
            }
        }
        __syncthreads();  // the next step overwrites value, dlogit and parts
    }

    // the epoch's tile goes back (W_last and b0 are in a.params already), and block 0's b_last
    for (int e = tid; e < units * pixels; e += MMA_THREADS)
        w0[(int64_t)(first_pixel + e % pixels) * hidden + first_unit + e / pixels] =
            my_w0[e / pixels * w_stride + e % pixels];
    if (blockIdx.x == 0)
        for (int j = tid; j < CLASSES; j += MMA_THREADS) b_last[j] = my_b_last[j];
}

// ----------------------------------------------------------------------------
// without a hidden layer: the epoch in one thread-block cluster (compute capability 9.0)

// A step of softmax regression is 4 MFLOP: stage 08's kernel spends it waiting on its two grid barriers and the L2
// round trips between them. One cluster of CLUSTER_BLOCKS blocks trades them for cluster barriers
// and distributed shared memory (a block writes into another block's shared memory): block r owns W's rows for
// pixels [49 r, 49 r + 49) and the batch's rows [8 r, 8 r + 8). A: my pixels' share of every logit, pushed to the
// row's owner. B: the owner sums its rows' 16 shares, softmax, pushes dlogits to every block. C: my pixels' gradient.
#define CLUSTER_BLOCKS 16                          // above 8, a non-portable cluster size
#define CLUSTER_THREADS 1024
#define CLUSTER_PIXELS (PIXELS / CLUSTER_BLOCKS)   // 49 pixels a block
#define CLUSTER_MAX_BATCH 128
#define CLUSTER_ROWS (CLUSTER_MAX_BATCH / CLUSTER_BLOCKS)  // 8 rows a block
#define CLUSTER_CHUNK 7                            // A: a thread's pixels of a row
#define CLUSTER_CHUNKS (CLUSTER_PIXELS / CLUSTER_CHUNK)
#define CLUSTER_BYTES ((CLUSTER_MAX_BATCH * CLUSTER_PIXELS + CLUSTER_THREADS - 1) / CLUSTER_THREADS)  // a thread's pixels

static size_t cluster_shared_bytes(void) {  // softmax_cluster_kernel's layout, in its order
    return (2 * CLUSTER_MAX_BATCH * CLUSTER_PIXELS + CLUSTER_PIXELS * CLASSES + CLASSES +
            CLUSTER_CHUNKS * CLUSTER_MAX_BATCH * CLASSES + CLUSTER_BLOCKS * CLUSTER_ROWS * CLASSES +
            CLUSTER_MAX_BATCH * CLASSES + CLUSTER_ROWS + 256 + 4 * CLUSTER_MAX_BATCH) * sizeof(float);
}

__global__ void __launch_bounds__(CLUSTER_THREADS) softmax_cluster_kernel(EpochArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::cluster_group cluster = cg::this_cluster();
    extern __shared__ float shared[];
    const int batch = a.batch, tid = threadIdx.x, warp = tid / WARP_SIZE, lane = tid % WARP_SIZE;
    const int rank = (int)cluster.block_rank(), first = rank * CLUSTER_PIXELS, row0 = rank * CLUSTER_ROWS;
    float *x = shared;                                    // (2, batch, 49) my pixels of this step's, the next step's rows
    float *w = x + 2 * CLUSTER_MAX_BATCH * CLUSTER_PIXELS;  // (49, CLASSES) my rows of W
    float *b = w + CLUSTER_PIXELS * CLASSES;              // (CLASSES,) every block's copy, updated alike
    float *part = b + CLASSES;                            // A: (7, batch, CLASSES) the chunks' parts; C: (16, 49, CLASSES)
    float *inbox = part + CLUSTER_CHUNKS * CLUSTER_MAX_BATCH * CLASSES;  // (16, 8, CLASSES) the blocks' shares, my rows
    float *dlogit = inbox + CLUSTER_BLOCKS * CLUSTER_ROWS * CLASSES;     // (batch, CLASSES) pushed by the rows' owners
    float *loss = dlogit + CLUSTER_MAX_BATCH * CLASSES;   // (8,) my rows' cross-entropy
    float *byte_value = loss + CLUSTER_ROWS;              // (256,) mnist_pixel_value of each byte: no division in the loop
    int32_t *rows = (int32_t *)(byte_value + 256);        // (2, batch) this step's and the next step's
    int32_t *labels = rows + 2 * CLUSTER_MAX_BATCH;       // (2, batch)
    float *W = a.params, *B = a.params + PIXELS * CLASSES;
    for (int e = tid; e < CLUSTER_PIXELS * CLASSES; e += CLUSTER_THREADS) w[e] = W[first * CLASSES + e];
    if (tid < CLASSES) b[tid] = B[tid];
    for (int v = tid; v < 256; v += CLUSTER_THREADS) byte_value[v] = mnist_pixel_value((uint8_t)v);
    for (int i = tid; i < batch; i += CLUSTER_THREADS) rows[i] = a.rows[i], labels[i] = a.labels[a.rows[i]];
    __syncthreads();
    for (int e = tid; e < batch * CLUSTER_PIXELS; e += CLUSTER_THREADS)
        x[e] = byte_value[a.pixels[(int64_t)rows[e / CLUSTER_PIXELS] * PIXELS + first + e % CLUSTER_PIXELS]];
    cluster.sync();  // every block has started before any block writes into its shared memory

    for (int step = 0; step < a.steps; step++) {
        int cur = step & 1, nxt = cur ^ 1;
        bool more = step + 1 < a.steps;
        const float *xs = x + cur * batch * CLUSTER_PIXELS;
        int next_row = more && tid < batch ? a.rows[(int64_t)(step + 1) * batch + tid] : 0;
        // A: a thread a row by 7 pixels, all ten classes (a warp reads one row of w: a broadcast)
        int i = warp % (CLUSTER_MAX_BATCH / WARP_SIZE) * WARP_SIZE + lane, c = warp / (CLUSTER_MAX_BATCH / WARP_SIZE);
        if (c < CLUSTER_CHUNKS && i < batch) {
            float s[CLASSES] = {0.0f};
            for (int p = c * CLUSTER_CHUNK; p < (c + 1) * CLUSTER_CHUNK; p++)
                for (int j = 0; j < CLASSES; j++) s[j] = fmaf(xs[i * CLUSTER_PIXELS + p], w[p * CLASSES + j], s[j]);
            for (int j = 0; j < CLASSES; j++) part[(c * batch + i) * CLASSES + j] = s[j];
        }
        if (more && tid < batch) rows[nxt * batch + tid] = next_row;
        __syncthreads();
        for (int e = tid; e < batch * CLASSES; e += CLUSTER_THREADS) {  // my share of logit e, into its owner's inbox
            float share = 0.0f;
            for (int q = 0; q < CLUSTER_CHUNKS; q++) share += part[q * batch * CLASSES + e];
            int row = e / CLASSES, owner = row / CLUSTER_ROWS;
            cluster.map_shared_rank(inbox, owner)[(rank * CLUSTER_ROWS + row % CLUSTER_ROWS) * CLASSES + e % CLASSES] = share;
        }
        cluster.sync();

        // B: the next step's pixels set off; a warp a row of mine: 16 shares summed, softmax, dlogits to every block
        uint8_t next_bytes[CLUSTER_BYTES];
        int next_label = 0;
        for (int k = 0; k < CLUSTER_BYTES; k++) {
            int e = tid + k * CLUSTER_THREADS;
            if (more && e < batch * CLUSTER_PIXELS)
                next_bytes[k] = a.pixels[(int64_t)rows[nxt * batch + e / CLUSTER_PIXELS] * PIXELS + first + e % CLUSTER_PIXELS];
        }
        if (more && tid < batch) next_label = a.labels[rows[nxt * batch + tid]];
        if (warp < CLUSTER_ROWS && row0 + warp < batch) {
            float z = -INFINITY;
            if (lane < CLASSES) {
                float sum = 0.0f;
                for (int q = 0; q < CLUSTER_BLOCKS; q++) sum += inbox[(q * CLUSTER_ROWS + warp) * CLASSES + lane];
                z = sum + b[lane];
            }
            float m = z;
            for (int o = WARP_SIZE / 2; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
            float ez = lane < CLASSES ? expf(z - m) : 0.0f, sum = warp_sum(ez);
            int label = labels[cur * batch + row0 + warp];
            float z_label = __shfl_sync(0xffffffff, z, label);
            float d = (ez / sum - (lane == label)) / (float)batch;
            for (int q = 0; q < CLUSTER_BLOCKS && lane < CLASSES; q++)
                cluster.map_shared_rank(dlogit, q)[(row0 + warp) * CLASSES + lane] = d;
            if (lane == 0) loss[warp] = logf(sum) - (z_label - m);
        }
        cluster.sync();

        // C: a thread a pixel by 8 rows, all ten classes (a warp reads one row of dlogit); the 16 parts summed
        int p = tid % CLUSTER_PIXELS, rc = tid / CLUSTER_PIXELS;
        if (rc < CLUSTER_MAX_BATCH / CLUSTER_ROWS) {
            float s[CLASSES] = {0.0f};
            for (int r = rc * CLUSTER_ROWS; r < min(rc * CLUSTER_ROWS + CLUSTER_ROWS, batch); r++)
                for (int j = 0; j < CLASSES; j++) s[j] = fmaf(xs[r * CLUSTER_PIXELS + p], dlogit[r * CLASSES + j], s[j]);
            for (int j = 0; j < CLASSES; j++) part[(rc * CLUSTER_PIXELS + p) * CLASSES + j] = s[j];
        }
        if (tid == CLUSTER_THREADS - 1 && row0 < batch) {  // an idle thread: my rows' loss
            float sum = 0.0f;
            for (int r = 0; r < min(CLUSTER_ROWS, batch - row0); r++) sum += loss[r];
            atomicAdd(a.loss_sum + step, sum);
        }
        __syncthreads();
        if (tid < CLUSTER_PIXELS * CLASSES) {
            float grad = 0.0f;
            for (int q = 0; q < CLUSTER_MAX_BATCH / CLUSTER_ROWS; q++) grad += part[q * CLUSTER_PIXELS * CLASSES + tid];
            w[tid] -= a.lr * grad;
        }
        if (warp >= 16 && warp < 16 + CLASSES) {  // b's gradient: warp 16 + j sums column j of dlogit
            float grad = 0.0f;
            for (int r = lane; r < batch; r += WARP_SIZE) grad += dlogit[r * CLASSES + warp - 16];
            grad = warp_sum(grad);
            if (lane == 0) b[warp - 16] -= a.lr * grad;
        }
        for (int k = 0; k < CLUSTER_BYTES; k++) {  // the next step's pixels land
            int e = tid + k * CLUSTER_THREADS;
            if (more && e < batch * CLUSTER_PIXELS) x[nxt * batch * CLUSTER_PIXELS + e] = byte_value[next_bytes[k]];
        }
        if (more && tid < batch) labels[nxt * batch + tid] = next_label;
        __syncthreads();
    }
    cluster.sync();  // no block leaves while another could still write into its shared memory
    for (int e = tid; e < CLUSTER_PIXELS * CLASSES; e += CLUSTER_THREADS) W[first * CLASSES + e] = w[e];
    if (rank == 0 && tid < CLASSES) B[tid] = b[tid];
#else
    __trap();  // never launched: cluster_layout finds no code for 9.0 in this build
#endif
}

// One cluster of CLUSTER_BLOCKS blocks, the whole grid
static cudaLaunchConfig_t cluster_config(const EpochArgs *a, cudaLaunchAttribute *attribute, cudaStream_t stream) {
    cudaLaunchConfig_t config = {};
    attribute->id = cudaLaunchAttributeClusterDimension;
    attribute->val.clusterDim.x = CLUSTER_BLOCKS, attribute->val.clusterDim.y = attribute->val.clusterDim.z = 1;
    config.gridDim = dim3(CLUSTER_BLOCKS), config.blockDim = dim3(CLUSTER_THREADS);
    config.dynamicSmemBytes = a->shared_bytes, config.stream = stream, config.attrs = attribute, config.numAttrs = 1;
    return config;
}

// --hidden 0: 1 where this GPU, this build and the batch allow one cluster; else 0 and why
static int cluster_layout(const MnistConfig *cfg, EpochArgs *a, char *why, size_t why_len) {
    if (!feature_available(FEATURE_CLUSTERS, (const void *)softmax_cluster_kernel, why, why_len)) return 0;
    if (cfg->batch > CLUSTER_MAX_BATCH) return snprintf(why, why_len, "its batch is at most %d", CLUSTER_MAX_BATCH), 0;
    a->shared_bytes = cluster_shared_bytes();
    cudaCheck(cudaFuncSetAttribute(softmax_cluster_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)a->shared_bytes));
    cudaCheck(cudaFuncSetAttribute(softmax_cluster_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaLaunchAttribute attribute;
    cudaLaunchConfig_t config = cluster_config(a, &attribute, 0);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, softmax_cluster_kernel, &config) != cudaSuccess) {
        (void)cudaGetLastError();  // a cluster size this GPU does not place: none fits
        clusters = 0;
    }
    if (!clusters) return snprintf(why, why_len, "this GPU places no cluster of %d blocks", CLUSTER_BLOCKS), 0;
    a->blocks = CLUSTER_BLOCKS, a->products = 0, a->cluster = 1;
    return 1;
}

// With --variant persistent named, one error line and EXIT_CUDA; else one note a process, and 0 (07's graph runs)
static int persistent_unavailable(const MnistConfig *cfg, const char *why) {
    static int noted = 0;
    if (cfg->variant_given) {
        fprintf(stderr, "error: --variant persistent cannot run here: %s; --variant epoch-graph runs here\n", why);
        exit(EXIT_CUDA);
    }
    if (!noted++)
        fprintf(stderr, "note: the persistent kernel cannot run here: %s; stage 07's epoch graph runs instead\n", why);
    return 0;
}

// Tensor cores: the shortest pixel ranges (1, 2, 3, ... m16 products) with which every block has an SM of its own;
// 0 where none fits, or where this GPU or build has no tf32 tensor cores (why says so).
static int mma_layout(const MnistConfig *cfg, int sms, int max_shared, EpochArgs *a, char *why, size_t why_len) {
    int per_sm;
    a->products = cfg->precision == PRECISION_TF32 ? 1 : 2;
    if (!feature_available(FEATURE_TF32, (const void *)mma_epoch_kernel, why, why_len)) return 0;
    cudaCheck(cudaFuncSetAttribute(mma_epoch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_shared));
    for (a->range_tiles = 1; a->range_tiles <= PIXELS / 16; a->range_tiles++) {
        a->ranges = (PIXELS / 16 + a->range_tiles - 1) / a->range_tiles;
        a->blocks = (a->hidden + MMA_UNITS - 1) / MMA_UNITS * a->ranges;
        a->shared_bytes = mma_shared_bytes(a);
        if (a->blocks > sms || a->shared_bytes > (size_t)max_shared) continue;
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, mma_epoch_kernel, MMA_THREADS,
                                                                a->shared_bytes));
        if (per_sm > 0) return 1;
    }
    snprintf(why, why_len, "its tiles of %d units, with two steps' pixels a block, leave a block without an SM or "
             "its shared memory", MMA_UNITS);
    return 0;
}

// The launch in *a, or 0 where 07's graphs run (a note says why). With a hidden layer, tensor cores where they fit
// (stage 09); else stage 08's kernel: units a block, the fewest (1, 2, 4, ...) that fit.
static int persistent_layout(const MnistConfig *cfg, int steps, EpochArgs *a) {
    int hidden = cfg->n_layers == 2 ? cfg->sizes[1] : 0;
    if (cfg->n_layers > 2) return persistent_unavailable(cfg, "it holds at most one hidden layer");
    int device, cooperative, sms, max_shared, per_sm;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
    if (!cooperative) return persistent_unavailable(cfg, "this GPU has no cooperative launches");
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    max_shared = device_shared_per_block();  // CUDA_STAGES_CC lowers it as that GPU would
    cudaCheck(cudaFuncSetAttribute(mlp_epoch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_shared));
    a->hidden = hidden;
    a->steps = steps;
    a->batch = cfg->batch;
    a->lr = cfg->lr;
    char why[160];
    if (hidden && mma_layout(cfg, sms, max_shared, a, why, sizeof(why))) return 1;
    if (cfg->precision != PRECISION_FP32)
        return persistent_unavailable(cfg, "it trains in tf32 only on tensor cores, with a hidden layer");
    if (!hidden && cluster_layout(cfg, a, why, sizeof(why))) return 1;
    static int noted = 0;
    if (!noted++)
        fprintf(stderr, "note: %s, stage 08's kernel: %s\n",
                hidden ? "the first layer's products run on the CUDA cores" : "no cluster runs the epoch", why);
    a->products = 0;
    a->slice = hidden ? 1 : PIXEL_SLICE;
    for (;; a->slice *= 2) {
        a->blocks = ((hidden ? hidden : PIXELS) + a->slice - 1) / a->slice;
        a->shared_bytes = persistent_shared_bytes(a);
        if (a->shared_bytes > (size_t)max_shared)
            return persistent_unavailable(cfg, "a block's slice of the weights does not fit its shared memory");
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, mlp_epoch_kernel, PERSISTENT_THREADS,
                                                                a->shared_bytes));
        if (a->blocks <= sms * per_sm) return 1;
    }
}

// ----------------------------------------------------------------------------
// launchers

static unsigned int blocks_for(int64_t n) { return (unsigned int)((n + BLOCK_SIZE - 1) / BLOCK_SIZE); }

// bias_backward_sgd_kernel: a block of WARP_SIZE x WARPS_PER_BLOCK threads per WARP_SIZE columns
static unsigned int column_blocks(int dim) { return (unsigned int)((dim + WARP_SIZE - 1) / WARP_SIZE); }

// plans[l]: layer l's forward GEMM, bound to its parameters and activations (bias and ReLU in its epilogue)
static void mlp_forward(const MnistConfig *cfg, cublasLtHandle_t lt, const MatmulPlan *plans, cudaStream_t stream) {
    for (int l = 0; l < cfg->n_layers; l++) run_matmul(lt, &plans[l], stream);
}

// dact[l]: (rows, sizes[l]) for l >= 1, dact[n_layers] holds dlogits. Updates params in place, yet every
// gradient comes from the pre-update params, as in the reference: layer l's din (which needs W_l) runs before
// W_l's update, and the layers below l never read W_l. One stream runs launches in order: that is the guarantee.
// input_plans[l] (l >= 1) and weight_plans[l]: layer l's din and SGD GEMMs.
// The last launch, layer 0's bias update, also advances the device step counter (unless step is NULL).
static void mlp_backward_sgd(const MnistConfig *cfg, cublasLtHandle_t lt, const MatmulPlan *input_plans,
                             const MatmulPlan *weight_plans, float *params, float *const *dact, int *step, int rows,
                             cudaStream_t stream) {
    for (int l = cfg->n_layers - 1; l >= 0; l--) {
        int out_dim = cfg->sizes[l + 1];
        if (l > 0) run_matmul(lt, &input_plans[l], stream);  // the images need no gradient
        run_matmul(lt, &weight_plans[l], stream);
        bias_backward_sgd_kernel<<<column_blocks(out_dim), dim3(WARP_SIZE, WARPS_PER_BLOCK), 0, stream>>>(
            params + mnist_bias_offset(cfg, l), dact[l + 1], cfg->lr, rows, out_dim, l == 0 ? step : NULL);
        launchCheck();
    }
}

// Everything a training step launches on, fixed for the whole run: a graph replays its kernels with the very
// arguments they were captured with.
typedef struct {
    const MnistConfig *cfg;
    cublasLtHandle_t lt;
    cudnnHandle_t cudnn;
    cudnnTensorDescriptor_t logits_desc;
    const MatmulPlan *forward_plans, *input_plans, *weight_plans;
    float *params, *const *act, *const *dact;
    uint8_t *labels;
    const float *train_images;
    const uint8_t *train_labels;
    const int32_t *order;
    float *loss_sum;  // (epochs, steps)
    int *step;        // (1,) the device step counter
    int n_train, steps;
} TrainStep;

// One training step on stream, every launch the same for every step (the step comes from t->step). Called in
// the capture, or directly with --breakdown, whose phase timers synchronize (not allowed while capturing).
static void train_step(const TrainStep *t, TrainClock *clock, cudaStream_t stream) {
    const MnistConfig *cfg = t->cfg;
    int n_layers = cfg->n_layers, batch = cfg->batch, pixels = cfg->sizes[0], classes = cfg->sizes[n_layers];
    const float one = 1.0f, zero = 0.0f;  // cuDNN's alpha and beta, read when the launch is made

    // gather the batch's rows on the device (reported as h2d: it replaces the per-batch copy)
    TIMED_PHASE(clock, PHASE_H2D, stream) {
        gather_batch_kernel<<<blocks_for((int64_t)batch * pixels), BLOCK_SIZE, 0, stream>>>(
            t->act[0], t->labels, t->train_images, t->train_labels, t->order, t->step, t->n_train, t->steps, batch,
            pixels);
        launchCheck();
    }

    TIMED_PHASE(clock, PHASE_FORWARD, stream) mlp_forward(cfg, t->lt, t->forward_plans, stream);

    TIMED_PHASE(clock, PHASE_LOSS, stream) {
        cudnnCheck(cudnnSoftmaxForward(t->cudnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &one,
                                       t->logits_desc, t->act[n_layers], &zero, t->logits_desc, t->dact[n_layers]));
        softmax_cross_entropy_kernel<<<blocks_for((int64_t)batch * WARP_SIZE), BLOCK_SIZE, 0, stream>>>(
            t->dact[n_layers], t->loss_sum, NULL, t->act[n_layers], t->labels, batch, classes, t->step);
        launchCheck();
    }

    // the update is fused into the backward pass: its time is reported as backward
    TIMED_PHASE(clock, PHASE_BACKWARD, stream)
        mlp_backward_sgd(cfg, t->lt, t->input_plans, t->weight_plans, t->params, t->dact, t->step, batch, stream);
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
    uint8_t *d_pixels;                        // (n_train + n_test, pixels) the images' bytes, uploaded once
    float *d_train_images;                    // (n_train, pixels) the whole training set, scaled from d_pixels
    uint8_t *d_train_labels;                  // (n_train,)
    int32_t *d_order;                         // (epochs, n_train) data->batch_order
    float *d_act[MNIST_MAX_LAYERS + 1];       // [l]: (batch, sizes[l]); [0] the batch images, [n_layers] the logits
    float *d_dact[MNIST_MAX_LAYERS + 1];      // [l], l >= 1: (batch, sizes[l]) dloss/dact[l]; [n_layers] dlogits
    uint8_t *d_relu_mask[MNIST_MAX_LAYERS];   // [l], 1 <= l < n_layers: (batch, relu_mask_ld(sizes[l]) / 8) bytes,
                                              // bit i of column b: act[l][b][i] > 0 (RELU_AUX_BIAS -> DRELU)
    uint8_t *d_labels;                        // (batch,)
    float *d_test_act[MNIST_MAX_LAYERS + 1];  // [l]: (n_test, sizes[l]); [0] the test images
    uint8_t *d_test_labels;                   // (n_test,)
    float *d_loss_sum;                        // (epochs, steps) summed cross-entropy of every batch
    float *d_test_loss_sum;                   // (epochs,) summed test cross-entropy after each epoch
    int *d_test_correct;                      // (epochs,) correct test predictions after each epoch
    int *d_step;                              // (1,) the next training step, epoch * steps + step: see train_step
    EpochArgs persistent = {};  // the persistent kernel's launch, where it applies
    int persistent_blocks =
        cfg->variant == VARIANT_PERSISTENT && persistent_layout(cfg, steps, &persistent) ? persistent.blocks : 0;
    float *d_partial = NULL;  // persistent: (batch, classes, blocks) each block's share of every logit
    float *d_zpart = NULL, *d_values = NULL;  // tensor cores: (ranges, batch, hidden), (batch, hidden)
    void *d_workspace, *d_eval_workspace;  // (WORKSPACE_BYTES,) each: cuBLASLt scratch, one per stream
    // zeroed: the warm-up before the capture reads them before the upload or a gather has written them
    d_params = (float *)device_zeros(n_params * sizeof(float));
    cudaCheck(cudaMalloc(&d_snapshot, n_params * sizeof(float)));
    cudaCheck(cudaMalloc(&d_pixels, ((size_t)n_train + n_test) * pixels));
    d_train_images = NULL;  // the persistent kernel reads the bytes: no floats
    if (!persistent_blocks) cudaCheck(cudaMalloc(&d_train_images, (size_t)n_train * pixels * sizeof(float)));
    cudaCheck(cudaMalloc(&d_train_labels, n_train));
    cudaCheck(cudaMalloc(&d_order, (size_t)cfg->epochs * n_train * sizeof(int32_t)));
    d_dact[0] = NULL;
    for (int l = 0; l <= n_layers; l++) {
        d_act[l] = (float *)device_zeros((size_t)batch * cfg->sizes[l] * sizeof(float));
        if (l > 0) cudaCheck(cudaMalloc(&d_dact[l], (size_t)batch * cfg->sizes[l] * sizeof(float)));
        cudaCheck(cudaMalloc(&d_test_act[l], (size_t)n_test * cfg->sizes[l] * sizeof(float)));
        if (l > 0 && l < n_layers) cudaCheck(cudaMalloc(&d_relu_mask[l], relu_mask_ld(cfg->sizes[l]) / 8 * batch));
    }
    cudaCheck(cudaMalloc(&d_workspace, WORKSPACE_BYTES));
    cudaCheck(cudaMalloc(&d_eval_workspace, WORKSPACE_BYTES));
    cudaCheck(cudaMalloc(&d_labels, batch));
    cudaCheck(cudaMalloc(&d_test_labels, n_test));
    cudaCheck(cudaMalloc(&d_loss_sum, n_steps * sizeof(float)));
    cudaCheck(cudaMalloc(&d_test_loss_sum, cfg->epochs * sizeof(float)));
    cudaCheck(cudaMalloc(&d_test_correct, cfg->epochs * sizeof(int)));
    cudaCheck(cudaMalloc(&d_step, sizeof(int)));
    if (persistent_blocks && !persistent.products)
        cudaCheck(cudaMalloc(&d_partial, (size_t)batch * persistent_blocks * classes * sizeof(float)));
    if (persistent.products) {
        cudaCheck(cudaMalloc(&d_zpart, (size_t)persistent.ranges * batch * cfg->sizes[1] * sizeof(float)));
        cudaCheck(cudaMalloc(&d_values, (size_t)batch * cfg->sizes[1] * sizeof(float)));
    }
    int *test_correct = (int *)host_malloc(cfg->epochs * sizeof(int), "the test results");  // (epochs,)
    // Non-blocking streams: the legacy default stream would serialize with all three.
    cudaStream_t stream, copy_stream, eval_stream;  // training; uploads; evaluation
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&eval_stream, cudaStreamNonBlocking));
    cudaEvent_t upload_done, snapshot_ready, eval_done;  // ordering only: no timing
    cudaCheck(cudaEventCreateWithFlags(&upload_done, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&snapshot_ready, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&eval_done, cudaEventDisableTiming));
    StagingRing *staging = staging_create(STAGING_SLOTS, STAGING_SLOT_BYTES, 0);
    cudnnHandle_t cudnn;                  // the softmax, on the training stream
    cudnnTensorDescriptor_t logits_desc;  // (batch, classes, 1, 1): softmax over each row (INSTANCE mode)
    cudnnCheck(cudnnCreate(&cudnn));
    cudnnCheck(cudnnSetStream(cudnn, stream));
    cudnnCheck(cudnnCreateTensorDescriptor(&logits_desc));
    cudnnCheck(cudnnSetTensor4dDescriptor(logits_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch, classes, 1, 1));
    cublasLtHandle_t lt;  // stream-free: each matmul names its stream
    cublasCheck(cublasLtCreate(&lt));
    // One plan per GEMM of a step and of an evaluation, bound to its buffers.
    MatmulPlan forward_plans[MNIST_MAX_LAYERS];  // [l]: act[l+1] = act[l] @ W_l + b_l (+ ReLU, mask out)
    MatmulPlan eval_plans[MNIST_MAX_LAYERS];     // [l]: the same on the test set, from the snapshot, no mask
    MatmulPlan input_plans[MNIST_MAX_LAYERS];    // [l], l >= 1: dact[l] = (dact[l+1] @ W_l^T) * ReLU' (mask in)
    MatmulPlan weight_plans[MNIST_MAX_LAYERS];   // [l]: W_l -= lr * act[l]^T @ dact[l+1]
    for (int l = 0; l < n_layers; l++) {
        int in_dim = cfg->sizes[l], out_dim = cfg->sizes[l + 1], hidden = l < n_layers - 1;
        int64_t w = mnist_weight_offset(cfg, l), b = mnist_bias_offset(cfg, l);
        plan_matmul(&forward_plans[l], lt, cfg->precision, 0, 0, out_dim, batch, in_dim, d_params + w, d_act[l],
                    d_act[l + 1], 1.0f, 0.0f, hidden ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_BIAS,
                    d_params + b, hidden ? d_relu_mask[l + 1] : NULL, d_workspace);
        plan_matmul(&eval_plans[l], lt, cfg->precision, 0, 0, out_dim, n_test, in_dim, d_snapshot + w, d_test_act[l],
                    d_test_act[l + 1], 1.0f, 0.0f, hidden ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS,
                    d_snapshot + b, NULL, d_eval_workspace);
        if (l > 0)
            plan_matmul(&input_plans[l], lt, cfg->precision, 1, 0, in_dim, batch, out_dim, d_params + w,
                        d_dact[l + 1], d_dact[l], 1.0f, 0.0f, CUBLASLT_EPILOGUE_DRELU, NULL, d_relu_mask[l],
                        d_workspace);
        plan_matmul(&weight_plans[l], lt, cfg->precision, 0, 1, out_dim, in_dim, batch, d_dact[l + 1], d_act[l],
                    d_params + w, -cfg->lr, 1.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, d_workspace);
    }
    TrainClock clock;
    train_clock_init(&clock, cfg->epochs, cfg->breakdown);
    TrainStep step_args = {cfg, lt, cudnn, logits_desc, forward_plans, input_plans, weight_plans, d_params, d_act,
                           d_dact, d_labels, d_train_images, d_train_labels, d_order, d_loss_sum, d_step, n_train,
                           steps};  // in TrainStep's order
    // The graph: a whole epoch of steps, or one step, captured (recorded, not run) and instantiated here,
    // untimed, and uploaded so that its first launch costs no more than the others.
    int use_graph = !cfg->breakdown && !persistent_blocks, epoch_graph = cfg->variant != VARIANT_STEP_GRAPH;
    cudaGraphExec_t graph_exec = NULL;
    if (use_graph) {
        // A library may set itself up on its first call (cuDNN loads its ops library, cuBLASLt its kernels),
        // which a capture would refuse: the step's library calls run once first, eagerly, on buffers that the
        // upload (the parameters) or every step (the rest) overwrites before use.
        const float one = 1.0f, zero = 0.0f;
        mlp_forward(cfg, lt, forward_plans, stream);
        cudnnCheck(cudnnSoftmaxForward(cudnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &one, logits_desc,
                                       d_act[n_layers], &zero, logits_desc, d_dact[n_layers]));
        mlp_backward_sgd(cfg, lt, input_plans, weight_plans, d_params, d_dact, NULL, batch, stream);
        cudaCheck(cudaStreamSynchronize(stream));

        cudaGraph_t graph;
        cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        for (int s = 0; s < (epoch_graph ? steps : 1); s++) train_step(&step_args, &clock, stream);
        cudaCheck(cudaStreamEndCapture(stream, &graph));
        cudaCheck(cudaGraphInstantiate(&graph_exec, graph, 0));
        cudaCheck(cudaGraphDestroy(graph));
        cudaCheck(cudaGraphUpload(graph_exec, stream));
        cudaCheck(cudaStreamSynchronize(stream));
    }
    out->timing.setup_ms = host_ms() - setup_start_ms;

    // e2e starts with the data in host memory: everything goes up once, on the copy stream, and the
    // training stream waits for it by event
    train_clock_e2e_start(&clock, stream);
    TIMED_PHASE(&clock, PHASE_H2D, stream) {
        cudaCheck(cudaStreamWaitEvent(copy_stream, clock.e2e_start, 0));  // the upload is inside e2e
        staging_upload(staging, d_params, data->init_params, n_params * sizeof(float), copy_stream);
        staging_upload(staging, d_pixels, data->train_pixels, (size_t)n_train * pixels, copy_stream);
        staging_upload(staging, d_train_labels, data->train_labels, n_train, copy_stream);
        staging_upload(staging, d_order, data->batch_order, (size_t)cfg->epochs * n_train * sizeof(int32_t),
                       copy_stream);
        staging_upload(staging, d_pixels + (size_t)n_train * pixels, data->test_pixels, (size_t)n_test * pixels,
                       copy_stream);
        staging_upload(staging, d_test_labels, data->test_labels, n_test, copy_stream);
        int64_t train_values = (int64_t)n_train * pixels, test_values = (int64_t)n_test * pixels;
        if (!persistent_blocks) {  // the persistent kernel reads the bytes
            scale_pixels_kernel<<<blocks_for(train_values), BLOCK_SIZE, 0, copy_stream>>>(d_train_images, d_pixels,
                                                                                           train_values);
            launchCheck();
        }
        scale_pixels_kernel<<<blocks_for(test_values), BLOCK_SIZE, 0, copy_stream>>>(
            d_test_act[0], d_pixels + train_values, test_values);
        launchCheck();
        cudaCheck(cudaEventRecord(upload_done, copy_stream));
        cudaCheck(cudaMemsetAsync(d_loss_sum, 0, n_steps * sizeof(float), stream));  // the losses are summed
        cudaCheck(cudaMemsetAsync(d_test_loss_sum, 0, cfg->epochs * sizeof(float), stream));
        cudaCheck(cudaMemsetAsync(d_test_correct, 0, cfg->epochs * sizeof(int), stream));
        cudaCheck(cudaMemsetAsync(d_step, 0, sizeof(int), stream));
        cudaCheck(cudaStreamWaitEvent(stream, upload_done, 0));
    }
    train_clock_loop_start(&clock, stream);

    // Only enqueueing from here to the end of the loop: the host runs ahead of the GPU, never waits for it.
    for (int epoch = 0; epoch < cfg->epochs; epoch++) {
        if (persistent_blocks) {
            // the whole epoch in one launch (with --breakdown, one phase: its steps have no host-visible seams)
            EpochArgs args = persistent;
            args.params = d_params, args.partial = d_partial, args.dlogits = d_dact[n_layers];
            args.zpart = d_zpart, args.values = d_values;
            args.pixels = d_pixels, args.labels = d_train_labels;
            args.loss_sum = d_loss_sum + (int64_t)epoch * steps, args.rows = d_order + (int64_t)epoch * n_train;
            void *kernel_args[] = {&args};
            const void *kernel = persistent.products ? (const void *)mma_epoch_kernel : (const void *)mlp_epoch_kernel;
            cudaLaunchAttribute attribute;
            cudaLaunchConfig_t config = cluster_config(&args, &attribute, stream);
            TIMED_PHASE(&clock, PHASE_FORWARD, stream)
                if (persistent.cluster) cudaCheck(cudaLaunchKernelEx(&config, softmax_cluster_kernel, args));
                else cudaCheck(cudaLaunchCooperativeKernel(kernel, persistent_blocks,
                                                           persistent.products ? MMA_THREADS : PERSISTENT_THREADS,
                                                           kernel_args, persistent.shared_bytes, stream));
        } else if (!use_graph) {
            for (int step = 0; step < steps; step++) train_step(&step_args, &clock, stream);
        } else {
            // one launch for the epoch, or one per step; either way the steps read their batch from d_step
            for (int replay = 0; replay < (epoch_graph ? 1 : steps); replay++)
                cudaCheck(cudaGraphLaunch(graph_exec, stream));
        }

        // test loss and accuracy of this epoch's parameters, on the eval stream while the next epoch
        // trains. The evaluation reads a snapshot, since training updates d_params in place; the snapshot
        // is taken once the previous evaluation is done reading it (eval_done: a no-op the first time).
        cudaCheck(cudaStreamWaitEvent(stream, eval_done, 0));
        cudaCheck(cudaMemcpyAsync(d_snapshot, d_params, n_params * sizeof(float), cudaMemcpyDeviceToDevice, stream));
        cudaCheck(cudaEventRecord(snapshot_ready, stream));
        cudaCheck(cudaStreamWaitEvent(eval_stream, snapshot_ready, 0));
        TIMED_PHASE(&clock, PHASE_EVAL, eval_stream) {
            mlp_forward(cfg, lt, eval_plans, eval_stream);
            softmax_cross_entropy_kernel<<<blocks_for((int64_t)n_test * WARP_SIZE), BLOCK_SIZE, 0, eval_stream>>>(
                NULL, d_test_loss_sum + epoch, d_test_correct + epoch, d_test_act[n_layers], d_test_labels, n_test,
                classes, NULL);
            launchCheck();
        }
        cudaCheck(cudaEventRecord(eval_done, eval_stream));

        // the loop (and its last epoch) ends when the last evaluation has, so loop_ms covers all the work
        if (epoch == cfg->epochs - 1) cudaCheck(cudaStreamWaitEvent(stream, eval_done, 0));
        train_clock_epoch_end(&clock, epoch, stream);
    }

    // one copy back of everything the loop produced (D2H into pageable memory: each returns when done)
    TIMED_PHASE(&clock, PHASE_D2H, stream) {
        cudaCheck(cudaMemcpyAsync(out->params, d_params, n_params * sizeof(float), cudaMemcpyDeviceToHost, stream));
        cudaCheck(cudaMemcpyAsync(out->step_loss, d_loss_sum, n_steps * sizeof(float), cudaMemcpyDeviceToHost, stream));
        cudaCheck(cudaMemcpyAsync(out->test_loss, d_test_loss_sum, cfg->epochs * sizeof(float), cudaMemcpyDeviceToHost,
                                  stream));
        cudaCheck(
            cudaMemcpyAsync(test_correct, d_test_correct, cfg->epochs * sizeof(int), cudaMemcpyDeviceToHost, stream));
    }
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
    cudaCheck(cudaFree(d_pixels));
    cudaCheck(cudaFree(d_train_images));
    cudaCheck(cudaFree(d_train_labels));
    cudaCheck(cudaFree(d_order));
    for (int l = 0; l <= n_layers; l++) {
        cudaCheck(cudaFree(d_act[l]));
        if (l > 0) cudaCheck(cudaFree(d_dact[l]));
        cudaCheck(cudaFree(d_test_act[l]));
        if (l > 0 && l < n_layers) cudaCheck(cudaFree(d_relu_mask[l]));
    }
    cudaCheck(cudaFree(d_workspace));
    cudaCheck(cudaFree(d_eval_workspace));
    for (int l = 0; l < n_layers; l++) {
        destroy_matmul(&forward_plans[l]);
        destroy_matmul(&eval_plans[l]);
        if (l > 0) destroy_matmul(&input_plans[l]);
        destroy_matmul(&weight_plans[l]);
    }
    cublasCheck(cublasLtDestroy(lt));
    cudnnCheck(cudnnDestroyTensorDescriptor(logits_desc));
    cudnnCheck(cudnnDestroy(cudnn));
    cudaCheck(cudaFree(d_labels));
    cudaCheck(cudaFree(d_test_labels));
    cudaCheck(cudaFree(d_loss_sum));
    cudaCheck(cudaFree(d_test_loss_sum));
    cudaCheck(cudaFree(d_test_correct));
    cudaCheck(cudaFree(d_step));
    cudaCheck(cudaFree(d_partial));
    cudaCheck(cudaFree(d_zpart));
    cudaCheck(cudaFree(d_values));
    if (graph_exec) cudaCheck(cudaGraphExecDestroy(graph_exec));
    free(test_correct);
    cudaCheck(cudaStreamDestroy(stream));
    cudaCheck(cudaStreamDestroy(copy_stream));
    cudaCheck(cudaStreamDestroy(eval_stream));
    cudaCheck(cudaEventDestroy(upload_done));
    cudaCheck(cudaEventDestroy(snapshot_ready));
    cudaCheck(cudaEventDestroy(eval_done));
    staging_destroy(staging);
    return 0;
}
