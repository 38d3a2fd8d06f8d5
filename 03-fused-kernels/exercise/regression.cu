/*
Exercise (stage 03, build): write the fused kernel. This is 03-fused-kernels/regression.cu with the body of
forward_loss_backward_kernel cut out; everything around it (launches, memsets, the update, the loop) is
the stage's. Stage 02 ran three kernels over the points (predict, squared error, gradient) and kept the
predictions in a 16 MB buffer between them; here one thread per point must do all of it in registers.

    make stage 3 exercise          build this file in place of the stage's regression.cu, run the GPU suite,
                                   and, if it passes, time it against the stage's own file
    make stage 3 exercise TRY_RUN=0    only what needs no GPU: compiles, exports, links, markers left

As shipped it compiles and FAILS: the kernel adds nothing, so every sum is 0, the parameters never move
and no loss matches the CPU reference. Every place to fill in carries a TODO(exercise) marker; delete
each marker once its code is written (a file with a marker left never passes). The answer is the
stage's own file: read it after your attempt, or run `make stage 3 exercise ANSWER=1`.
*/
#include <stdint.h>
#include <time.h>
#include <cuda_runtime.h>

#include "check.h"
#include "timing.h"
#include "trainer.h"

const char *const REGRESSION_VARIANTS[] = {"fused", NULL};

#define BLOCK_SIZE 256

// ----------------------------------------------------------------------------
// forward, loss and gradient: one pass over the points, the residual never leaves a register.
// Every sum is still built with one atomicAdd per point into a single address (stage 04 removes them).
// The sums are doubles: a float accumulator that has grown to ~4e4 (5M points) rounds away the low
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
    // TODO(exercise): one thread per point, n points, the launch is blocks_for(n) blocks of BLOCK_SIZE.
    //   1. find this thread's point i; threads past the end do nothing;
    //   2. read x[i] and y[i] once and keep the residual r = w x + b - y in a register (w = params[0],
    //      b = params[1]), as stage 02's predict and gradient kernels computed it, in float;
    //   3. add r^2 to *loss_sum, and, unless grad_sum is NULL (the test set), r x to grad_sum[0] and r to
    //      grad_sum[1], with atomicAdd on the double sums (stage 04 removes these atomics; not yet).
    (void)loss_sum, (void)grad_sum, (void)x, (void)y, (void)params, (void)n;
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
// launchers: one launch each, one thread per point

static unsigned int blocks_for(int64_t n) { return (unsigned int)((n + BLOCK_SIZE - 1) / BLOCK_SIZE); }

// loss_sum and grad_sum are zeroed first; grad_sum NULL: the loss alone
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

static double host_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

// ----------------------------------------------------------------------------
// training

int train_regression(const RegressionConfig *cfg, const RegressionData *data, RegressionResult *out) {
    int64_t n_train = data->n_train, n_test = data->n_test;

    // setup (not timed): device buffers
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
    train_clock_phase_begin(&clock, stream);
    float params_init[2] = {data->w_init, data->b_init};
    cudaCheck(cudaMemcpy(d_x_train, data->x_train, n_train * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_y_train, data->y_train, n_train * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_x_test, data->x_test, n_test * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_y_test, data->y_test, n_test * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_params, params_init, 2 * sizeof(float), cudaMemcpyHostToDevice));
    train_clock_phase_end(&clock, PHASE_H2D, stream);
    train_clock_loop_start(&clock, stream);

    int logged = 0;
    for (int epoch = 0; epoch < cfg->epochs; epoch++) {
        int is_logged = regression_epoch_logged(epoch, cfg->epochs, cfg->log_every);

        // test loss with the parameters at the start of the epoch, before they are updated
        if (is_logged) {
            train_clock_phase_begin(&clock, stream);
            out->test_loss[logged] = test_loss_now(d_test_loss_sum, d_x_test, d_y_test, d_params, n_test);
            train_clock_phase_end(&clock, PHASE_EVAL, stream);
        }

        // forward, loss and backward are one kernel now: --breakdown reports it as "loss"
        train_clock_phase_begin(&clock, stream);
        forward_loss_backward(d_loss_sum, d_grad_sum, d_x_train, d_y_train, d_params, n_train);
        train_clock_phase_end(&clock, PHASE_LOSS, stream);

        train_clock_phase_begin(&clock, stream);
        sgd_update(d_params, d_grad_sum, cfg->lr, n_train);
        train_clock_phase_end(&clock, PHASE_UPDATE, stream);

        // wait for the epoch, then read its loss back, as a progress print would
        train_clock_phase_begin(&clock, stream);
        cudaCheck(cudaDeviceSynchronize());
        double loss_sum = 0.0;
        cudaCheck(cudaMemcpy(&loss_sum, d_loss_sum, sizeof(double), cudaMemcpyDeviceToHost));
        train_clock_phase_end(&clock, PHASE_D2H, stream);
        if (is_logged) out->train_loss[logged++] = (float)(loss_sum / (double)n_train);

        train_clock_epoch_end(&clock, epoch, stream);
    }

    train_clock_phase_begin(&clock, stream);
    float params_trained[2];
    cudaCheck(cudaMemcpy(params_trained, d_params, 2 * sizeof(float), cudaMemcpyDeviceToHost));
    train_clock_phase_end(&clock, PHASE_D2H, stream);
    train_clock_e2e_stop(&clock, stream);
    train_clock_finish(&clock, &out->timing);
    out->w = params_trained[0];
    out->b = params_trained[1];

    // reported, not timed: the test loss of the trained parameters
    out->final_test_loss = test_loss_now(d_test_loss_sum, d_x_test, d_y_test, d_params, n_test);

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
