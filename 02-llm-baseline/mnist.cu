// Stage 02, MNIST: an MLP (784 -> hidden... -> 10, ReLU, softmax cross-entropy) trained with minibatch SGD,
// written the way a first CUDA version usually is: one kernel per operation, a naive matrix multiply with
// one thread per output element, atomicAdd for every sum, each batch gathered on the host and copied from
// pageable memory, and the host waiting for the loss after every step. The yardstick for every later stage.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>

#include "check.h"
#include "host.h"
#include "timing.h"
#include "trainer.h"

const char *const MNIST_VARIANTS[] = {"baseline", NULL};
const char *const MNIST_PRECISIONS[] = {"fp32", NULL};

#define BLOCK_SIZE 256
#define TILE_X 32  // 2-D launches: 32 threads along a row of the output (coalesced), 8 rows per block
#define TILE_Y 8

// ----------------------------------------------------------------------------
// forward: out = in @ W + b, then ReLU (three kernels, one thread per output element each)

// for i < rows, j < out_dim: out[i][j] = sum_k in[i][k] * weight[k][j]
__global__ void matmul_forward_kernel(float *out, const float *in, const float *weight, int rows, int in_dim,
                                      int out_dim) {
    // EXERCISE(matmul-forward) begin: one thread per output out[i][j] (j from the x dimension, i from y);
    //: threads outside (rows, out_dim) do nothing; a float sum over k of in[i][k] * weight[k][j], then one
    //: store. All three matrices are row-major: element [r][c] of an (R, C) matrix is at r * C + c.
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= rows || j >= out_dim) return;
    const float *in_row = in + (size_t)i * in_dim;
    float sum = 0.0f;
    for (int k = 0; k < in_dim; k++) sum += in_row[k] * weight[(size_t)k * out_dim + j];
    out[(size_t)i * out_dim + j] = sum;
    // EXERCISE end
}

// for i < rows, j < dim: out[i][j] += bias[j]
__global__ void add_bias_kernel(float *out, const float *bias, int rows, int dim) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)rows * dim) return;
    out[idx] += bias[idx % dim];
}

// for idx < n: act[idx] = max(act[idx], 0)
__global__ void relu_kernel(float *act, int64_t n) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    act[idx] = fmaxf(act[idx], 0.0f);
}

// ----------------------------------------------------------------------------
// loss: softmax, cross-entropy, accuracy and the gradient of the loss, one kernel each.
// Every row is shifted by its largest logit before exp, so exp never overflows.

// for each row i: probs[i] = exp(logits[i] - max) / sum(exp(logits[i] - max))
__global__ void softmax_kernel(float *probs, const float *logits, int rows, int classes) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows) return;
    const float *row = logits + (size_t)i * classes;
    float *prob_row = probs + (size_t)i * classes;
    float max = row[0];
    for (int j = 1; j < classes; j++) max = fmaxf(max, row[j]);
    float sum = 0.0f;
    for (int j = 0; j < classes; j++) {
        prob_row[j] = expf(row[j] - max);
        sum += prob_row[j];
    }
    for (int j = 0; j < classes; j++) prob_row[j] /= sum;
}

// for each row i: loss_sum += log(sum_j exp(logits[i][j])) - logits[i][label[i]]
// (from the logits, not from probs: log of a probability that underflowed to 0 would be -inf)
__global__ void cross_entropy_kernel(float *loss_sum, const float *logits, const uint8_t *labels, int rows,
                                     int classes) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows) return;
    const float *row = logits + (size_t)i * classes;
    float max = row[0];
    for (int j = 1; j < classes; j++) max = fmaxf(max, row[j]);
    float sum = 0.0f;
    for (int j = 0; j < classes; j++) sum += expf(row[j] - max);
    atomicAdd(loss_sum, logf(sum) - (row[labels[i]] - max));
}

