// Stage 09, regression: stage 08's trainer, unchanged (one cooperative launch runs every epoch, the training set on
// chip). A step of it is a few sums over the points, with no matrix product for tensor cores to take: this stage's
// idea is in the MNIST trainer.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>
#include <cooperative_groups.h>  // stage 08: the grid barrier, grid.sync()

#include "check.h"
#include "host.h"
#include "staging.h"
#include "timing.h"
#include "trainer.h"

namespace cg = cooperative_groups;

const char *const REGRESSION_VARIANTS[] = {"persistent", "graphs", NULL};
#define VARIANT_PERSISTENT 0  // index of "persistent" above

#define BLOCK_SIZE 256  // a multiple of WARP_SIZE: the reductions below assume full warps
#define WARP_SIZE 32
#define WARPS_PER_BLOCK (BLOCK_SIZE / WARP_SIZE)
// Epochs per graph launch. Any number works (the epoch count lives on the device); 10 = one log interval.
#define EPOCHS_PER_GRAPH 10

// ----------------------------------------------------------------------------
// forward, loss and gradient: one pass over the points, reduced on chip. The three sums are built bottom-up:
// a thread's points in registers, a warp's 32 threads with shuffles, a block's warps through shared memory,
// and only then one atomicAdd per block and sum into the double sums in global memory.
// The sums are doubles: a float accumulator that has grown to ~4e4 (4M training points) rounds away the low
// bits of every ~1e-2 term and ends up ~0.5% off; a double holds all of them (atomicAdd on double
// needs sm_60, older than anything this repository builds for).
// Inside a block the partial sums stay float: a thread adds ~n / (grid * BLOCK_SIZE) terms (about 20 at the
// 4M training points on an H100), the warp and block levels are trees of depth 5 and 3; the long sum, across
// blocks, is double.

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

// Every lane ends up with the sums over the warp's 32 lanes: each step adds the values of lane (lane ^ offset),
// register to register, no memory involved. All 32 lanes must take part (full mask).
__device__ Sums warp_sums(Sums s) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        s.r2 += __shfl_xor_sync(0xffffffffu, s.r2, offset);
        s.rx += __shfl_xor_sync(0xffffffffu, s.rx, offset);
        s.r += __shfl_xor_sync(0xffffffffu, s.r, offset);
    }
    return s;
}

// for (i = 0; i < n; i++) {
//     r = w * x[i] + b - y[i];
//     loss_sum += r^2;
//     grad_sum[0] += r * x[i]; grad_sum[1] += r;   (skipped when grad_sum is NULL: the test set)
// }
// (the gradient of the MSE is 2/n times the grad sums; the update applies the factor)
// Lane 0 of every warp leaves its warp's sums in shared memory; warp 0 adds them up with one more round of
// shuffles, and its lane 0 adds the block's sums to global memory.
__global__ void forward_loss_backward_kernel(double *loss_sum, double *grad_sum, const float *x, const float *y,
                                             const float *params, int64_t n) {
    // One Sums per warp: warp 0's lane i reads words 3i, 3i + 1, 3i + 2, and as 3 is odd no two lanes hit the
    // same bank (no bank conflicts); the writes are one lane per warp.
    __shared__ Sums warp_partials[WARPS_PER_BLOCK];
    int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;

    Sums s = warp_sums(thread_sums(x, y, params, n));
    if (lane == 0) warp_partials[warp] = s;
    __syncthreads();
    if (warp != 0) return;
    Sums block = {0.0f, 0.0f, 0.0f};
    if (lane < WARPS_PER_BLOCK) block = warp_partials[lane];
    block = warp_sums(block);
    if (lane != 0) return;
    atomicAdd(loss_sum, (double)block.r2);
    if (grad_sum == NULL) return;
    atomicAdd(&grad_sum[0], (double)block.rx);
    atomicAdd(&grad_sum[1], (double)block.r);
}

// ----------------------------------------------------------------------------
// update: one thread, two parameters

