// Stage 08, MNIST: stage 07's trainer plus a persistent kernel. --variant persistent (default) runs a whole epoch
// of steps in one launch: each block keeps its slice of the weights in shared memory for the whole epoch, copies
// its batch from the resident pixel bytes itself, and the steps meet at cluster and grid barriers instead of
// kernel boundaries. It covers fp32 with at most one hidden layer that fits the grid (persistent_layout); every
// other configuration, and --variant epoch-graph or step-graph, runs stage 07's graphs.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_pipeline_primitives.h>  // __pipeline_memcpy_async: copies into shared memory that run on their own
#include <cuda_runtime.h>
#include <cublasLt.h>  // before check.h, which defines cublasCheck and cudnnCheck only for headers included
#include <cudnn.h>

#include "check.h"
#include "gates.h"  // stage 08: the persistent kernel needs clusters, on the GPU and in this build
#include "host.h"
#include "staging.h"
#include "lt_matmul.h"
#include "persistent.cuh"  // stage 08: cluster launches, grid and cluster barriers
#include "timing.h"
#include "trainer.h"

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
// the persistent epoch: one launch, every step of the epoch inside it
//
// The network is 784 -> [hidden] -> 10. A step's work splits by the last layer's inputs, its features: the pixels
// without a hidden layer, the hidden units with one. Block g owns features [g * slice, g * slice + slice) and every
// weight that touches them, in shared memory for the whole epoch. The blocks come in thread-block clusters, whose
// blocks read each other's shared memory and meet at a hardware barrier. A step (README, "What changes"):
//     A  each block: its features' values and its share of every logit -- cluster barrier
//     B  block r: its rows' logits, the cluster's shares summed block by block (with several clusters, then the
//        clusters' sums, after a grid barrier); softmax, loss, dlogits -- cluster barrier
//     C  each block: the batch's dlogits from the cluster, the gradients of its weights, applied in place
// The next step's batch is copied in during the step. Weights' sums run in a fixed order: they repeat bit for bit.

#define PERSISTENT_THREADS 512
#define PERSISTENT_WARPS (PERSISTENT_THREADS / WARP_SIZE)
#define ROW_THREADS 4                                            // phase A: the threads that share a row
#define PERSISTENT_MAX_BATCH (PERSISTENT_THREADS / ROW_THREADS)  // phase A: 4 threads a row, one pass
#define PERSISTENT_MAX_UNITS 8      // hidden units a block owns, at most (mlp_epoch_kernel's UNITS: 1, 2, 4 or 8)
#define GRADIENT_GROUPS 8           // W_last's gradient: partial sums per weight, at most, added in a fixed order
#define PERSISTENT_MAX_CLUSTER 16   // blocks a cluster, at most (16 is past the portable 8: asked for)
#define PERSISTENT_MIN_CLUSTER 8    // so that a block's rows of the batch fit its warps (128 / 8 = 16)
#define PERSISTENT_MAX_CLUSTERS 16  // clusters a grid, at most
#define PIXELS 784
#define WORDS (PIXELS / 4)          // a row's pixels as 4-byte words
#define QUARTER_WORDS (WORDS / ROW_THREADS)  // 49: phase A's words per thread with a hidden layer
#define CLASSES 10
#define CLASSES_PADDED 12           // a row of 10 classes padded to 3 float4 loads

typedef struct {
    float *params;          // packed as trainer.h: each block reads its slices at the start, writes them at the end
    float *partial;         // (2, clusters, batch, CLASSES) each cluster's sums of the logits, by step parity
    float *loss_sum;        // (steps,) this epoch's summed cross-entropy per step (zeroed)
    unsigned int *arrived;  // (1,) the grid barrier's counter (zeroed)
    const uint8_t *pixels;  // (n_train, PIXELS) the training images' bytes
    const uint8_t *labels;  // (n_train,)
    const int32_t *rows;    // (steps * batch,) this epoch's batch order
    int hidden, slice, steps, batch, cluster_size, buffers;  // buffers: 2 when the next batch is copied early
    float lr;
} EpochArgs;

// Where each region of the kernel's dynamic shared memory starts, in floats (each a multiple of 16 bytes), in
// mlp_epoch_kernel's order; bytes: the whole.
typedef struct {
    int share, my_logit, dlogit, w_last, b_last, value, dvalue, scratch, pixel_value, batch_row, labels, b0, w0, pixels;
    size_t bytes;
} SharedLayout;

