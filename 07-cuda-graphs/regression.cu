/*
Stage 07, regression: CUDA graphs. Stage 06 launched two kernels (fused) or about nine (cuBLAS) for
every epoch, each paying the host's launch cost and a gap on the GPU. Here the epochs after the first
are captured once, in setup, with stream capture (cudaStreamBeginCapture / EndCapture /
cudaGraphInstantiate): a graph of EPOCHS_PER_GRAPH epochs, replayed with one cudaGraphLaunch per block,
and a second graph for the epochs left over. A graph replays its launches with the arguments they had
at capture, so nothing in an epoch's launches may name the epoch: the update kernel now reads the epoch
number from device memory (and advances it), and looks up the epoch's log slot in a device table.
Epoch 0 stays eager: it rides on the chunked upload, as in stage 05.
Timing: one event after each graph launch ends all of its epochs; their epoch_ms share its time evenly.
With --breakdown the epochs run eagerly (a graph's phases cannot be timed apart).

    fused    (default) stage 05's "shared" kernel: one pass, block reduction, 1 atomicAdd per block and sum
    cublas   residual kernel + 3 x cublasSdot + a 1-thread kernel that adds the results
The graphs are captured around the faster of stage 06's two paths by default: on an H200 the fused
kernel beat the cuBLAS path in stage 06, so stage 07 makes it the default and keeps cublas to compare.

Build and run from the repository root:
    make stage 7 run TRAINER=regression            (or: make build/07/regression && build/07/regression)
    make stage 7 test                              (agreement with common/reference.c, both variants)
    make stage 7 diff                              (this stage against stage 06)
    build/07/regression --variant cublas           (the cuBLAS path of stage 06, captured the same way)
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>

#include "check.h"
#include "timing.h"
#include "trainer.h"

const char *const REGRESSION_VARIANTS[] = {"fused", "cublas", NULL};
enum { VARIANT_FUSED, VARIANT_CUBLAS };  // indices into REGRESSION_VARIANTS

#define BLOCK_SIZE 256  // a multiple of WARP_SIZE: the reductions below assume full warps
#define WARP_SIZE 32
#define WARPS_PER_BLOCK (BLOCK_SIZE / WARP_SIZE)
// Uploads go in chunks through a ring of pinned buffers: the copy engine can read only pinned memory, so a
// pageable array is first copied by the host into a pinned slot, and while the copy engine drains that
// slot the host fills the next. A chunk is a multiple of 4 floats, so every chunk starts float4-aligned.
#define CHUNK_POINTS (1 << 18)  // floats per chunk: 1 MiB
#define STAGING_SLOTS 4         // 4 MiB of pinned memory in all
// Epochs per graph launch. Any number works (the epoch count lives on the device); 10 = one log interval.
#define EPOCHS_PER_GRAPH 10
#define CUBLAS_WORKSPACE_BYTES (32 << 20)  // cuBLAS's recommended workspace on Hopper

// ----------------------------------------------------------------------------
// forward, loss and gradient, "fused": one pass, reduced on chip. Three sums, built bottom-up: a thread's
// points in registers, a warp's 32 threads with shuffles, a block's warps through shared memory, and only
// then one atomicAdd per block into the double sums in global memory.
//
// for (i = 0; i < n; i++) {
//     r = w * x[i] + b - y[i];
//     loss_sum += r^2;
//     grad_sum[0] += r * x[i]; grad_sum[1] += r;   (skipped when grad_sum is NULL: the test set)
// }
// (the gradient of the MSE is 2/n times the grad sums; the update applies the factor)
// The global sums are doubles: a float accumulator that has grown to ~4e4 (5M points) rounds away the
// low bits of every ~1e-2 term and ends up ~0.5% off.
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
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
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

// Lane 0 of every warp leaves its warp's sums in shared memory; warp 0 adds them up with one more round of
// shuffles and its lane 0 adds the block's sums to global memory.
__global__ void forward_loss_backward_shared_kernel(double *loss_sum, double *grad_sum, const float *x, const float *y,
                                                    const float *params, int64_t n) {
    // One row per sum, one column per warp: warp 0's lane i reads word i of a row, so its 32 lanes hit
    // 32 different banks (no bank conflicts); the writes are one lane per warp.
    __shared__ float warp_partials[3][WARPS_PER_BLOCK];
    int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;

    Sums s = warp_sums(thread_sums(x, y, params, n));
    if (lane == 0) {
        warp_partials[0][warp] = s.r2;
        warp_partials[1][warp] = s.rx;
        warp_partials[2][warp] = s.r;
    }
    __syncthreads();
    if (warp != 0) return;
    Sums block = {0.0f, 0.0f, 0.0f};
    if (lane < WARPS_PER_BLOCK) {
        block.r2 = warp_partials[0][lane];
        block.rx = warp_partials[1][lane];
        block.r = warp_partials[2][lane];
    }
    block = warp_sums(block);
    if (lane == 0) add_to_global(loss_sum, grad_sum, block);
}

// ----------------------------------------------------------------------------
// forward, loss and gradient, "cublas": a kernel for the residual, cuBLAS for the sums. Each step is its
// own pass over memory: the residual kernel reads x and y and writes r; then cublasSdot reads r (for r.r),
// r and x, r and a vector of ones.

// for (i = 0; i < n; i++) r[i] = w * x[i] + b - y[i];
__global__ void residual_kernel(float *residual, const float *x, const float *y, const float *params, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    residual[i] = params[0] * x[i] + params[1] - y[i];
}

// cuBLAS leaves each dot product, a float, in device memory; this adds them to the double sums, where the
// fused kernel's atomics go: loss_sum += r.r; grad_sum += (r.x, r.1) unless grad_sum is NULL (the test set)
__global__ void add_dots_kernel(double *loss_sum, double *grad_sum, const float *dots) {
    *loss_sum += dots[0];
    if (grad_sum == NULL) return;
    grad_sum[0] += dots[1];
    grad_sum[1] += dots[2];
}

// for (i = 0; i < n; i++) v[i] = value;
__global__ void fill_kernel(float *v, float value, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    v[i] = value;
}

// ----------------------------------------------------------------------------
// update: one thread, two parameters, and the bookkeeping the host used to do between epochs

// At the end of epoch *epoch: a logged epoch (log_slots[*epoch] >= 0) leaves its loss sum and the parameters
// it started from in the logs; then w -= lr * 2/n * sum(r x), b -= lr * 2/n * sum(r); then the sums are
// zeroed and *epoch advanced for the next epoch. The epoch number lives in device memory because a graph
// replays the same launch, with the same arguments, for every epoch.
__global__ void sgd_update_kernel(float *params, double *loss_sum, double *grad_sum, double *loss_log, float *param_log,
                                  const int *log_slots, int *epoch, float lr, int64_t n) {
    int e = *epoch;
    int log_slot = log_slots[e];
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
    *epoch = e + 1;
}

// ----------------------------------------------------------------------------
// launchers: "fused" one wave of blocks; the residual one thread per point

static unsigned int blocks_for(int64_t n) { return (unsigned int)((n + BLOCK_SIZE - 1) / BLOCK_SIZE); }

// The largest grid that runs in one wave: SMs × the blocks of the reduction kernel one SM holds at once.
// Once every thread loops, more blocks only queue behind the first wave (each adding its atomics), and
// fewer leave SMs without enough loads in flight to keep memory busy.
static int wave_blocks(void) {
    int device, sm_count, per_sm;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)forward_loss_backward_shared_kernel,
                                                            BLOCK_SIZE, 0));
    return sm_count * per_sm;
}

// a wave, or fewer blocks when n is small: at least one float4 per thread
static unsigned int wave_for(int max_blocks, int64_t n) {
    int64_t needed = (n + 4 * BLOCK_SIZE - 1) / (4 * BLOCK_SIZE);
    return (unsigned int)(needed < max_blocks ? needed : max_blocks);
}

// What the cuBLAS path needs on one stream. A handle per stream: a handle's workspace must not serve two
// streams that run at the same time. Device pointer mode: cublasSdot writes its result to device memory
// and returns at once, instead of copying it to the host and waiting for it. A workspace of our own, set
// after cublasSetStream (which resets it): captured calls then allocate nothing inside the graph.
typedef struct {
    cublasHandle_t handle;  // bound to the stream, CUBLAS_POINTER_MODE_DEVICE
    void *workspace;        // (CUBLAS_WORKSPACE_BYTES,)
    float *residual;        // (n,) r = w x + b - y
    float *dots;            // (3,) r.r, r.x, r.1
    const float *ones;      // (n,) 1.0f for r.1; NULL on the test stream, which needs r.r only
} CublasSums;

static void cublas_sums_create(CublasSums *c, int64_t n, const float *ones, cudaStream_t stream) {
    cublasCheck(cublasCreate(&c->handle));
    cublasCheck(cublasSetStream(c->handle, stream));
    cublasCheck(cublasSetPointerMode(c->handle, CUBLAS_POINTER_MODE_DEVICE));
    cudaCheck(cudaMalloc(&c->workspace, CUBLAS_WORKSPACE_BYTES));
    cublasCheck(cublasSetWorkspace(c->handle, c->workspace, CUBLAS_WORKSPACE_BYTES));
    cudaCheck(cudaMalloc(&c->residual, n * sizeof(float)));
    cudaCheck(cudaMalloc(&c->dots, 3 * sizeof(float)));
    c->ones = ones;
}

static void cublas_sums_destroy(CublasSums *c) {
    cublasCheck(cublasDestroy(c->handle));
    cudaCheck(cudaFree(c->workspace));
    cudaCheck(cudaFree(c->residual));
    cudaCheck(cudaFree(c->dots));
}

// adds to loss_sum and grad_sum (zeroed by the update kernel); grad_sum NULL: the loss alone.
// "cublas" needs cublas->handle bound to stream; n fits cuBLAS's int (--points <= 2e9, 80% of it trains).
static void forward_loss_backward(int variant, int max_blocks, const CublasSums *cublas, double *loss_sum,
                                  double *grad_sum, const float *x, const float *y, const float *params, int64_t n,
                                  cudaStream_t stream) {
    if (variant == VARIANT_FUSED) {
        unsigned int grid = wave_for(max_blocks, n);
        forward_loss_backward_shared_kernel<<<grid, BLOCK_SIZE, 0, stream>>>(loss_sum, grad_sum, x, y, params, n);
        launchCheck();
        return;
    }
    residual_kernel<<<blocks_for(n), BLOCK_SIZE, 0, stream>>>(cublas->residual, x, y, params, n);
    launchCheck();
    cublasCheck(cublasSdot(cublas->handle, (int)n, cublas->residual, 1, cublas->residual, 1, &cublas->dots[0]));
    if (grad_sum != NULL) {
        cublasCheck(cublasSdot(cublas->handle, (int)n, cublas->residual, 1, x, 1, &cublas->dots[1]));
        cublasCheck(cublasSdot(cublas->handle, (int)n, cublas->residual, 1, cublas->ones, 1, &cublas->dots[2]));
    }
    add_dots_kernel<<<1, 1, 0, stream>>>(loss_sum, grad_sum, cublas->dots);
    launchCheck();
}

static void sgd_update(float *params, double *loss_sum, double *grad_sum, double *loss_log, float *param_log,
                       const int *log_slots, int *epoch, float lr, int64_t n, cudaStream_t stream) {
    sgd_update_kernel<<<1, 1, 0, stream>>>(params, loss_sum, grad_sum, loss_log, param_log, log_slots, epoch, lr, n);
    launchCheck();
}

// ----------------------------------------------------------------------------
// upload: pageable host array -> pinned staging slot (host memcpy) -> device (copy engine, asynchronous)

typedef struct {
    float *slot[STAGING_SLOTS];          // pinned, (CHUNK_POINTS,) each
    cudaEvent_t drained[STAGING_SLOTS];  // recorded after the copy that reads the slot
    int next;                            // the slot to fill next
} StagingRing;

static void staging_ring_create(StagingRing *ring) {
    for (int s = 0; s < STAGING_SLOTS; s++) {
        cudaCheck(cudaMallocHost(&ring->slot[s], CHUNK_POINTS * sizeof(float)));
        cudaCheck(cudaEventCreateWithFlags(&ring->drained[s], cudaEventDisableTiming));
    }
    ring->next = 0;
}

static void staging_ring_destroy(StagingRing *ring) {
    for (int s = 0; s < STAGING_SLOTS; s++) {
        cudaCheck(cudaFreeHost(ring->slot[s]));
        cudaCheck(cudaEventDestroy(ring->drained[s]));
    }
}

// n <= CHUNK_POINTS floats from src to dst, enqueued on stream. The host waits only when the slot it is
// about to refill has not been drained yet (never-recorded events count as done): a wait for the copy
// engine, never for a kernel.
static void staged_copy(StagingRing *ring, float *dst, const float *src, int64_t n, cudaStream_t stream) {
    int s = ring->next;
    ring->next = (s + 1) % STAGING_SLOTS;
    cudaCheck(cudaEventSynchronize(ring->drained[s]));
    memcpy(ring->slot[s], src, (size_t)n * sizeof(float));
    cudaCheck(cudaMemcpyAsync(dst, ring->slot[s], (size_t)n * sizeof(float), cudaMemcpyHostToDevice, stream));
    cudaCheck(cudaEventRecord(ring->drained[s], stream));
}

static int64_t chunk_length(int64_t start, int64_t n) { return n - start < CHUNK_POINTS ? n - start : CHUNK_POINTS; }

// any n, chunk by chunk
static void staged_upload(StagingRing *ring, float *dst, const float *src, int64_t n, cudaStream_t stream) {
    for (int64_t start = 0; start < n; start += CHUNK_POINTS)
        staged_copy(ring, dst + start, src + start, chunk_length(start, n), stream);
}

static double host_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

// ----------------------------------------------------------------------------
// training

// The epochs [first, first + count) were one graph launch, and their end events were recorded together
// after it: the first holds the graph's whole time and the others ~0. Each gets the average.
static void spread_epoch_ms(double *epoch_ms, int first, int count) {
    double total = 0.0;
    for (int e = first; e < first + count; e++) total += epoch_ms[e];
    for (int e = first; e < first + count; e++) epoch_ms[e] = total / count;
}

static void *host_alloc_or_die(size_t bytes) {
    void *p = malloc(bytes);
    if (p == NULL) {
        fprintf(stderr, "error: out of host memory (%zu bytes)\n", bytes);
        exit(EXIT_CUDA);
    }
    return p;
}

int train_regression(const RegressionConfig *cfg, const RegressionData *data, RegressionResult *out) {
    int64_t n_train = data->n_train, n_test = data->n_test;
    int n_logged = regression_logged_count(cfg->epochs, cfg->log_every);

    // setup (not timed): device buffers, the size of a wave, streams, events, pinned buffers, cuBLAS handles,
    // graphs
    double setup_start_ms = host_ms();
    float *d_x_train, *d_y_train;  // (n_train,)
    float *d_x_test, *d_y_test;    // (n_test,)
    float *d_params;               // (2,) w, b
    double *d_loss_sum;            // (1,) train sum of squared residuals of the running epoch
    double *d_grad_sum;            // (2,) sum of r x, sum of r of the running epoch
    float *d_param_log;            // (n_logged, 2) w, b at the start of each logged epoch
    double *d_loss_log;            // (2 * n_logged + 1,) sums of squared residuals: the logged epochs' train
                                   // sums, then their test sums, then the test sum of the trained parameters
    cudaCheck(cudaMalloc(&d_x_train, n_train * sizeof(float)));
    cudaCheck(cudaMalloc(&d_y_train, n_train * sizeof(float)));
    cudaCheck(cudaMalloc(&d_x_test, n_test * sizeof(float)));
    cudaCheck(cudaMalloc(&d_y_test, n_test * sizeof(float)));
    cudaCheck(cudaMalloc(&d_params, 2 * sizeof(float)));
    cudaCheck(cudaMalloc(&d_loss_sum, sizeof(double)));
    cudaCheck(cudaMalloc(&d_grad_sum, 2 * sizeof(double)));
    cudaCheck(cudaMalloc(&d_param_log, 2 * n_logged * sizeof(float)));
    cudaCheck(cudaMalloc(&d_loss_log, (2 * n_logged + 1) * sizeof(double)));
    int *d_log_slots;  // (epochs,) each epoch's slot in the logs, -1 when it is not logged
    int *d_epoch;      // (1,) the epoch the next update ends
    cudaCheck(cudaMalloc(&d_log_slots, cfg->epochs * sizeof(int)));
    cudaCheck(cudaMalloc(&d_epoch, sizeof(int)));
    int *log_slots = (int *)host_alloc_or_die(cfg->epochs * sizeof(int));  // (epochs,) d_log_slots on the host
    for (int epoch = 0, logged = 0; epoch < cfg->epochs; epoch++)
        log_slots[epoch] = regression_epoch_logged(epoch, cfg->epochs, cfg->log_every) ? logged++ : -1;
    cudaCheck(cudaMemcpy(d_log_slots, log_slots, cfg->epochs * sizeof(int), cudaMemcpyHostToDevice));
    double *d_train_loss_log = d_loss_log;            // (n_logged,)
    double *d_test_loss_log = d_loss_log + n_logged;  // (n_logged + 1,)
    float *h_params;                                  // (2,) pinned: the trained w, b come back here
    double *h_loss_log;                               // (2 * n_logged + 1,) pinned: d_loss_log comes back here
    cudaCheck(cudaMallocHost(&h_params, 2 * sizeof(float)));
    cudaCheck(cudaMallocHost(&h_loss_log, (2 * n_logged + 1) * sizeof(double)));
    int max_blocks = wave_blocks();

    // stream: the epochs; copy_stream: the training set; eval_stream: the test set and the test losses
    cudaStream_t stream, copy_stream, eval_stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&eval_stream, cudaStreamNonBlocking));
    cudaEvent_t forked;       // the other streams start after e2e_start and the zeroing on stream
    cudaEvent_t chunk_ready;  // the latest training chunk is on the device
    cudaEvent_t trained;      // the last update is done
    cudaEvent_t eval_done;    // every test loss is in d_test_loss_log
    cudaEvent_t *logged_ready = (cudaEvent_t *)host_alloc_or_die(n_logged * sizeof(cudaEvent_t));  // [n_logged]
    cudaCheck(cudaEventCreateWithFlags(&forked, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&chunk_ready, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&trained, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&eval_done, cudaEventDisableTiming));
    for (int k = 0; k < n_logged; k++) cudaCheck(cudaEventCreateWithFlags(&logged_ready[k], cudaEventDisableTiming));
    StagingRing ring;
    staging_ring_create(&ring);
    // "cublas": a handle, a residual and a result buffer per stream that sums; r.1 needs a vector of ones
    float *d_ones = NULL;  // (n_train,) 1.0f
    CublasSums train_cublas = {NULL, NULL, NULL, NULL, NULL}, test_cublas = {NULL, NULL, NULL, NULL, NULL};
    if (cfg->variant == VARIANT_CUBLAS) {
        cudaCheck(cudaMalloc(&d_ones, n_train * sizeof(float)));
        fill_kernel<<<blocks_for(n_train), BLOCK_SIZE, 0, stream>>>(d_ones, 1.0f, n_train);
        launchCheck();
        cublas_sums_create(&train_cublas, n_train, d_ones, stream);
        cublas_sums_create(&test_cublas, n_test, NULL, eval_stream);
    }
    // Epochs 1.. of the resident training set, captured: between Begin and EndCapture the launches on
    // stream are recorded into a graph, not run. graphs[0] holds EPOCHS_PER_GRAPH epochs, graphs[1] the
    // (epochs - 1) % EPOCHS_PER_GRAPH left over at the end. None with --breakdown, which times epochs eagerly.
    int graph_epochs[2] = {EPOCHS_PER_GRAPH, (cfg->epochs - 1) % EPOCHS_PER_GRAPH};
    cudaGraphExec_t graphs[2] = {NULL, NULL};
    for (int g = 0; g < 2; g++) {
        if (cfg->breakdown || graph_epochs[g] == 0 || graph_epochs[g] > cfg->epochs - 1) continue;
        cudaGraph_t graph;
        cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        for (int e = 0; e < graph_epochs[g]; e++) {
            forward_loss_backward(cfg->variant, max_blocks, &train_cublas, d_loss_sum, d_grad_sum, d_x_train, d_y_train,
                                  d_params, n_train, stream);
            sgd_update(d_params, d_loss_sum, d_grad_sum, d_train_loss_log, d_param_log, d_log_slots, d_epoch, cfg->lr,
                       n_train, stream);
        }
        cudaCheck(cudaStreamEndCapture(stream, &graph));
        cudaCheck(cudaGraphInstantiate(&graphs[g], graph, 0));
        cudaCheck(cudaGraphDestroy(graph));
        cudaCheck(cudaGraphUpload(graphs[g], stream));  // so that the first launch does not pay for it
    }
    TrainClock clock;
    train_clock_init(&clock, cfg->epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start_ms;

    // e2e starts with the data in host memory
    train_clock_e2e_start(&clock, stream);
    float params_init[2] = {data->w_init, data->b_init};
    staged_copy(&ring, d_params, params_init, 2, stream);
    cudaCheck(cudaMemsetAsync(d_loss_sum, 0, sizeof(double), stream));
    cudaCheck(cudaMemsetAsync(d_grad_sum, 0, 2 * sizeof(double), stream));
    cudaCheck(cudaMemsetAsync(d_epoch, 0, sizeof(int), stream));
    cudaCheck(cudaMemsetAsync(d_test_loss_log, 0, (n_logged + 1) * sizeof(double), stream));
    cudaCheck(cudaEventRecord(forked, stream));
    cudaCheck(cudaStreamWaitEvent(copy_stream, forked, 0));
    cudaCheck(cudaStreamWaitEvent(eval_stream, forked, 0));

    // The loop only enqueues work: the host never waits for a kernel. (The staging ring may wait for the
    // copy engine during epoch 0, when it is full.) Epoch 0 is eager, then one graph launch per
    // EPOCHS_PER_GRAPH epochs. With --breakdown every epoch is eager and every phase waits for itself.
    for (int epoch = 0; epoch < cfg->epochs;) {
        int done = 1;                              // epochs enqueued by this iteration
        int eager = epoch == 0 || cfg->breakdown;  // else a graph launch

        if (epoch == 0) {
            // Epoch 0 rides on the upload: the sums of chunk k start as soon as chunk k is on the device,
            // while the copy engine moves chunk k + 1. The loop clock starts when the last chunk is in.
            for (int64_t start = 0; start < n_train; start += CHUNK_POINTS) {
                int64_t count = chunk_length(start, n_train);
                train_clock_phase_begin(&clock, copy_stream);
                staged_copy(&ring, d_x_train + start, data->x_train + start, count, copy_stream);
                staged_copy(&ring, d_y_train + start, data->y_train + start, count, copy_stream);
                cudaCheck(cudaEventRecord(chunk_ready, copy_stream));
                train_clock_phase_end(&clock, PHASE_H2D, copy_stream);
                cudaCheck(cudaStreamWaitEvent(stream, chunk_ready, 0));
                if (start + count == n_train) train_clock_loop_start(&clock, stream);

                train_clock_phase_begin(&clock, stream);
                forward_loss_backward(cfg->variant, max_blocks, &train_cublas, d_loss_sum, d_grad_sum,
                                      d_x_train + start, d_y_train + start, d_params, count, stream);
                train_clock_phase_end(&clock, PHASE_LOSS, stream);
            }
        } else if (eager) {
            // forward, loss and backward (one kernel, or a kernel and cuBLAS calls): --breakdown says "loss"
            train_clock_phase_begin(&clock, stream);
            forward_loss_backward(cfg->variant, max_blocks, &train_cublas, d_loss_sum, d_grad_sum, d_x_train, d_y_train,
                                  d_params, n_train, stream);
            train_clock_phase_end(&clock, PHASE_LOSS, stream);
        } else {
            // EPOCHS_PER_GRAPH epochs, sums and updates, in one launch (the leftover epochs: the tail graph)
            done = cfg->epochs - epoch < EPOCHS_PER_GRAPH ? cfg->epochs - epoch : EPOCHS_PER_GRAPH;
            cudaCheck(cudaGraphLaunch(graphs[done == EPOCHS_PER_GRAPH ? 0 : 1], stream));
        }

        if (eager) {
            train_clock_phase_begin(&clock, stream);
            sgd_update(d_params, d_loss_sum, d_grad_sum, d_train_loss_log, d_param_log, d_log_slots, d_epoch, cfg->lr,
                       n_train, stream);
            train_clock_phase_end(&clock, PHASE_UPDATE, stream);
        }

        // the epochs just enqueued (a graph's all at once) end here: their snapshots are ready, their clocks stop
        for (int e = epoch; e < epoch + done; e++) {
            if (log_slots[e] >= 0) cudaCheck(cudaEventRecord(logged_ready[log_slots[e]], stream));
            train_clock_epoch_end(&clock, e, stream);
        }
        epoch += done;
    }
    cudaCheck(cudaEventRecord(trained, stream));

    // The test set goes up on the eval stream while the epochs run (enqueued after them, so that the host
    // memcpy into the staging ring does not delay their launches), then each logged epoch's test loss runs
    // from its parameter snapshot as soon as that exists, lagging the training as far as it likes.
    train_clock_phase_begin(&clock, eval_stream);
    staged_upload(&ring, d_x_test, data->x_test, n_test, eval_stream);
    staged_upload(&ring, d_y_test, data->y_test, n_test, eval_stream);
    train_clock_phase_end(&clock, PHASE_H2D, eval_stream);
    train_clock_phase_begin(&clock, eval_stream);
    for (int k = 0; k < n_logged; k++) {
        cudaCheck(cudaStreamWaitEvent(eval_stream, logged_ready[k], 0));
        forward_loss_backward(cfg->variant, max_blocks, &test_cublas, d_test_loss_log + k, NULL, d_x_test, d_y_test,
                              d_param_log + 2 * k, n_test, eval_stream);
    }
    cudaCheck(cudaStreamWaitEvent(eval_stream, trained, 0));
    forward_loss_backward(cfg->variant, max_blocks, &test_cublas, d_test_loss_log + n_logged, NULL, d_x_test, d_y_test,
                          d_params, n_test, eval_stream);
    train_clock_phase_end(&clock, PHASE_EVAL, eval_stream);
    cudaCheck(cudaEventRecord(eval_done, eval_stream));

    // once everything is done: the parameters and every loss, in two copies
    cudaCheck(cudaStreamWaitEvent(stream, eval_done, 0));
    train_clock_phase_begin(&clock, stream);
    cudaCheck(cudaMemcpyAsync(h_params, d_params, 2 * sizeof(float), cudaMemcpyDeviceToHost, stream));
    cudaCheck(
        cudaMemcpyAsync(h_loss_log, d_loss_log, (2 * n_logged + 1) * sizeof(double), cudaMemcpyDeviceToHost, stream));
    train_clock_phase_end(&clock, PHASE_D2H, stream);
    train_clock_e2e_stop(&clock, stream);
    train_clock_finish(&clock, &out->timing);  // waits for e2e_stop, so the copies have landed
    for (int first = 1; !cfg->breakdown && first < cfg->epochs; first += EPOCHS_PER_GRAPH)
        spread_epoch_ms(out->timing.epoch_ms, first,
                        cfg->epochs - first < EPOCHS_PER_GRAPH ? cfg->epochs - first : EPOCHS_PER_GRAPH);
    out->w = h_params[0];
    out->b = h_params[1];
    for (int k = 0; k < n_logged; k++) {
        out->train_loss[k] = (float)(h_loss_log[k] / (double)n_train);
        out->test_loss[k] = (float)(h_loss_log[n_logged + k] / (double)n_test);
    }
    out->final_test_loss = (float)(h_loss_log[2 * n_logged] / (double)n_test);

    for (int g = 0; g < 2; g++)
        if (graphs[g] != NULL) cudaCheck(cudaGraphExecDestroy(graphs[g]));
    staging_ring_destroy(&ring);
    if (cfg->variant == VARIANT_CUBLAS) {
        cublas_sums_destroy(&train_cublas);
        cublas_sums_destroy(&test_cublas);
        cudaCheck(cudaFree(d_ones));
    }
    cudaCheck(cudaEventDestroy(forked));
    cudaCheck(cudaEventDestroy(chunk_ready));
    cudaCheck(cudaEventDestroy(trained));
    cudaCheck(cudaEventDestroy(eval_done));
    for (int k = 0; k < n_logged; k++) cudaCheck(cudaEventDestroy(logged_ready[k]));
    free(logged_ready);
    free(log_slots);
    cudaCheck(cudaStreamDestroy(stream));
    cudaCheck(cudaStreamDestroy(copy_stream));
    cudaCheck(cudaStreamDestroy(eval_stream));
    cudaCheck(cudaFreeHost(h_params));
    cudaCheck(cudaFreeHost(h_loss_log));
    cudaCheck(cudaFree(d_x_train));
    cudaCheck(cudaFree(d_y_train));
    cudaCheck(cudaFree(d_x_test));
    cudaCheck(cudaFree(d_y_test));
    cudaCheck(cudaFree(d_params));
    cudaCheck(cudaFree(d_loss_sum));
    cudaCheck(cudaFree(d_grad_sum));
    cudaCheck(cudaFree(d_param_log));
    cudaCheck(cudaFree(d_loss_log));
    cudaCheck(cudaFree(d_log_slots));
    cudaCheck(cudaFree(d_epoch));
    return 0;
}
