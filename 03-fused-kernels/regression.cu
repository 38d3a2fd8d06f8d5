// Stage 03, regression: kernel fusion. One thread per point keeps r = w x + b - y in a register and adds r^2, r x
// and r to the sums in one kernel: no prediction buffers, x and y read once an epoch. Otherwise stage 02.
#include <stdint.h>
#include <cuda_runtime.h>

#include "check.h"
#include "host.h"
#include "timing.h"
#include "trainer.h"

const char *const REGRESSION_VARIANTS[] = {"fused", NULL};

#define BLOCK_SIZE 256

// ----------------------------------------------------------------------------
// forward, loss and gradient: one pass over the points, the residual never leaves a register.
// Every sum is still built with one atomicAdd per point into a single address.
// The sums are doubles: a float accumulator that has grown to ~4e4 (4M training points) rounds away the low
// bits of every ~1e-2 term and ends up ~0.5% off; a double holds all of them (atomicAdd on double
// needs sm_60, older than anything this repository builds for).

// for (i = 0; i < n; i++) {
//     r = w * x[i] + b - y[i];
//     loss_sum += r^2;
//     grad_sum[0] += r * x[i]; grad_sum[1] += r;   (skipped when grad_sum is NULL: the test set)
// }
// (the gradient of the MSE is 2/n times the grad sums; the update applies the factor)
__global__ void forward_loss_backward_kernel(double *loss_sum, double *grad_sum, const float *x, const float *y,
                                             const float *params, int64_t n) {
    // EXERCISE(fused-kernel) begin: one thread per point, none past n: r = w x + b - y in a register (float),
    //: then atomicAdd r^2 to *loss_sum and, unless grad_sum is NULL (the test set), r x and r to grad_sum[0], [1].
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float xi = x[i];
    float residual = params[0] * xi + params[1] - y[i];
    atomicAdd(loss_sum, (double)(residual * residual));
    if (grad_sum == NULL) return;
    atomicAdd(&grad_sum[0], (double)(residual * xi));
    atomicAdd(&grad_sum[1], (double)residual);
    // EXERCISE end
}

// ----------------------------------------------------------------------------
// update: one thread, two parameters

// w -= lr * 2/n * sum(r x); b -= lr * 2/n * sum(r)
__global__ void sgd_update_kernel(float *params, const double *grad_sum, float lr, int64_t n) {
    double scale = 2.0 / (double)n;
    params[0] = (float)(params[0] - lr * scale * grad_sum[0]);
    params[1] = (float)(params[1] - lr * scale * grad_sum[1]);
}

// ----------------------------------------------------------------------------
// launchers

static unsigned int blocks_for(int64_t n) { return (unsigned int)((n + BLOCK_SIZE - 1) / BLOCK_SIZE); }

// grad_sum NULL: the loss alone (the test set)
static void forward_loss_backward(double *loss_sum, double *grad_sum, const float *x, const float *y,
                                  const float *params, int64_t n) {
    cudaCheck(cudaMemset(loss_sum, 0, sizeof(double)));
    if (grad_sum != NULL) cudaCheck(cudaMemset(grad_sum, 0, 2 * sizeof(double)));
    forward_loss_backward_kernel<<<blocks_for(n), BLOCK_SIZE>>>(loss_sum, grad_sum, x, y, params, n);
    launchCheck();
}

static void sgd_update(float *params, const double *grad_sum, float lr, int64_t n) {
    sgd_update_kernel<<<1, 1>>>(params, grad_sum, lr, n);
    launchCheck();
}

// test MSE with the parameters now on the device (waits for the GPU)
static float test_loss_now(double *loss_sum, const float *x, const float *y, const float *params, int64_t n) {
    forward_loss_backward(loss_sum, NULL, x, y, params, n);
    double sum = 0.0;
    cudaCheck(cudaMemcpy(&sum, loss_sum, sizeof(double), cudaMemcpyDeviceToHost));
    return (float)(sum / (double)n);
}

// ----------------------------------------------------------------------------
// training