// Rows the kernel's loops run over: the batch, padded to 8 with rows of zeros (no bounds checks in phase C).
static __host__ __device__ int padded_rows(int batch) { return round_up(batch, 8); }
static __host__ __device__ int persistent_row_bytes(const EpochArgs *a) { return a->hidden ? PIXELS : a->slice; }
static __host__ __device__ int persistent_rows_per_block(const EpochArgs *a) {
    return (a->batch + a->cluster_size - 1) / a->cluster_size;
}

static __host__ __device__ SharedLayout persistent_shared_layout(const EpochArgs *a) {
    int batch = a->batch, slice = a->slice, rows = padded_rows(batch), rows_per_block = persistent_rows_per_block(a);
    SharedLayout s;
    int at = 0;
    s.share = at, at += round_up(batch * CLASSES, 4);                   // (batch, CLASSES)
    s.my_logit = at, at += round_up(rows_per_block * CLASSES, 4);       // (rows_per_block, CLASSES)
    s.dlogit = at, at += batch * CLASSES_PADDED;                        // (batch, CLASSES_PADDED)
    s.w_last = at, at += slice * CLASSES_PADDED;                        // (slice, CLASSES_PADDED)
    s.b_last = at, at += CLASSES_PADDED;                                // (CLASSES_PADDED,)
    s.value = at, at += round_up(batch * slice, 4);                     // (batch, slice)
    s.dvalue = at, at += a->hidden ? rows * slice : 0;                  // (rows, slice)
    s.scratch = at, at += GRADIENT_GROUPS * slice * CLASSES_PADDED;     // (GRADIENT_GROUPS, slice, CLASSES_PADDED)
    s.pixel_value = at, at += 256;                                      // (256,)
    s.batch_row = at, at += 2 * round_up(batch, 4);                     // int32 (2, batch)
    s.labels = at, at += round_up(a->steps * rows_per_block, 16) / 4;  // uint8 (steps, rows_per_block)
    s.b0 = at, at += a->hidden ? round_up(slice, 4) : 0;               // (slice,)
    s.w0 = at, at += a->hidden ? slice * PIXELS : 0;                    // (slice, PIXELS)
    s.pixels = at;                                                      // uint8 (buffers, rows, row_bytes)
    s.bytes = (size_t)at * sizeof(float) + (size_t)a->buffers * rows * persistent_row_bytes(a);
    return s;
}

// row[j] for j < CLASSES from a CLASSES_PADDED row in shared memory: three 16-byte loads.
__device__ __forceinline__ void load_classes(float *out, const float *row) {
    float4 a = *(const float4 *)row, b = *(const float4 *)(row + 4), c = *(const float4 *)(row + 8);
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x;
    out[5] = b.y, out[6] = b.z, out[7] = b.w, out[8] = c.x, out[9] = c.y;
}

// Starts copying a batch's pixels into shared memory x: my bytes of each row (all 784 with a hidden layer, my
// slice without), asynchronously, waited for with __pipeline_wait_prior(0). batch_row: the batch's rows of the
// training set, in shared memory. owned: my features (a multiple of 4).
__device__ void copy_batch_pixels(const EpochArgs *a, int owned, uint8_t *x, const int32_t *batch_row) {
    // 4 threads a row; 16-byte copies of whole rows with a hidden layer, 4-byte copies of my pixels without (my
    // first pixel and PIXELS are multiples of 4)
    int i = threadIdx.x / ROW_THREADS, c0 = threadIdx.x % ROW_THREADS, row_bytes = persistent_row_bytes(a);
    if (i < a->batch) {
        const uint8_t *src = a->pixels + (int64_t)batch_row[i] * PIXELS;
        uint8_t *dst = x + i * row_bytes;
        if (a->hidden) {
            for (int c = c0; c < PIXELS / 16; c += ROW_THREADS) __pipeline_memcpy_async(dst + 16 * c, src + 16 * c, 16);
        } else {
            src += blockIdx.x * a->slice;
            for (int c = c0; c < owned / 4; c += ROW_THREADS) __pipeline_memcpy_async(dst + 4 * c, src + 4 * c, 4);
        }
    }
    __pipeline_commit();
}

