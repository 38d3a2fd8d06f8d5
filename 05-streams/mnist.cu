// Stage 05, MNIST: stage 04's trainer with the host taken out of the training loop. The training set (its
// bytes, scaled on the device), its labels and every epoch's batch order go up once, through the pinned
// staging ring (common/staging.c) on a copy stream; each step gathers its batch on the device; step losses
// stay on the device until the end; each epoch's test evaluation runs on a stream of its own, from a snapshot
// of the parameters, while the next epoch trains.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>

#include "check.h"
#include "host.h"
#include "staging.h"
#include "timing.h"
#include "trainer.h"

const char *const MNIST_VARIANTS[] = {"tiled", NULL};
const char *const MNIST_PRECISIONS[] = {"fp32", NULL};

#define BLOCK_SIZE 256
#define WARP_SIZE 32
#define WARPS_PER_BLOCK (BLOCK_SIZE / WARP_SIZE)  // loss kernel: rows per block; bias kernel: partial sums per column
#define TILE 16    // GEMMs: a block of TILE x TILE threads computes a TILE x TILE tile of the output
#define TILE_K 32  // GEMMs: the slice of the shared dimension K staged in shared memory per step
#define SLICE_LOADS (TILE * TILE_K / (TILE * TILE))  // floats of each operand's slice that a thread copies

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
// A block of TILE x TILE threads owns a TILE x TILE tile of C and walks K in slices of TILE_K, copied into
// shared memory (coalesced): each float loaded from global memory feeds TILE threads, where the naive kernel
// loaded two floats per FMA. As measured in gemm_ladder.cu, the next slices' loads are issued before this
// slice's FMAs (prefetch), and slice rows are padded by one float, so that the threads reading down a column
// hit different shared-memory banks. A and B^T are X (outer, K), stored (outer, K) row-major or, if k_major
// (A with a_trans, B without b_trans), (K, outer); a slice keeps that layout, (TILE, TILE_K) or (TILE_K, TILE).

// X(outer, k), from its slice
__device__ __forceinline__ float slice_at(const float *slice, int outer, int k, int k_major) {
    return k_major ? slice[k * (TILE + 1) + outer] : slice[outer * (TILE_K + 1) + k];
}

// This thread's share of the slice of X at (outer0, k0): elements tid, tid + TILE^2, ... of the slice counted
// row by row (neighbouring threads, neighbouring addresses), into registers, zeros outside X.
__device__ __forceinline__ void fetch_slice(float regs[SLICE_LOADS], const float *x, int outer_dim, int k_dim,
                                            int outer0, int k0, int k_major) {
    int cols = k_major ? TILE : TILE_K, tid = threadIdx.y * TILE + threadIdx.x;
#pragma unroll
    for (int e = 0; e < SLICE_LOADS; e++) {
        int idx = tid + e * TILE * TILE, r = idx / cols, c = idx % cols;
        int outer = outer0 + (k_major ? c : r), k = k0 + (k_major ? r : c);
        size_t at = k_major ? (size_t)k * outer_dim + outer : (size_t)outer * k_dim + k;
        regs[e] = outer < outer_dim && k < k_dim ? x[at] : 0.0f;
    }
}

// ... and the same elements from the registers into the slice in shared memory
__device__ __forceinline__ void store_slice(float *slice, const float regs[SLICE_LOADS], int k_major) {
    int cols = k_major ? TILE : TILE_K, tid = threadIdx.y * TILE + threadIdx.x;
#pragma unroll
    for (int e = 0; e < SLICE_LOADS; e++) {
        int idx = tid + e * TILE * TILE;
        slice[idx / cols * (cols + 1) + idx % cols] = regs[e];
    }
}

