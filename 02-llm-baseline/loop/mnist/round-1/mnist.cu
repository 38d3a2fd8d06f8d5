// Stage 02, MNIST: an MLP (784 -> hidden... -> 10, ReLU, softmax cross-entropy) trained with minibatch SGD.
// Round 1 of the loop: the same arithmetic in fp32 (only summation order changes), arranged for speed:
//  * the whole training set goes up once, as bytes; each batch is gathered and scaled on the GPU, its rows
//    found from a step counter kept in device memory, so one captured graph serves every step;
//  * the bias is folded into the GEMM: W_l followed by b_l is, as packed, a row-major (in+1, out) matrix, and
//    every activation buffer carries a column of ones, so the forward pass is one SGEMM (+ a ReLU kernel) per
//    layer and one weight-gradient GEMM yields dW and db together;
//  * SGD is fused into that GEMM (alpha = -lr, beta = 1, written into the parameters) once din has read W;
//  * softmax, cross-entropy, dlogits and the step's mean loss are one single-block kernel, and the host never
//    waits inside the loop: losses stay on the device until the parameters come back;
//  * steps run as CUDA graphs of up to 64 steps; each hidden layer's weight update runs on a second stream,
//    overlapping the rest of the backward pass.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>

#include "check.h"
#include "host.h"
#include "timing.h"
#include "trainer.h"

const char *const MNIST_VARIANTS[] = {"cublas-graph", NULL};
const char *const MNIST_PRECISIONS[] = {"fp32", NULL};

#define MNIST_THREADS 256                           // element-wise kernels
#define MNIST_LOSS_THREADS 256                      // one block per step (a power of two: tree reduction)
#define MNIST_EVAL_THREADS 1024                     // one block per evaluation (a power of two)
#define MNIST_LD_ALIGN 4                            // activation rows padded to 16 bytes
#define MNIST_STEP_CHUNK 64                         // steps per captured graph
#define MNIST_WORKSPACE_BYTES ((size_t)32 << 20)    // per cuBLAS handle

// ----------------------------------------------------------------------------
// kernels

// The batch of global step g = *step_counter (epoch g / steps, step g % steps): row i of act0 (ld floats) gets
// the scaled pixels of image batch_order[epoch * n_train + step * batch + i], then a 1 (the bias input), then 0s.
static __global__ void mnist_gather_kernel(float *act0, int ld, const uint8_t *pixels, const int32_t *order,
                                           const int *step_counter, int steps, int n_train, int batch,
                                           int n_pixels) {
    int g = *step_counter;
    int64_t first = (int64_t)(g / steps) * n_train + (int64_t)(g % steps) * batch;
    int i = blockIdx.x;
    int32_t row = order[first + i];
    const uint8_t *src = pixels + (int64_t)row * n_pixels;
    float *dst = act0 + (int64_t)i * ld;
    for (int c = threadIdx.x; c < ld; c += blockDim.x)
        dst[c] = c < n_pixels ? mnist_pixel_value(src[c]) : (c == n_pixels ? 1.0f : 0.0f);
}

// act (rows, ld) from raw bytes (rows, n_pixels): scaled pixels, then a column of ones, then zeros
static __global__ void mnist_pixels_kernel(float *act, int ld, const uint8_t *pixels, int rows, int n_pixels) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)rows * ld) return;
    int64_t i = idx / ld;
    int c = (int)(idx % ld);
    act[idx] = c < n_pixels ? mnist_pixel_value(pixels[i * n_pixels + c]) : (c == n_pixels ? 1.0f : 0.0f);
}

// act (rows, ld): ReLU on the first dim columns, the ones column at dim, zeros in the padding
static __global__ void mnist_relu_aug_kernel(float *act, int rows, int dim, int ld) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)rows * ld) return;
    int c = (int)(idx % ld);
    if (c < dim)
        act[idx] = fmaxf(act[idx], 0.0f);
    else
        act[idx] = c == dim ? 1.0f : 0.0f;
}

// dact (rows, dim) is zeroed where the ReLU output act (rows, ld_act) is not positive
static __global__ void mnist_relu_backward_kernel(float *dact, const float *act, int rows, int dim, int ld_act) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)rows * dim) return;
    int64_t i = idx / dim;
    int c = (int)(idx % dim);
    if (act[i * ld_act + c] <= 0.0f) dact[idx] = 0.0f;
}

