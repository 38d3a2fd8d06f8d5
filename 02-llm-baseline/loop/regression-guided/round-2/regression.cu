// Stage 04-style regression: y = w x + b by full-batch gradient descent, the whole run in one launch with the
// training set kept on chip (registers + shared memory) for every epoch.
//
// One cooperative launch, one 512-thread block per SM, all blocks resident. Each block owns a contiguous slice of
// the training set and loads it once: REG04_REG_QUADS float4 pairs (x, y) per thread into registers, the rest of the
// slice into shared memory, and whatever still does not fit (larger sets, smaller GPUs) is re-read from global memory
// every epoch. On an H200 (132 SMs), 4,000,000 points = 7,576 quads a block: 2,048 in registers, 5,528 (177 KB) in
// shared memory, none from global memory.
//
// Every epoch a thread forms r = w x + b - y in fp32 exactly as stage 02, sums r x, r (and r^2 on logged epochs) in
// fp32 over at most REG04_CHUNK quads and then in fp64; warp shuffles and shared memory reduce the block. Blocks then
// exchange their sums instead of ending the kernel: each publishes its four sums as 64-bit words (the sum's fp32
// bits, the step's tag in the high half: a word is either this step's value or a stale one, never torn),
// double-buffered by step parity; every thread of every block polls one or two words until all carry this step's tag
// and warp 0 sums them in a fixed order. Every block thus computes the same w, b bit for bit, with no second barrier
// and no parameters in global memory; block 0 records the losses. Logged epochs also sum the test set's r^2 (read
// from L2) with the start-of-epoch parameters; a last step does the same with the trained ones.
//
// The upload: host threads copy 1 MB chunks of the caller's pageable arrays into a pinned staging buffer (allocated
// during setup) and each chunk's DMA is queued as soon as it is staged.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "check.h"
#include "host.h"
#include "timing.h"
#include "trainer.h"

const char *const REGRESSION_VARIANTS[] = {"resident", NULL};

#define REG04_THREADS 512                                // one block per SM
#define REG04_WARPS (REG04_THREADS / 32)
#define REG04_REG_QUADS 4                                // training quads (4 points of x and y) a thread keeps in registers
#define REG04_CHUNK 8                                    // quads a thread sums in fp32 before adding to its fp64 sums
#define REG04_TEST_QUADS 4                               // test quads a thread has in flight
#define REG04_SUMS 4                                     // per block: train r^2, r x, r; test r^2
#define REG04_MAX_GRID (2 * REG04_THREADS / REG04_SUMS)  // every thread polls at most 2 published words
#define REG04_SPIN_LIMIT (1u << 25)                      // polls (seconds of them) before a trap instead of a hang
#define REG04_STAGE_CHUNK ((size_t)1 << 20)              // bytes per staged upload chunk
#define REG04_COPY_THREADS 6                             // host threads filling the staging buffer

// ----------------------------------------------------------------------------
// the arguments of the training launch (passed by value)

typedef struct {
    const float *x_train, *y_train;  // (n_train,)
    const float *x_test, *y_test;    // (n_test,)
    long long n_train, n_test;
    long long quads_per_block;       // training quads each block owns: a contiguous slice
    int smem_quads;                  // training quads a block's shared memory holds
    int epochs, log_every, n_logged;
    float lr, w0, b0;
    unsigned long long *pub;         // (2, grid, REG04_SUMS) published block sums: fp32 bits | step tag << 32
    float *report;                   // w, b, final test loss, train losses [n_logged], test losses [n_logged]
} Reg04Args;

// ----------------------------------------------------------------------------
// per point: r = w x + b - y in fp32 (as stage 02)

