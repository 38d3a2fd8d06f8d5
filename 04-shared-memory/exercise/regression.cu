/*
Exercise (stage 04, build): the block reduction. This is 04-shared-memory/regression.cu with two pieces cut
out: the body of warp_sum (the shuffle step) and the block step of forward_loss_backward_shared_kernel
(shared memory between the warps of a block). Everything else is the stage's: thread_sums (each thread's
points in registers, float4 loads), add_to_global, the one-wave grid, the launches, the loop.

    make stage 4 exercise              build this file in place of the stage's regression.cu, run the GPU
                                       suite (all three variants), and, if it passes, time it
    make stage 4 exercise TRY_RUN=0    only what needs no GPU: compiles, exports, links, markers left

As shipped it compiles and FAILS: warp_sum returns each lane's own value, so "shuffle" adds only lane 0's
points of every warp, and "shared" adds nothing at all; "atomic" (stage 03's kernel) still passes. Every
place to fill in carries a TODO(exercise) marker; delete each marker once its code is written (a file
with a marker left never passes). The answer is the stage's own file: read it after your attempt, or run
`make stage 4 exercise ANSWER=1`. Then remove your __syncthreads() and see what
compute-sanitizer --tool racecheck says (04-shared-memory/exercises.md).
*/
#include <stdint.h>
#include <time.h>
#include <cuda_runtime.h>

#include "check.h"
#include "timing.h"
#include "trainer.h"

const char *const REGRESSION_VARIANTS[] = {"shared", "atomic", "shuffle", NULL};
enum { VARIANT_SHARED, VARIANT_ATOMIC, VARIANT_SHUFFLE };  // indices into REGRESSION_VARIANTS

#define BLOCK_SIZE 256  // a multiple of WARP_SIZE: the reductions below assume full warps
#define WARP_SIZE 32
#define WARPS_PER_BLOCK (BLOCK_SIZE / WARP_SIZE)

// ----------------------------------------------------------------------------
// forward, loss and gradient, "atomic": stage 03's kernel, one atomicAdd per point and sum.
// The sums are doubles: a float accumulator that has grown to ~4e4 (5M points) rounds away the low
// bits of every ~1e-2 term and ends up ~0.5% off; a double holds all of them (atomicAdd on double
// needs sm_60, older than anything this repository builds for).

// for (i = 0; i < n; i++) {
//     r = w * x[i] + b - y[i];
//     loss_sum += r^2;
//     grad_sum[0] += r * x[i]; grad_sum[1] += r;   (skipped when grad_sum is NULL: the test set)
// }
// (the gradient of the MSE is 2/n times the grad sums; the update applies the factor)
__global__ void forward_loss_backward_atomic_kernel(double *loss_sum, double *grad_sum, const float *x, const float *y,
                                                    const float *params, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float xi = x[i];
    float residual = params[0] * xi + params[1] - y[i];
    atomicAdd(loss_sum, (double)(residual * residual));
    if (grad_sum == NULL) return;
    atomicAdd(&grad_sum[0], (double)(residual * xi));
    atomicAdd(&grad_sum[1], (double)residual);
}

// ----------------------------------------------------------------------------
// forward, loss and gradient, reduced on chip. The same three sums, built bottom-up: a thread's points
// in registers, a warp's 32 threads with shuffles, a block's warps through shared memory, and only then
// one atomicAdd per block (per warp in "shuffle") into the double sums in global memory.
// Inside a block the partial sums stay float: a thread adds ~n / (grid * BLOCK_SIZE) terms (15 at the
// canonical size on an H100), and the warp and block levels are trees of depth 5 and 3. The long sum,
// across blocks, is the double one.

typedef struct {
    float r2, rx, r;  // sums of r^2, r x and r over some points
} Sums;

__device__ void add_point(Sums *s, float x, float y, float w, float b) {
    float residual = w * x + b - y;
    s->r2 += residual * residual;
    s->rx += residual * x;
    s->r += residual;
}

// This thread's points: a grid-stride loop over float4s (x and y are cudaMalloc'ed, so 16-byte aligned),
// four points per 16-byte load, then at most 3 leftover points, one each for the first threads.
__device__ Sums thread_sums(const float *x, const float *y, const float *params, int64_t n) {
    float w = params[0], b = params[1];
    Sums s = {0.0f, 0.0f, 0.0f};
    int64_t thread = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const float4 *x4 = (const float4 *)x, *y4 = (const float4 *)y;
    int64_t n4 = n / 4;
    for (int64_t i = thread; i < n4; i += stride) {
        float4 xv = x4[i], yv = y4[i];
        add_point(&s, xv.x, yv.x, w, b);
        add_point(&s, xv.y, yv.y, w, b);
        add_point(&s, xv.z, yv.z, w, b);
        add_point(&s, xv.w, yv.w, w, b);
    }
    int64_t leftover = n4 * 4 + thread;
    if (leftover < n) add_point(&s, x[leftover], y[leftover], w, b);
    return s;
}

// Lane 0 ends up with the sum of v over the warp's 32 lanes: each step adds the value `offset` lanes up,
// register to register, no memory involved. Every lane of the warp must take part (full mask).
__device__ float warp_sum(float v) {
    // TODO(exercise): five steps of __shfl_down_sync(0xffffffffu, v, offset) with offset = 16, 8, 4, 2, 1,
    //   each adding the value of the lane `offset` above; after the last, lane 0 holds the warp's sum.
    return v;
}

__device__ Sums warp_sums(Sums s) {
    s.r2 = warp_sum(s.r2);
    s.rx = warp_sum(s.rx);
    s.r = warp_sum(s.r);
    return s;
}

