// Stage 02, regression: y = w x + b by full-batch gradient descent.
// Round 1 of the loop: one fused kernel per epoch. Each thread walks the points with float4 loads and keeps
// sum r^2, sum r x, sum r (and, on logged epochs, the test sum r^2) in FP64 registers; blocks reduce with warp
// shuffles and write one partial each; the last block to finish (threadfence + ticket) sums the partials in a fixed
// order, records the losses in a device array and applies the SGD update in place. No contended atomics, no host
// synchronization inside the loop: one launch and one epoch event per epoch, one device-to-host copy at the end.
#include <stdint.h>
#include <stddef.h>
#include <cuda_runtime.h>

#include "check.h"
#include "host.h"
#include "timing.h"
#include "trainer.h"

// the name is kept so that the drivers' and the loop's variant flags still select it
const char *const REGRESSION_VARIANTS[] = {"baseline", NULL};

#define RG_THREADS 256
#define RG_WARPS (RG_THREADS / 32)

// ----------------------------------------------------------------------------
// reductions

static __device__ __forceinline__ double rg_warp_sum(double v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

// sums v[0..3] over the block; the totals are valid in thread 0. Safe to call more than once per kernel.
static __device__ __forceinline__ void rg_block_sum4(double v[4]) {
    __shared__ double shared[4][RG_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = rg_warp_sum(v[k]);
    if (lane == 0) {
#pragma unroll
        for (int k = 0; k < 4; k++) shared[k][warp] = v[k];
    }
    __syncthreads();
    if (warp == 0) {
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = rg_warp_sum(lane < RG_WARPS ? shared[k][lane] : 0.0);
    }
    __syncthreads();
}

// one training point: r = w x + b - y (in double); v[0] += r^2, v[1] += r x, v[2] += r
static __device__ __forceinline__ void rg_train_point(double w, double b, float xf, float yf, double v[4]) {
    const double x = (double)xf;
    const double r = fma(w, x, b) - (double)yf;
    v[0] = fma(r, r, v[0]);
    v[1] = fma(r, x, v[1]);
    v[2] += r;
}

// one test point: v[3] += r^2
static __device__ __forceinline__ void rg_test_point(double w, double b, float xf, float yf, double v[4]) {
    const double r = fma(w, (double)xf, b) - (double)yf;
    v[3] = fma(r, r, v[3]);
}

// ----------------------------------------------------------------------------
// the epoch kernel
//
// n > 0: training pass with the parameters now in params: the train MSE goes to *train_loss_dst (when not NULL)
//        and the parameters are updated in place, w -= lr 2/n sum(r x), b -= lr 2/n sum(r).
// nt > 0: test pass with the same (pre-update) parameters: the test MSE goes to *test_loss_dst.
// partials holds 4 doubles per block; *counter is 0 on entry and is reset to 0 by the last block.

static __global__ void __launch_bounds__(RG_THREADS)
rg_epoch_kernel(double *params, const float *__restrict__ x, const float *__restrict__ y, int64_t n,
                const float *__restrict__ xt, const float *__restrict__ yt, int64_t nt, double *partials,
                unsigned int *counter, float *train_loss_dst, float *test_loss_dst, double lr) {
    const double w = params[0], b = params[1];
    const int64_t start = (int64_t)blockIdx.x * RG_THREADS + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * RG_THREADS;
    double v[4] = {0.0, 0.0, 0.0, 0.0};  // train sum r^2, sum r x, sum r; test sum r^2

    if (n > 0) {
        const int64_t n4 = n >> 2;
        const float4 *x4 = reinterpret_cast<const float4 *>(x);
        const float4 *y4 = reinterpret_cast<const float4 *>(y);
        for (int64_t i = start; i < n4; i += stride) {
            const float4 xv = __ldg(x4 + i);
            const float4 yv = __ldg(y4 + i);
            rg_train_point(w, b, xv.x, yv.x, v);
            rg_train_point(w, b, xv.y, yv.y, v);
            rg_train_point(w, b, xv.z, yv.z, v);
            rg_train_point(w, b, xv.w, yv.w, v);
        }
        for (int64_t i = (n4 << 2) + start; i < n; i += stride) rg_train_point(w, b, __ldg(x + i), __ldg(y + i), v);
    }
    if (nt > 0) {
        const int64_t n4 = nt >> 2;
        const float4 *x4 = reinterpret_cast<const float4 *>(xt);
        const float4 *y4 = reinterpret_cast<const float4 *>(yt);
        for (int64_t i = start; i < n4; i += stride) {
            const float4 xv = __ldg(x4 + i);
            const float4 yv = __ldg(y4 + i);
            rg_test_point(w, b, xv.x, yv.x, v);
            rg_test_point(w, b, xv.y, yv.y, v);
            rg_test_point(w, b, xv.z, yv.z, v);
            rg_test_point(w, b, xv.w, yv.w, v);
        }
        for (int64_t i = (n4 << 2) + start; i < nt; i += stride) rg_test_point(w, b, __ldg(xt + i), __ldg(yt + i), v);
    }

    rg_block_sum4(v);

    __shared__ bool is_last;
    if (threadIdx.x == 0) {
#pragma unroll
        for (int k = 0; k < 4; k++) partials[4 * (size_t)blockIdx.x + k] = v[k];
        __threadfence();  // the partials are visible device-wide before the ticket is taken
        is_last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();

    // the last block: sum the partials in a fixed order (deterministic), then record and update
    double t[4] = {0.0, 0.0, 0.0, 0.0};
    for (unsigned int j = threadIdx.x; j < gridDim.x; j += RG_THREADS) {
#pragma unroll
        for (int k = 0; k < 4; k++) t[k] += __ldcg(partials + 4 * (size_t)j + k);
    }
    rg_block_sum4(t);

    if (threadIdx.x == 0) {
        if (n > 0) {
            if (train_loss_dst) *train_loss_dst = (float)(t[0] / (double)n);
            const double step = lr * (2.0 / (double)n);
            params[0] = w - step * t[1];
            params[1] = b - step * t[2];
        }
        if (nt > 0) *test_loss_dst = (float)(t[3] / (double)nt);
        *counter = 0u;
    }
}

static __global__ void rg_set_params_kernel(double *params, double w, double b) {
    params[0] = w;
    params[1] = b;
}

// ----------------------------------------------------------------------------
// launchers

static unsigned int rg_grid(int64_t n, int max_blocks) {
    int64_t items = (n + 3) / 4;  // float4s
    int64_t blocks = (items + RG_THREADS - 1) / RG_THREADS;
    if (blocks < 1) blocks = 1;
    if (blocks > max_blocks) blocks = max_blocks;
    return (unsigned int)blocks;
}

// n = 0: no training pass (and no update); nt = 0: no test pass
static void rg_launch(cudaStream_t stream, int max_blocks, double *params, const float *x, const float *y, int64_t n,
                      const float *xt, const float *yt, int64_t nt, double *partials, unsigned int *counter,
                      float *train_loss_dst, float *test_loss_dst, double lr) {
    int64_t larger = n > nt ? n : nt;
    rg_epoch_kernel<<<rg_grid(larger, max_blocks), RG_THREADS, 0, stream>>>(
        params, x, y, n, xt, yt, nt, partials, counter, train_loss_dst, test_loss_dst, lr);
    launchCheck();
}

// ----------------------------------------------------------------------------
// training

int train_regression(const RegressionConfig *cfg, const RegressionData *data, RegressionResult *out) {
    int64_t n_train = data->n_train, n_test = data->n_test;
    const int epochs = cfg->epochs;
    const int n_logged = regression_logged_count(epochs, cfg->log_every);
    const double lr = (double)cfg->lr;

    // setup (not timed): buffers, the launch geometry, the kernels loaded
    double setup_start_ms = host_ms();
    float *d_x_train, *d_y_train;  // (n_train,)
    float *d_x_test, *d_y_test;    // (n_test,)
    double *d_partials;            // (4 * max_blocks,) per-block sums
    unsigned int *d_counter;       // (1,) last-block ticket
    cudaCheck(cudaMalloc(&d_x_train, (n_train > 0 ? n_train : 1) * sizeof(float)));
    cudaCheck(cudaMalloc(&d_y_train, (n_train > 0 ? n_train : 1) * sizeof(float)));
    cudaCheck(cudaMalloc(&d_x_test, (n_test > 0 ? n_test : 1) * sizeof(float)));
    cudaCheck(cudaMalloc(&d_y_test, (n_test > 0 ? n_test : 1) * sizeof(float)));

    int device = 0, num_sms = 0, blocks_per_sm = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, rg_epoch_kernel, RG_THREADS, 0));
    if (blocks_per_sm < 1) blocks_per_sm = 1;
    int max_blocks = num_sms * blocks_per_sm;
    if (max_blocks < 1) max_blocks = 1;
    cudaFuncAttributes attr;  // loads both kernels now rather than inside the timed loop
    cudaCheck(cudaFuncGetAttributes(&attr, rg_epoch_kernel));
    cudaCheck(cudaFuncGetAttributes(&attr, rg_set_params_kernel));

    cudaCheck(cudaMalloc(&d_partials, 4 * (size_t)max_blocks * sizeof(double)));
    cudaCheck(cudaMalloc(&d_counter, sizeof(unsigned int)));
    cudaCheck(cudaMemset(d_counter, 0, sizeof(unsigned int)));

    // the outputs in one block of device memory, brought back by one copy:
    // w, b (double), then train_loss[n_logged], test_loss[n_logged], final_test_loss (float)
    size_t out_bytes = 2 * sizeof(double) + (2 * (size_t)n_logged + 1) * sizeof(float);
    unsigned char *d_out, *h_out;
    cudaCheck(cudaMalloc(&d_out, out_bytes));
    cudaCheck(cudaMallocHost(&h_out, out_bytes));
    double *d_params = (double *)d_out;
    float *d_losses = (float *)(d_out + 2 * sizeof(double));
    float *d_train_loss = d_losses, *d_test_loss = d_losses + n_logged, *d_final_test_loss = d_losses + 2 * n_logged;

    cudaStream_t stream = 0;
    cudaCheck(cudaDeviceSynchronize());
    TrainClock clock;
    train_clock_init(&clock, epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start_ms;

    // e2e starts with the data in host memory
    train_clock_e2e_start(&clock, stream);
    TIMED_PHASE(&clock, PHASE_H2D, stream) {
        if (n_train > 0) {
            cudaCheck(cudaMemcpyAsync(d_x_train, data->x_train, n_train * sizeof(float), cudaMemcpyHostToDevice, stream));
            cudaCheck(cudaMemcpyAsync(d_y_train, data->y_train, n_train * sizeof(float), cudaMemcpyHostToDevice, stream));
        }
        if (n_test > 0) {
            cudaCheck(cudaMemcpyAsync(d_x_test, data->x_test, n_test * sizeof(float), cudaMemcpyHostToDevice, stream));
            cudaCheck(cudaMemcpyAsync(d_y_test, data->y_test, n_test * sizeof(float), cudaMemcpyHostToDevice, stream));
        }
        rg_set_params_kernel<<<1, 1, 0, stream>>>(d_params, (double)data->w_init, (double)data->b_init);
        launchCheck();
    }
    train_clock_loop_start(&clock, stream);

    int logged = 0;
    for (int epoch = 0; epoch < epochs; epoch++) {
        float *train_dst = NULL, *test_dst = NULL;
        if (regression_epoch_logged(epoch, epochs, cfg->log_every)) {
            train_dst = d_train_loss + logged;
            test_dst = d_test_loss + logged;
            logged++;
        }

        if (cfg->breakdown) {
            // with --breakdown the test loss (parameters at the start of the epoch) is its own launch, so that
            // eval is timed apart; otherwise it rides along in the epoch's one kernel
            if (test_dst) {
                TIMED_PHASE(&clock, PHASE_EVAL, stream) {
                    rg_launch(stream, max_blocks, d_params, d_x_train, d_y_train, 0, d_x_test, d_y_test, n_test,
                              d_partials, d_counter, NULL, test_dst, lr);
                }
            }
            // forward, loss, gradient and update, fused into one kernel
            TIMED_PHASE(&clock, PHASE_FORWARD, stream) {
                rg_launch(stream, max_blocks, d_params, d_x_train, d_y_train, n_train, d_x_test, d_y_test, 0,
                          d_partials, d_counter, train_dst, NULL, lr);
            }
        } else {
            rg_launch(stream, max_blocks, d_params, d_x_train, d_y_train, n_train, d_x_test, d_y_test,
                      test_dst ? n_test : 0, d_partials, d_counter, train_dst, test_dst, lr);
        }

        if (epoch < epochs - 1) train_clock_epoch_end(&clock, epoch, stream);  // the last one: below
    }

    // the test loss of the trained parameters, the last evaluation: the last epoch (and loop) ends after it
    TIMED_PHASE(&clock, PHASE_EVAL, stream) {
        rg_launch(stream, max_blocks, d_params, d_x_train, d_y_train, 0, d_x_test, d_y_test, n_test, d_partials,
                  d_counter, NULL, d_final_test_loss, lr);
    }
    train_clock_epoch_end(&clock, epochs - 1, stream);

    // the trained parameters and every loss, in one copy
    TIMED_PHASE(&clock, PHASE_D2H, stream) {
        cudaCheck(cudaMemcpy(h_out, d_out, out_bytes, cudaMemcpyDeviceToHost));
    }
    train_clock_e2e_stop(&clock, stream);
    train_clock_finish(&clock, &out->timing);

    const double *h_params = (const double *)h_out;
    const float *h_losses = (const float *)(h_out + 2 * sizeof(double));
    out->w = (float)h_params[0];
    out->b = (float)h_params[1];
    for (int i = 0; i < logged; i++) {
        out->train_loss[i] = h_losses[i];
        out->test_loss[i] = h_losses[n_logged + i];
    }
    out->final_test_loss = h_losses[2 * n_logged];

    cudaCheck(cudaFree(d_x_train));
    cudaCheck(cudaFree(d_y_train));
    cudaCheck(cudaFree(d_x_test));
    cudaCheck(cudaFree(d_y_test));
    cudaCheck(cudaFree(d_partials));
    cudaCheck(cudaFree(d_counter));
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFreeHost(h_out));
    return 0;
}