// sum_k A(row, k) * B(k, col) for this thread's (row, col) = (blockIdx.y * TILE + threadIdx.y, blockIdx.x *
// TILE + threadIdx.x), 0 outside C. A is stored (M, K) row-major, or (K, M) if a_trans; B (K, N), or (N, K)
// if b_trans (literal constants at every call: each kernel inlines its own copy). Every thread must call it.
__device__ __forceinline__ float gemm_tile(const float *a, const float *b, int m_dim, int n_dim, int k_dim, int a_trans,
                                           int b_trans) {
    float acc = 0.0f;
    __shared__ float a_slice[(TILE + 1) * (TILE_K + 1)];  // A(m, k) at [m][k], or at [k][m] if a_trans
    __shared__ float b_slice[(TILE + 1) * (TILE_K + 1)];  // B(k, n) at [k][n], or at [n][k] if b_trans
    int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
    float a_next[SLICE_LOADS], b_next[SLICE_LOADS];  // this thread's share of the next slices
    fetch_slice(a_next, a, m_dim, k_dim, row0, 0, a_trans);
    fetch_slice(b_next, b, n_dim, k_dim, col0, 0, !b_trans);
    for (int k0 = 0; k0 < k_dim; k0 += TILE_K) {
        store_slice(a_slice, a_next, a_trans);
        store_slice(b_slice, b_next, !b_trans);
        __syncthreads();            // the slices are complete
        if (k0 + TILE_K < k_dim) {  // the next slices' loads: in flight during the FMAs below
            fetch_slice(a_next, a, m_dim, k_dim, row0, k0 + TILE_K, a_trans);
            fetch_slice(b_next, b, n_dim, k_dim, col0, k0 + TILE_K, !b_trans);
        }
#pragma unroll
        for (int k = 0; k < TILE_K; k++)
            acc += slice_at(a_slice, threadIdx.y, k, a_trans) * slice_at(b_slice, threadIdx.x, k, !b_trans);
        __syncthreads();  // everyone is done with the slices before the next store overwrites them
    }
    return acc;
}

// ----------------------------------------------------------------------------
// forward: out = in @ W + b, then ReLU, in one kernel (one thread per output element)

// for i < rows, j < out_dim: out[i][j] = sum_k in[i][k] * weight[k][j] + bias[j], then max(., 0) if relu
// (applied to the sum in a register: stage 02 stored it, then two more kernels read and stored it again)
__global__ void matmul_forward_kernel(float *out, const float *in, const float *weight, const float *bias, int rows,
                                      int in_dim, int out_dim, int relu) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    float sum = gemm_tile(in, weight, rows, out_dim, in_dim, 0, 0);  // before the return: all threads copy
    if (i >= rows || j >= out_dim) return;
    float value = sum + bias[j];
    out[(size_t)i * out_dim + j] = relu ? fmaxf(value, 0.0f) : value;
}

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
// SGD to W and b in place. No gradient buffer: the thread that sums one element of dW or db subtracts
// lr times the sum from that parameter at once.

// for k < in_dim, j < out_dim: weight[k][j] -= lr * sum_i in[i][k] * dout[i][j]
// (in place: each thread touches only its own weight, and the launcher runs it after din, which reads W)
__global__ void matmul_backward_weight_sgd_kernel(float *weight, const float *in, const float *dout, float lr, int rows,
                                                  int in_dim, int out_dim) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int k = blockIdx.y * blockDim.y + threadIdx.y;
    float sum = gemm_tile(in, dout, in_dim, out_dim, rows, 1, 0);  // A = in^T, read from in (rows, in_dim)
    if (k >= in_dim || j >= out_dim) return;
    weight[(size_t)k * out_dim + j] -= lr * sum;
}

// for j < dim: bias[j] -= lr * sum_i dout[i][j]
// The thread that completes a column's sum holds the whole gradient and can apply it: with stage 02's
// atomicAdd per element no thread knows when the sum is done (and the sum needed a zeroed buffer and a
// second kernel). A block of 32 x 8 threads owns 32 columns: thread (x, y) sums rows y, y + 8, ... of
// column x (a warp reads 32 neighbouring floats of a row), and thread (x, 0) adds the 8 partial sums
// from shared memory in a fixed order, so every run sums alike. (Stage 03's one thread per column adds a
// batch of 128 rows in series, all in one block.)
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

// for i < rows, k < in_dim: din[i][k] = act[i][k] > 0 ? sum_j dout[i][j] * weight[k][j] : 0
// (act, a ReLU output, is positive where its input was; stage 02 masked din in a kernel of its own)
__global__ void matmul_backward_input_kernel(float *din, const float *dout, const float *weight, const float *act,
                                             int rows, int in_dim, int out_dim) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    float sum = gemm_tile(dout, weight, rows, in_dim, out_dim, 0, 1);  // B = W^T, read from W (in_dim, out_dim)
    if (i >= rows || k >= in_dim) return;
    size_t idx = (size_t)i * in_dim + k;
    din[idx] = act[idx] > 0.0f ? sum : 0.0f;
}

// ----------------------------------------------------------------------------
// launchers