// One block, the whole batch of global step g = *step_counter: for each row, the cross-entropy from the logits
// (shifted by the row max), and dlogits = (softmax - onehot) / rows; step_loss[g] = mean loss; then g + 1.
static __global__ void mnist_loss_kernel(float *dlogits, float *step_loss, int *step_counter, const float *logits,
                                         const uint8_t *labels, const int32_t *order, int steps, int n_train,
                                         int rows, int classes) {
    __shared__ float part[MNIST_LOSS_THREADS];
    int g = *step_counter;
    int64_t first = (int64_t)(g / steps) * n_train + (int64_t)(g % steps) * rows;
    float local = 0.0f;
    for (int i = threadIdx.x; i < rows; i += blockDim.x) {
        const float *row = logits + (int64_t)i * classes;
        float *drow = dlogits + (int64_t)i * classes;
        int label = labels[order[first + i]];
        float max = row[0];
        for (int j = 1; j < classes; j++) max = fmaxf(max, row[j]);
        float sum = 0.0f;
        for (int j = 0; j < classes; j++) sum += expf(row[j] - max);
        local += logf(sum) - (row[label] - max);
        for (int j = 0; j < classes; j++) {
            float prob = expf(row[j] - max) / sum;
            float onehot = j == label ? 1.0f : 0.0f;
            drow[j] = (prob - onehot) / (float)rows;
        }
    }
    part[threadIdx.x] = local;
    __syncthreads();  // every thread has read g by now
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        step_loss[g] = part[0] / (float)rows;
        *step_counter = g + 1;
    }
}

// One block over the test logits (rows, classes): mean cross-entropy and accuracy (argmax, ties to the lowest
// index), written to test_loss[epoch] and test_acc[epoch].
static __global__ void mnist_eval_kernel(float *test_loss, float *test_acc, const float *logits,
                                         const uint8_t *labels, int rows, int classes, int epoch) {
    __shared__ float loss_part[MNIST_EVAL_THREADS];
    __shared__ int correct_part[MNIST_EVAL_THREADS];
    float local = 0.0f;
    int correct = 0;
    for (int i = threadIdx.x; i < rows; i += blockDim.x) {
        const float *row = logits + (int64_t)i * classes;
        int label = labels[i];
        float max = row[0];
        int argmax = 0;
        for (int j = 1; j < classes; j++) {
            max = fmaxf(max, row[j]);
            if (row[j] > row[argmax]) argmax = j;
        }
        float sum = 0.0f;
        for (int j = 0; j < classes; j++) sum += expf(row[j] - max);
        local += logf(sum) - (row[label] - max);
        if (argmax == label) correct++;
    }
    loss_part[threadIdx.x] = local;
    correct_part[threadIdx.x] = correct;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            loss_part[threadIdx.x] += loss_part[threadIdx.x + s];
            correct_part[threadIdx.x] += correct_part[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        test_loss[epoch] = loss_part[0] / (float)rows;
        test_acc[epoch] = (float)correct_part[0] / (float)rows;
    }
}

// ----------------------------------------------------------------------------
// the trainer's device state

typedef struct {
    const MnistConfig *cfg;
    int n_layers, batch, steps, n_train, pixels, classes;
    int ld[MNIST_MAX_LAYERS + 1];  // row stride of act[l]: sizes[l] + 1 (the ones column) padded; classes for the logits
    float neg_lr;                  // -lr: alpha of the fused gradient-and-update GEMM
    float *params;                 // (n_params,) packed as trainer.h; [W_l; b_l] is a row-major (in+1, out) matrix
    float *act[MNIST_MAX_LAYERS + 1];       // [l]: (batch, ld[l]); [0] the batch images, [n_layers] the logits
    float *dact[MNIST_MAX_LAYERS + 1];      // [l], l >= 1: (batch, sizes[l]); [n_layers] dlogits
    float *test_act[MNIST_MAX_LAYERS + 1];  // [l]: (n_test, ld[l]); [0] the test images
    uint8_t *train_pixels;                  // (n_train, pixels)
    uint8_t *train_labels;                  // (n_train,)
    uint8_t *test_pixels;                   // (n_test, pixels)
    uint8_t *test_labels;                   // (n_test,)
    int32_t *order;                         // (epochs, n_train) the batch order
    int *step_counter;                      // (1,) global step of the next training step
    float *step_loss;                       // (epochs * steps,)
    float *test_loss, *test_acc;            // (epochs,)
    cudaStream_t stream, side;              // side: the weight updates, overlapping the backward chain
    cublasHandle_t blas, blas_side;         // one per stream, each with its own workspace
    void *workspace, *workspace_side;
    cudaEvent_t fork[MNIST_MAX_LAYERS], join;
} MnistGpu;