// One epoch of SGD for 784 -> hidden -> 10 (hidden 0: 784 -> 10), as train_step's graph does it, in one launch of
// clusters of a.cluster_size blocks of PERSISTENT_THREADS threads, one block an SM. UNITS: the hidden units a block
// owns (a.slice with a hidden layer), so that their sums stay in registers. Dynamic shared memory:
// persistent_shared_layout(&a).bytes. Built for every architecture, launched only where the GPU and the code this
// build carries have clusters (persistent_layout; common/gates.h).
template <int UNITS>
__global__ void __launch_bounds__(PERSISTENT_THREADS, 1) mlp_epoch_kernel(EpochArgs a) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
    extern __shared__ __align__(16) float shared[];
    int hidden = a.hidden, slice = a.slice, batch = a.batch, cluster_size = a.cluster_size;
    int features = hidden ? hidden : PIXELS, first = blockIdx.x * slice;
    int owned = max(0, min(slice, features - first));
    int rank = (int)__clusterRelativeBlockRank(), cluster = (int)__clusterIdx().x;
    int clusters = gridDim.x / cluster_size, rows = padded_rows(batch);
    int rows_per_block = persistent_rows_per_block(&a), row0 = rank * rows_per_block;
    int my_rows = max(0, min(rows_per_block, batch - row0));
    float *w_last = a.params + (hidden ? (int64_t)PIXELS * hidden + hidden : 0);  // (features, CLASSES)
    float *b_last = w_last + (int64_t)features * CLASSES;                         // (CLASSES,)
    float *w0 = a.params, *b0 = a.params + (int64_t)PIXELS * hidden;              // hidden: (PIXELS, hidden), (hidden,)
    SharedLayout layout = persistent_shared_layout(&a);
    float *share = shared + layout.share;        // my share of every logit: the cluster reads it
    float *my_logit = shared + layout.my_logit;  // my rows' logits, then their dlogits: the cluster reads them
    float *dlogit = shared + layout.dlogit;      // this step's dlogits, every row
    float *my_w_last = shared + layout.w_last;   // W_last's rows I own
    float *my_b_last = shared + layout.b_last;   // my copy of b_last
    float *value = shared + layout.value;        // my features' values for the batch
    float *dvalue = shared + layout.dvalue;      // hidden: dloss/dvalue, rows past the batch 0
    float *scratch = shared + layout.scratch;    // W_last's gradient, partial sums
    float *pixel_value = shared + layout.pixel_value;  // (256,) mnist_pixel_value of every byte
    int32_t *batch_row = (int32_t *)(shared + layout.batch_row);  // each step's rows, by step parity
    uint8_t *my_labels = (uint8_t *)(shared + layout.labels);     // [step][r]: the label of my row r of step
    float *my_b0 = shared + layout.b0, *my_w0 = shared + layout.w0;  // hidden: my units' b0 and W0 columns
    uint8_t *pixels = (uint8_t *)(shared + layout.pixels);          // rows past the batch 0
    int row_bytes = persistent_row_bytes(&a), tid = threadIdx.x, warp = tid / WARP_SIZE, lane = tid % WARP_SIZE;
    float lr = a.lr, lr_255 = a.lr / 255.0f;

    // my weights, my rows' labels for the whole epoch, step 0's rows; zeros where loops read past the batch
    for (int v = tid; v < 256; v += PERSISTENT_THREADS) pixel_value[v] = mnist_pixel_value((uint8_t)v);
    for (int e = tid; e < slice * CLASSES_PADDED; e += PERSISTENT_THREADS) {
        int f = e / CLASSES_PADDED, j = e % CLASSES_PADDED;
        my_w_last[e] = f < owned && j < CLASSES ? w_last[(int64_t)(first + f) * CLASSES + j] : 0.0f;
    }
    for (int j = tid; j < CLASSES_PADDED; j += PERSISTENT_THREADS) my_b_last[j] = j < CLASSES ? b_last[j] : 0.0f;
    for (int e = tid; e < batch * CLASSES_PADDED; e += PERSISTENT_THREADS) dlogit[e] = 0.0f;
    if (hidden) {
        for (int f = tid; f < slice; f += PERSISTENT_THREADS) my_b0[f] = f < owned ? b0[first + f] : 0.0f;
        for (int e = tid; e < slice * PIXELS; e += PERSISTENT_THREADS) {
            int f = e / PIXELS, k = e % PIXELS;
            my_w0[e] = f < owned ? w0[(int64_t)k * hidden + first + f] : 0.0f;
        }
        for (int e = tid; e < rows * slice; e += PERSISTENT_THREADS) dvalue[e] = 0.0f;
    }
    for (int e = tid; e < a.buffers * rows * row_bytes / 4; e += PERSISTENT_THREADS) ((uint32_t *)pixels)[e] = 0;
    for (int e = tid; e < a.steps * rows_per_block; e += PERSISTENT_THREADS) {
        int step = e / rows_per_block, r = e % rows_per_block;
        my_labels[e] = r < my_rows ? a.labels[a.rows[(int64_t)step * batch + row0 + r]] : 0;
    }
    for (int i = tid; i < batch; i += PERSISTENT_THREADS) batch_row[i] = a.rows[i];
    __syncthreads();
    copy_batch_pixels(&a, owned, pixels, batch_row);

    unsigned int barriers = 0;
    for (int step = 0; step < a.steps; step++) {
        int parity = step & 1, next = parity ^ 1, more = step + 1 < a.steps;
        uint8_t *x = pixels + (a.buffers == 2 ? parity : 0) * rows * row_bytes;  // (rows, row_bytes)
        int32_t *next_rows = batch_row + next * round_up(batch, 4);
        __pipeline_wait_prior(0);  // this step's pixels
        __syncthreads();
        if (more)  // the next step's rows, waited for after phase A
            for (int i = tid; i < batch; i += PERSISTENT_THREADS)
                __pipeline_memcpy_async(next_rows + i, a.rows + (int64_t)(step + 1) * batch + i, 4);
        __pipeline_commit();

        // A: my features' values and my share of every logit, 4 threads a row
        int i = tid / ROW_THREADS, q = tid % ROW_THREADS;
        float logit[CLASSES];
        for (int j = 0; j < CLASSES; j++) logit[j] = 0.0f;
        if (hidden) {
            // my units over a quarter of the row's words each (even and odd words in separate sums, so that
            // two chains of multiply-adds run at once), then the 4 quarters added
            float sum[UNITS], sum_odd[UNITS];
            for (int f = 0; f < UNITS; f++) sum[f] = sum_odd[f] = 0.0f;
            if (i < batch) {
                const uint32_t *row_words = (const uint32_t *)(x + i * PIXELS) + q * QUARTER_WORDS;
                const float *w0_words = my_w0 + 4 * q * QUARTER_WORDS;
                for (int k = 0; k < QUARTER_WORDS; k += 2) {
                    uint32_t even = row_words[k], odd = k + 1 < QUARTER_WORDS ? row_words[k + 1] : 0u;
                    for (int f = 0; f < UNITS; f++) {
                        float4 w = *(const float4 *)(w0_words + f * PIXELS + 4 * k);
                        sum[f] = fmaf(byte_value(even, 3), w.w, fmaf(byte_value(even, 2), w.z,
                                 fmaf(byte_value(even, 1), w.y, fmaf(byte_value(even, 0), w.x, sum[f]))));
                        if (k + 1 < QUARTER_WORDS) {
                            float4 v = *(const float4 *)(w0_words + f * PIXELS + 4 * (k + 1));
                            sum_odd[f] = fmaf(byte_value(odd, 3), v.w, fmaf(byte_value(odd, 2), v.z,
                                         fmaf(byte_value(odd, 1), v.y, fmaf(byte_value(odd, 0), v.x, sum_odd[f]))));
                        }
                    }
                }
            }
            for (int f = 0; f < UNITS; f++) {
                float z = group_sum(sum[f] + sum_odd[f], ROW_THREADS) / 255.0f + my_b0[f];
                if (q == 0 && i < batch) value[i * UNITS + f] = f < owned ? fmaxf(z, 0.0f) : 0.0f;
            }
            __syncwarp();  // a row's 4 threads are in one warp
            if (i < batch) {
                for (int f = q; f < UNITS; f += ROW_THREADS) {
                    float v = value[i * UNITS + f], w[CLASSES];
                    load_classes(w, my_w_last + f * CLASSES_PADDED);
                    for (int j = 0; j < CLASSES; j++) logit[j] = fmaf(v, w[j], logit[j]);
                }
            }
        } else if (i < batch) {  // my pixels, every 4th of them each
            for (int f = q; f < slice; f += ROW_THREADS) {
                float v = f < owned ? pixel_value[x[i * row_bytes + f]] : 0.0f, w[CLASSES];
                value[i * slice + f] = v;
                load_classes(w, my_w_last + f * CLASSES_PADDED);
                for (int j = 0; j < CLASSES; j++) logit[j] = fmaf(v, w[j], logit[j]);
            }
        }
        for (int j = 0; j < CLASSES; j++) logit[j] = group_sum(logit[j], ROW_THREADS);
        if (q == 0 && i < batch)
            for (int j = 0; j < CLASSES; j++) share[i * CLASSES + j] = logit[j];
        __pipeline_wait_prior(0);  // the next step's rows
        __syncthreads();
        // the next step's batch, copied while the cluster meets (its buffer was last read in the previous step)
        if (a.buffers == 2 && more) copy_batch_pixels(&a, owned, pixels + next * rows * row_bytes, next_rows);
        cluster_barrier();

        // B: warp r takes my row r, lane j its logit j: the cluster's shares, then (several clusters) the clusters'
        // sums in global memory (read past L1: other SMs wrote them), then softmax, loss and dlogits
        int has_row = warp < my_rows, row = row0 + warp;  // my rows fit my warps (PERSISTENT_MIN_CLUSTER)
        float logit_sum = 0.0f;
        // EXERCISE(cluster-sum) begin: if has_row and lane < CLASSES, read share[row * CLASSES + lane] of every
        //: block k < cluster_size of the cluster through __cluster_map_shared_rank(share, k), every load before
        //: the first add, then add them into logit_sum in rank order (the same order every run)
        if (has_row && lane < CLASSES) {
            float part[PERSISTENT_MAX_CLUSTER];
#pragma unroll
            for (int k = 0; k < PERSISTENT_MAX_CLUSTER; k++)
                if (k < cluster_size)
                    part[k] = ((const float *)__cluster_map_shared_rank(share, k))[row * CLASSES + lane];
#pragma unroll
            for (int k = 0; k < PERSISTENT_MAX_CLUSTER; k++)
                if (k < cluster_size) logit_sum += part[k];
        }
        // EXERCISE end
        if (clusters > 1) {
            float *sums = a.partial + (int64_t)parity * clusters * batch * CLASSES;  // (clusters, batch, CLASSES)
            if (has_row && lane < CLASSES) __stcg(sums + ((int64_t)cluster * batch + row) * CLASSES + lane, logit_sum);
            grid_barrier(a.arrived, ++barriers * gridDim.x);
            if (has_row && lane < CLASSES) {
                float part[PERSISTENT_MAX_CLUSTERS];
#pragma unroll
                for (int c = 0; c < PERSISTENT_MAX_CLUSTERS; c++)
                    if (c < clusters) part[c] = __ldcg(sums + ((int64_t)c * batch + row) * CLASSES + lane);
                logit_sum = 0.0f;
#pragma unroll
                for (int c = 0; c < PERSISTENT_MAX_CLUSTERS; c++)
                    if (c < clusters) logit_sum += part[c];
            }
        }
        if (has_row) {
            float z = lane < CLASSES ? logit_sum + my_b_last[lane] : -INFINITY, max = z;
            int argmax = lane;
            warp_argmax(&max, &argmax);
            float e = lane < CLASSES ? expf(z - max) : 0.0f, sum = warp_sum(e);
            int label = my_labels[step * rows_per_block + warp];
            float label_logit = __shfl_sync(0xffffffff, z, label);
            if (lane < CLASSES)
                my_logit[warp * CLASSES + lane] = (e / sum - (lane == label ? 1.0f : 0.0f)) / (float)batch;
            // from the logits, not from p: log of a probability that underflowed to 0 would be -inf (every
            // cluster computes every row's dlogits, cluster 0 alone adds the loss)
            if (lane == 0 && cluster == 0) atomicAdd(a.loss_sum + step, logf(sum) - (label_logit - max));
        }
        cluster_barrier();

        // C: the batch's dlogits from the cluster (row i is block i / rows_per_block's), every load before the
        // first store, then my gradients, every one from the weights before this step's update
        {
            float v[3];  // batch * CLASSES <= 3 * PERSISTENT_THREADS
            for (int k = 0; k < 3; k++) {
                int e = tid + k * PERSISTENT_THREADS, owner = e / CLASSES / rows_per_block;
                if (e < batch * CLASSES)
                    v[k] = ((const float *)__cluster_map_shared_rank(my_logit, owner))[e - owner * rows_per_block *
                                                                                        CLASSES];
            }
            for (int k = 0; k < 3; k++) {
                int e = tid + k * PERSISTENT_THREADS;
                if (e < batch * CLASSES) dlogit[e / CLASSES * CLASSES_PADDED + e % CLASSES] = v[k];
            }
        }
        __syncthreads();
        if (hidden) {  // dvalue: through W_last and the ReLU
            for (int e = tid; e < batch * UNITS; e += PERSISTENT_THREADS) {
                int r = e / UNITS, f = e % UNITS;
                float d[CLASSES], w[CLASSES], sum = 0.0f;
                load_classes(d, dlogit + r * CLASSES_PADDED);
                load_classes(w, my_w_last + f * CLASSES_PADDED);
                for (int j = 0; j < CLASSES; j++) sum = fmaf(d[j], w[j], sum);
                dvalue[e] = value[e] > 0.0f ? sum : 0.0f;
            }
        }
        // W_last's gradient: `groups` threads a feature, each over every groups-th row
        int groups = min(GRADIENT_GROUPS, PERSISTENT_THREADS / slice);
        {
            int f = tid / groups, g = tid % groups;
            if (f < slice) {
                float sum[CLASSES];
                for (int j = 0; j < CLASSES; j++) sum[j] = 0.0f;
                for (int r = g; r < batch; r += groups) {
                    float v = value[r * slice + f], d[CLASSES];
                    load_classes(d, dlogit + r * CLASSES_PADDED);
                    for (int j = 0; j < CLASSES; j++) sum[j] = fmaf(v, d[j], sum[j]);
                }
                for (int j = 0; j < CLASSES; j++) scratch[(g * slice + f) * CLASSES_PADDED + j] = sum[j];
            }
        }
        // b_last's gradient, in every block alike: warp j sums column j
        float bias_gradient = 0.0f;
        if (warp < CLASSES) {
            for (int r = lane; r < batch; r += WARP_SIZE) bias_gradient += dlogit[r * CLASSES_PADDED + warp];
            bias_gradient = warp_sum(bias_gradient);
        }
        __syncthreads();  // scratch written, dvalue read W_last
        for (int e = tid; e < slice * CLASSES; e += PERSISTENT_THREADS) {
            int f = e / CLASSES, j = e % CLASSES;
            float sum = 0.0f;
            for (int g = 0; g < groups; g++) sum += scratch[(g * slice + f) * CLASSES_PADDED + j];
            my_w_last[f * CLASSES_PADDED + j] -= lr * sum;
        }
        if (warp < CLASSES && lane == 0) my_b_last[warp] -= lr * bias_gradient;
        if (hidden) {
            // b0's gradient: warp f sums unit f's column of dvalue
            for (int f = warp; f < UNITS; f += PERSISTENT_WARPS) {
                float sum = 0.0f;
                for (int r = lane; r < batch; r += WARP_SIZE) sum += dvalue[r * UNITS + f];
                sum = warp_sum(sum);
                if (lane == 0) my_b0[f] -= lr * sum;
            }
            // W0's gradient: 2 threads a word (4 pixels), over alternate runs of 4 rows (4 rows apart, their words
            // fall 16 banks apart), every load of a run before its multiply-adds; then the pair's sums added
            int w = tid / 2, half = tid % 2;
            float sum[UNITS][4];
            for (int f = 0; f < UNITS; f++)
                for (int b = 0; b < 4; b++) sum[f][b] = 0.0f;
            if (w < WORDS) {
                for (int run = 4 * half; run < rows; run += 8) {
                    uint32_t four[4];
                    float d[4][UNITS];
                    for (int r = 0; r < 4; r++) {
                        four[r] = ((const uint32_t *)(x + (run + r) * PIXELS))[w];
                        for (int f = 0; f < UNITS; f++) d[r][f] = dvalue[(run + r) * UNITS + f];
                    }
                    for (int r = 0; r < 4; r++) {
                        float xb[4] = {byte_value(four[r], 0), byte_value(four[r], 1), byte_value(four[r], 2),
                                       byte_value(four[r], 3)};
                        for (int f = 0; f < UNITS; f++)
                            for (int b = 0; b < 4; b++) sum[f][b] = fmaf(xb[b], d[r][f], sum[f][b]);
                    }
                }
            }
            for (int f = 0; f < UNITS; f++) {
                for (int b = 0; b < 4; b++) {
                    float total = sum[f][b] + __shfl_xor_sync(0xffffffff, sum[f][b], 1);
                    if (w < WORDS && half == 0) my_w0[f * PIXELS + 4 * w + b] -= lr_255 * total;
                }
            }
        }
        __syncthreads();
        if (a.buffers == 1 && more) copy_batch_pixels(&a, owned, pixels, next_rows);
    }

    // no block leaves while the cluster may still read its shared memory; then the epoch's weights go back
    cluster_barrier();
    for (int e = tid; e < owned * CLASSES; e += PERSISTENT_THREADS)
        w_last[(int64_t)first * CLASSES + e] = my_w_last[e / CLASSES * CLASSES_PADDED + e % CLASSES];
    if (blockIdx.x == 0)
        for (int j = tid; j < CLASSES; j += PERSISTENT_THREADS) b_last[j] = my_b_last[j];
    if (hidden) {
        for (int f = tid; f < owned; f += PERSISTENT_THREADS) b0[first + f] = my_b0[f];
        for (int e = tid; e < owned * PIXELS; e += PERSISTENT_THREADS) {
            int f = e / PIXELS, k = e % PIXELS;
            w0[(int64_t)k * hidden + first + f] = my_w0[e];
        }
    }