// one quad: rx += r x, rs += r and, when WITH_SQ, sq += r^2
template <bool WITH_SQ>
static __device__ __forceinline__ void reg04_quad(float4 x, float4 y, float w, float b, float &sq, float &rx,
                                                  float &rs) {
    const float r0 = fmaf(w, x.x, b) - y.x;
    const float r1 = fmaf(w, x.y, b) - y.y;
    const float r2 = fmaf(w, x.z, b) - y.z;
    const float r3 = fmaf(w, x.w, b) - y.w;
    if constexpr (WITH_SQ) sq = fmaf(r3, r3, fmaf(r2, r2, fmaf(r1, r1, fmaf(r0, r0, sq))));
    rx = fmaf(r3, x.w, fmaf(r2, x.z, fmaf(r1, x.y, fmaf(r0, x.x, rx))));
    rs += (r0 + r1) + (r2 + r3);
}

// one quad of the test set: sq + r^2
static __device__ __forceinline__ float reg04_quad_sq(float4 x, float4 y, float w, float b, float sq) {
    const float r0 = fmaf(w, x.x, b) - y.x;
    const float r1 = fmaf(w, x.y, b) - y.y;
    const float r2 = fmaf(w, x.z, b) - y.z;
    const float r3 = fmaf(w, x.w, b) - y.w;
    return fmaf(r3, r3, fmaf(r2, r2, fmaf(r1, r1, fmaf(r0, r0, sq))));
}