static const float mnist_one = 1.0f, mnist_zero = 0.0f;

static unsigned int mnist_blocks(int64_t n) { return (unsigned int)((n + MNIST_THREADS - 1) / MNIST_THREADS); }

static void *mnist_device_zeros(size_t bytes) {
    void *ptr = NULL;
    if (bytes == 0) bytes = 16;
    cudaCheck(cudaMalloc(&ptr, bytes));
    cudaCheck(cudaMemset(ptr, 0, bytes));
    return ptr;
}

static void mnist_blas_create(cublasHandle_t *blas, void **workspace, cudaStream_t stream) {
    cublasCheck(cublasCreate(blas));
    cublasCheck(cublasSetStream(*blas, stream));  // before the workspace: setting the stream resets it
    cudaCheck(cudaMalloc(workspace, MNIST_WORKSPACE_BYTES));
    cublasCheck(cublasSetWorkspace(*blas, *workspace, MNIST_WORKSPACE_BYTES));
    cublasCheck(cublasSetMathMode(*blas, CUBLAS_DEFAULT_MATH));  // plain fp32, no TF32
    cublasCheck(cublasSetPointerMode(*blas, CUBLAS_POINTER_MODE_HOST));
}

// ----------------------------------------------------------------------------
// launchers. cuBLAS is column-major: a row-major (R, C) matrix with row stride ld is a column-major (C, R) one
// with leading dimension ld, so row-major out = in @ W is the column-major out^T = W^T in^T.

static void mnist_gather(const MnistGpu *m) {
    mnist_gather_kernel<<<m->batch, MNIST_THREADS, 0, m->stream>>>(m->act[0], m->ld[0], m->train_pixels, m->order,
                                                                   m->step_counter, m->steps, m->n_train, m->batch,
                                                                   m->pixels);
    cudaCheck(cudaGetLastError());
}

// act[l + 1][:, :out] = [act[l] | 1] @ [W_l; b_l], then ReLU (and the ones column) for every layer but the last
static void mnist_forward(const MnistGpu *m, float *const *act, int rows) {
    const MnistConfig *cfg = m->cfg;
    for (int l = 0; l < m->n_layers; l++) {
        int in_dim = cfg->sizes[l], out_dim = cfg->sizes[l + 1];
        const float *w_aug = m->params + mnist_weight_offset(cfg, l);
        cublasCheck(cublasSgemm(m->blas, CUBLAS_OP_N, CUBLAS_OP_N, out_dim, rows, in_dim + 1, &mnist_one, w_aug,
                                out_dim, act[l], m->ld[l], &mnist_zero, act[l + 1], m->ld[l + 1]));
        if (l < m->n_layers - 1) {
            int64_t n = (int64_t)rows * m->ld[l + 1];
            mnist_relu_aug_kernel<<<mnist_blocks(n), MNIST_THREADS, 0, m->stream>>>(act[l + 1], rows, out_dim,
                                                                                    m->ld[l + 1]);
            cudaCheck(cudaGetLastError());
        }
    }
}

static void mnist_loss(const MnistGpu *m) {
    mnist_loss_kernel<<<1, MNIST_LOSS_THREADS, 0, m->stream>>>(m->dact[m->n_layers], m->step_loss, m->step_counter,
                                                              m->act[m->n_layers], m->train_labels, m->order,
                                                              m->steps, m->n_train, m->batch, m->classes);
    cudaCheck(cudaGetLastError());
}

// [W_l; b_l] += -lr * [act[l] | 1]^T @ dact[l + 1]: the weight and bias gradients and the SGD update in one GEMM
static void mnist_update(const MnistGpu *m, cublasHandle_t blas, int l) {
    const MnistConfig *cfg = m->cfg;
    int in_dim = cfg->sizes[l], out_dim = cfg->sizes[l + 1];
    float *w_aug = m->params + mnist_weight_offset(cfg, l);
    cublasCheck(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, out_dim, in_dim + 1, m->batch, &m->neg_lr,
                            m->dact[l + 1], out_dim, m->act[l], m->ld[l], &mnist_one, w_aug, out_dim));
}