static unsigned int blocks_for(int64_t n) { return (unsigned int)((n + BLOCK_SIZE - 1) / BLOCK_SIZE); }

// bias_backward_sgd_kernel: a block of WARP_SIZE x WARPS_PER_BLOCK threads per WARP_SIZE columns
static unsigned int column_blocks(int dim) { return (unsigned int)((dim + WARP_SIZE - 1) / WARP_SIZE); }

static dim3 grid_2d(int rows, int cols) { return dim3((cols + TILE - 1) / TILE, (rows + TILE - 1) / TILE); }

// act[l]: (rows, sizes[l]); act[0] is the input, act[n_layers] receives the logits
static void mlp_forward(const MnistConfig *cfg, const float *params, float *const *act, int rows, cudaStream_t stream) {
    dim3 block(TILE, TILE);
    for (int l = 0; l < cfg->n_layers; l++) {
        int in_dim = cfg->sizes[l], out_dim = cfg->sizes[l + 1];
        const float *weight = params + mnist_weight_offset(cfg, l);
        const float *bias = params + mnist_bias_offset(cfg, l);
        int relu = l < cfg->n_layers - 1;  // no ReLU on the logits
        matmul_forward_kernel<<<grid_2d(rows, out_dim), block, 0, stream>>>(act[l + 1], act[l], weight, bias, rows,
                                                                            in_dim, out_dim, relu);
        launchCheck();
    }
}