static __device__ __forceinline__ double reg04_warp_sum(double v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

// the log slot of epoch e, or -1 (as regression_epoch_logged and regression_logged_count count them)
static __device__ __forceinline__ int reg04_log_slot(int e, int epochs, int log_every) {
    if (e % log_every == 0) return e / log_every;
    if (e == epochs - 1) return e / log_every + 1;
    return -1;
}

// ----------------------------------------------------------------------------
// one thread's share of the training sums for one epoch: its register quads (and, for the tail owner, the n % 4
// last points), its shared-memory quads and, when the slice does not fit on chip, its streamed quads

template <bool WITH_SQ>
static __device__ __forceinline__ void reg04_train_sums(const float4 (&rx4)[REG04_REG_QUADS],
                                                        const float4 (&ry4)[REG04_REG_QUADS], int n_mine,
                                                        const float4 *__restrict__ xs, const float4 *__restrict__ ys,
                                                        int n_smem, const float4 *__restrict__ xg,
                                                        const float4 *__restrict__ yg, long long n_stream,
                                                        const float *tail_x, const float *tail_y, int n_tail, float w,
                                                        float b, double &s_sq, double &s_rx, double &s_rs) {
    const int tid = threadIdx.x;
    float sq = 0.0f, rx = 0.0f, rs = 0.0f;
#pragma unroll
    for (int j = 0; j < REG04_REG_QUADS; j++)
        if (j < n_mine) reg04_quad<WITH_SQ>(rx4[j], ry4[j], w, b, sq, rx, rs);
    for (int i = 0; i < n_tail; i++) {
        const float r = fmaf(w, tail_x[i], b) - tail_y[i];
        if constexpr (WITH_SQ) sq = fmaf(r, r, sq);
        rx = fmaf(r, tail_x[i], rx);
        rs += r;
    }
    s_sq += (double)sq;
    s_rx += (double)rx;
    s_rs += (double)rs;

    // shared memory: consecutive threads read consecutive float4s (no bank conflicts)
    for (int first = tid; first < n_smem; first += REG04_CHUNK * REG04_THREADS) {
        const int end = n_smem < first + REG04_CHUNK * REG04_THREADS ? n_smem : first + REG04_CHUNK * REG04_THREADS;
        sq = 0.0f;
        rx = 0.0f;
        rs = 0.0f;
#pragma unroll 4
        for (int i = first; i < end; i += REG04_THREADS) reg04_quad<WITH_SQ>(xs[i], ys[i], w, b, sq, rx, rs);
        s_sq += (double)sq;
        s_rx += (double)rx;
        s_rs += (double)rs;
    }

    // global memory: only what did not fit on chip
    for (long long first = tid; first < n_stream; first += (long long)REG04_CHUNK * REG04_THREADS) {
        const long long stop = first + (long long)REG04_CHUNK * REG04_THREADS;
        const long long end = n_stream < stop ? n_stream : stop;
        sq = 0.0f;
        rx = 0.0f;
        rs = 0.0f;
#pragma unroll 4
        for (long long i = first; i < end; i += REG04_THREADS)
            reg04_quad<WITH_SQ>(__ldg(xg + i), __ldg(yg + i), w, b, sq, rx, rs);
        s_sq += (double)sq;
        s_rx += (double)rx;
        s_rs += (double)rs;
    }
}

// the test set, grid-strided: loads of REG04_TEST_QUADS quads, then their r^2 sum
static __device__ __forceinline__ void reg04_test_load(const float4 *__restrict__ xt, const float4 *__restrict__ yt,
                                                       long long first, long long stride, long long n4,
                                                       float4 (&tx)[REG04_TEST_QUADS], float4 (&ty)[REG04_TEST_QUADS]) {
#pragma unroll
    for (int k = 0; k < REG04_TEST_QUADS; k++) {
        const long long i = first + k * stride;
        if (i < n4) {
            tx[k] = __ldg(xt + i);
            ty[k] = __ldg(yt + i);
        } else {
            tx[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            ty[k] = tx[k];
        }
    }
}

static __device__ __forceinline__ float reg04_test_sq(const float4 (&tx)[REG04_TEST_QUADS],
                                                      const float4 (&ty)[REG04_TEST_QUADS], long long first,
                                                      long long stride, long long n4, float w, float b) {
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < REG04_TEST_QUADS; k++)
        if (first + k * stride < n4) sq = reg04_quad_sq(tx[k], ty[k], w, b, sq);
    return sq;
}

// ----------------------------------------------------------------------------
// the whole training run: load the slice once, then per step: sums, block reduction, grid exchange, update

static __global__ void __launch_bounds__(REG04_THREADS, 1) reg04_resident_kernel(Reg04Args a) {
    extern __shared__ float4 reg04_dyn[];  // [grid] gathered block sums, then xs [smem_quads], ys [smem_quads]
    __shared__ double warp_part[REG04_SUMS][REG04_WARPS];
    __shared__ float tail_x[4], tail_y[4];
    __shared__ float next_wb[2];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int grid = (int)gridDim.x, blk = (int)blockIdx.x;
    float *gathered = reinterpret_cast<float *>(reg04_dyn);  // [grid][REG04_SUMS]: this step's sums of every block
    float4 *xs = reg04_dyn + grid;
    float4 *ys = xs + a.smem_quads;

    // this block's training quads [q0, q0 + mq): n_reg in registers, then n_smem in shared memory, then n_stream
    const long long quads = a.n_train >> 2;
    const long long start = (long long)blk * a.quads_per_block;
    const long long q0 = start < quads ? start : quads;
    const long long mq = quads - q0 < a.quads_per_block ? quads - q0 : a.quads_per_block;
    const long long reg_cap = (long long)REG04_REG_QUADS * REG04_THREADS;
    const int n_reg = (int)(mq < reg_cap ? mq : reg_cap);
    const int n_smem = (int)(mq - n_reg < (long long)a.smem_quads ? mq - n_reg : (long long)a.smem_quads);
    const long long n_stream = mq - n_reg - n_smem;
    const float4 *x4 = reinterpret_cast<const float4 *>(a.x_train) + q0;
    const float4 *y4 = reinterpret_cast<const float4 *>(a.y_train) + q0;

    // load the slice once (streaming loads: the on-chip part is never read from global memory again)
    float4 rx4[REG04_REG_QUADS], ry4[REG04_REG_QUADS];
    int n_mine = 0;
#pragma unroll
    for (int j = 0; j < REG04_REG_QUADS; j++) {
        const int q = tid + j * REG04_THREADS;
        if (q < n_reg) {
            rx4[j] = __ldcs(x4 + q);
            ry4[j] = __ldcs(y4 + q);
            n_mine = j + 1;
        } else {
            rx4[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            ry4[j] = rx4[j];
        }
    }
#pragma unroll 4
    for (int i = tid; i < n_smem; i += REG04_THREADS) {
        xs[i] = __ldcs(x4 + n_reg + i);
        ys[i] = __ldcs(y4 + n_reg + i);
    }
    // the n % 4 last points of each set belong to the last block's thread 0
    const bool tail_owner = blk == grid - 1 && tid == 0;
    const int train_tail = tail_owner ? (int)(a.n_train & 3) : 0;
    const int test_tail = tail_owner ? (int)(a.n_test & 3) : 0;
    for (int i = 0; i < train_tail; i++) {
        tail_x[i] = a.x_train[4 * quads + i];
        tail_y[i] = a.y_train[4 * quads + i];
    }
    __syncthreads();

    const long long test_quads = a.n_test >> 2;
    const float4 *xt4 = reinterpret_cast<const float4 *>(a.x_test);
    const float4 *yt4 = reinterpret_cast<const float4 *>(a.y_test);
    const long long t_first = (long long)blk * REG04_THREADS + tid;
    const long long t_stride = (long long)grid * REG04_THREADS;
    const float4 *xg = x4 + n_reg + n_smem;
    const float4 *yg = y4 + n_reg + n_smem;
    const int words = REG04_SUMS * grid;
    float w = a.w0, b = a.b0;

    // steps 0 .. epochs-1 train (and test on logged epochs); step `epochs` measures the trained parameters
    for (int step = 0; step <= a.epochs; step++) {
        const bool train = step < a.epochs;
        const int slot = train ? reg04_log_slot(step, a.epochs, a.log_every) : -1;
        const bool test = !train || slot >= 0;
        double s_sq = 0.0, s_rx = 0.0, s_rs = 0.0, s_test = 0.0;

        // the first test loads go out before the on-chip work, which hides their latency
        float4 tx[REG04_TEST_QUADS], ty[REG04_TEST_QUADS];
        if (test) reg04_test_load(xt4, yt4, t_first, t_stride, test_quads, tx, ty);
        if (train) {
            if (slot >= 0)
                reg04_train_sums<true>(rx4, ry4, n_mine, xs, ys, n_smem, xg, yg, n_stream, tail_x, tail_y,
                                       train_tail, w, b, s_sq, s_rx, s_rs);
            else
                reg04_train_sums<false>(rx4, ry4, n_mine, xs, ys, n_smem, xg, yg, n_stream, tail_x, tail_y,
                                        train_tail, w, b, s_sq, s_rx, s_rs);
        }
        if (test) {
            for (long long first = t_first;;) {
                s_test += (double)reg04_test_sq(tx, ty, first, t_stride, test_quads, w, b);
                first += (long long)REG04_TEST_QUADS * t_stride;
                if (first >= test_quads) break;
                reg04_test_load(xt4, yt4, first, t_stride, test_quads, tx, ty);
            }
            for (int i = 0; i < test_tail; i++) {
                const float r = fmaf(w, a.x_test[4 * test_quads + i], b) - a.y_test[4 * test_quads + i];
                s_test += (double)(r * r);
            }
        }

        // block sums: warp shuffles, then one partial per warp in shared memory
        double v[REG04_SUMS] = {s_sq, s_rx, s_rs, s_test};
#pragma unroll
        for (int k = 0; k < REG04_SUMS; k++) {
            v[k] = reg04_warp_sum(v[k]);
            if (lane == 0) warp_part[k][warp] = v[k];
        }
        __syncthreads();

        // publish this block's sums, each word tagged with the step (buffers alternate by step parity: a block
        // rewrites a buffer only after every block has gathered from it, since it has seen their next words)
        const unsigned int tag = (unsigned int)step + 1u;
        volatile unsigned long long *pub = a.pub + (size_t)(step & 1) * (size_t)words;
        if (warp == 0) {
#pragma unroll
            for (int k = 0; k < REG04_SUMS; k++) v[k] = reg04_warp_sum(lane < REG04_WARPS ? warp_part[k][lane] : 0.0);
            if (lane == 0) {
#pragma unroll
                for (int k = 0; k < REG04_SUMS; k++)
                    pub[blk * REG04_SUMS + k] =
                        ((unsigned long long)tag << 32) | (unsigned long long)__float_as_uint((float)v[k]);
            }
        }

        // gather every block's sums: each thread waits for one or two words of this step
        if (tid < words) {
            const int i1 = tid + REG04_THREADS;
            unsigned long long v0, v1 = 0ull;
            unsigned int spins = 0;
            for (;;) {
                v0 = pub[tid];
                if (i1 < words) v1 = pub[i1];
                if ((unsigned int)(v0 >> 32) == tag && (i1 >= words || (unsigned int)(v1 >> 32) == tag)) break;
                if (++spins == REG04_SPIN_LIMIT) __trap();
            }
            gathered[tid] = __uint_as_float((unsigned int)(v0 & 0xffffffffull));
            if (i1 < words) gathered[i1] = __uint_as_float((unsigned int)(v1 & 0xffffffffull));
        }
        __syncthreads();

        // the same fixed-order sum in every block, hence the same w, b in every block
        if (warp == 0) {
            double t[REG04_SUMS] = {0.0, 0.0, 0.0, 0.0};
            for (int g = lane; g < grid; g += 32) {
#pragma unroll
                for (int k = 0; k < REG04_SUMS; k++) t[k] += (double)gathered[g * REG04_SUMS + k];
            }
#pragma unroll
            for (int k = 0; k < REG04_SUMS; k++) t[k] = reg04_warp_sum(t[k]);
            if (lane == 0) {
                float nw = w, nb = b;
                if (train) {
                    // w -= lr * 2/n * sum(r x); b -= lr * 2/n * sum(r)   (as stage 02)
                    const double scale = 2.0 / (double)a.n_train;
                    nw = (float)(w - a.lr * scale * t[1]);
                    nb = (float)(b - a.lr * scale * t[2]);
                }
                next_wb[0] = nw;
                next_wb[1] = nb;
                if (blk == 0) {
                    if (slot >= 0) {  // train and test MSE with the parameters at the start of the epoch
                        a.report[3 + slot] = (float)(t[0] / (double)a.n_train);
                        a.report[3 + a.n_logged + slot] = (float)(t[3] / (double)a.n_test);
                    }
                    if (!train) {  // the trained parameters and their test MSE
                        a.report[0] = w;
                        a.report[1] = b;
                        a.report[2] = (float)(t[3] / (double)a.n_test);
                    }
                }
            }
        }
        __syncthreads();
        w = next_wb[0];
        b = next_wb[1];
    }
}

// ----------------------------------------------------------------------------
// upload: pageable host arrays -> pinned staging (host threads) -> device (one DMA per staged chunk)

typedef struct {
    const unsigned char *src;  // the caller's host memory
    unsigned char *stage;      // pinned staging
    unsigned char *dst;        // device memory
    size_t bytes;
} Reg04Copy;

static void reg04_stage_chunks(const Reg04Copy *chunks, int n, std::atomic<int> *next, std::atomic<int> *ready) {
    for (;;) {
        const int k = next->fetch_add(1, std::memory_order_relaxed);
        if (k >= n) return;
        memcpy(chunks[k].stage, chunks[k].src, chunks[k].bytes);
        ready[k].store(1, std::memory_order_release);
    }
}

static void reg04_upload(const Reg04Copy *arrays, int n_arrays, cudaStream_t stream) {
    std::vector<Reg04Copy> chunks;
    for (int i = 0; i < n_arrays; i++)
        for (size_t off = 0; off < arrays[i].bytes; off += REG04_STAGE_CHUNK) {
            const size_t left = arrays[i].bytes - off;
            Reg04Copy c = {arrays[i].src + off, arrays[i].stage + off, arrays[i].dst + off,
                           left < REG04_STAGE_CHUNK ? left : REG04_STAGE_CHUNK};
            chunks.push_back(c);
        }
    const int n = (int)chunks.size();
    if (n == 0) return;
    std::unique_ptr<std::atomic<int>[]> ready(new std::atomic<int>[n]);
    for (int k = 0; k < n; k++) ready[k].store(0, std::memory_order_relaxed);
    std::atomic<int> next(0);

    const unsigned int cores = std::thread::hardware_concurrency();
    int helpers = cores > 1 ? (int)cores - 1 : 0;
    if (helpers > REG04_COPY_THREADS) helpers = REG04_COPY_THREADS;
    if (helpers > n - 1) helpers = n - 1;
    std::vector<std::thread> workers;
    try {
        for (int p = 0; p < helpers; p++)
            workers.emplace_back(reg04_stage_chunks, chunks.data(), n, &next, ready.get());
    } catch (...) {
        // fewer helpers (or none): this thread copies whatever they leave
    }

    // queue the DMAs in order, each as soon as its chunk is staged; while waiting, stage a chunk nobody has taken
    for (int k = 0; k < n; k++) {
        while (!ready[k].load(std::memory_order_acquire)) {
            const int j = next.fetch_add(1, std::memory_order_relaxed);
            if (j < n) {
                memcpy(chunks[j].stage, chunks[j].src, chunks[j].bytes);
                ready[j].store(1, std::memory_order_release);
            } else {
                std::this_thread::yield();
            }
        }
        cudaCheck(cudaMemcpyAsync(chunks[k].dst, chunks[k].stage, chunks[k].bytes, cudaMemcpyHostToDevice, stream));
    }
    for (size_t p = 0; p < workers.size(); p++) workers[p].join();
}

// ----------------------------------------------------------------------------
// training

int train_regression(const RegressionConfig *cfg, const RegressionData *data, RegressionResult *out) {
    const long long n_train = data->n_train, n_test = data->n_test;
    const int epochs = cfg->epochs;
    const int log_every = cfg->log_every > 0 ? cfg->log_every : 1;
    const int n_logged = regression_logged_count(epochs, log_every);

    // setup (not timed): launch geometry, buffers, pinned staging
    const double setup_start_ms = host_ms();
    int device = 0, sms = 0, optin = 0, coop = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    cudaCheck(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaCheck(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device));
    if (!coop) {
        fprintf(stderr, "regression: this device cannot launch cooperative kernels\n");
        exit(4);
    }
    cudaFuncAttributes attr;
    cudaCheck(cudaFuncGetAttributes(&attr, reg04_resident_kernel));

    // one block per SM; each owns quads_per_block training quads: registers first, then shared memory
    int grid = sms < 1 ? 1 : sms;
    if (grid > REG04_MAX_GRID) grid = REG04_MAX_GRID;
    const long long quads = n_train / 4;
    const long long quads_per_block = (quads + grid - 1) / grid;
    long long want = quads_per_block - (long long)REG04_REG_QUADS * REG04_THREADS;
    if (want < 0) want = 0;
    const long long room = ((long long)optin - (long long)attr.sharedSizeBytes) / 16 - grid;  // float4 slots
    const long long cap = room > 0 ? room / 2 : 0;
    const int smem_quads = (int)(want < cap ? want : cap);
    const size_t dyn_bytes = 16 * ((size_t)grid + 2 * (size_t)smem_quads);
    cudaCheck(cudaFuncSetAttribute(reg04_resident_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn_bytes));
    int per_sm = 0;
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reg04_resident_kernel, REG04_THREADS, dyn_bytes));
    if (per_sm < 1) {
        fprintf(stderr, "regression: the resident kernel does not fit on an SM (%zu bytes of shared memory)\n",
                dyn_bytes);
        exit(4);
    }

    const size_t train_bytes = (size_t)n_train * sizeof(float), test_bytes = (size_t)n_test * sizeof(float);
    const size_t report_count = 3 + 2 * (size_t)n_logged;
    const size_t pub_bytes = 2 * (size_t)REG04_SUMS * (size_t)grid * sizeof(unsigned long long);
    const size_t stage_bytes = 2 * train_bytes + 2 * test_bytes;
    float *d_x_train, *d_y_train;  // (n_train,)
    float *d_x_test, *d_y_test;    // (n_test,)
    float *d_report;               // w, b, final test loss, train losses [n_logged], test losses [n_logged]
    unsigned long long *d_pub;     // (2, grid, REG04_SUMS)
    unsigned char *h_stage = NULL; // pinned: x_train | y_train | x_test | y_test
    cudaCheck(cudaMalloc(&d_x_train, train_bytes));
    cudaCheck(cudaMalloc(&d_y_train, train_bytes));
    cudaCheck(cudaMalloc(&d_x_test, test_bytes));
    cudaCheck(cudaMalloc(&d_y_test, test_bytes));
    cudaCheck(cudaMalloc(&d_report, report_count * sizeof(float)));
    cudaCheck(cudaMalloc(&d_pub, pub_bytes));
    cudaCheck(cudaMallocHost((void **)&h_stage, stage_bytes > 0 ? stage_bytes : 1));
    cudaCheck(cudaMemset(d_report, 0xFF, report_count * sizeof(float)));  // NaN until written
    cudaCheck(cudaMemset(d_pub, 0, pub_bytes));                          // tag 0: nothing published
    cudaCheck(cudaDeviceSynchronize());
    float *h_report = (float *)host_malloc(report_count * sizeof(float), "regression report");
    TrainClock clock;
    train_clock_init(&clock, epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start_ms;

    // e2e starts with the data in host memory
    cudaStream_t stream = 0;
    train_clock_e2e_start(&clock, stream);
    const Reg04Copy arrays[4] = {
        {(const unsigned char *)data->x_train, h_stage, (unsigned char *)d_x_train, train_bytes},
        {(const unsigned char *)data->y_train, h_stage + train_bytes, (unsigned char *)d_y_train, train_bytes},
        {(const unsigned char *)data->x_test, h_stage + 2 * train_bytes, (unsigned char *)d_x_test, test_bytes},
        {(const unsigned char *)data->y_test, h_stage + 2 * train_bytes + test_bytes, (unsigned char *)d_y_test,
         test_bytes},
    };
    TIMED_PHASE(&clock, PHASE_H2D, stream) reg04_upload(arrays, 4, stream);
    train_clock_loop_start(&clock, stream);

    Reg04Args args;
    args.x_train = d_x_train;
    args.y_train = d_y_train;
    args.x_test = d_x_test;
    args.y_test = d_y_test;
    args.n_train = n_train;
    args.n_test = n_test;
    args.quads_per_block = quads_per_block;
    args.smem_quads = smem_quads;
    args.epochs = epochs;
    args.log_every = log_every;
    args.n_logged = n_logged;
    args.lr = cfg->lr;
    args.w0 = data->w_init;
    args.b0 = data->b_init;
    args.pub = d_pub;
    args.report = d_report;
    void *kernel_args[] = {&args};

    // every epoch (forward, loss, gradient, update, logged test losses) and the final test loss in one launch:
    // timed as the loss phase (loss + fused gradient, as round 1)
    TIMED_PHASE(&clock, PHASE_LOSS, stream)
        cudaCheck(cudaLaunchCooperativeKernel((const void *)reg04_resident_kernel, dim3((unsigned int)grid),
                                              dim3(REG04_THREADS), kernel_args, dyn_bytes, stream));
    // the epochs run inside that launch: their events can only follow it (loop_ms is the honest total)
    for (int epoch = 0; epoch < epochs; epoch++) train_clock_epoch_end(&clock, epoch, stream);

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
    cudaCheck(cudaFreeHost(h_stage));
    cudaCheck(cudaFree(d_x_train));
    cudaCheck(cudaFree(d_y_train));
    cudaCheck(cudaFree(d_x_test));
    cudaCheck(cudaFree(d_y_test));
    cudaCheck(cudaFree(d_report));
    cudaCheck(cudaFree(d_pub));
    return 0;
}