// one atomicAdd per sum; grad_sum NULL: the loss alone (the test set)
__device__ void add_to_global(double *loss_sum, double *grad_sum, Sums s) {
    atomicAdd(loss_sum, (double)s.r2);
    if (grad_sum == NULL) return;
    atomicAdd(&grad_sum[0], (double)s.rx);
    atomicAdd(&grad_sum[1], (double)s.r);
}

// "shuffle": lane 0 of every warp adds its warp's sums to global memory
__global__ void forward_loss_backward_shuffle_kernel(double *loss_sum, double *grad_sum, const float *x, const float *y,
                                                     const float *params, int64_t n) {
    Sums s = warp_sums(thread_sums(x, y, params, n));
    if (threadIdx.x % WARP_SIZE == 0) add_to_global(loss_sum, grad_sum, s);
}

// "shared": lane 0 of every warp leaves its warp's sums in shared memory; warp 0 adds them up with one
// more round of shuffles and its lane 0 adds the block's sums to global memory.
__global__ void forward_loss_backward_shared_kernel(double *loss_sum, double *grad_sum, const float *x, const float *y,
                                                    const float *params, int64_t n) {
    Sums s = warp_sums(thread_sums(x, y, params, n));  // lane 0 of each warp holds its warp's sums

    // TODO(exercise): the block step, then one atomicAdd per block and sum.
    //   1. this thread's warp is threadIdx.x / WARP_SIZE, its lane threadIdx.x % WARP_SIZE; a __shared__
    //      array with one row per sum and one column per warp (WARPS_PER_BLOCK columns);
    //      lane 0 of every warp writes its warp's three sums into its column;
    //   2. __syncthreads(): every warp's column is written before anyone reads;
    //   3. warp 0 alone: lane i < WARPS_PER_BLOCK loads column i (the other lanes 0), warp_sums() adds them;
    //   4. its lane 0 adds the block's sums with add_to_global(loss_sum, grad_sum, ...).
    //   Which layout of the array lets warp 0's lanes read without bank conflicts?
    (void)s, (void)loss_sum, (void)grad_sum;
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
// launchers: one launch each; "atomic" one thread per point, the reductions one wave of blocks

static unsigned int blocks_for(int64_t n) { return (unsigned int)((n + BLOCK_SIZE - 1) / BLOCK_SIZE); }

// The largest grid that runs in one wave: SMs × the blocks of the variant's kernel one SM holds at once.
// Once every thread loops, more blocks only queue behind the first wave (each adding its atomics), and
// fewer leave SMs without enough loads in flight to keep memory busy.
static int wave_blocks(int variant) {
    int device, sm_count, per_sm;
    const void *kernel = variant == VARIANT_SHUFFLE ? (const void *)forward_loss_backward_shuffle_kernel
                                                    : (const void *)forward_loss_backward_shared_kernel;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, BLOCK_SIZE, 0));
    return sm_count * per_sm;
}

// a wave, or fewer blocks when n is small: at least one float4 per thread
static unsigned int wave_for(int max_blocks, int64_t n) {
    int64_t needed = (n + 4 * BLOCK_SIZE - 1) / (4 * BLOCK_SIZE);
    return (unsigned int)(needed < max_blocks ? needed : max_blocks);
}

// loss_sum and grad_sum are zeroed first; grad_sum NULL: the loss alone
static void forward_loss_backward(int variant, int max_blocks, double *loss_sum, double *grad_sum, const float *x,
                                  const float *y, const float *params, int64_t n) {
    cudaCheck(cudaMemset(loss_sum, 0, sizeof(double)));
    if (grad_sum != NULL) cudaCheck(cudaMemset(grad_sum, 0, 2 * sizeof(double)));
    unsigned int grid = variant == VARIANT_ATOMIC ? blocks_for(n) : wave_for(max_blocks, n);
    if (variant == VARIANT_ATOMIC) {
        forward_loss_backward_atomic_kernel<<<grid, BLOCK_SIZE>>>(loss_sum, grad_sum, x, y, params, n);
    } else if (variant == VARIANT_SHUFFLE) {
        forward_loss_backward_shuffle_kernel<<<grid, BLOCK_SIZE>>>(loss_sum, grad_sum, x, y, params, n);
    } else {
        forward_loss_backward_shared_kernel<<<grid, BLOCK_SIZE>>>(loss_sum, grad_sum, x, y, params, n);
    }
    launchCheck();
}

static void sgd_update(float *params, const double *grad_sum, float lr, int64_t n) {
    sgd_update_kernel<<<1, 1>>>(params, grad_sum, lr, n);
    launchCheck();
}

// test MSE with the parameters now on the device (waits for the GPU)
static float test_loss_now(int variant, int max_blocks, double *loss_sum, const float *x, const float *y,
                           const float *params, int64_t n) {
    forward_loss_backward(variant, max_blocks, loss_sum, NULL, x, y, params, n);
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

    // setup (not timed): device buffers, the size of a wave
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
    int max_blocks = wave_blocks(cfg->variant);
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
            out->test_loss[logged] =
                test_loss_now(cfg->variant, max_blocks, d_test_loss_sum, d_x_test, d_y_test, d_params, n_test);
            train_clock_phase_end(&clock, PHASE_EVAL, stream);
        }

        // forward, loss and backward are one kernel now: --breakdown reports it as "loss"
        train_clock_phase_begin(&clock, stream);
        forward_loss_backward(cfg->variant, max_blocks, d_loss_sum, d_grad_sum, d_x_train, d_y_train, d_params,
                              n_train);
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
    out->final_test_loss =
        test_loss_now(cfg->variant, max_blocks, d_test_loss_sum, d_x_test, d_y_test, d_params, n_test);

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