// dact[l]: (rows, sizes[l]) for l >= 1, dact[n_layers] holds dlogits. Updates params in place, yet every
// gradient comes from the pre-update params, as in the reference: layer l's din (which needs W_l) runs before
// W_l's update, and the layers below l never read W_l. One stream runs launches in order: that is the guarantee.
static void mlp_backward_sgd(const MnistConfig *cfg, float *params, float *const *act, float *const *dact, int rows,
                             cudaStream_t stream) {
    dim3 block(TILE, TILE);
    for (int l = cfg->n_layers - 1; l >= 0; l--) {
        int in_dim = cfg->sizes[l], out_dim = cfg->sizes[l + 1];
        float *weight = params + mnist_weight_offset(cfg, l);
        if (l > 0) {  // the images need no gradient
            matmul_backward_input_kernel<<<grid_2d(rows, in_dim), block, 0, stream>>>(dact[l], dact[l + 1], weight,
                                                                                      act[l], rows, in_dim, out_dim);
            launchCheck();
        }
        matmul_backward_weight_sgd_kernel<<<grid_2d(in_dim, out_dim), block, 0, stream>>>(
            weight, act[l], dact[l + 1], cfg->lr, rows, in_dim, out_dim);
        launchCheck();
        bias_backward_sgd_kernel<<<column_blocks(out_dim), dim3(WARP_SIZE, WARPS_PER_BLOCK), 0, stream>>>(
            params + mnist_bias_offset(cfg, l), dact[l + 1], cfg->lr, rows, out_dim);
        launchCheck();
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
    uint8_t *d_pixels;                        // (n_train + n_test, pixels) the images' bytes, uploaded once
    float *d_train_images;                    // (n_train, pixels) the whole training set, scaled from d_pixels
    uint8_t *d_train_labels;                  // (n_train,)
    int32_t *d_order;                         // (epochs, n_train) data->batch_order
    float *d_act[MNIST_MAX_LAYERS + 1];       // [l]: (batch, sizes[l]); [0] the batch images, [n_layers] the logits
    float *d_dact[MNIST_MAX_LAYERS + 1];      // [l], l >= 1: (batch, sizes[l]) dloss/dact[l]; [n_layers] dlogits
    uint8_t *d_labels;                        // (batch,)
    float *d_test_act[MNIST_MAX_LAYERS + 1];  // [l]: (n_test, sizes[l]); [0] the test images
    uint8_t *d_test_labels;                   // (n_test,)
    float *d_loss_sum;                        // (epochs, steps) summed cross-entropy of every batch
    float *d_test_loss_sum;                   // (epochs,) summed test cross-entropy after each epoch
    int *d_test_correct;                      // (epochs,) correct test predictions after each epoch
    cudaCheck(cudaMalloc(&d_params, n_params * sizeof(float)));
    cudaCheck(cudaMalloc(&d_snapshot, n_params * sizeof(float)));
    cudaCheck(cudaMalloc(&d_pixels, ((size_t)n_train + n_test) * pixels));
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
    cudaCheck(cudaMalloc(&d_loss_sum, n_steps * sizeof(float)));
    cudaCheck(cudaMalloc(&d_test_loss_sum, cfg->epochs * sizeof(float)));
    cudaCheck(cudaMalloc(&d_test_correct, cfg->epochs * sizeof(int)));
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
    TrainClock clock;
    train_clock_init(&clock, cfg->epochs, cfg->breakdown);
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
        scale_pixels_kernel<<<blocks_for(train_values), BLOCK_SIZE, 0, copy_stream>>>(d_train_images, d_pixels,
                                                                                       train_values);
        launchCheck();
        scale_pixels_kernel<<<blocks_for(test_values), BLOCK_SIZE, 0, copy_stream>>>(
            d_test_act[0], d_pixels + train_values, test_values);
        launchCheck();
        cudaCheck(cudaEventRecord(upload_done, copy_stream));
        cudaCheck(cudaMemsetAsync(d_loss_sum, 0, n_steps * sizeof(float), stream));  // the losses are summed
        cudaCheck(cudaMemsetAsync(d_test_loss_sum, 0, cfg->epochs * sizeof(float), stream));
        cudaCheck(cudaMemsetAsync(d_test_correct, 0, cfg->epochs * sizeof(int), stream));
        cudaCheck(cudaStreamWaitEvent(stream, upload_done, 0));
    }
    train_clock_loop_start(&clock, stream);

    // Only enqueueing from here to the end of the loop: the host runs ahead of the GPU, never waits for it.
    for (int epoch = 0; epoch < cfg->epochs; epoch++) {
        for (int step = 0; step < steps; step++) {
            // gather the batch's rows on the device (reported as h2d: it replaces the per-batch copy)
            const int32_t *rows = d_order + (int64_t)epoch * n_train + (int64_t)step * batch;
            TIMED_PHASE(&clock, PHASE_H2D, stream) {
                gather_batch_kernel<<<blocks_for((int64_t)batch * pixels), BLOCK_SIZE, 0, stream>>>(
                    d_act[0], d_labels, d_train_images, d_train_labels, rows, batch, pixels);
                launchCheck();
            }

            TIMED_PHASE(&clock, PHASE_FORWARD, stream) mlp_forward(cfg, d_params, d_act, batch, stream);

            float *loss_sum = d_loss_sum + (int64_t)epoch * steps + step;
            TIMED_PHASE(&clock, PHASE_LOSS, stream) {
                softmax_cross_entropy_kernel<<<blocks_for((int64_t)batch * WARP_SIZE), BLOCK_SIZE, 0, stream>>>(
                    d_dact[n_layers], loss_sum, NULL, d_act[n_layers], d_labels, batch, classes);
                launchCheck();
            }

            // the update is fused into the backward pass: its time is reported as backward
            TIMED_PHASE(&clock, PHASE_BACKWARD, stream) mlp_backward_sgd(cfg, d_params, d_act, d_dact, batch, stream);
        }

        // test loss and accuracy of this epoch's parameters, on the eval stream while the next epoch
        // trains. The evaluation reads a snapshot, since training updates d_params in place; the snapshot
        // is taken once the previous evaluation is done reading it (eval_done: a no-op the first time).
        cudaCheck(cudaStreamWaitEvent(stream, eval_done, 0));
        cudaCheck(cudaMemcpyAsync(d_snapshot, d_params, n_params * sizeof(float), cudaMemcpyDeviceToDevice, stream));
        cudaCheck(cudaEventRecord(snapshot_ready, stream));
        cudaCheck(cudaStreamWaitEvent(eval_stream, snapshot_ready, 0));
        TIMED_PHASE(&clock, PHASE_EVAL, eval_stream) {
            mlp_forward(cfg, d_snapshot, d_test_act, n_test, eval_stream);
            softmax_cross_entropy_kernel<<<blocks_for((int64_t)n_test * WARP_SIZE), BLOCK_SIZE, 0, eval_stream>>>(
                NULL, d_test_loss_sum + epoch, d_test_correct + epoch, d_test_act[n_layers], d_test_labels, n_test,
                classes);
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
    }
    cudaCheck(cudaFree(d_labels));
    cudaCheck(cudaFree(d_test_labels));
    cudaCheck(cudaFree(d_loss_sum));
    cudaCheck(cudaFree(d_test_loss_sum));
    cudaCheck(cudaFree(d_test_correct));
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