int train_regression(const RegressionConfig *cfg, const RegressionData *data, RegressionResult *out) {
    int64_t n_train = data->n_train, n_test = data->n_test;

    // setup (not timed): buffers, and everything else made once before e2e starts
    double setup_start_ms = host_ms();
    float *d_x_train, *d_y_train;  // (n_train,)
    float *d_x_test, *d_y_test;    // (n_test,)
    float *d_params;               // (2,) w, b
    double *d_loss_sum;            // (1,) train sum of squared residuals
    double *d_test_loss_sum;       // (1,) test sum of squared residuals
    double *d_grad_sum;            // (2,) sum of r x, sum of r
    cudaCheck(cudaMalloc(&d_x_train, n_train * sizeof(float)));
    cudaCheck(cudaMalloc(&d_y_train, n_train * sizeof(float)));
    cudaCheck(cudaMalloc(&d_x_test, n_test * sizeof(float)));
    cudaCheck(cudaMalloc(&d_y_test, n_test * sizeof(float)));
    cudaCheck(cudaMalloc(&d_params, 2 * sizeof(float)));
    cudaCheck(cudaMalloc(&d_loss_sum, sizeof(double)));
    cudaCheck(cudaMalloc(&d_test_loss_sum, sizeof(double)));
    cudaCheck(cudaMalloc(&d_grad_sum, 2 * sizeof(double)));
    TrainClock clock;
    train_clock_init(&clock, cfg->epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start_ms;

    // e2e starts with the data in host memory: pageable copies, each one waits for itself
    cudaStream_t stream = 0;
    train_clock_e2e_start(&clock, stream);
    float params_init[2] = {data->w_init, data->b_init};
    TIMED_PHASE(&clock, PHASE_H2D, stream) {
        cudaCheck(cudaMemcpy(d_x_train, data->x_train, n_train * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_y_train, data->y_train, n_train * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_x_test, data->x_test, n_test * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_y_test, data->y_test, n_test * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_params, params_init, 2 * sizeof(float), cudaMemcpyHostToDevice));
    }
    train_clock_loop_start(&clock, stream);

    int logged = 0;
    for (int epoch = 0; epoch < cfg->epochs; epoch++) {
        int log_slot = regression_epoch_logged(epoch, cfg->epochs, cfg->log_every) ? logged++ : -1;

        // test loss with the parameters at the start of the epoch, before they are updated
        if (log_slot >= 0) TIMED_PHASE(&clock, PHASE_EVAL, stream)
            out->test_loss[log_slot] = test_loss_now(d_test_loss_sum, d_x_test, d_y_test, d_params, n_test);

        // forward, loss and backward together: --breakdown reports them as "loss"
        TIMED_PHASE(&clock, PHASE_LOSS, stream)
            forward_loss_backward(d_loss_sum, d_grad_sum, d_x_train, d_y_train, d_params, n_train);
        TIMED_PHASE(&clock, PHASE_UPDATE, stream) sgd_update(d_params, d_grad_sum, cfg->lr, n_train);

        // read the epoch's loss back, as a progress print would: cudaMemcpy waits for the epoch first
        double loss_sum = 0.0;
        TIMED_PHASE(&clock, PHASE_D2H, stream)
            cudaCheck(cudaMemcpy(&loss_sum, d_loss_sum, sizeof(double), cudaMemcpyDeviceToHost));
        if (log_slot >= 0) out->train_loss[log_slot] = (float)(loss_sum / (double)n_train);

        if (epoch < cfg->epochs - 1) train_clock_epoch_end(&clock, epoch, stream);  // the last one: below
    }

    // the test loss of the trained parameters, the last evaluation: the last epoch (and loop) ends after it
    TIMED_PHASE(&clock, PHASE_EVAL, stream)
        out->final_test_loss = test_loss_now(d_test_loss_sum, d_x_test, d_y_test, d_params, n_test);
    train_clock_epoch_end(&clock, cfg->epochs - 1, stream);

    float h_params[2];  // the trained w, b
    TIMED_PHASE(&clock, PHASE_D2H, stream)
        cudaCheck(cudaMemcpy(h_params, d_params, 2 * sizeof(float), cudaMemcpyDeviceToHost));
    train_clock_e2e_stop(&clock, stream);
    train_clock_finish(&clock, &out->timing);
    out->w = h_params[0];
    out->b = h_params[1];

    cudaCheck(cudaFree(d_x_train));
    cudaCheck(cudaFree(d_y_train));
    cudaCheck(cudaFree(d_x_test));
    cudaCheck(cudaFree(d_y_test));
    cudaCheck(cudaFree(d_params));
    cudaCheck(cudaFree(d_loss_sum));
    cudaCheck(cudaFree(d_test_loss_sum));
    cudaCheck(cudaFree(d_grad_sum));
    return 0;
}