// From dlogits down: for each layer, din = dout @ W^T (from the pre-update W) and its ReLU mask, then the fused
// update of W and b. With overlap, each hidden layer's update runs on the side stream once din has read W.
static void mnist_backward(const MnistGpu *m, int overlap) {
    const MnistConfig *cfg = m->cfg;
    int forked = 0;
    for (int l = m->n_layers - 1; l >= 1; l--) {
        int in_dim = cfg->sizes[l], out_dim = cfg->sizes[l + 1];
        const float *weight = m->params + mnist_weight_offset(cfg, l);
        cublasCheck(cublasSgemm(m->blas, CUBLAS_OP_T, CUBLAS_OP_N, in_dim, m->batch, out_dim, &mnist_one, weight,
                                out_dim, m->dact[l + 1], out_dim, &mnist_zero, m->dact[l], in_dim));
        if (overlap) {
            cudaCheck(cudaEventRecord(m->fork[l], m->stream));
            cudaCheck(cudaStreamWaitEvent(m->side, m->fork[l], 0));
            mnist_update(m, m->blas_side, l);  // reads act[l], dact[l + 1]; writes W_l, b_l: nothing below touches them
            forked = 1;
        } else {
            mnist_update(m, m->blas, l);
        }
        int64_t n = (int64_t)m->batch * in_dim;
        mnist_relu_backward_kernel<<<mnist_blocks(n), MNIST_THREADS, 0, m->stream>>>(m->dact[l], m->act[l], m->batch,
                                                                                     in_dim, m->ld[l]);
        cudaCheck(cudaGetLastError());
    }
    mnist_update(m, m->blas, 0);
    if (forked) {
        cudaCheck(cudaEventRecord(m->join, m->side));
        cudaCheck(cudaStreamWaitEvent(m->stream, m->join, 0));
    }
}

static void mnist_step(const MnistGpu *m, int overlap) {
    mnist_gather(m);
    mnist_forward(m, m->act, m->batch);
    mnist_loss(m);
    mnist_backward(m, overlap);
}

static void mnist_eval(const MnistGpu *m, int n_test, int epoch) {
    mnist_forward(m, m->test_act, n_test);
    mnist_eval_kernel<<<1, MNIST_EVAL_THREADS, 0, m->stream>>>(m->test_loss, m->test_acc, m->test_act[m->n_layers],
                                                              m->test_labels, n_test, m->classes, epoch);
    cudaCheck(cudaGetLastError());
}

// n_steps consecutive training steps as one graph (each step finds its batch from the device step counter)
static cudaGraphExec_t mnist_capture_steps(const MnistGpu *m, int n_steps) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaCheck(cudaStreamBeginCapture(m->stream, cudaStreamCaptureModeThreadLocal));
    for (int s = 0; s < n_steps; s++) mnist_step(m, 1);
    cudaCheck(cudaStreamEndCapture(m->stream, &graph));
    cudaCheck(cudaGraphInstantiateWithFlags(&exec, graph, 0));
    cudaCheck(cudaGraphDestroy(graph));
    return exec;
}

// ----------------------------------------------------------------------------
// training