// A logged epoch (log_slot >= 0) leaves its loss sum and starting parameters in the logs; then
// w -= lr * 2/n * sum(r x), b -= lr * 2/n * sum(r); then the sums are zeroed for the next epoch (no memsets).
// The epoch number comes from device memory (the update advances it): a graph replays the same launch, with
// the same arguments, for every epoch.
__global__ void sgd_update_kernel(float *params, double *loss_sum, double *grad_sum, double *loss_log, float *param_log,
                                  const int *log_slots, int *epoch, float lr, int64_t n) {
    // EXERCISE(epoch-counter) begin: this epoch's log slot is log_slots at the device's epoch counter; advance the
    //: counter; then stage 05's bookkeeping and update (log a logged epoch, step w and b, zero the sums)
    int log_slot = log_slots[*epoch];
    *epoch += 1;
    if (log_slot >= 0) {
        loss_log[log_slot] = *loss_sum;
        param_log[2 * log_slot] = params[0];
        param_log[2 * log_slot + 1] = params[1];
    }
    double scale = 2.0 / (double)n;
    params[0] = (float)(params[0] - lr * scale * grad_sum[0]);
    params[1] = (float)(params[1] - lr * scale * grad_sum[1]);
    *loss_sum = 0.0;
    grad_sum[0] = 0.0;
    grad_sum[1] = 0.0;
    // EXERCISE end
}

// ----------------------------------------------------------------------------
// the persistent run: every epoch in one cooperative launch, the training set on chip
//
// Block g owns the points [g * chunk, g * chunk + chunk). It loads its whole rows of PERSISTENT_THREADS points, up
// to on_chip, once: x into shared memory, y into registers (thread t holds points k * PERSISTENT_THREADS + t). The
// rest of its chunk, if any, it reads from global memory every epoch. An epoch: every block sums its points and stores the block's sums; one
// grid barrier; then every block adds all the blocks' sums in the same fixed order, so each one computes the same
// update, bit for bit, and the next epoch starts without a second barrier (regression.svg).

// A block fills an SM's register file: 512 threads of 128 registers, half of them this thread's y values (with
// 1,024 threads of 64 registers, 32 y values leave too few for the rest, and the compiler spills).
#define PERSISTENT_THREADS 512
#define PERSISTENT_WARPS (PERSISTENT_THREADS / WARP_SIZE)
#define REGISTER_POINTS 64  // y values a thread keeps in registers, x values in shared memory: 128 KB a block

typedef struct {
    double r2, rx, r;  // Sums in double: a block's and the grid's, and a thread's points read from global memory
} DoubleSums;

typedef struct {
    const float *x, *y;    // (n,) the training set: what fits on chip is read once, the rest every epoch
    float *params;         // (2,) w, b: read at the start, the trained values written at the end
    DoubleSums *partial;   // (2, blocks) each block's sums; epochs take the two halves in turn (see below)
    double *loss_log;      // (n_logged,) the logged epochs' train sums of squared residuals
    float *param_log;      // (n_logged, 2) w, b at the start of each logged epoch
    const int *log_slots;  // (epochs,) an epoch's slot in the logs, -1: not logged
    int64_t n, chunk;      // points; points a block owns (whole rows of PERSISTENT_THREADS; the last block's fewer)
    int on_chip, epochs;   // points of a chunk held on chip (a multiple of PERSISTENT_THREADS, at most
    float lr;              //   REGISTER_POINTS of them)
    int blocks;            // the launch (host side): blocks of PERSISTENT_THREADS,
    size_t shared_bytes;   // with on_chip floats of dynamic shared memory each
} PersistentArgs;

// add_point in double: a thread may add thousands of these
__device__ void add_point_double(DoubleSums *s, float x, float y, float w, float b) {
    float residual = w * x + b - y;
    s->r2 += residual * residual;
    s->rx += residual * x;
    s->r += residual;
}