// for each row i: correct += (argmax_j logits[i][j] == label[i]), ties going to the lowest index
__global__ void accuracy_kernel(int *correct, const float *logits, const uint8_t *labels, int rows, int classes) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows) return;
    const float *row = logits + (size_t)i * classes;
    int argmax = 0;
    for (int j = 1; j < classes; j++) {
        if (row[j] > row[argmax]) argmax = j;
    }
    if (argmax == labels[i]) atomicAdd(correct, 1);
}

// for i < rows, j < classes: dlogits[i][j] = (probs[i][j] - (j == label[i])) / rows
// (the gradient of the mean cross-entropy over the batch)
__global__ void cross_entropy_backward_kernel(float *dlogits, const float *probs, const uint8_t *labels, int rows,
                                              int classes) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * classes) return;
    int i = idx / classes, j = idx % classes;
    float onehot = j == labels[i] ? 1.0f : 0.0f;
    dlogits[idx] = (probs[idx] - onehot) / (float)rows;
}

// ----------------------------------------------------------------------------
// backward: for out = in @ W + b, given dout, compute dW, db and din (then through the ReLU)

// for k < in_dim, j < out_dim: dweight[k][j] = sum_i in[i][k] * dout[i][j]
__global__ void matmul_backward_weight_kernel(float *dweight, const float *in, const float *dout, int rows, int in_dim,
                                              int out_dim) {
    // EXERCISE(matmul-backward-weight) begin: one thread per weight dweight[k][j] (j from x, k from y): the
    //: sum over the batch rows i of in[i][k] * dout[i][j]. Written, not added: every call overwrites it.
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int k = blockIdx.y * blockDim.y + threadIdx.y;
    if (k >= in_dim || j >= out_dim) return;
    float sum = 0.0f;
    for (int i = 0; i < rows; i++) sum += in[(size_t)i * in_dim + k] * dout[(size_t)i * out_dim + j];
    dweight[(size_t)k * out_dim + j] = sum;
    // EXERCISE end
}

// for i < rows, j < dim: dbias[j] += dout[i][j] (dbias zeroed before)
__global__ void bias_backward_kernel(float *dbias, const float *dout, int rows, int dim) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)rows * dim) return;
    atomicAdd(&dbias[idx % dim], dout[idx]);
}

// for i < rows, k < in_dim: din[i][k] = sum_j dout[i][j] * weight[k][j]
__global__ void matmul_backward_input_kernel(float *din, const float *dout, const float *weight, int rows, int in_dim,
                                             int out_dim) {
    // EXERCISE(matmul-backward-input) begin: one thread per input gradient din[i][k] (k from x, i from y):
    //: the sum over j of dout[i][j] * weight[k][j], that is dout @ W^T, read from W as it is stored.
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= rows || k >= in_dim) return;
    const float *dout_row = dout + (size_t)i * out_dim;
    const float *weight_row = weight + (size_t)k * out_dim;
    float sum = 0.0f;
    for (int j = 0; j < out_dim; j++) sum += dout_row[j] * weight_row[j];
    din[(size_t)i * in_dim + k] = sum;
    // EXERCISE end
}

// for idx < n: dact[idx] = act[idx] > 0 ? dact[idx] : 0
// (act is the ReLU's output: positive exactly where its input was)
__global__ void relu_backward_kernel(float *dact, const float *act, int64_t n) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    if (act[idx] <= 0.0f) dact[idx] = 0.0f;
}

// ----------------------------------------------------------------------------
// update

// for p < n: params[p] -= lr * grads[p]
__global__ void sgd_kernel(float *params, const float *grads, float lr, int64_t n) {
    int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    params[p] -= lr * grads[p];
}

// ----------------------------------------------------------------------------
// launchers

static unsigned int blocks_for(int64_t n) { return (unsigned int)((n + BLOCK_SIZE - 1) / BLOCK_SIZE); }