#else
    __trap();  // compiled for an architecture without clusters: persistent_layout never launches this
#endif
}

// The persistent kernel's dynamic shared memory.
static size_t persistent_shared_bytes(const EpochArgs *a) { return persistent_shared_layout(a).bytes; }

// mlp_epoch_kernel for a block that owns `units` hidden units (1, 2, 4 or 8; 1 without a hidden layer).
static const void *persistent_kernel(int units) {
    switch (units) {
    case 1: return (const void *)mlp_epoch_kernel<1>;
    case 2: return (const void *)mlp_epoch_kernel<2>;
    case 4: return (const void *)mlp_epoch_kernel<4>;
    default: return (const void *)mlp_epoch_kernel<8>;
    }
}

typedef struct {
    EpochArgs args;  // all but the per-epoch pointers
    const void *kernel;
    int blocks;
    size_t shared_bytes;
} PersistentLayout;

// Where the persistent kernel cannot run: with --variant persistent named, one error line and EXIT_CUDA; else 0
// (stage 07's epoch graph runs) and, once a process, one note.
static int persistent_unavailable(const MnistConfig *cfg, const char *needs, const char *why) {
    static int noted = 0;
    if (cfg->variant_given) {
        fprintf(stderr, "error: --variant persistent needs %s: %s; --variant epoch-graph runs here\n", needs, why);
        exit(EXIT_CUDA);
    }
    if (!noted) fprintf(stderr, "note: the persistent kernel needs %s: %s; stage 07's epoch graph runs instead\n", needs, why);
    noted = 1;
    return 0;
}