int train_mnist(const MnistConfig *cfg, const MnistData *data, MnistResult *out) {
    int n_layers = cfg->n_layers, batch = cfg->batch, epochs = cfg->epochs;
    int pixels = cfg->sizes[0], classes = cfg->sizes[n_layers];
    int n_train = data->n_train, n_test = data->n_test;
    int steps = mnist_steps_per_epoch(cfg, n_train);
    int64_t n_params = mnist_param_count(cfg);
    int64_t total_steps = (int64_t)epochs * steps;

    // setup (not timed): streams, cuBLAS handles, device buffers, a warm-up step on zeros (loads every kernel
    // the graphs use), and the graphs themselves
    double setup_start_ms = host_ms();
    MnistGpu m;
    memset(&m, 0, sizeof m);
    m.cfg = cfg;
    m.n_layers = n_layers;
    m.batch = batch;
    m.steps = steps;
    m.n_train = n_train;
    m.pixels = pixels;
    m.classes = classes;
    m.neg_lr = -cfg->lr;
    for (int l = 0; l < n_layers; l++) m.ld[l] = (cfg->sizes[l] + 1 + MNIST_LD_ALIGN - 1) / MNIST_LD_ALIGN * MNIST_LD_ALIGN;
    m.ld[n_layers] = classes;

    cudaCheck(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&m.side, cudaStreamNonBlocking));
    for (int l = 0; l < n_layers; l++) cudaCheck(cudaEventCreateWithFlags(&m.fork[l], cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&m.join, cudaEventDisableTiming));
    mnist_blas_create(&m.blas, &m.workspace, m.stream);
    mnist_blas_create(&m.blas_side, &m.workspace_side, m.side);

    m.params = (float *)mnist_device_zeros((size_t)n_params * sizeof(float));
    for (int l = 0; l <= n_layers; l++) {
        m.act[l] = (float *)mnist_device_zeros((size_t)batch * m.ld[l] * sizeof(float));
        m.test_act[l] = (float *)mnist_device_zeros((size_t)n_test * m.ld[l] * sizeof(float));
        m.dact[l] = l > 0 ? (float *)mnist_device_zeros((size_t)batch * cfg->sizes[l] * sizeof(float)) : NULL;
    }
    m.train_pixels = (uint8_t *)mnist_device_zeros((size_t)n_train * pixels);
    m.train_labels = (uint8_t *)mnist_device_zeros((size_t)n_train);
    m.test_pixels = (uint8_t *)mnist_device_zeros((size_t)n_test * pixels);
    m.test_labels = (uint8_t *)mnist_device_zeros((size_t)n_test);
    m.order = (int32_t *)mnist_device_zeros((size_t)epochs * n_train * sizeof(int32_t));
    m.step_counter = (int *)mnist_device_zeros(sizeof(int));
    m.step_loss = (float *)mnist_device_zeros((size_t)(total_steps > 0 ? total_steps : 1) * sizeof(float));
    m.test_loss = (float *)mnist_device_zeros((size_t)(epochs > 0 ? epochs : 1) * sizeof(float));
    m.test_acc = (float *)mnist_device_zeros((size_t)(epochs > 0 ? epochs : 1) * sizeof(float));
    cudaCheck(cudaDeviceSynchronize());

    // warm-up on the zeroed buffers (every row 0, label 0, weights 0): results are overwritten in the timed run
    if (steps > 0) mnist_step(&m, 1);
    if (n_test > 0) mnist_eval(&m, n_test, 0);
    cudaCheck(cudaStreamSynchronize(m.stream));
    cudaCheck(cudaDeviceSynchronize());

    // graphs: chunks of up to MNIST_STEP_CHUNK steps, and one for the rest of an epoch; --breakdown runs eagerly
    cudaGraphExec_t chunk_exec = NULL, rest_exec = NULL;
    int chunk = steps < MNIST_STEP_CHUNK ? steps : MNIST_STEP_CHUNK;
    int n_chunks = chunk > 0 ? steps / chunk : 0, rest = chunk > 0 ? steps % chunk : 0;
    if (!cfg->breakdown && chunk > 0) {
        chunk_exec = mnist_capture_steps(&m, chunk);
        if (rest > 0) rest_exec = mnist_capture_steps(&m, rest);
    }
    TrainClock clock;
    train_clock_init(&clock, epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start_ms;

    // e2e starts with the data in host memory: everything goes up once, the images as bytes
    cudaStream_t stream = m.stream;
    train_clock_e2e_start(&clock, stream);
    for (int epoch = 0; epoch < epochs; epoch++) {
        const int32_t *rows = data->batch_order + (int64_t)epoch * n_train;
        for (int64_t p = 0; p < (int64_t)steps * batch; p++) {
            if (rows[p] < 0 || rows[p] >= n_train) {
                fprintf(stderr, "error: batch order entry %lld of epoch %d is %d, outside 0..%d\n", (long long)p, epoch,
                        rows[p], n_train - 1);
                exit(EXIT_DATA);
            }
        }
    }
    TIMED_PHASE(&clock, PHASE_H2D, stream) {
        cudaCheck(cudaMemcpyAsync(m.params, data->init_params, (size_t)n_params * sizeof(float), cudaMemcpyHostToDevice,
                                  stream));
        cudaCheck(cudaMemcpyAsync(m.train_pixels, data->train_pixels, (size_t)n_train * pixels, cudaMemcpyHostToDevice,
                                  stream));
        cudaCheck(cudaMemcpyAsync(m.train_labels, data->train_labels, (size_t)n_train, cudaMemcpyHostToDevice, stream));
        cudaCheck(cudaMemcpyAsync(m.order, data->batch_order, (size_t)epochs * n_train * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream));
        cudaCheck(cudaMemcpyAsync(m.test_pixels, data->test_pixels, (size_t)n_test * pixels, cudaMemcpyHostToDevice,
                                  stream));
        cudaCheck(cudaMemcpyAsync(m.test_labels, data->test_labels, (size_t)n_test, cudaMemcpyHostToDevice, stream));
        int64_t n = (int64_t)n_test * m.ld[0];
        if (n > 0) {
            mnist_pixels_kernel<<<mnist_blocks(n), MNIST_THREADS, 0, stream>>>(m.test_act[0], m.ld[0], m.test_pixels,
                                                                               n_test, pixels);
            cudaCheck(cudaGetLastError());
        }
        cudaCheck(cudaMemsetAsync(m.step_counter, 0, sizeof(int), stream));
    }
    train_clock_loop_start(&clock, stream);

    for (int epoch = 0; epoch < epochs; epoch++) {
        if (cfg->breakdown) {
            // eager, one phase at a time (the update is fused into the backward GEMMs)
            for (int step = 0; step < steps; step++) {
                TIMED_PHASE(&clock, PHASE_H2D, stream) mnist_gather(&m);
                TIMED_PHASE(&clock, PHASE_FORWARD, stream) mnist_forward(&m, m.act, batch);
                TIMED_PHASE(&clock, PHASE_LOSS, stream) mnist_loss(&m);
                TIMED_PHASE(&clock, PHASE_BACKWARD, stream) mnist_backward(&m, 0);
            }
        } else {
            for (int c = 0; c < n_chunks; c++) cudaCheck(cudaGraphLaunch(chunk_exec, stream));
            if (rest_exec) cudaCheck(cudaGraphLaunch(rest_exec, stream));
        }

        // test loss and accuracy after the epoch, the whole test set in one pass, left on the device
        TIMED_PHASE(&clock, PHASE_EVAL, stream) mnist_eval(&m, n_test, epoch);

        train_clock_epoch_end(&clock, epoch, stream);
    }

    TIMED_PHASE(&clock, PHASE_D2H, stream) {
        cudaCheck(cudaMemcpyAsync(out->params, m.params, (size_t)n_params * sizeof(float), cudaMemcpyDeviceToHost,
                                  stream));
        if (total_steps > 0)
            cudaCheck(cudaMemcpyAsync(out->step_loss, m.step_loss, (size_t)total_steps * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream));
        if (epochs > 0) {
            cudaCheck(cudaMemcpyAsync(out->test_loss, m.test_loss, (size_t)epochs * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream));
            cudaCheck(cudaMemcpyAsync(out->test_acc, m.test_acc, (size_t)epochs * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream));
        }
        cudaCheck(cudaStreamSynchronize(stream));
    }
    train_clock_e2e_stop(&clock, stream);
    train_clock_finish(&clock, &out->timing);

    if (chunk_exec) cudaCheck(cudaGraphExecDestroy(chunk_exec));
    if (rest_exec) cudaCheck(cudaGraphExecDestroy(rest_exec));
    cublasCheck(cublasDestroy(m.blas));
    cublasCheck(cublasDestroy(m.blas_side));
    cudaCheck(cudaFree(m.workspace));
    cudaCheck(cudaFree(m.workspace_side));
    cudaCheck(cudaFree(m.params));
    for (int l = 0; l <= n_layers; l++) {
        cudaCheck(cudaFree(m.act[l]));
        cudaCheck(cudaFree(m.test_act[l]));
        if (m.dact[l]) cudaCheck(cudaFree(m.dact[l]));
    }
    cudaCheck(cudaFree(m.train_pixels));
    cudaCheck(cudaFree(m.train_labels));
    cudaCheck(cudaFree(m.test_pixels));
    cudaCheck(cudaFree(m.test_labels));
    cudaCheck(cudaFree(m.order));
    cudaCheck(cudaFree(m.step_counter));
    cudaCheck(cudaFree(m.step_loss));
    cudaCheck(cudaFree(m.test_loss));
    cudaCheck(cudaFree(m.test_acc));
    for (int l = 0; l < n_layers; l++) cudaCheck(cudaEventDestroy(m.fork[l]));
    cudaCheck(cudaEventDestroy(m.join));
    cudaCheck(cudaStreamDestroy(m.side));
    cudaCheck(cudaStreamDestroy(m.stream));
    return 0;
}
