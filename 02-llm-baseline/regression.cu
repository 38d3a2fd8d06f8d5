// Stage 02, regression: y = w x + b by full-batch gradient descent, as a first CUDA port writes it: one kernel per
// step, one thread and one atomicAdd per point and sum, the host waiting for the loss every epoch. The yardstick.
#include <stdint.h>
#include <cuda_runtime.h>

#include "check.h"
#include "host.h"
#include "timing.h"
#include "trainer.h"

const char *const REGRESSION_VARIANTS[] = {"baseline", NULL};

#define BLOCK_SIZE 256

// ----------------------------------------------------------------------------
// forward: the model's prediction for every point

// for (i = 0; i < n; i++) pred[i] = w * x[i] + b;
__global__ void predict_kernel(float *pred, const float *x, const float *params, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    pred[i] = params[0] * x[i] + params[1];
}

// ----------------------------------------------------------------------------
// loss and gradient: sums over all points, one atomicAdd per point into a single address.
// The sums are doubles: a float accumulator that has grown to ~4e4 (4M training points) rounds away the low
// bits of every ~1e-2 term and ends up ~0.5% off; a double holds all of them (atomicAdd on double
// needs sm_60, older than anything this repository builds for).

// for (i = 0; i < n; i++) loss_sum += (pred[i] - y[i])^2;
__global__ void squared_error_kernel(double *loss_sum, const float *pred, const float *y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float residual = pred[i] - y[i];
    atomicAdd(loss_sum, (double)(residual * residual));
}

// for (i = 0; i < n; i++) { grad_sum[0] += (pred[i] - y[i]) * x[i]; grad_sum[1] += pred[i] - y[i]; }
// (the gradient of the MSE is 2/n times these sums; the update applies the factor)
__global__ void gradient_kernel(double *grad_sum, const float *pred, const float *x, const float *y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float residual = pred[i] - y[i];
    atomicAdd(&grad_sum[0], (double)(residual * x[i]));
    atomicAdd(&grad_sum[1], (double)residual);
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

static void predict(float *pred, const float *x, const float *params, int64_t n) {
    predict_kernel<<<blocks_for(n), BLOCK_SIZE>>>(pred, x, params, n);
    launchCheck();
}

static void squared_error_sum(double *loss_sum, const float *pred, const float *y, int64_t n) {
    cudaCheck(cudaMemset(loss_sum, 0, sizeof(double)));
    squared_error_kernel<<<blocks_for(n), BLOCK_SIZE>>>(loss_sum, pred, y, n);
    launchCheck();
}

static void gradient_sum(double *grad_sum, const float *pred, const float *x, const float *y, int64_t n) {
    cudaCheck(cudaMemset(grad_sum, 0, 2 * sizeof(double)));
    gradient_kernel<<<blocks_for(n), BLOCK_SIZE>>>(grad_sum, pred, x, y, n);
    launchCheck();
}

static void sgd_update(float *params, const double *grad_sum, float lr, int64_t n) {
    sgd_update_kernel<<<1, 1>>>(params, grad_sum, lr, n);
    launchCheck();
}

// test MSE with the parameters now on the device (waits for the GPU)
static float test_loss_now(float *pred, double *loss_sum, const float *x, const float *y, const float *params,
                           int64_t n) {
    predict(pred, x, params, n);
    squared_error_sum(loss_sum, pred, y, n);
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
    float *d_pred_train;           // (n_train,) w x + b for every training point
    float *d_pred_test;            // (n_test,)
    float *d_params;               // (2,) w, b
    double *d_loss_sum;            // (1,) train sum of squared residuals
    double *d_test_loss_sum;       // (1,) test sum of squared residuals
    double *d_grad_sum;            // (2,) sum of r x, sum of r
    cudaCheck(cudaMalloc(&d_x_train, n_train * sizeof(float)));
    cudaCheck(cudaMalloc(&d_y_train, n_train * sizeof(float)));
    cudaCheck(cudaMalloc(&d_x_test, n_test * sizeof(float)));
    cudaCheck(cudaMalloc(&d_y_test, n_test * sizeof(float)));
    cudaCheck(cudaMalloc(&d_pred_train, n_train * sizeof(float)));
    cudaCheck(cudaMalloc(&d_pred_test, n_test * sizeof(float)));
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
            out->test_loss[log_slot] =
                test_loss_now(d_pred_test, d_test_loss_sum, d_x_test, d_y_test, d_params, n_test);

        TIMED_PHASE(&clock, PHASE_FORWARD, stream) predict(d_pred_train, d_x_train, d_params, n_train);
        TIMED_PHASE(&clock, PHASE_LOSS, stream) squared_error_sum(d_loss_sum, d_pred_train, d_y_train, n_train);
        TIMED_PHASE(&clock, PHASE_BACKWARD, stream)
            gradient_sum(d_grad_sum, d_pred_train, d_x_train, d_y_train, n_train);
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
        out->final_test_loss = test_loss_now(d_pred_test, d_test_loss_sum, d_x_test, d_y_test, d_params, n_test);
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
    cudaCheck(cudaFree(d_pred_train));
    cudaCheck(cudaFree(d_pred_test));
    cudaCheck(cudaFree(d_params));
    cudaCheck(cudaFree(d_loss_sum));
    cudaCheck(cudaFree(d_test_loss_sum));
    cudaCheck(cudaFree(d_grad_sum));
    return 0;
}