// The persistent kernel's launch for cfg on this GPU, in *layout; 0 where stage 07's graphs run instead: not fp32,
// more than one hidden layer, a batch past PERSISTENT_MAX_BATCH, or more hidden units than the blocks the GPU
// runs at once can own (PERSISTENT_MAX_UNITS each). Without a hidden layer one cluster holds the model: 16 blocks
// where the GPU places clusters that large, else 8. With one, the cluster size (16 or 8) that puts the most blocks
// on the GPU at once (up to PERSISTENT_MAX_CLUSTERS clusters), up to a block a unit. Every block asks for more
// than half an SM's shared memory, so that no two share an SM. A GPU without thread-block clusters (or a build
// whose kernel lacks them), or that cannot hold the layout, runs stage 07's epoch graph with one note; with
// --variant persistent named, one error line and EXIT_CUDA. steps: the epoch's (the labels of a block's rows for
// all of them stay in its shared memory).
static int persistent_layout(const MnistConfig *cfg, int steps, PersistentLayout *layout) {
    int hidden = cfg->n_layers == 2 ? cfg->sizes[1] : 0;
    if (cfg->precision != PRECISION_FP32 || cfg->n_layers > 2 || cfg->batch > PERSISTENT_MAX_BATCH) return 0;
    int device, max_shared, sm_shared;
    char why[160];
    if (!feature_available(FEATURE_CLUSTERS, persistent_kernel(1), why, sizeof(why)))
        return persistent_unavailable(cfg, feature_description(FEATURE_CLUSTERS), why);
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&max_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaCheck(cudaDeviceGetAttribute(&sm_shared, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    for (int units = 1; units <= PERSISTENT_MAX_UNITS; units *= 2) {
        const void *kernel = persistent_kernel(units);
        cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_shared));
    }
    memset(layout, 0, sizeof(*layout));
    EpochArgs *a = &layout->args;
    a->hidden = hidden;
    a->batch = cfg->batch;
    a->steps = steps;
    a->lr = cfg->lr;
    size_t least = (size_t)sm_shared / 2 + 1;
    int best_blocks = 0, best_size = 0;
    for (int size = PERSISTENT_MAX_CLUSTER; size >= PERSISTENT_MIN_CLUSTER; size /= 2) {
        a->cluster_size = size;
        a->slice = hidden ? 1 : round_up((PIXELS + size - 1) / size, 4);
        a->buffers = 1;
        size_t bytes = persistent_shared_bytes(a);
        int wanted = hidden ? (hidden + size - 1) / size : 1;
        int fit = max_active_clusters(persistent_kernel(1), PERSISTENT_THREADS, size, bytes > least ? bytes : least);
        if (fit > PERSISTENT_MAX_CLUSTERS) fit = PERSISTENT_MAX_CLUSTERS;
        int blocks = (wanted < fit ? wanted : fit) * size;
        if (blocks > best_blocks) {
            best_blocks = blocks;
            best_size = size;
        }
        if (!hidden && blocks > 0) break;  // the largest cluster that fits
    }
    if (best_blocks == 0) {
        snprintf(why, sizeof(why), "this GPU runs none of %d blocks of %d threads with %zu bytes of shared memory each",
                 PERSISTENT_MIN_CLUSTER, PERSISTENT_THREADS, persistent_shared_bytes(a));
        return persistent_unavailable(cfg, "a cluster it can place", why);
    }
    a->cluster_size = best_size;
    if (hidden) {
        a->slice = 1;
        while (a->slice * best_blocks < hidden) a->slice *= 2;
        if (a->slice > PERSISTENT_MAX_UNITS) return 0;
        int owners = (hidden + a->slice - 1) / a->slice;  // blocks that own a unit
        best_blocks = (owners + best_size - 1) / best_size * best_size;
    } else {
        a->slice = round_up((PIXELS + best_size - 1) / best_size, 4);
    }
    layout->kernel = persistent_kernel(hidden ? a->slice : 1);
    layout->blocks = best_blocks;
    for (a->buffers = 2; a->buffers > 1 && persistent_shared_bytes(a) > (size_t)max_shared; a->buffers--) {
    }
    layout->shared_bytes = persistent_shared_bytes(a);
    if (layout->shared_bytes < least) layout->shared_bytes = least;
    return layout->shared_bytes <= (size_t)max_shared;
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
    PersistentLayout persistent;  // the persistent kernel's launch, where it applies
    int persistent_blocks =
        cfg->variant == VARIANT_PERSISTENT && persistent_layout(cfg, steps, &persistent) ? persistent.blocks : 0;
    float *d_partial = NULL;                  // persistent: (2, clusters, batch, classes) each cluster's logit sums
    unsigned int *d_arrived = NULL;           // persistent: (epochs,) each epoch's grid barrier counter
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
    if (persistent_blocks) {
        int clusters = persistent_blocks / persistent.args.cluster_size;
        cudaCheck(cudaMalloc(&d_partial, (size_t)2 * clusters * batch * classes * sizeof(float)));
        cudaCheck(cudaMalloc(&d_arrived, cfg->epochs * sizeof(unsigned int)));
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
        if (persistent_blocks) cudaCheck(cudaMemsetAsync(d_arrived, 0, cfg->epochs * sizeof(unsigned int), stream));
        cudaCheck(cudaStreamWaitEvent(stream, upload_done, 0));
    }
    train_clock_loop_start(&clock, stream);

    // Only enqueueing from here to the end of the loop: the host runs ahead of the GPU, never waits for it.
    for (int epoch = 0; epoch < cfg->epochs; epoch++) {
        if (persistent_blocks) {
            // the whole epoch in one launch (with --breakdown, one phase: its steps have no host-visible seams)
            EpochArgs args = persistent.args;
            args.params = d_params;
            args.partial = d_partial;
            args.loss_sum = d_loss_sum + (int64_t)epoch * steps;
            args.arrived = d_arrived + epoch;
            args.pixels = d_pixels;
            args.labels = d_train_labels;
            args.rows = d_order + (int64_t)epoch * n_train;
            void *kernel_args[] = {&args};
            cudaLaunchAttribute attrs[2];
            cudaLaunchConfig_t config = cluster_launch_config(persistent_blocks, PERSISTENT_THREADS, args.cluster_size,
                                                              persistent.shared_bytes, stream, attrs);
            TIMED_PHASE(&clock, PHASE_FORWARD, stream)
                cudaCheck(cudaLaunchKernelExC(&config, persistent.kernel, kernel_args));
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
    cudaCheck(cudaFree(d_arrived));
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