// The points [from, to) of x and y (from 16-byte aligned), this thread's share of a block-stride loop over float4s
__device__ void add_global_points(DoubleSums *s, const float *x, const float *y, int64_t from, int64_t to, float w,
                                  float b) {
    const float4 *x4 = (const float4 *)(x + from), *y4 = (const float4 *)(y + from);
    int64_t n4 = (to - from) / 4;
    for (int64_t i = threadIdx.x; i < n4; i += PERSISTENT_THREADS) {
        float4 xv = x4[i], yv = y4[i];
        add_point_double(s, xv.x, yv.x, w, b);
        add_point_double(s, xv.y, yv.y, w, b);
        add_point_double(s, xv.z, yv.z, w, b);
        add_point_double(s, xv.w, yv.w, w, b);
    }
    int64_t leftover = from + n4 * 4 + threadIdx.x;
    if (leftover < to) add_point_double(s, x[leftover], y[leftover], w, b);
}

// warp_sums in double: every lane ends up with the warp's sums, added in the same butterfly every time
__device__ DoubleSums warp_double_sums(DoubleSums s) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        s.r2 += __shfl_xor_sync(0xffffffffu, s.r2, offset);
        s.rx += __shfl_xor_sync(0xffffffffu, s.rx, offset);
        s.r += __shfl_xor_sync(0xffffffffu, s.r, offset);
    }
    return s;
}

// The block's sums, in every lane of warp 0 (the other warps get their own warp's): warps, then warp 0 over them
__device__ DoubleSums block_double_sums(DoubleSums s, DoubleSums *warp_sums_of) {
    int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    s = warp_double_sums(s);
    if (lane == 0) warp_sums_of[warp] = s;
    __syncthreads();
    DoubleSums none = {0.0, 0.0, 0.0};
    if (warp == 0) s = warp_double_sums(lane < PERSISTENT_WARPS ? warp_sums_of[lane] : none);
    return s;
}

// After the barrier, in every block: the sums of all blocks, in warp 0. Thread t reads block t's sums (all the
// reads at once: one trip to L2, not one per block), then the block adds them as it added its points' sums.
// __ldcg and __stcg keep the sums in L2: another SM wrote them, and L1 is not coherent.
__device__ DoubleSums grid_double_sums(const DoubleSums *partial, DoubleSums *warp_sums_of) {
    DoubleSums mine = {0.0, 0.0, 0.0};
    for (int g = threadIdx.x; g < gridDim.x; g += PERSISTENT_THREADS) {
        mine.r2 += __ldcg(&partial[g].r2);
        mine.rx += __ldcg(&partial[g].rx);
        mine.r += __ldcg(&partial[g].r);
    }
    return block_double_sums(mine, warp_sums_of);
}