static dim3 grid_2d(int rows, int cols) { return dim3((cols + TILE_X - 1) / TILE_X, (rows + TILE_Y - 1) / TILE_Y); }

// act[l]: (rows, sizes[l]); act[0] is the input, act[n_layers] receives the logits
static void mlp_forward(const MnistConfig *cfg, const float *params, float *const *act, int rows, cudaStream_t stream) {
    dim3 block(TILE_X, TILE_Y);
    for (int l = 0; l < cfg->n_layers; l++) {
        int in_dim = cfg->sizes[l], out_dim = cfg->sizes[l + 1];
        const float *weight = params + mnist_weight_offset(cfg, l);
        const float *bias = params + mnist_bias_offset(cfg, l);
        int64_t n_out = (int64_t)rows * out_dim;
        matmul_forward_kernel<<<grid_2d(rows, out_dim), block, 0, stream>>>(act[l + 1], act[l], weight, rows, in_dim,
                                                                            out_dim);
        launchCheck();
        add_bias_kernel<<<blocks_for(n_out), BLOCK_SIZE, 0, stream>>>(act[l + 1], bias, rows, out_dim);
        launchCheck();
        if (l < cfg->n_layers - 1) {
            relu_kernel<<<blocks_for(n_out), BLOCK_SIZE, 0, stream>>>(act[l + 1], n_out);
            launchCheck();
        }
    }
}

