// Stage 03-style regression: y = w x + b by full-batch gradient descent with the whole epoch fused into one kernel.
// Each launch: every thread reads x, y as float4, forms r = w x + b - y in fp32 (as stage 02 did) and keeps the
// sums of r^2, r x and r in fp64 registers; blocks reduce them with warp shuffles into per-block partials; the last
// block to finish (threadfence + one counter atomic per block) sums the partials in a fixed order, writes the
// train loss, applies the SGD step and resets the counter. On logged epochs extra blocks of the same launch sum the
// test set's r^2 with the same (start-of-epoch) parameters. Losses land in a device report buffer, so the loop never
// waits for the host: one copy at the end brings back w, b, the final test loss and every logged loss.
#include <stdint.h>
#include <stdlib.h>
#include <cuda_runtime.h>

#include "check.h"
#include "host.h"
#include "timing.h"
#include "trainer.h"

const char *const REGRESSION_VARIANTS[] = {"fused", NULL};

#define REG03_BLOCK 256
#define REG03_WARPS (REG03_BLOCK / 32)

// ----------------------------------------------------------------------------
// the arguments of one fused step (passed by value)

typedef struct {
    const float *x_train, *y_train;  // (n_train,)
    const float *x_test, *y_test;    // (n_test,)
    int64_t n_train, n_test;
    float *params;                   // (2,) w, b: read by every block at its start, updated by the last block
    double *partials;                // (3, partial_stride) per-block sums of r^2, r x, r
    int partial_stride;
    unsigned int *blocks_done;       // (1,) 0 between launches; the last block resets it
    unsigned int train_blocks;       // blocks [0, train_blocks) sum training points, the rest test points
    int update;                      // 1: apply the gradient step
    float lr;
    float *train_loss_out;           // where the train MSE goes, or NULL
    float *test_loss_out;            // where the test MSE goes, or NULL
} Reg03StepArgs;

// ----------------------------------------------------------------------------
// reductions in double