// for (epoch = 0; epoch < epochs; epoch++) { the sums of forward_loss_backward_kernel; the update of
// sgd_update_kernel }, in one cooperative launch of a.blocks x PERSISTENT_THREADS
__global__ void __launch_bounds__(PERSISTENT_THREADS, 1) regression_persistent_kernel(PersistentArgs a) {
    extern __shared__ float x_chip[];                       // (on_chip,) x of my chunk's first points
    __shared__ DoubleSums warp_sums_of[PERSISTENT_WARPS];  // block_double_sums' scratch
    __shared__ float next_params[2];                        // the update, from thread 0 to the block
    cg::grid_group grid = cg::this_grid();
    int64_t first = (int64_t)blockIdx.x * a.chunk, count = a.n - first < a.chunk ? a.n - first : a.chunk;
    // whole rows of PERSISTENT_THREADS points on chip, the same number for every thread of the block
    int rows = count / PERSISTENT_THREADS < a.on_chip / PERSISTENT_THREADS ? (int)(count / PERSISTENT_THREADS)
                                                                          : a.on_chip / PERSISTENT_THREADS;
    for (int i = threadIdx.x; i < rows * PERSISTENT_THREADS; i += PERSISTENT_THREADS) x_chip[i] = a.x[first + i];
    float y_chip[REGISTER_POINTS];  // registers: once the loops are unrolled, every index is a constant
#pragma unroll
    for (int k = 0; k < REGISTER_POINTS; k++)
        y_chip[k] = k < rows ? a.y[first + k * PERSISTENT_THREADS + threadIdx.x] : 0.0f;
    float w = a.params[0], b = a.params[1];  // every block keeps its own copy, updated alike

    for (int epoch = 0; epoch < a.epochs; epoch++) {
        Sums mine = {0.0f, 0.0f, 0.0f};  // my points on chip, at most REGISTER_POINTS: float, as in 07
#pragma unroll
        for (int k = 0; k < REGISTER_POINTS; k++)
            if (k < rows) add_point(&mine, x_chip[k * PERSISTENT_THREADS + threadIdx.x], y_chip[k], w, b);
        DoubleSums s = {mine.r2, mine.rx, mine.r};
        add_global_points(&s, a.x, a.y, first + rows * PERSISTENT_THREADS, first + count, w, b);
        s = block_double_sums(s, warp_sums_of);
        // EXERCISE(epoch-barrier) begin: thread 0 stores the block's sums s in this epoch's half of a.partial, past
        //: L1; every block waits for all the others; the block adds every block's sums (grid_double_sums); thread 0
        //: writes the update to next_params, and in block 0 at a logged epoch the loss sum and w, b to the logs.
        // Two halves: a block still reading epoch e's sums (below) keeps epoch e + 1's writes off them, since no
        // block can write epoch e + 2's before every block has reached epoch e + 1's barrier.
        DoubleSums *partial = a.partial + (epoch % 2) * gridDim.x;
        if (threadIdx.x == 0) {
            __stcg(&partial[blockIdx.x].r2, s.r2);
            __stcg(&partial[blockIdx.x].rx, s.rx);
            __stcg(&partial[blockIdx.x].r, s.r);
        }
        grid.sync();  // every block's sums of this epoch are in partial (the barrier orders the memory, too)
        DoubleSums all = grid_double_sums(partial, warp_sums_of);
        if (threadIdx.x == 0) {
            int log_slot = a.log_slots[epoch];
            if (blockIdx.x == 0 && log_slot >= 0) {
                a.loss_log[log_slot] = all.r2;
                a.param_log[2 * log_slot] = w;
                a.param_log[2 * log_slot + 1] = b;
            }
            double scale = 2.0 / (double)a.n;  // sgd_update_kernel's arithmetic, in the same order
            next_params[0] = (float)(w - a.lr * scale * all.rx);
            next_params[1] = (float)(b - a.lr * scale * all.r);
        }
        // EXERCISE end
        __syncthreads();
        w = next_params[0];
        b = next_params[1];
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        a.params[0] = w;
        a.params[1] = b;
    }
}

// ----------------------------------------------------------------------------
// launchers

// The largest grid that runs in one wave: SMs × the blocks of the kernel one SM holds at once. Once every
// thread loops, more blocks only queue behind the first wave (each adding its atomics), and fewer leave SMs
// without enough loads in flight to keep memory busy. Asked once (in setup), then remembered.
static int wave_blocks(void) {
    static int blocks = 0;  // one device per process
    if (blocks > 0) return blocks;
    int device, sm_count, per_sm;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)forward_loss_backward_kernel,
                                                            BLOCK_SIZE, 0));
    blocks = sm_count * per_sm;
    return blocks;
}

// a wave, or fewer blocks when n is small: at least one float4 per thread
static unsigned int wave_for(int64_t n) {
    int64_t needed = (n + 4 * BLOCK_SIZE - 1) / (4 * BLOCK_SIZE);
    return (unsigned int)(needed < wave_blocks() ? needed : wave_blocks());
}

// grad_sum NULL: the loss alone (the test set)
static void forward_loss_backward(double *loss_sum, double *grad_sum, const float *x, const float *y,
                                  const float *params, int64_t n, cudaStream_t stream) {
    forward_loss_backward_kernel<<<wave_for(n), BLOCK_SIZE, 0, stream>>>(loss_sum, grad_sum, x, y, params, n);
    launchCheck();
}

