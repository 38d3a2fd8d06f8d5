// Stage 03, MNIST: stage 02's trainer with every small kernel fused into the kernel that already holds its
// input in registers: bias and ReLU into the forward GEMM; softmax, cross-entropy, accuracy and dlogits into
// one loss kernel; the ReLU backward into the input-gradient GEMM; the SGD update into the kernels that sum
// the weight and bias gradients, so no gradient is ever stored. Everything else is stage 02's.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>

#include "check.h"
#include "host.h"
#include "timing.h"
#include "trainer.h"

const char *const MNIST_VARIANTS[] = {"fused", NULL};
const char *const MNIST_PRECISIONS[] = {"fp32", NULL};

#define BLOCK_SIZE 256
#define TILE_X 32  // 2-D launches: 32 threads along a row of the output (coalesced), 8 rows per block
#define TILE_Y 8

// ----------------------------------------------------------------------------
// forward: out = in @ W + b, then ReLU, in one kernel (one thread per output element)

// for i < rows, j < out_dim: out[i][j] = sum_k in[i][k] * weight[k][j] + bias[j], then max(., 0) if relu
// (applied to the sum in a register: stage 02 stored it, then two more kernels read and stored it again)
__global__ void matmul_forward_kernel(float *out, const float *in, const float *weight, const float *bias, int rows,
                                      int in_dim, int out_dim, int relu) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= rows || j >= out_dim) return;
    const float *in_row = in + (size_t)i * in_dim;
    float sum = 0.0f;
    for (int k = 0; k < in_dim; k++) sum += in_row[k] * weight[(size_t)k * out_dim + j];
    float value = sum + bias[j];
    out[(size_t)i * out_dim + j] = relu ? fmaxf(value, 0.0f) : value;
}

// ----------------------------------------------------------------------------
// loss: softmax, cross-entropy, accuracy and the gradient of the loss in one kernel, one thread per row.
// Every row is shifted by its largest logit before exp, so exp never overflows.

// for each row i, with p = softmax(logits[i]):
//     loss_sum += log(sum_j exp(logits[i][j])) - logits[i][label[i]]
//     correct  += (argmax_j logits[i][j] == label[i]), ties going to the lowest index      (if correct)
//     dlogits[i][j] = (p[j] - (j == label[i])) / rows                                       (if dlogits)
// Training asks for dlogits, evaluation for the count. The probabilities never go to memory (each exp is
// recomputed for dlogits instead): stage 02 wrote them out and read them back, and three kernels read the
// logits.
__global__ void softmax_cross_entropy_kernel(float *dlogits, float *loss_sum, int *correct, const float *logits,
                                             const uint8_t *labels, int rows, int classes) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows) {
        const float *row = logits + (size_t)i * classes;
        int label = labels[i];
        float max = row[0];
        int argmax = 0;
        for (int j = 1; j < classes; j++) {
            if (row[j] > max) {
                max = row[j];
                argmax = j;
            }
        }
        float sum = 0.0f;
        for (int j = 0; j < classes; j++) sum += expf(row[j] - max);
        // from the logits, not from p: log of a probability that underflowed to 0 would be -inf
        atomicAdd(loss_sum, logf(sum) - (row[label] - max));
        if (correct && argmax == label) atomicAdd(correct, 1);
        if (dlogits) {
            float *dlogits_row = dlogits + (size_t)i * classes;
            for (int j = 0; j < classes; j++) {
                float onehot = j == label ? 1.0f : 0.0f;
                dlogits_row[j] = (expf(row[j] - max) / sum - onehot) / (float)rows;
            }
        }
    }
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
    if (k >= in_dim || j >= out_dim) return;
    float sum = 0.0f;
    for (int i = 0; i < rows; i++) sum += in[(size_t)i * in_dim + k] * dout[(size_t)i * out_dim + j];
    weight[(size_t)k * out_dim + j] -= lr * sum;
}

// for j < dim: bias[j] -= lr * sum_i dout[i][j]
// The thread that completes a column's sum holds the whole gradient and can apply it: with stage 02's
// atomicAdd per element no thread knows when the sum is done (and the sum needed a zeroed buffer and a
// second kernel). One thread per column adds its rows in series, in a fixed order, so every run sums alike.
__global__ void bias_backward_sgd_kernel(float *bias, const float *dout, float lr, int rows, int dim) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= dim) return;
    float sum = 0.0f;
    for (int i = 0; i < rows; i++) sum += dout[(size_t)i * dim + j];
    bias[j] -= lr * sum;
}

// for i < rows, k < in_dim: din[i][k] = act[i][k] > 0 ? sum_j dout[i][j] * weight[k][j] : 0
// (act, a ReLU output, is positive where its input was; stage 02 masked din in a kernel of its own)
__global__ void matmul_backward_input_kernel(float *din, const float *dout, const float *weight, const float *act,
                                             int rows, int in_dim, int out_dim) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= rows || k >= in_dim) return;
    const float *dout_row = dout + (size_t)i * out_dim;
    const float *weight_row = weight + (size_t)k * out_dim;
    float sum = 0.0f;
    for (int j = 0; j < out_dim; j++) sum += dout_row[j] * weight_row[j];
    size_t idx = (size_t)i * in_dim + k;
    din[idx] = act[idx] > 0.0f ? sum : 0.0f;
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
    dim3 block(TILE_X, TILE_Y);
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
        bias_backward_sgd_kernel<<<blocks_for(out_dim), BLOCK_SIZE, 0, stream>>>(params + mnist_bias_offset(cfg, l),
                                                                                 dact[l + 1], cfg->lr, rows, out_dim);
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
                softmax_cross_entropy_kernel<<<blocks_for(batch), BLOCK_SIZE, 0, stream>>>(
                    d_dact[n_layers], d_loss_sum, NULL, d_act[n_layers], d_labels, batch, classes);
                launchCheck();
            }

            // the update is fused into the backward pass: its time is reported as backward
            TIMED_PHASE(&clock, PHASE_BACKWARD, stream) mlp_backward_sgd(cfg, d_params, d_act, d_dact, batch, stream);

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
            softmax_cross_entropy_kernel<<<blocks_for(n_test), BLOCK_SIZE, 0, stream>>>(
                NULL, d_test_loss_sum, d_test_correct, d_test_act[n_layers], d_test_labels, n_test, classes);
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