// dact[l]: (rows, sizes[l]) for l >= 1, dact[n_layers] holds dlogits; grads packed as params.
// Every gradient comes from the current (pre-update) params.
static void mlp_backward(const MnistConfig *cfg, const float *params, float *grads, float *const *act,
                         float *const *dact, int rows, cudaStream_t stream) {
    dim3 block(TILE_X, TILE_Y);
    cudaCheck(cudaMemset(grads, 0, mnist_param_count(cfg) * sizeof(float)));  // bias_backward accumulates
    for (int l = cfg->n_layers - 1; l >= 0; l--) {
        int in_dim = cfg->sizes[l], out_dim = cfg->sizes[l + 1];
        const float *weight = params + mnist_weight_offset(cfg, l);
        if (l > 0) {  // the images need no gradient
            matmul_backward_input_kernel<<<grid_2d(rows, in_dim), block, 0, stream>>>(dact[l], dact[l + 1], weight,
                                                                                      rows, in_dim, out_dim);
            launchCheck();
            relu_backward_kernel<<<blocks_for((int64_t)rows * in_dim), BLOCK_SIZE, 0, stream>>>(dact[l], act[l],
                                                                                                (int64_t)rows * in_dim);
            launchCheck();
        }
        matmul_backward_weight_kernel<<<grid_2d(in_dim, out_dim), block, 0, stream>>>(
            grads + mnist_weight_offset(cfg, l), act[l], dact[l + 1], rows, in_dim, out_dim);
        launchCheck();
        bias_backward_kernel<<<blocks_for((int64_t)rows * out_dim), BLOCK_SIZE, 0, stream>>>(
            grads + mnist_bias_offset(cfg, l), dact[l + 1], rows, out_dim);
        launchCheck();
    }
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
    float *d_grads;                           // (n_params,) same packing
    float *d_act[MNIST_MAX_LAYERS + 1];       // [l]: (batch, sizes[l]); [0] the batch images, [n_layers] the logits
    float *d_dact[MNIST_MAX_LAYERS + 1];      // [l], l >= 1: (batch, sizes[l]) dloss/dact[l]; [n_layers] dlogits
    float *d_probs;                           // (batch, classes)
    uint8_t *d_labels;                        // (batch,)
    float *d_test_act[MNIST_MAX_LAYERS + 1];  // [l]: (n_test, sizes[l]); [0] the test images
    uint8_t *d_test_labels;                   // (n_test,)
    float *d_loss_sum;                        // (1,) summed cross-entropy of one batch
    float *d_test_loss_sum;                   // (1,) summed cross-entropy of the test set
    int *d_test_correct;                      // (1,) correct test predictions
    cudaCheck(cudaMalloc(&d_params, n_params * sizeof(float)));
    cudaCheck(cudaMalloc(&d_grads, n_params * sizeof(float)));
    d_dact[0] = NULL;
    for (int l = 0; l <= n_layers; l++) {
        cudaCheck(cudaMalloc(&d_act[l], (size_t)batch * cfg->sizes[l] * sizeof(float)));
        if (l > 0) cudaCheck(cudaMalloc(&d_dact[l], (size_t)batch * cfg->sizes[l] * sizeof(float)));
        cudaCheck(cudaMalloc(&d_test_act[l], (size_t)n_test * cfg->sizes[l] * sizeof(float)));
    }
    cudaCheck(cudaMalloc(&d_probs, (size_t)batch * classes * sizeof(float)));
    cudaCheck(cudaMalloc(&d_labels, batch));
    cudaCheck(cudaMalloc(&d_test_labels, n_test));
    cudaCheck(cudaMalloc(&d_loss_sum, sizeof(float)));
    cudaCheck(cudaMalloc(&d_test_loss_sum, sizeof(float)));
    cudaCheck(cudaMalloc(&d_test_correct, sizeof(int)));
    float *batch_images = (float *)host_malloc((size_t)batch * pixels * sizeof(float), "the batch images");  // pageable
    uint8_t *batch_labels = (uint8_t *)host_malloc(batch, "the batch labels");                               // (batch,)
    TrainClock clock;
    train_clock_init(&clock, cfg->epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start_ms;

    // e2e starts with the data in host memory; before the loop only what never changes goes up
    cudaStream_t stream = 0;  // the legacy default stream: every launch and copy runs on it, in order
    train_clock_e2e_start(&clock, stream);
    TIMED_PHASE(&clock, PHASE_H2D, stream) {
        cudaCheck(cudaMemcpy(d_params, data->init_params, n_params * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_test_act[0], data->test_images, (size_t)n_test * pixels * sizeof(float),
                             cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_test_labels, data->test_labels, n_test, cudaMemcpyHostToDevice));
    }
    train_clock_loop_start(&clock, stream);

    for (int epoch = 0; epoch < cfg->epochs; epoch++) {
        for (int step = 0; step < steps; step++) {
            // gather the batch's rows on the host, then copy it up from pageable memory
            const int32_t *rows = data->batch_order + (int64_t)epoch * data->n_train + (int64_t)step * batch;
            TIMED_PHASE(&clock, PHASE_H2D, stream) {
                for (int i = 0; i < batch; i++) {
                    if (rows[i] < 0 || rows[i] >= data->n_train) {
                        fprintf(stderr, "error: batch order entry %d of epoch %d is %d, outside 0..%d\n",
                                step * batch + i, epoch, rows[i], data->n_train - 1);
                        exit(EXIT_DATA);
                    }
                    memcpy(batch_images + (size_t)i * pixels, data->train_images + (size_t)rows[i] * pixels,
                           pixels * sizeof(float));
                    batch_labels[i] = data->train_labels[rows[i]];
                }
                cudaCheck(
                    cudaMemcpy(d_act[0], batch_images, (size_t)batch * pixels * sizeof(float), cudaMemcpyHostToDevice));
                cudaCheck(cudaMemcpy(d_labels, batch_labels, batch, cudaMemcpyHostToDevice));
            }

            TIMED_PHASE(&clock, PHASE_FORWARD, stream) mlp_forward(cfg, d_params, d_act, batch, stream);

            TIMED_PHASE(&clock, PHASE_LOSS, stream) {
                cudaCheck(cudaMemset(d_loss_sum, 0, sizeof(float)));
                softmax_kernel<<<blocks_for(batch), BLOCK_SIZE, 0, stream>>>(d_probs, d_act[n_layers], batch, classes);
                launchCheck();
                cross_entropy_kernel<<<blocks_for(batch), BLOCK_SIZE, 0, stream>>>(d_loss_sum, d_act[n_layers],
                                                                                   d_labels, batch, classes);
                launchCheck();
                cross_entropy_backward_kernel<<<blocks_for((int64_t)batch * classes), BLOCK_SIZE, 0, stream>>>(
                    d_dact[n_layers], d_probs, d_labels, batch, classes);
                launchCheck();
            }

            TIMED_PHASE(&clock, PHASE_BACKWARD, stream)
                mlp_backward(cfg, d_params, d_grads, d_act, d_dact, batch, stream);

            TIMED_PHASE(&clock, PHASE_UPDATE, stream) {
                sgd_kernel<<<blocks_for(n_params), BLOCK_SIZE, 0, stream>>>(d_params, d_grads, cfg->lr, n_params);
                launchCheck();
            }

            // wait for the step, then read its loss back, as a progress print would
            float loss_sum = 0.0f;
            TIMED_PHASE(&clock, PHASE_D2H, stream) {
                cudaCheck(cudaDeviceSynchronize());
                cudaCheck(cudaMemcpy(&loss_sum, d_loss_sum, sizeof(float), cudaMemcpyDeviceToHost));
            }
            out->step_loss[(int64_t)epoch * steps + step] = loss_sum / (float)batch;
        }

        // test loss and accuracy after the epoch, the whole test set in one pass
        float test_loss_sum = 0.0f;
        int test_correct = 0;
        TIMED_PHASE(&clock, PHASE_EVAL, stream) {
            mlp_forward(cfg, d_params, d_test_act, n_test, stream);
            cudaCheck(cudaMemset(d_test_loss_sum, 0, sizeof(float)));
            cudaCheck(cudaMemset(d_test_correct, 0, sizeof(int)));
            cross_entropy_kernel<<<blocks_for(n_test), BLOCK_SIZE, 0, stream>>>(d_test_loss_sum, d_test_act[n_layers],
                                                                                d_test_labels, n_test, classes);
            launchCheck();
            accuracy_kernel<<<blocks_for(n_test), BLOCK_SIZE, 0, stream>>>(d_test_correct, d_test_act[n_layers],
                                                                           d_test_labels, n_test, classes);
            launchCheck();
            cudaCheck(cudaMemcpy(&test_loss_sum, d_test_loss_sum, sizeof(float), cudaMemcpyDeviceToHost));
            cudaCheck(cudaMemcpy(&test_correct, d_test_correct, sizeof(int), cudaMemcpyDeviceToHost));
        }
        out->test_loss[epoch] = test_loss_sum / (float)n_test;
        out->test_acc[epoch] = (float)test_correct / (float)n_test;

        train_clock_epoch_end(&clock, epoch, stream);
    }

    TIMED_PHASE(&clock, PHASE_D2H, stream)
        cudaCheck(cudaMemcpy(out->params, d_params, n_params * sizeof(float), cudaMemcpyDeviceToHost));
    train_clock_e2e_stop(&clock, stream);
    train_clock_finish(&clock, &out->timing);

    cudaCheck(cudaFree(d_params));
    cudaCheck(cudaFree(d_grads));
    for (int l = 0; l <= n_layers; l++) {
        cudaCheck(cudaFree(d_act[l]));
        if (l > 0) cudaCheck(cudaFree(d_dact[l]));
        cudaCheck(cudaFree(d_test_act[l]));
    }
    cudaCheck(cudaFree(d_probs));
    cudaCheck(cudaFree(d_labels));
    cudaCheck(cudaFree(d_test_labels));
    cudaCheck(cudaFree(d_loss_sum));
    cudaCheck(cudaFree(d_test_loss_sum));
    cudaCheck(cudaFree(d_test_correct));
    free(batch_images);
    free(batch_labels);
    return 0;
}