static void sgd_update(float *params, double *loss_sum, double *grad_sum, double *loss_log, float *param_log,
                       const int *log_slots, int *epoch, float lr, int64_t n, cudaStream_t stream) {
    sgd_update_kernel<<<1, 1, 0, stream>>>(params, loss_sum, grad_sum, loss_log, param_log, log_slots, epoch, lr, n);
    launchCheck();
}

// With --variant persistent named, one error line and EXIT_CUDA; else one note a process, and 0 (07's graphs run)
static int persistent_unavailable(const RegressionConfig *cfg, const char *why) {
    static int noted = 0;
    if (cfg->variant_given) {
        fprintf(stderr, "error: --variant persistent cannot run here: %s; --variant graphs runs here\n", why);
        exit(EXIT_CUDA);
    }
    if (!noted++)
        fprintf(stderr, "note: the persistent kernel cannot run here: %s; stage 07's graphs run instead\n", why);
    return 0;
}

// The launch in *a (all but the pointers), or 0 where stage 07's graphs run (a note: no cooperative launches).
// A block: PERSISTENT_THREADS threads and the most shared memory the GPU gives it, up to REGISTER_POINTS floats a
// thread; as many blocks as are resident at once (one an SM), fewer when n is small. Points past what the blocks
// hold on chip are read from global memory every epoch, with one note.
static int persistent_layout(const RegressionConfig *cfg, int64_t n, PersistentArgs *a) {
    int device, cooperative, sms, per_sm;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
    if (!cooperative) return persistent_unavailable(cfg, "this GPU has no cooperative launches");
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    cudaFuncAttributes kernel;
    cudaCheck(cudaFuncGetAttributes(&kernel, regression_persistent_kernel));
    size_t rows = (device_shared_per_block() - kernel.sharedSizeBytes) / (PERSISTENT_THREADS * sizeof(float));
    a->on_chip = (int)(rows < REGISTER_POINTS ? rows : REGISTER_POINTS) * PERSISTENT_THREADS;
    a->shared_bytes = a->on_chip * sizeof(float);
    cudaCheck(cudaFuncSetAttribute(regression_persistent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)a->shared_bytes));
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, regression_persistent_kernel, PERSISTENT_THREADS,
                                                            a->shared_bytes));
    if (per_sm == 0) return persistent_unavailable(cfg, "a block of 512 threads does not fit on an SM");
    int64_t wanted = (n + PERSISTENT_THREADS - 1) / PERSISTENT_THREADS;  // a point a thread, at least
    a->blocks = (int)(wanted < (int64_t)sms * per_sm ? wanted : (int64_t)sms * per_sm);
    int64_t share = (n + a->blocks - 1) / a->blocks;
    a->chunk = (share + PERSISTENT_THREADS - 1) / PERSISTENT_THREADS * PERSISTENT_THREADS;  // whole rows
    a->blocks = (int)((n + a->chunk - 1) / a->chunk);  // so that no block is left without points
    a->n = n;
    a->epochs = cfg->epochs;
    a->lr = cfg->lr;
    static int noted = 0;
    if (a->chunk > a->on_chip && !noted++)
        fprintf(stderr,
                "note: the training set does not fit on chip: each of %d blocks holds %d of its %lld points; the "
                "persistent kernel reads the rest from global memory every epoch\n",
                a->blocks, a->on_chip, (long long)a->chunk);
    return 1;
}

// every epoch: a cooperative launch, refused (an error) unless all of a->blocks can be resident at once
static void persistent_run(PersistentArgs *a, cudaStream_t stream) {
    // EXERCISE(cooperative-launch) begin: launch regression_persistent_kernel on stream, cooperatively: a->blocks
    //: blocks of PERSISTENT_THREADS threads, a->shared_bytes of dynamic shared memory, *a its one argument
    void *kernel_args[] = {a};
    cudaCheck(cudaLaunchCooperativeKernel((const void *)regression_persistent_kernel, a->blocks, PERSISTENT_THREADS,
                                          kernel_args, a->shared_bytes, stream));
    // EXERCISE end
}

// ----------------------------------------------------------------------------
// training