static __device__ __forceinline__ double reg03_warp_sum(double v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

// sums each v[k] over the block; the result is valid in thread 0. Every thread of the block must call it.
template <int K>
static __device__ __forceinline__ void reg03_block_sum(double (&v)[K]) {
    __shared__ double warp_sums[K][REG03_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k < K; k++) {
        v[k] = reg03_warp_sum(v[k]);
        if (lane == 0) warp_sums[k][warp] = v[k];
    }
    __syncthreads();
    if (warp == 0) {
#pragma unroll
        for (int k = 0; k < K; k++) v[k] = reg03_warp_sum(lane < REG03_WARPS ? warp_sums[k][lane] : 0.0);
    }
}

// ----------------------------------------------------------------------------
// forward + loss + gradient for one thread's share of a set: sq += r^2, rx += r x, rs += r, r = w x + b - y

static __device__ __forceinline__ void reg03_accumulate(const float *__restrict__ x, const float *__restrict__ y,
                                                        int64_t n, float w, float b, int64_t first, int64_t stride,
                                                        double &sq, double &rx, double &rs) {
    const int64_t n4 = n >> 2;
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    const float4 *y4 = reinterpret_cast<const float4 *>(y);
    for (int64_t i = first; i < n4; i += stride) {
        const float4 xv = __ldg(x4 + i);
        const float4 yv = __ldg(y4 + i);
        const float r0 = fmaf(w, xv.x, b) - yv.x;
        const float r1 = fmaf(w, xv.y, b) - yv.y;
        const float r2 = fmaf(w, xv.z, b) - yv.z;
        const float r3 = fmaf(w, xv.w, b) - yv.w;
        sq += (double)((r0 * r0 + r1 * r1) + (r2 * r2 + r3 * r3));
        rx += (double)((r0 * xv.x + r1 * xv.y) + (r2 * xv.z + r3 * xv.w));
        rs += (double)((r0 + r1) + (r2 + r3));
    }
    for (int64_t i = 4 * n4 + first; i < n; i += stride) {  // the last n % 4 points
        const float xi = __ldg(x + i);
        const float r = fmaf(w, xi, b) - __ldg(y + i);
        sq += (double)(r * r);
        rx += (double)(r * xi);
        rs += (double)r;
    }
}

// ----------------------------------------------------------------------------
// the fused step: forward, loss, gradient, (test loss), update in one launch

static __global__ void __launch_bounds__(REG03_BLOCK) reg03_step_kernel(Reg03StepArgs a) {
    const float w = a.params[0], b = a.params[1];  // the parameters at the start of the epoch
    double s[3] = {0.0, 0.0, 0.0};
    if (blockIdx.x < a.train_blocks)
        reg03_accumulate(a.x_train, a.y_train, a.n_train, w, b, (int64_t)blockIdx.x * REG03_BLOCK + threadIdx.x,
                         (int64_t)a.train_blocks * REG03_BLOCK, s[0], s[1], s[2]);
    else
        reg03_accumulate(a.x_test, a.y_test, a.n_test, w, b,
                         (int64_t)(blockIdx.x - a.train_blocks) * REG03_BLOCK + threadIdx.x,
                         (int64_t)(gridDim.x - a.train_blocks) * REG03_BLOCK, s[0], s[1], s[2]);
    reg03_block_sum<3>(s);

    // publish this block's sums; the last block to arrive finishes the step
    __shared__ bool am_last;
    if (threadIdx.x == 0) {
        a.partials[blockIdx.x] = s[0];
        a.partials[a.partial_stride + blockIdx.x] = s[1];
        a.partials[2 * a.partial_stride + blockIdx.x] = s[2];
        __threadfence();
        am_last = (atomicAdd(a.blocks_done, 1u) == gridDim.x - 1);
    }
    __syncthreads();
    if (!am_last) return;
    __threadfence();

    // t[0..2]: train sums of r^2, r x, r; t[3]: test sum of r^2. Fixed order: deterministic.
    double t[4] = {0.0, 0.0, 0.0, 0.0};
    for (unsigned int i = threadIdx.x; i < gridDim.x; i += REG03_BLOCK) {
        const double sq = __ldcg(a.partials + i);
        if (i < a.train_blocks) {
            t[0] += sq;
            t[1] += __ldcg(a.partials + a.partial_stride + i);
            t[2] += __ldcg(a.partials + 2 * a.partial_stride + i);
        } else {
            t[3] += sq;
        }
    }
    reg03_block_sum<4>(t);
    if (threadIdx.x == 0) {
        if (a.train_loss_out) *a.train_loss_out = (float)(t[0] / (double)a.n_train);
        if (a.test_loss_out) *a.test_loss_out = (float)(t[3] / (double)a.n_test);
        if (a.update) {
            // w -= lr * 2/n * sum(r x); b -= lr * 2/n * sum(r)   (as stage 02)
            const double scale = 2.0 / (double)a.n_train;
            a.params[0] = (float)(w - a.lr * scale * t[1]);
            a.params[1] = (float)(b - a.lr * scale * t[2]);
        }
        *a.blocks_done = 0;  // every other block has already counted itself
    }
}

// ----------------------------------------------------------------------------
// launchers

// blocks for n points read 4 at a time, at least 1, at most cap
static unsigned int reg03_blocks_for(int64_t n, int cap) {
    int64_t blocks = ((n + 3) / 4 + REG03_BLOCK - 1) / REG03_BLOCK;
    if (blocks < 1) blocks = 1;
    if (blocks > cap) blocks = cap;
    return (unsigned int)blocks;
}

static void reg03_launch(const Reg03StepArgs *args, unsigned int test_blocks, cudaStream_t stream) {
    reg03_step_kernel<<<args->train_blocks + test_blocks, REG03_BLOCK, 0, stream>>>(*args);
    launchCheck();
}

// ----------------------------------------------------------------------------
// training

int train_regression(const RegressionConfig *cfg, const RegressionData *data, RegressionResult *out) {
    const int64_t n_train = data->n_train, n_test = data->n_test;
    const int n_logged = regression_logged_count(cfg->epochs, cfg->log_every);

    // setup (not timed): launch geometry, buffers
    double setup_start_ms = host_ms();
    int device = 0, sms = 0, per_sm = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reg03_step_kernel, REG03_BLOCK, 0));
    if (sms < 1) sms = 1;
    if (per_sm < 1) per_sm = 1;
    const int cap = sms * per_sm;  // one full wave
    // logged epochs: the wave split between training and test blocks in proportion to their sizes
    int cap_train = (int)((double)cap * (double)n_train / (double)(n_train + n_test));
    if (cap_train < 1) cap_train = 1;
    int cap_test = cap - cap_train;
    if (cap_test < 1) cap_test = 1;
    const int partial_stride = cap + 1;  // >= any grid below
    const unsigned int plain_train_blocks = reg03_blocks_for(n_train, cap);
    const unsigned int logged_train_blocks = reg03_blocks_for(n_train, cap_train);
    const unsigned int logged_test_blocks = reg03_blocks_for(n_test, cap_test);
    const unsigned int eval_blocks = reg03_blocks_for(n_test, cap);

    float *d_x_train, *d_y_train;  // (n_train,)
    float *d_x_test, *d_y_test;    // (n_test,)
    float *d_report;               // w, b, final test loss, train losses [n_logged], test losses [n_logged]
    double *d_partials;            // (3, partial_stride)
    unsigned int *d_blocks_done;   // (1,)
    const size_t report_count = 3 + 2 * (size_t)n_logged;
    cudaCheck(cudaMalloc(&d_x_train, n_train * sizeof(float)));
    cudaCheck(cudaMalloc(&d_y_train, n_train * sizeof(float)));
    cudaCheck(cudaMalloc(&d_x_test, n_test * sizeof(float)));
    cudaCheck(cudaMalloc(&d_y_test, n_test * sizeof(float)));
    cudaCheck(cudaMalloc(&d_report, report_count * sizeof(float)));
    cudaCheck(cudaMalloc(&d_partials, 3 * (size_t)partial_stride * sizeof(double)));
    cudaCheck(cudaMalloc(&d_blocks_done, sizeof(unsigned int)));
    cudaCheck(cudaMemset(d_report, 0xFF, report_count * sizeof(float)));  // NaN until written
    cudaCheck(cudaMemset(d_blocks_done, 0, sizeof(unsigned int)));
    cudaCheck(cudaDeviceSynchronize());
    float *h_report = (float *)host_malloc(report_count * sizeof(float), "regression report");
    float *d_params = d_report;
    float *d_final_test = d_report + 2;
    float *d_train_log = d_report + 3;
    float *d_test_log = d_report + 3 + n_logged;
    TrainClock clock;
    train_clock_init(&clock, cfg->epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start_ms;

    // e2e starts with the data in host memory
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

    Reg03StepArgs args;
    args.x_train = d_x_train;
    args.y_train = d_y_train;
    args.x_test = d_x_test;
    args.y_test = d_y_test;
    args.n_train = n_train;
    args.n_test = n_test;
    args.params = d_params;
    args.partials = d_partials;
    args.partial_stride = partial_stride;
    args.blocks_done = d_blocks_done;
    args.lr = cfg->lr;

    int logged = 0;
    for (int epoch = 0; epoch < cfg->epochs; epoch++) {
        int log_slot = regression_epoch_logged(epoch, cfg->epochs, cfg->log_every) ? logged++ : -1;
        unsigned int test_blocks;
        args.update = 1;
        if (log_slot >= 0) {
            // train and test losses with the parameters at the start of the epoch, in the same launch
            args.train_blocks = logged_train_blocks;
            test_blocks = logged_test_blocks;
            args.train_loss_out = d_train_log + log_slot;
            args.test_loss_out = d_test_log + log_slot;
        } else {
            args.train_blocks = plain_train_blocks;
            test_blocks = 0;
            args.train_loss_out = NULL;
            args.test_loss_out = NULL;
        }
        // forward, loss, gradient and update fused: timed as the loss phase (loss + fused gradient)
        TIMED_PHASE(&clock, PHASE_LOSS, stream) reg03_launch(&args, test_blocks, stream);

        if (epoch < cfg->epochs - 1) train_clock_epoch_end(&clock, epoch, stream);  // the last one: below
    }

    // the test loss of the trained parameters: test blocks only, no update
    args.train_blocks = 0;
    args.update = 0;
    args.train_loss_out = NULL;
    args.test_loss_out = d_final_test;
    TIMED_PHASE(&clock, PHASE_EVAL, stream) reg03_launch(&args, eval_blocks, stream);
    train_clock_epoch_end(&clock, cfg->epochs - 1, stream);

    // one copy: the trained w, b, the final test loss and every logged loss
    TIMED_PHASE(&clock, PHASE_D2H, stream)
        cudaCheck(cudaMemcpy(h_report, d_report, report_count * sizeof(float), cudaMemcpyDeviceToHost));
    train_clock_e2e_stop(&clock, stream);
    train_clock_finish(&clock, &out->timing);
    out->w = h_report[0];
    out->b = h_report[1];
    out->final_test_loss = h_report[2];
    for (int i = 0; i < n_logged; i++) {
        out->train_loss[i] = h_report[3 + i];
        out->test_loss[i] = h_report[3 + n_logged + i];
    }

    free(h_report);
    cudaCheck(cudaFree(d_x_train));
    cudaCheck(cudaFree(d_y_train));
    cudaCheck(cudaFree(d_x_test));
    cudaCheck(cudaFree(d_y_test));
    cudaCheck(cudaFree(d_report));
    cudaCheck(cudaFree(d_partials));
    cudaCheck(cudaFree(d_blocks_done));
    return 0;
}