int train_regression(const RegressionConfig *cfg, const RegressionData *data, RegressionResult *out) {
    int64_t n_train = data->n_train, n_test = data->n_test;
    int n_logged = regression_logged_count(cfg->epochs, cfg->log_every);

    // setup (not timed): buffers, and everything else made once before e2e starts
    double setup_start_ms = host_ms();
    float *d_x_train, *d_y_train;  // (n_train,)
    float *d_x_test, *d_y_test;    // (n_test,)
    float *d_params;               // (2,) w, b
    double *d_loss_sum;            // (1,) train sum of squared residuals
    double *d_grad_sum;            // (2,) sum of r x, sum of r
    float *d_param_log;            // (n_logged, 2) w, b at the start of each logged epoch
    cudaCheck(cudaMalloc(&d_x_train, n_train * sizeof(float)));
    cudaCheck(cudaMalloc(&d_y_train, n_train * sizeof(float)));
    cudaCheck(cudaMalloc(&d_x_test, n_test * sizeof(float)));
    cudaCheck(cudaMalloc(&d_y_test, n_test * sizeof(float)));
    cudaCheck(cudaMalloc(&d_params, 2 * sizeof(float)));
    cudaCheck(cudaMalloc(&d_loss_sum, sizeof(double)));
    cudaCheck(cudaMalloc(&d_grad_sum, 2 * sizeof(double)));
    cudaCheck(cudaMalloc(&d_param_log, 2 * n_logged * sizeof(float)));
    cudaCheck(cudaMemset(d_loss_sum, 0, sizeof(double)));  // once: then the update kernel zeroes the sums
    cudaCheck(cudaMemset(d_grad_sum, 0, 2 * sizeof(double)));
    // (2 n_logged + 1,) sums of squared residuals: the logged epochs' train sums, then their test sums, then the
    // test sum of the trained parameters
    double *d_loss_log = (double *)device_zeros((2 * n_logged + 1) * sizeof(double));
    double *h_loss_log = (double *)host_malloc((2 * n_logged + 1) * sizeof(double), "the losses");
    int *d_epoch = (int *)device_zeros(sizeof(int));  // (1,) the epoch the next update ends
    int *log_slots = (int *)host_malloc(cfg->epochs * sizeof(int), "the log slots");  // (epochs,) -1: not logged
    for (int epoch = 0, logged = 0; epoch < cfg->epochs; epoch++)
        log_slots[epoch] = regression_epoch_logged(epoch, cfg->epochs, cfg->log_every) ? logged++ : -1;
    int *d_log_slots;  // (epochs,) log_slots on the device
    cudaCheck(cudaMalloc(&d_log_slots, cfg->epochs * sizeof(int)));
    cudaCheck(cudaMemcpy(d_log_slots, log_slots, cfg->epochs * sizeof(int), cudaMemcpyHostToDevice));
    wave_blocks();
    PersistentArgs persistent = {};  // the persistent kernel's launch, where it runs
    int persistent_blocks =
        cfg->variant == VARIANT_PERSISTENT && persistent_layout(cfg, n_train, &persistent) ? persistent.blocks : 0;
    DoubleSums *d_partial = NULL;  // persistent: (2, blocks) each block's sums of an epoch
    if (persistent_blocks) cudaCheck(cudaMalloc(&d_partial, 2 * persistent_blocks * sizeof(DoubleSums)));
    persistent.x = d_x_train, persistent.y = d_y_train, persistent.params = d_params, persistent.partial = d_partial;
    persistent.loss_log = d_loss_log, persistent.param_log = d_param_log, persistent.log_slots = d_log_slots;
    StagingRing *ring = staging_create(STAGING_SLOTS, STAGING_SLOT_BYTES, 0);
    // stream: the training set and the epochs; eval_stream: the test set and the test losses
    cudaStream_t stream, eval_stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&eval_stream, cudaStreamNonBlocking));
    // [n_logged + 1]: logged epoch k's parameters are in d_param_log; the last: the trained parameters are final
    cudaEvent_t *logged_ready = (cudaEvent_t *)host_malloc((n_logged + 1) * sizeof(cudaEvent_t), "events");
    for (int k = 0; k <= n_logged; k++) cudaCheck(cudaEventCreateWithFlags(&logged_ready[k], cudaEventDisableTiming));
    cudaCheck(cudaDeviceSynchronize());  // the memsets ran on the default stream, which the streams do not wait for
    // EPOCHS_PER_GRAPH epochs, captured: between Begin and EndCapture the launches on stream are recorded into
    // a graph, not run. It runs the first graph_epochs epochs; the rest, and all of them with --breakdown (which
    // times every phase), run eagerly. The persistent kernel needs no graph.
    int graph_epochs = cfg->breakdown || persistent_blocks ? 0 : cfg->epochs / EPOCHS_PER_GRAPH * EPOCHS_PER_GRAPH;
    cudaGraphExec_t graph = NULL;
    if (graph_epochs > 0) {
        // EXERCISE(capture) begin: capture EPOCHS_PER_GRAPH eager epochs (forward_loss_backward, sgd_update) on
        //: stream, instantiate the captured graph into graph, upload it. Why may no launch depend on the epoch?
        cudaGraph_t captured;
        cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        for (int e = 0; e < EPOCHS_PER_GRAPH; e++) {  // what an eager epoch enqueues
            forward_loss_backward(d_loss_sum, d_grad_sum, d_x_train, d_y_train, d_params, n_train, stream);
            sgd_update(d_params, d_loss_sum, d_grad_sum, d_loss_log, d_param_log, d_log_slots, d_epoch, cfg->lr,
                       n_train, stream);
        }
        cudaCheck(cudaStreamEndCapture(stream, &captured));
        cudaCheck(cudaGraphInstantiate(&graph, captured, 0));
        cudaCheck(cudaGraphDestroy(captured));
        cudaCheck(cudaGraphUpload(graph, stream));  // so that the first launch does not pay for it
        // EXERCISE end
    }
    TrainClock clock;
    train_clock_init(&clock, cfg->epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start_ms;

    // e2e starts with the data in host memory. From here the host only enqueues: it never waits for a kernel
    // (the staging ring waits for the copy engine). With --breakdown every phase waits for itself instead.
    train_clock_e2e_start(&clock, stream);
    float params_init[2] = {data->w_init, data->b_init};
    TIMED_PHASE(&clock, PHASE_H2D, stream) {
        staging_upload(ring, d_x_train, data->x_train, n_train * sizeof(float), stream);
        staging_upload(ring, d_y_train, data->y_train, n_train * sizeof(float), stream);
        staging_upload(ring, d_params, params_init, 2 * sizeof(float), stream);
    }
    train_clock_loop_start(&clock, stream);

    int logged = 0;
    for (int epoch = 0; epoch < cfg->epochs; epoch++) {
        int log_slot = regression_epoch_logged(epoch, cfg->epochs, cfg->log_every) ? logged++ : -1;

        if (persistent_blocks) {
            // every epoch in one launch (with --breakdown, one phase); the events below follow it for all of them
            if (epoch == 0) TIMED_PHASE(&clock, PHASE_LOSS, stream) persistent_run(&persistent, stream);
        } else if (epoch < graph_epochs) {
            // one launch per EPOCHS_PER_GRAPH epochs; the events below follow it for all of them
            if (epoch % EPOCHS_PER_GRAPH == 0) cudaCheck(cudaGraphLaunch(graph, stream));
        } else {
            // forward, loss and backward together: --breakdown reports them as "loss"
            TIMED_PHASE(&clock, PHASE_LOSS, stream)
                forward_loss_backward(d_loss_sum, d_grad_sum, d_x_train, d_y_train, d_params, n_train, stream);
            TIMED_PHASE(&clock, PHASE_UPDATE, stream)
                sgd_update(d_params, d_loss_sum, d_grad_sum, d_loss_log, d_param_log, d_log_slots, d_epoch, cfg->lr,
                           n_train, stream);
        }
        if (log_slot >= 0) cudaCheck(cudaEventRecord(logged_ready[log_slot], stream));

        if (epoch < cfg->epochs - 1) train_clock_epoch_end(&clock, epoch, stream);  // the last one: below
    }
    cudaCheck(cudaEventRecord(logged_ready[n_logged], stream));

    // The test set goes up on the eval stream beside the epochs (enqueued after them, so that its host memcpy
    // does not delay their launches); each test loss runs as soon as its parameters exist. The eval stream
    // waits for the trained parameters last: it ends the last epoch (and the loop) and the run.
    TIMED_PHASE(&clock, PHASE_H2D, eval_stream) {
        staging_upload(ring, d_x_test, data->x_test, n_test * sizeof(float), eval_stream);
        staging_upload(ring, d_y_test, data->y_test, n_test * sizeof(float), eval_stream);
    }
    TIMED_PHASE(&clock, PHASE_EVAL, eval_stream) for (int k = 0; k <= n_logged; k++) {
        const float *params = k < n_logged ? d_param_log + 2 * k : d_params;
        cudaCheck(cudaStreamWaitEvent(eval_stream, logged_ready[k], 0));
        forward_loss_backward(d_loss_log + n_logged + k, NULL, d_x_test, d_y_test, params, n_test, eval_stream);
    }
    train_clock_epoch_end(&clock, cfg->epochs - 1, eval_stream);

    float h_params[2];  // the trained w, b
    TIMED_PHASE(&clock, PHASE_D2H, eval_stream) {
        cudaCheck(cudaMemcpyAsync(h_params, d_params, 2 * sizeof(float), cudaMemcpyDeviceToHost, eval_stream));
        cudaCheck(cudaMemcpyAsync(h_loss_log, d_loss_log, (2 * n_logged + 1) * sizeof(double), cudaMemcpyDeviceToHost,
                                  eval_stream));
    }
    train_clock_e2e_stop(&clock, eval_stream);
    train_clock_finish(&clock, &out->timing);
    // A launch's epochs end together (the first holds the launch's time, the others ~0): each gets the average.
    int launch_epochs = persistent_blocks ? cfg->epochs : EPOCHS_PER_GRAPH;
    for (int first = 0; first < (persistent_blocks ? cfg->epochs : graph_epochs); first += launch_epochs) {
        double launch_ms = 0.0;
        for (int e = first; e < first + launch_epochs; e++) launch_ms += out->timing.epoch_ms[e];
        for (int e = first; e < first + launch_epochs; e++) out->timing.epoch_ms[e] = launch_ms / launch_epochs;
    }
    out->w = h_params[0];
    out->b = h_params[1];
    for (int k = 0; k < n_logged; k++) {
        out->train_loss[k] = (float)(h_loss_log[k] / (double)n_train);
        out->test_loss[k] = (float)(h_loss_log[n_logged + k] / (double)n_test);
    }
    out->final_test_loss = (float)(h_loss_log[2 * n_logged] / (double)n_test);

    if (graph != NULL) cudaCheck(cudaGraphExecDestroy(graph));
    staging_destroy(ring);
    for (int k = 0; k <= n_logged; k++) cudaCheck(cudaEventDestroy(logged_ready[k]));
    free(logged_ready);
    free(h_loss_log);
    free(log_slots);
    cudaCheck(cudaStreamDestroy(stream));
    cudaCheck(cudaStreamDestroy(eval_stream));
    cudaCheck(cudaFree(d_x_train));
    cudaCheck(cudaFree(d_y_train));
    cudaCheck(cudaFree(d_x_test));
    cudaCheck(cudaFree(d_y_test));
    cudaCheck(cudaFree(d_params));
    cudaCheck(cudaFree(d_loss_sum));
    cudaCheck(cudaFree(d_grad_sum));
    cudaCheck(cudaFree(d_param_log));
    cudaCheck(cudaFree(d_loss_log));
    cudaCheck(cudaFree(d_epoch));
    cudaCheck(cudaFree(d_log_slots));
    cudaCheck(cudaFree(d_partial));
    return 0;
}
