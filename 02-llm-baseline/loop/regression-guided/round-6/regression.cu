// Regression: y = w x + b, MSE, full-batch gradient descent (as stage 02). Two variants.
//
// resident-overlap (the default, the one timed): round 5's persistent kernel with a less contended grid exchange and
//   more of each block's slice in registers (see "Round 6" below). Round 3's resident kernel with the test set
//   off the critical path; its one launch already holds every epoch (what a graph of the epochs would replay, without
//   the per-epoch node gaps and re-reads of the training set).
//   Upload. Set-up (untimed) allocates one device buffer and one pinned staging buffer with the same layout
//   (x_train | y_train | x_test | y_test, each at a 256-byte boundary), pre-faults the staging buffer and starts a pool
//   of host threads that wait on a flag. Once e2e starts, the helpers copy 256 KB pieces of the caller's pageable arrays
//   into the staging buffer, in order; the calling thread queues one DMA per staged range. Only the training set (32 of
//   the 40 MB) is uploaded before the loop. The test set's DMAs go on a second stream that waits for the training set's:
//   they run on the copy engine while the SMs train, and nothing in the training waits for them.
//   Training. One cooperative launch, one 512-thread block per SM, all resident. Each block owns a contiguous slice of
//   the training set and loads it once: RG05_REG_QUADS float4 pairs (x, y) per thread into registers, the rest of the
//   slice into shared memory, whatever still does not fit re-read from global memory every epoch. Every epoch a thread
//   forms r = w x + b - y in fp32 (as stage 02), sums r x, r (and r^2 on logged epochs) in fp32 over at most
//   RG05_CHUNK quads and then in fp64; warp shuffles and shared memory reduce the block. Blocks exchange their sums
//   through 64-bit words (the sum's fp32 bits, the step's tag in the high half: a word is this step's value or a stale
//   one, never torn), written and polled with relaxed gpu-scope accesses, double-buffered by step parity, and summed in
//   fp64 in a fixed order: every block computes the same w, b bit for bit. Logged epochs record their train MSE and
//   their start-of-epoch (w, b); the end of the run records the trained (w, b).
//   Round 6: (1) every published word is written to RG05_REPLICAS copies of the exchange array (lane k of the
//   publishing warp writes copy k, one store instruction) and each block polls only copy blk % RG05_REPLICAS. Round 5
//   had all 132 blocks poll the same ~8 cache lines per sum without pause, ~280-420 KB of L2 reads per poll round on
//   17-25 lines, and the last block's store queued behind them; now each line has 8-9 readers. Same words, same tags,
//   same fixed-order fp64 sum: every block still computes the same w, b bit for bit. (2) RG05_REG_QUADS 4 -> 6 (and
//   RG05_CHUNK 8 -> 4, to keep the register peak below the 128 of one 512-thread block per SM): 96 KB of each block's
//   slice in registers and 144 KB instead of 177 KB in shared memory, i.e. ~20% fewer shared-memory bytes per epoch.
//   Evaluation. A second launch, ordered after the test set's DMAs by an event, computes every test MSE (each logged
//   epoch's, with that epoch's start-of-epoch parameters, and the final one, with the trained parameters) in one pass
//   over the test set, RG05_EVAL_GROUP parameter pairs per read of a quad; the last block to finish sums the blocks'
//   partial sums in a fixed order.
//
// cublas (tested; timed only when selected): the same model with cuBLAS alone, in device pointer mode, without a host
//   synchronisation: per epoch r = y (copy), r = [x 1] (w b)^T - r (gemv), g = [x 1]^T r (gemv, transposed),
//   (w b) += -2 lr / n g (axpy), and sum r^2 (dot) of the train and test residuals on logged epochs. It measures the
//   library against the fused kernel: every call streams its operands through memory, ~144 MB per epoch.
//   Round 5: (1) the staging buffer carries the ones columns too. An upload DMA spans every byte between its first and
//   last staged piece, the ones column between x and y included; with zeros there it wiped the device's ones (b's
//   gradient and every test residual lost their b). (2) CUDA graph: every epoch and the final test sum are captured
//   once in set-up (user-owned cuBLAS workspace, relaxed capture), instantiated and uploaded there, and replayed with
//   one cudaGraphLaunch inside e2e instead of ~890 library calls. With --breakdown (a timed phase per step), or if the
//   capture fails, the same calls go to the stream directly.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include <cuda_runtime.h>
#include <cublas_v2.h>

#include "check.h"
#include "host.h"
#include "timing.h"
#include "trainer.h"

const char *const REGRESSION_VARIANTS[] = {"resident-overlap", "cublas", NULL};

#define RG05_THREADS 512                         // one block per SM
#define RG05_WARPS (RG05_THREADS / 32)
#define RG05_REG_QUADS 6                         // training quads (4 points of x and y) a thread keeps in registers
#define RG05_CHUNK 4                             // quads a thread sums in fp32 before adding to its fp64 sums
#define RG05_LOAD_BATCH 4                        // shared-memory quads a thread has in flight while loading
#define RG05_SUMS 3                              // exchanged sums: train r x, train r, train r^2 (logged epochs)
#define RG05_POLL 8                              // published words one gathering lane polls
#define RG05_MAX_GRID (32 * RG05_POLL)           // so that one gathering warp covers every block
#define RG05_SPIN_LIMIT (1u << 26)               // polls (seconds of them) before a trap instead of a hang
#define RG05_REPLICAS 16                         // copies of the exchange array (<= 32: one per lane of a warp)
#define RG05_SLOT_PAD 16                         // words between two slot arrays beyond the grid (rounded to 16)
#define RG05_EVAL_THREADS 256                    // evaluation launch
#define RG05_EVAL_WARPS (RG05_EVAL_THREADS / 32)
#define RG05_EVAL_GROUP 8                        // parameter pairs evaluated per read of a test quad
#define RG05_EVAL_QUADS 4                        // test quads a thread has in flight
#define RG05_EVAL_BLOCKS_PER_SM 2
#define RG05_ALIGN ((size_t)256)                 // every array starts at a 256-byte boundary (float4 loads)
#define RG05_PIECE ((size_t)256 << 10)           // bytes a host thread stages at a time
#define RG05_BATCH_MAX ((size_t)8 << 20)         // the largest single DMA
#define RG05_MAX_HELPERS 12                      // host threads staging pieces
#define RG05_DMA_BYTES_PER_MS 5.0e7              // what the issuing thread assumes of the copy engine (50 GB/s) ...
#define RG05_DMA_FIXED_MS 0.002                  // ... and of each DMA's fixed cost
#define RG05_DMA_SLACK_MS 0.01                   // queue a DMA once the queued ones have less than this left
#define RG05_HELP_MS 0.08                        // the issuing thread stages a piece itself only with this much queued
#define RG05_LDA_ALIGN 64                        // cublas variant: columns padded to 64 floats
#define RG05_SMALL 16                            // cublas variant: constants, gradient and scratch on the device

// ----------------------------------------------------------------------------
// the arguments of the default variant's two launches (passed by value)

typedef struct {
    const float *x_train, *y_train;  // (n_train,)
    long long n_train;
    long long quads_per_block;       // training quads each block owns: a contiguous slice
    int smem_quads;                  // training quads a block's shared memory holds
    int epochs, log_every, n_logged;
    float lr, w0, b0;
    unsigned long long *pub;         // (2, RG05_REPLICAS, RG05_SUMS, slot_words) published block sums: fp32 bits |
                                     // step tag << 32; each block's word at [.., .., .., blk] of every replica
    long long slot_words;            // words per slot array: the grid rounded up to 16, plus RG05_SLOT_PAD
    float2 *params;                  // [n_logged + 1]: (w, b) at the start of each logged epoch, then the trained ones
    float *report;                   // w, b, final test loss, train losses [n_logged], test losses [n_logged]
} Rg05Args;

typedef struct {
    const float *x_test, *y_test;    // (n_test,)
    long long n_test;
    const float2 *params;            // [n_eval]
    int n_eval, n_logged;            // n_eval = n_logged + 1
    double *part;                    // [grid][n_eval]: each block's sums of r^2
    unsigned int *done;              // blocks finished (0 before the launch)
    float *report;                   // the test losses and the final test loss go here (layout above)
} Rg05EvalArgs;

// ----------------------------------------------------------------------------
// per point: r = w x + b - y in fp32 (as stage 02)

// one quad: rx += r x, rs += r and, when WITH_SQ, sq += r^2
template <bool WITH_SQ>
static __device__ __forceinline__ void rg05_quad(float4 x, float4 y, float w, float b, float &sq, float &rx,
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
static __device__ __forceinline__ float rg05_quad_sq(float4 x, float4 y, float w, float b, float sq) {
    const float r0 = fmaf(w, x.x, b) - y.x;
    const float r1 = fmaf(w, x.y, b) - y.y;
    const float r2 = fmaf(w, x.z, b) - y.z;
    const float r3 = fmaf(w, x.w, b) - y.w;
    return fmaf(r3, r3, fmaf(r2, r2, fmaf(r1, r1, fmaf(r0, r0, sq))));
}

static __device__ __forceinline__ double rg05_warp_sum(double v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

// the log slot of epoch e, or -1 (as regression_epoch_logged and regression_logged_count count them)
static __host__ __device__ __forceinline__ int rg05_log_slot(int e, int epochs, int log_every) {
    if (e % log_every == 0) return e / log_every;
    if (e == epochs - 1) return e / log_every + 1;
    return -1;
}

// published words: single 64-bit relaxed accesses at gpu scope (served by L2, never by a stale L1 line); the word
// carries its own tag, so no other ordering is needed
static __device__ __forceinline__ unsigned long long rg05_load_word(const unsigned long long *p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
#else
    return *(const volatile unsigned long long *)p;
#endif
}

static __device__ __forceinline__ void rg05_store_word(unsigned long long *p, unsigned long long v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" : : "l"(p), "l"(v) : "memory");
#else
    *(volatile unsigned long long *)p = v;
#endif
}

// ----------------------------------------------------------------------------
// one thread's share of the training sums for one epoch: its register quads (and, for the tail owner, the n % 4 last
// points), its shared-memory quads and, when the slice does not fit on chip, its quads in global memory

template <bool WITH_SQ>
static __device__ __forceinline__ void rg05_train_sums(const float4 (&rx4)[RG05_REG_QUADS],
                                                       const float4 (&ry4)[RG05_REG_QUADS], int n_reg,
                                                       const float4 *xs, const float4 *ys, int smem_n,
                                                       const float4 *__restrict__ gx, const float4 *__restrict__ gy,
                                                       long long g_begin, long long g_end,
                                                       const float *__restrict__ tail_x,
                                                       const float *__restrict__ tail_y, int n_tail, float w, float b,
                                                       double &d_sq, double &d_rx, double &d_rs) {
    const int tid = threadIdx.x;

    // registers, and the last n % 4 points for their owner
    {
        float sq = 0.f, rx = 0.f, rs = 0.f;
#pragma unroll
        for (int j = 0; j < RG05_REG_QUADS; j++)
            if (j < n_reg) rg05_quad<WITH_SQ>(rx4[j], ry4[j], w, b, sq, rx, rs);
        for (int t = 0; t < n_tail; t++) {
            const float x = __ldg(tail_x + t);
            const float r = fmaf(w, x, b) - __ldg(tail_y + t);
            if constexpr (WITH_SQ) sq = fmaf(r, r, sq);
            rx = fmaf(r, x, rx);
            rs += r;
        }
        if constexpr (WITH_SQ) d_sq += (double)sq;
        d_rx += (double)rx;
        d_rs += (double)rs;
    }

    // shared memory: quads tid, tid + RG05_THREADS, ... of the block's on-chip part
    const int mine = smem_n > tid ? (smem_n - tid + RG05_THREADS - 1) / RG05_THREADS : 0;
    const float4 *px = xs + tid;
    const float4 *py = ys + tid;
    int c = 0;
    for (; c + RG05_CHUNK <= mine; c += RG05_CHUNK) {
        float sq = 0.f, rx = 0.f, rs = 0.f;
#pragma unroll
        for (int k = 0; k < RG05_CHUNK; k++)
            rg05_quad<WITH_SQ>(px[(c + k) * RG05_THREADS], py[(c + k) * RG05_THREADS], w, b, sq, rx, rs);
        if constexpr (WITH_SQ) d_sq += (double)sq;
        d_rx += (double)rx;
        d_rs += (double)rs;
    }
    if (c < mine) {
        float sq = 0.f, rx = 0.f, rs = 0.f;
        for (; c < mine; c++) rg05_quad<WITH_SQ>(px[c * RG05_THREADS], py[c * RG05_THREADS], w, b, sq, rx, rs);
        if constexpr (WITH_SQ) d_sq += (double)sq;
        d_rx += (double)rx;
        d_rs += (double)rs;
    }

    // global memory: whatever did not fit on chip
    for (long long g = g_begin + tid; g < g_end;) {
        float sq = 0.f, rx = 0.f, rs = 0.f;
        for (int k = 0; k < RG05_CHUNK && g < g_end; k++, g += RG05_THREADS)
            rg05_quad<WITH_SQ>(__ldg(gx + g), __ldg(gy + g), w, b, sq, rx, rs);
        if constexpr (WITH_SQ) d_sq += (double)sq;
        d_rx += (double)rx;
        d_rs += (double)rs;
    }
}

// one warp waits until every block's word carries this step's tag, then sums the words in fp64 in a fixed order
// (lane, then shuffle tree): the same total, bit for bit, in every block. The polls are paced by the L2 round trip.
static __device__ __forceinline__ double rg05_gather(const unsigned long long *words, int grid, int lane,
                                                     unsigned int tag) {
    unsigned long long v[RG05_POLL];
    unsigned int spins = 0;
    for (;;) {
        int ok = 1;
#pragma unroll
        for (int j = 0; j < RG05_POLL; j++) {
            const int g = lane + 32 * j;
            v[j] = 0ull;
            if (g < grid) {
                v[j] = rg05_load_word(words + g);
                ok &= (unsigned int)(v[j] >> 32) == tag;
            }
        }
        if (__all_sync(0xffffffffu, ok)) break;
        if (++spins == RG05_SPIN_LIMIT) __trap();
    }
    double t = 0.0;
#pragma unroll
    for (int j = 0; j < RG05_POLL; j++)
        if (lane + 32 * j < grid) t += (double)__uint_as_float((unsigned int)(v[j] & 0xffffffffull));
    return rg05_warp_sum(t);
}

// ----------------------------------------------------------------------------
// the whole training: load the slice once, then every epoch in one launch

__global__ void __launch_bounds__(RG05_THREADS, 1) rg05_resident_kernel(const Rg05Args a) {
    extern __shared__ float4 rg05_smem[];               // x quads [smem_quads] | y quads [smem_quads]
    __shared__ double s_red[RG05_WARPS][RG05_SUMS];     // per-warp partial sums
    __shared__ double s_tot[RG05_SUMS];                 // this step's grid-wide sums

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int blk = blockIdx.x, grid = gridDim.x;

    // this block's slice of training quads [q0, q1)
    const long long quads = a.n_train >> 2;
    long long q0 = (long long)blk * a.quads_per_block;
    if (q0 > quads) q0 = quads;
    long long q1 = q0 + a.quads_per_block;
    if (q1 > quads) q1 = quads;
    const long long nq = q1 - q0;
    const float4 *__restrict__ gx = reinterpret_cast<const float4 *>(a.x_train) + q0;
    const float4 *__restrict__ gy = reinterpret_cast<const float4 *>(a.y_train) + q0;

    // registers: local quads tid + j * RG05_THREADS
    float4 rx4[RG05_REG_QUADS], ry4[RG05_REG_QUADS];
    int n_reg = 0;
#pragma unroll
    for (int j = 0; j < RG05_REG_QUADS; j++) {
        const long long l = (long long)tid + (long long)j * RG05_THREADS;
        if (l < nq) {
            rx4[j] = __ldg(gx + l);
            ry4[j] = __ldg(gy + l);
            n_reg = j + 1;
        } else {
            rx4[j] = make_float4(0.f, 0.f, 0.f, 0.f);
            ry4[j] = rx4[j];
        }
    }

    // shared memory: the next smem_n local quads, RG05_LOAD_BATCH pairs in flight per thread; global memory: the rest
    const long long reg_span = (long long)RG05_REG_QUADS * RG05_THREADS;
    const long long rest = nq > reg_span ? nq - reg_span : 0;
    const int smem_n = (int)(rest < (long long)a.smem_quads ? rest : (long long)a.smem_quads);
    float4 *xs = rg05_smem;
    float4 *ys = rg05_smem + a.smem_quads;
    for (int s0 = tid; s0 < smem_n; s0 += RG05_LOAD_BATCH * RG05_THREADS) {
        float4 bx[RG05_LOAD_BATCH], by[RG05_LOAD_BATCH];
#pragma unroll
        for (int k = 0; k < RG05_LOAD_BATCH; k++) {
            const int s = s0 + k * RG05_THREADS;
            if (s < smem_n) {
                bx[k] = __ldg(gx + reg_span + s);
                by[k] = __ldg(gy + reg_span + s);
            } else {
                bx[k] = make_float4(0.f, 0.f, 0.f, 0.f);
                by[k] = bx[k];
            }
        }
#pragma unroll
        for (int k = 0; k < RG05_LOAD_BATCH; k++) {
            const int s = s0 + k * RG05_THREADS;
            if (s < smem_n) {
                xs[s] = bx[k];
                ys[s] = by[k];
            }
        }
    }
    const long long g_begin = reg_span + smem_n;

    // the n % 4 last training points belong to thread 0 of block 0, which also records the results
    const bool owner = blk == 0 && tid == 0;
    const int n_tail = owner ? (int)(a.n_train - 4 * quads) : 0;
    const float *tail_x = a.x_train + 4 * quads;
    const float *tail_y = a.y_train + 4 * quads;
    __syncthreads();

    float w = a.w0, b = a.b0;
    const double scale = 2.0 / (double)a.n_train;
    for (int step = 0; step < a.epochs; step++) {
        const int slot = rg05_log_slot(step, a.epochs, a.log_every);
        const bool logged = slot >= 0;
        const unsigned int tag = (unsigned int)step + 1u;  // 0 = nothing published yet

        // this thread's share, with the parameters at the start of the epoch
        double p_rx = 0.0, p_rs = 0.0, p_sq = 0.0;
        if (logged)
            rg05_train_sums<true>(rx4, ry4, n_reg, xs, ys, smem_n, gx, gy, g_begin, nq, tail_x, tail_y, n_tail, w, b,
                                  p_sq, p_rx, p_rs);
        else
            rg05_train_sums<false>(rx4, ry4, n_reg, xs, ys, smem_n, gx, gy, g_begin, nq, tail_x, tail_y, n_tail, w, b,
                                   p_sq, p_rx, p_rs);

        // warp sums, then one warp per needed sum: the block's total
        p_rx = rg05_warp_sum(p_rx);
        p_rs = rg05_warp_sum(p_rs);
        if (logged) p_sq = rg05_warp_sum(p_sq);
        if (lane == 0) {
            s_red[warp][0] = p_rx;
            s_red[warp][1] = p_rs;
            s_red[warp][2] = p_sq;
        }
        __syncthreads();

        const bool needed = warp < 2 || (warp == 2 && logged);
        if (needed) {
            double v = lane < RG05_WARPS ? s_red[lane][warp] : 0.0;
            v = rg05_warp_sum(v);
            v = __shfl_sync(0xffffffffu, v, 0);  // the block's total in every lane (lane 0 holds the sum)
            const unsigned long long word =
                ((unsigned long long)tag << 32) | (unsigned long long)__float_as_uint((float)v);
            // this step's parity: RG05_REPLICAS copies of (RG05_SUMS slot arrays of slot_words words)
            unsigned long long *const parity_base =
                a.pub + (size_t)(step & 1) * (size_t)RG05_REPLICAS * RG05_SUMS * (size_t)a.slot_words;
            // lane k writes the block's word into copy k (one store instruction, RG05_REPLICAS lanes)
            if (lane < RG05_REPLICAS)
                rg05_store_word(parity_base + ((size_t)lane * RG05_SUMS + (size_t)warp) * (size_t)a.slot_words + blk,
                                word);
            // every block's word for this sum, from this block's copy only (8-9 readers per line instead of all
            // blocks): the grid-wide total, the same in every block
            const unsigned long long *const words =
                parity_base + ((size_t)(blk % RG05_REPLICAS) * RG05_SUMS + (size_t)warp) * (size_t)a.slot_words;
            const double t = rg05_gather(words, grid, lane, tag);
            if (lane == 0) s_tot[warp] = t;
        }
        __syncthreads();

        if (owner && logged) {  // train MSE and the parameters at the start of the epoch (its test MSE comes later)
            a.params[slot] = make_float2(w, b);
            a.report[3 + slot] = (float)(s_tot[2] / (double)a.n_train);
        }
        // w -= lr * 2/n * sum(r x); b -= lr * 2/n * sum(r)   (as stage 02), the same in every thread of every block
        w = (float)((double)w - (double)a.lr * scale * s_tot[0]);
        b = (float)((double)b - (double)a.lr * scale * s_tot[1]);
    }
    if (owner) {  // the trained parameters
        a.params[a.n_logged] = make_float2(w, b);
        a.report[0] = w;
        a.report[1] = b;
    }
}

// ----------------------------------------------------------------------------
// every test MSE in one pass: quad i of the test set is read once per RG05_EVAL_GROUP parameter pairs; each block
// writes its sums, and the last block to finish adds them up in a fixed order

static __global__ void __launch_bounds__(RG05_EVAL_THREADS) rg05_eval_kernel(const Rg05EvalArgs a) {
    __shared__ double s_red[RG05_EVAL_WARPS][RG05_EVAL_GROUP];
    __shared__ int s_last;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long tquads = a.n_test >> 2;
    const float4 *__restrict__ tx = reinterpret_cast<const float4 *>(a.x_test);
    const float4 *__restrict__ ty = reinterpret_cast<const float4 *>(a.y_test);
    const bool owner = blockIdx.x == 0 && tid == 0;  // the n_test % 4 last points
    const int n_tail = owner ? (int)(a.n_test - 4 * tquads) : 0;
    const float *tail_x = a.x_test + 4 * tquads;
    const float *tail_y = a.y_test + 4 * tquads;
    const long long first = (long long)blockIdx.x * RG05_EVAL_THREADS + tid;
    const long long stride = (long long)gridDim.x * RG05_EVAL_THREADS;

    for (int e0 = 0; e0 < a.n_eval; e0 += RG05_EVAL_GROUP) {
        float w[RG05_EVAL_GROUP], b[RG05_EVAL_GROUP];
        double acc[RG05_EVAL_GROUP];
#pragma unroll
        for (int g = 0; g < RG05_EVAL_GROUP; g++) {
            const int e = e0 + g < a.n_eval ? e0 + g : a.n_eval - 1;  // past the end: a duplicate, not written
            const float2 p = a.params[e];
            w[g] = p.x;
            b[g] = p.y;
            acc[g] = 0.0;
        }
        for (long long i = first; i < tquads; i += (long long)RG05_EVAL_QUADS * stride) {
            float4 xv[RG05_EVAL_QUADS], yv[RG05_EVAL_QUADS];
#pragma unroll
            for (int c = 0; c < RG05_EVAL_QUADS; c++) {
                const long long k = i + (long long)c * stride;
                if (k < tquads) {
                    xv[c] = __ldg(tx + k);
                    yv[c] = __ldg(ty + k);
                } else {
                    xv[c] = make_float4(0.f, 0.f, 0.f, 0.f);
                    yv[c] = xv[c];
                }
            }
#pragma unroll
            for (int g = 0; g < RG05_EVAL_GROUP; g++) {
                float sq = 0.f;
#pragma unroll
                for (int c = 0; c < RG05_EVAL_QUADS; c++)
                    if (i + (long long)c * stride < tquads) sq = rg05_quad_sq(xv[c], yv[c], w[g], b[g], sq);
                acc[g] += (double)sq;
            }
        }
        for (int t = 0; t < n_tail; t++) {
            const float tx1 = __ldg(tail_x + t), ty1 = __ldg(tail_y + t);
#pragma unroll
            for (int g = 0; g < RG05_EVAL_GROUP; g++) {
                const float r = fmaf(w[g], tx1, b[g]) - ty1;
                acc[g] += (double)(r * r);
            }
        }

        // the block's sums of this group
#pragma unroll
        for (int g = 0; g < RG05_EVAL_GROUP; g++) {
            const double v = rg05_warp_sum(acc[g]);
            if (lane == 0) s_red[warp][g] = v;
        }
        __syncthreads();
        if (tid < RG05_EVAL_GROUP && e0 + tid < a.n_eval) {
            double t = 0.0;
#pragma unroll
            for (int wp = 0; wp < RG05_EVAL_WARPS; wp++) t += s_red[wp][tid];
            a.part[(size_t)blockIdx.x * (size_t)a.n_eval + (size_t)(e0 + tid)] = t;
            __threadfence();  // the block's sums are visible before its arrival is counted
        }
        __syncthreads();
    }

    // the last block to arrive sums every block's partial sums, blocks in order: the same total whoever is last
    if (tid == 0) {
        __threadfence();
        const unsigned int prev = atomicAdd(a.done, 1u);
        s_last = prev == gridDim.x - 1u ? 1 : 0;
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    const volatile double *part = a.part;
    for (int e = warp; e < a.n_eval; e += RG05_EVAL_WARPS) {
        double t = 0.0;
        for (int blk = lane; blk < (int)gridDim.x; blk += 32) t += part[(size_t)blk * (size_t)a.n_eval + (size_t)e];
        t = rg05_warp_sum(t);
        if (lane == 0) {
            const float loss = (float)(t / (double)a.n_test);
            if (e < a.n_logged)
                a.report[3 + a.n_logged + e] = loss;  // logged epoch e's test MSE
            else
                a.report[2] = loss;                   // the trained parameters' test MSE
        }
    }
}

// cublas variant, set-up only: the column of ones next to x
static __global__ void rg05_fill_kernel(float *p, long long n, float v) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        p[i] = v;
}

// ----------------------------------------------------------------------------
// upload: pageable host arrays -> pinned staging (a pool of host threads, started during set-up) -> device (DMAs
// queued by the calling thread as the staged prefix of a range of pieces grows)

typedef struct {
    const unsigned char *src;  // the caller's host memory
    size_t off;                // offset in the staging buffer and in the device buffer (same layout)
    size_t bytes;
} Rg05Piece;

struct Rg05Uploader {
    std::vector<Rg05Piece> pieces;               // in offset order
    std::unique_ptr<std::atomic<int>[]> ready;   // [pieces] 1 once staged
    std::atomic<int> next;                       // the next piece to claim
    std::atomic<int> go;                         // 0: wait, 1: stage, 2: quit
    unsigned char *stage;                        // pinned staging
    std::vector<std::thread> helpers;
};

static size_t rg05_align(size_t bytes) { return (bytes + RG05_ALIGN - 1) & ~(RG05_ALIGN - 1); }

static void rg05_add_pieces(std::vector<Rg05Piece> &pieces, const void *src, size_t off, size_t bytes) {
    for (size_t o = 0; o < bytes; o += RG05_PIECE) {
        Rg05Piece p;
        p.src = (const unsigned char *)src + o;
        p.off = off + o;
        p.bytes = bytes - o < RG05_PIECE ? bytes - o : RG05_PIECE;
        pieces.push_back(p);
    }
}

static int rg05_claim(Rg05Uploader *u) {
    const int n = (int)u->pieces.size();
    if (u->next.load(std::memory_order_relaxed) >= n) return -1;
    const int k = u->next.fetch_add(1, std::memory_order_relaxed);
    return k < n ? k : -1;
}

static void rg05_stage_piece(Rg05Uploader *u, int k) {
    const Rg05Piece &p = u->pieces[k];
    memcpy(u->stage + p.off, p.src, p.bytes);
    u->ready[k].store(1, std::memory_order_release);
}

static void rg05_helper(Rg05Uploader *u) {
    int go;
    while ((go = u->go.load(std::memory_order_acquire)) == 0) std::this_thread::yield();
    if (go != 1) return;
    for (int k; (k = rg05_claim(u)) >= 0;) rg05_stage_piece(u, k);
}

// set-up: the ready flags, then the helper threads (waiting for go)
static void rg05_start_helpers(Rg05Uploader *u) {
    const int n = (int)u->pieces.size();
    u->ready.reset(new std::atomic<int>[n > 0 ? n : 1]);
    for (int k = 0; k < n; k++) u->ready[k].store(0, std::memory_order_relaxed);
    u->next.store(0, std::memory_order_relaxed);
    u->go.store(0, std::memory_order_release);
    const unsigned int cores = std::thread::hardware_concurrency();
    int helpers = cores > 4 ? (int)cores - 4 : (cores > 1 ? 1 : 0);
    if (helpers > RG05_MAX_HELPERS) helpers = RG05_MAX_HELPERS;
    if (helpers > n - 1) helpers = n - 1;
    if (helpers < 0) helpers = 0;
    try {
        for (int p = 0; p < helpers; p++) u->helpers.emplace_back(rg05_helper, u);
    } catch (...) {
        // fewer helpers (or none): the calling thread stages whatever they leave
    }
}

// runs inside e2e: releases the helpers, then queues one DMA per staged range of pieces [begin, end), each as soon as
// the copy engine is about to run dry (host-clock estimate) or RG05_BATCH_MAX bytes are staged; stages pieces itself
// only when alone or when plenty is queued. Returns once every piece of the range is queued on the stream.
static void rg05_upload(Rg05Uploader *u, int begin, int end, unsigned char *dev, cudaStream_t stream) {
    u->go.store(1, std::memory_order_release);
    const bool alone = u->helpers.empty();
    int issued = begin, staged = begin;
    double dma_end_ms = 0.0;  // when the queued DMAs should be done
    while (issued < end) {
        while (staged < end && u->ready[staged].load(std::memory_order_acquire)) staged++;
        const double now = host_ms();
        if (staged > issued) {
            const size_t lo = u->pieces[issued].off;
            const size_t hi = u->pieces[staged - 1].off + u->pieces[staged - 1].bytes;
            if (staged == end || hi - lo >= RG05_BATCH_MAX || now + RG05_DMA_SLACK_MS >= dma_end_ms) {
                cudaCheck(cudaMemcpyAsync(dev + lo, u->stage + lo, hi - lo, cudaMemcpyHostToDevice, stream));
                dma_end_ms = (now > dma_end_ms ? now : dma_end_ms) + RG05_DMA_FIXED_MS +
                             (double)(hi - lo) / RG05_DMA_BYTES_PER_MS;
                issued = staged;
                continue;
            }
        }
        if (alone || now + RG05_HELP_MS < dma_end_ms) {
            const int k = rg05_claim(u);
            if (k >= 0) rg05_stage_piece(u, k);
        }
    }
}

static void rg05_join(Rg05Uploader *u) {
    int idle = 0;
    u->go.compare_exchange_strong(idle, 2);  // helpers that never started quit
    for (size_t p = 0; p < u->helpers.size(); p++) u->helpers[p].join();
    u->helpers.clear();
}

// ----------------------------------------------------------------------------
// the default variant: resident training, test set uploaded and evaluated off the critical path

static int rg05_train_resident(const RegressionConfig *cfg, const RegressionData *data, RegressionResult *out) {
    const long long n_train = data->n_train, n_test = data->n_test;
    const int epochs = cfg->epochs;
    const int log_every = cfg->log_every > 0 ? cfg->log_every : 1;
    const int n_logged = regression_logged_count(epochs, log_every);
    const int n_eval = n_logged + 1;  // every logged epoch, then the trained parameters

    // setup (not timed): launch geometry, buffers, pinned staging, streams, events, staging threads
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
    cudaFuncAttributes attr, eval_attr;
    cudaCheck(cudaFuncGetAttributes(&attr, rg05_resident_kernel));
    cudaCheck(cudaFuncGetAttributes(&eval_attr, rg05_eval_kernel));  // loads the evaluation kernel now, not in e2e

    // one block per SM; each owns quads_per_block training quads: registers first, then shared memory
    int grid = sms < 1 ? 1 : sms;
    if (grid > RG05_MAX_GRID) grid = RG05_MAX_GRID;
    const long long quads = n_train / 4;
    const long long quads_per_block = (quads + grid - 1) / grid;
    long long want = quads_per_block - (long long)RG05_REG_QUADS * RG05_THREADS;
    if (want < 0) want = 0;
    long long cap = ((long long)optin - (long long)attr.sharedSizeBytes) / (long long)(2 * sizeof(float4)) - 1;
    if (cap < 0) cap = 0;
    int smem_quads = (int)(want < cap ? want : cap);
    size_t dyn_bytes = 0;
    int per_sm = 0;
    for (;;) {
        dyn_bytes = 2 * sizeof(float4) * (size_t)smem_quads;
        cudaCheck(cudaFuncSetAttribute(rg05_resident_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)dyn_bytes));
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rg05_resident_kernel, RG05_THREADS,
                                                                dyn_bytes));
        if (per_sm >= 1 || smem_quads == 0) break;
        smem_quads -= smem_quads / 8 + 1;  // leave more to global memory until a block fits
        if (smem_quads < 0) smem_quads = 0;
    }
    if (per_sm < 1) {
        fprintf(stderr, "regression: the resident kernel does not fit on an SM (%zu bytes of shared memory)\n",
                dyn_bytes);
        exit(4);
    }
    const int eval_grid = (sms < 1 ? 1 : sms) * RG05_EVAL_BLOCKS_PER_SM;

    // one layout for the staging buffer and the device buffer: x_train | y_train | x_test | y_test
    const size_t train_bytes = (size_t)n_train * sizeof(float), test_bytes = (size_t)n_test * sizeof(float);
    const size_t off_x_train = 0;
    const size_t off_y_train = rg05_align(off_x_train + train_bytes);
    const size_t off_x_test = rg05_align(off_y_train + train_bytes);
    const size_t off_y_test = rg05_align(off_x_test + test_bytes);
    size_t total_bytes = rg05_align(off_y_test + test_bytes);
    if (total_bytes == 0) total_bytes = RG05_ALIGN;

    const size_t report_count = 3 + 2 * (size_t)n_logged;
    const long long slot_words = ((long long)grid + 15) / 16 * 16 + RG05_SLOT_PAD;  // 128-byte aligned slot arrays
    const size_t pub_bytes =
        2 * (size_t)RG05_REPLICAS * (size_t)RG05_SUMS * (size_t)slot_words * sizeof(unsigned long long);
    const size_t params_bytes = (size_t)n_eval * sizeof(float2);
    const size_t part_bytes = (size_t)eval_grid * (size_t)n_eval * sizeof(double);
    unsigned char *d_data = NULL;     // device: the four arrays
    unsigned char *h_stage = NULL;    // pinned: the same layout
    float *d_report = NULL;           // w, b, final test loss, train losses [n_logged], test losses [n_logged]
    float *h_report = NULL;           // pinned copy of it
    unsigned long long *d_pub = NULL; // (2, RG05_REPLICAS, RG05_SUMS, slot_words)
    float2 *d_params = NULL;          // [n_eval]
    double *d_part = NULL;            // [eval_grid][n_eval]
    unsigned int *d_done = NULL;      // evaluation blocks finished
    cudaCheck(cudaMalloc((void **)&d_data, total_bytes));
    cudaCheck(cudaMalloc((void **)&d_report, report_count * sizeof(float)));
    cudaCheck(cudaMalloc((void **)&d_pub, pub_bytes));
    cudaCheck(cudaMalloc((void **)&d_params, params_bytes));
    cudaCheck(cudaMalloc((void **)&d_part, part_bytes));
    cudaCheck(cudaMalloc((void **)&d_done, sizeof(unsigned int)));
    cudaCheck(cudaMallocHost((void **)&h_stage, total_bytes));
    cudaCheck(cudaMallocHost((void **)&h_report, report_count * sizeof(float)));
    memset(h_stage, 0, total_bytes);  // every staging page faulted in now, not inside e2e
    cudaStream_t stream, stream_b;    // stream: training set, training, evaluation, results; stream_b: the test set
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&stream_b, cudaStreamNonBlocking));
    cudaEvent_t ev_train, ev_test;    // training set queued / test set on the device
    cudaCheck(cudaEventCreateWithFlags(&ev_train, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&ev_test, cudaEventDisableTiming));
    cudaCheck(cudaMemsetAsync(d_report, 0xFF, report_count * sizeof(float), stream));  // NaN until written
    cudaCheck(cudaMemsetAsync(d_params, 0xFF, params_bytes, stream));
    cudaCheck(cudaMemsetAsync(d_pub, 0, pub_bytes, stream));                           // tag 0: nothing published
    cudaCheck(cudaMemsetAsync(d_part, 0, part_bytes, stream));
    cudaCheck(cudaMemsetAsync(d_done, 0, sizeof(unsigned int), stream));
    cudaCheck(cudaStreamSynchronize(stream));
    cudaCheck(cudaDeviceSynchronize());

    Rg05Args args;
    args.x_train = (const float *)(d_data + off_x_train);
    args.y_train = (const float *)(d_data + off_y_train);
    args.n_train = n_train;
    args.quads_per_block = quads_per_block;
    args.smem_quads = smem_quads;
    args.epochs = epochs;
    args.log_every = log_every;
    args.n_logged = n_logged;
    args.lr = cfg->lr;
    args.w0 = data->w_init;
    args.b0 = data->b_init;
    args.pub = d_pub;
    args.slot_words = slot_words;
    args.params = d_params;
    args.report = d_report;
    void *kernel_args[] = {&args};

    Rg05EvalArgs eargs;
    eargs.x_test = (const float *)(d_data + off_x_test);
    eargs.y_test = (const float *)(d_data + off_y_test);
    eargs.n_test = n_test;
    eargs.params = d_params;
    eargs.n_eval = n_eval;
    eargs.n_logged = n_logged;
    eargs.part = d_part;
    eargs.done = d_done;
    eargs.report = d_report;

    // the staging pool: pieces in offset order (training set first), helper threads waiting for the start of e2e
    Rg05Uploader up;
    up.stage = h_stage;
    rg05_add_pieces(up.pieces, data->x_train, off_x_train, train_bytes);
    rg05_add_pieces(up.pieces, data->y_train, off_y_train, train_bytes);
    const int n_train_pieces = (int)up.pieces.size();
    rg05_add_pieces(up.pieces, data->x_test, off_x_test, test_bytes);
    rg05_add_pieces(up.pieces, data->y_test, off_y_test, test_bytes);
    const int n_pieces = (int)up.pieces.size();
    rg05_start_helpers(&up);

    // with --breakdown every phase synchronizes: no overlap then, everything is uploaded in the h2d phase
    const bool overlap = !cfg->breakdown && n_train_pieces < n_pieces;

    TrainClock clock;
    train_clock_init(&clock, epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start_ms;

    // e2e starts with the data in host memory
    train_clock_e2e_start(&clock, stream);
    if (overlap) {
        TIMED_PHASE(&clock, PHASE_H2D, stream) rg05_upload(&up, 0, n_train_pieces, d_data, stream);
        cudaCheck(cudaEventRecord(ev_train, stream));
        cudaCheck(cudaStreamWaitEvent(stream_b, ev_train, 0));  // the test set follows the training set on the link
    } else {
        TIMED_PHASE(&clock, PHASE_H2D, stream) rg05_upload(&up, 0, n_pieces, d_data, stream);
    }
    train_clock_loop_start(&clock, stream);

    // every epoch (forward, loss, gradient, update, logged train losses) in one launch: timed as the loss phase (loss +
    // fused gradient, as the earlier rounds). It reads nothing of the test set.
    TIMED_PHASE(&clock, PHASE_LOSS, stream)
        cudaCheck(cudaLaunchCooperativeKernel((const void *)rg05_resident_kernel, dim3((unsigned int)grid),
                                              dim3(RG05_THREADS), kernel_args, dyn_bytes, stream));

    // meanwhile the test set goes up on the second stream; the evaluation waits for it
    if (overlap) {
        rg05_upload(&up, n_train_pieces, n_pieces, d_data, stream_b);
        cudaCheck(cudaEventRecord(ev_test, stream_b));
        cudaCheck(cudaStreamWaitEvent(stream, ev_test, 0));
    }

    // every test loss: each logged epoch's (its start-of-epoch parameters) and the trained parameters'
    TIMED_PHASE(&clock, PHASE_EVAL, stream) {
        rg05_eval_kernel<<<eval_grid, RG05_EVAL_THREADS, 0, stream>>>(eargs);
        cudaCheck(cudaGetLastError());
    }
    // the epochs ran inside the launches: their events can only follow them (loop_ms is the honest total)
    for (int epoch = 0; epoch < epochs; epoch++) train_clock_epoch_end(&clock, epoch, stream);

    // one asynchronous copy into pinned memory: the trained w, b, the final test loss and every logged loss
    TIMED_PHASE(&clock, PHASE_D2H, stream)
        cudaCheck(cudaMemcpyAsync(h_report, d_report, report_count * sizeof(float), cudaMemcpyDeviceToHost, stream));
    train_clock_e2e_stop(&clock, stream);
    cudaCheck(cudaStreamSynchronize(stream));  // after the last event: the host waits, the timeline does not change
    train_clock_finish(&clock, &out->timing);

    out->w = h_report[0];
    out->b = h_report[1];
    out->final_test_loss = h_report[2];
    for (int i = 0; i < n_logged; i++) {
        out->train_loss[i] = h_report[3 + i];
        out->test_loss[i] = h_report[3 + n_logged + i];
    }

    rg05_join(&up);
    cudaCheck(cudaStreamSynchronize(stream_b));
    cudaCheck(cudaEventDestroy(ev_train));
    cudaCheck(cudaEventDestroy(ev_test));
    cudaCheck(cudaStreamDestroy(stream_b));
    cudaCheck(cudaStreamDestroy(stream));
    cudaCheck(cudaFreeHost(h_report));
    cudaCheck(cudaFreeHost(h_stage));
    cudaCheck(cudaFree(d_data));
    cudaCheck(cudaFree(d_report));
    cudaCheck(cudaFree(d_pub));
    cudaCheck(cudaFree(d_params));
    cudaCheck(cudaFree(d_part));
    cudaCheck(cudaFree(d_done));
    return 0;
}

// ----------------------------------------------------------------------------
// the cublas variant: the library against the fused kernel, its epochs captured once into a CUDA graph

#define RG05_CUBLAS_WORKSPACE ((size_t)32 << 20)  // user-owned cuBLAS workspace: nothing allocated during capture

static size_t rg05_pad(long long n) {
    const size_t m = n > 0 ? (size_t)n : 1;
    return (m + RG05_LDA_ALIGN - 1) / RG05_LDA_ALIGN * RG05_LDA_ALIGN;
}

// the operands of the cublas model: device pointers, scalars in device memory (CUBLAS_POINTER_MODE_DEVICE)
typedef struct {
    cublasHandle_t handle;
    int m_train, m_test;                                 // points
    int lda_train, lda_test;                             // column strides of [x | ones]
    const float *a_train, *y_train;                      // [x_train | ones] column-major (m_train, 2), y_train
    const float *a_test, *y_test;                        // [x_test | ones] column-major (m_test, 2), y_test
    float *r_train, *r_test;                             // residuals
    const float *c_one, *c_minus_one, *c_zero, *c_step;  // 1, -1, 0, -2 lr / n_train
    float *g;                                            // (sum r x, sum r)
    bool soft;                                           // capturing: a failed call is recorded, not fatal
    cublasStatus_t status;                               // the first failure while soft
} Rg05Blas;

static void rg05_blas_check(Rg05Blas *k, cublasStatus_t rg05_status) {
    if (rg05_status == CUBLAS_STATUS_SUCCESS) return;
    if (k->soft) {
        if (k->status == CUBLAS_STATUS_SUCCESS) k->status = rg05_status;
        return;
    }
    cublasCheck(rg05_status);
}

// result = sum r^2 with r = [x 1] p - y over one set (a: x then ones, column-major, lda)
static void rg05_blas_sq(Rg05Blas *k, int m, const float *a, int lda, const float *y, float *r, const float *p,
                         float *result) {
    rg05_blas_check(k, cublasScopy(k->handle, m, y, 1, r, 1));
    rg05_blas_check(k, cublasSgemv(k->handle, CUBLAS_OP_N, m, 2, k->c_one, a, lda, p, 1, k->c_minus_one, r, 1));
    rg05_blas_check(k, cublasSdot(k->handle, m, r, 1, r, 1, result));
}

// r_train = [x 1] p - y with p = (w, b) at the start of the epoch
static void rg05_blas_forward(Rg05Blas *k, const float *p) {
    rg05_blas_check(k, cublasScopy(k->handle, k->m_train, k->y_train, 1, k->r_train, 1));
    rg05_blas_check(k, cublasSgemv(k->handle, CUBLAS_OP_N, k->m_train, 2, k->c_one, k->a_train, k->lda_train, p, 1,
                                   k->c_minus_one, k->r_train, 1));
}

// result = sum r_train^2
static void rg05_blas_train_sq(Rg05Blas *k, float *result) {
    rg05_blas_check(k, cublasSdot(k->handle, k->m_train, k->r_train, 1, k->r_train, 1, result));
}

// result = sum r_test^2 with the parameters p
static void rg05_blas_test_sq(Rg05Blas *k, const float *p, float *result) {
    rg05_blas_sq(k, k->m_test, k->a_test, k->lda_test, k->y_test, k->r_test, p, result);
}

// g = [x 1]^T r_train = (sum r x, sum r)
static void rg05_blas_backward(Rg05Blas *k) {
    rg05_blas_check(k, cublasSgemv(k->handle, CUBLAS_OP_T, k->m_train, 2, k->c_one, k->a_train, k->lda_train,
                                   k->r_train, 1, k->c_zero, k->g, 1));
}

// (w, b) += -2 lr / n g
static void rg05_blas_update(Rg05Blas *k, float *p) {
    rg05_blas_check(k, cublasSaxpy(k->handle, 2, k->c_step, k->g, 1, p, 1));
}

// every epoch and the trained parameters' test sum, as stream work without phases (what the graph holds). report:
// w, b (= p), final test sum r^2, train sums [n_logged], test sums [n_logged]
static void rg05_blas_all_epochs(Rg05Blas *k, float *p, float *report, int epochs, int log_every, int n_logged) {
    for (int epoch = 0; epoch < epochs; epoch++) {
        const int slot = rg05_log_slot(epoch, epochs, log_every);
        rg05_blas_forward(k, p);
        if (slot >= 0) {
            rg05_blas_train_sq(k, report + 3 + slot);
            rg05_blas_test_sq(k, p, report + 3 + n_logged + slot);
        }
        rg05_blas_backward(k);
        rg05_blas_update(k, p);
    }
    rg05_blas_test_sq(k, p, report + 2);
}

// set-up: rg05_blas_all_epochs captured once on the stream, instantiated and uploaded; NULL (and one line on stderr)
// when the capture, the instantiation or the upload fails: the caller then issues the same calls directly
static cudaGraphExec_t rg05_blas_capture(Rg05Blas *k, cudaStream_t stream, float *p, float *report, int epochs,
                                         int log_every, int n_logged) {
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    k->soft = true;
    k->status = CUBLAS_STATUS_SUCCESS;
    bool ok = cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) == cudaSuccess;
    if (ok) {
        rg05_blas_all_epochs(k, p, report, epochs, log_every, n_logged);
        const cudaError_t end = cudaStreamEndCapture(stream, &graph);  // ends the capture even when invalidated
        ok = end == cudaSuccess && graph != NULL && k->status == CUBLAS_STATUS_SUCCESS;
    }
    if (ok) ok = cudaGraphInstantiateWithFlags(&exec, graph, 0) == cudaSuccess && exec != NULL;
    if (ok) ok = cudaGraphUpload(exec, stream) == cudaSuccess;
    if (graph != NULL) (void)cudaGraphDestroy(graph);  // the executable graph is a copy
    if (!ok) {
        if (exec != NULL) (void)cudaGraphExecDestroy(exec);
        exec = NULL;
        (void)cudaGetLastError();  // capture errors are not sticky: clear the last one
        fprintf(stderr, "regression cublas: graph capture failed (cuBLAS status %d); issuing the calls directly\n",
                (int)k->status);
    }
    k->soft = false;
    k->status = CUBLAS_STATUS_SUCCESS;
    cudaCheck(cudaStreamSynchronize(stream));
    return exec;
}

static int rg05_train_cublas(const RegressionConfig *cfg, const RegressionData *data, RegressionResult *out) {
    const long long n_train = data->n_train, n_test = data->n_test;
    const int epochs = cfg->epochs;
    const int log_every = cfg->log_every > 0 ? cfg->log_every : 1;
    const int n_logged = regression_logged_count(epochs, log_every);

    // setup (not timed): buffers, pinned staging, stream, handle, workspace, the ones columns, constants, cuBLAS
    // warm-up, the graph of every epoch
    const double setup_start_ms = host_ms();
    const size_t lda_train = rg05_pad(n_train), lda_test = rg05_pad(n_test);
    const size_t o_a_train = 0;                     // [x_train | ones]: column-major (n_train, 2), lda_train
    const size_t o_y_train = 2 * lda_train;
    const size_t o_a_test = o_y_train + lda_train;  // [x_test | ones]: column-major (n_test, 2), lda_test
    const size_t o_y_test = o_a_test + 2 * lda_test;
    const size_t o_r_train = o_y_test + lda_test;   // residuals
    const size_t o_r_test = o_r_train + lda_train;
    const size_t n_floats = o_r_test + lda_test;
    const size_t stage_bytes = o_r_train * sizeof(float);  // the uploaded part: the staging buffer mirrors it
    const size_t report_count = 3 + 2 * (size_t)n_logged;  // w, b, final test sum r^2, train sums, test sums

    float *d_buf = NULL, *d_report = NULL, *d_small = NULL;
    void *d_work = NULL;
    unsigned char *h_stage = NULL;
    float *h_report = NULL, *h_init = NULL;
    cudaCheck(cudaMalloc((void **)&d_buf, n_floats * sizeof(float)));
    cudaCheck(cudaMalloc((void **)&d_report, report_count * sizeof(float)));
    cudaCheck(cudaMalloc((void **)&d_small, RG05_SMALL * sizeof(float)));
    cudaCheck(cudaMalloc(&d_work, RG05_CUBLAS_WORKSPACE));
    cudaCheck(cudaMallocHost((void **)&h_stage, stage_bytes));
    cudaCheck(cudaMallocHost((void **)&h_report, report_count * sizeof(float)));
    cudaCheck(cudaMallocHost((void **)&h_init, 2 * sizeof(float)));
    memset(h_stage, 0, stage_bytes);  // every staging page faulted in now, not inside e2e
    // the staging buffer holds the ones columns too: an upload DMA covers every byte between its first and last staged
    // piece, so the ones column between x and y travels with it and must arrive as ones
    {
        float *const stage_f = (float *)h_stage;
        for (long long i = 0; i < n_train; i++) stage_f[o_a_train + lda_train + (size_t)i] = 1.f;
        for (long long i = 0; i < n_test; i++) stage_f[o_a_test + lda_test + (size_t)i] = 1.f;
    }
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cublasHandle_t handle;
    cublasCheck(cublasCreate(&handle));
    cublasCheck(cublasSetStream(handle, stream));  // (resets the workspace: set it after)
    cublasCheck(cublasSetWorkspace(handle, d_work, RG05_CUBLAS_WORKSPACE));
    cublasCheck(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_DEVICE));  // scalars and results stay on the device

    Rg05Blas blas;
    blas.handle = handle;
    blas.m_train = (int)n_train;
    blas.m_test = (int)n_test;
    blas.lda_train = (int)lda_train;
    blas.lda_test = (int)lda_test;
    blas.a_train = d_buf + o_a_train;
    blas.y_train = d_buf + o_y_train;
    blas.a_test = d_buf + o_a_test;
    blas.y_test = d_buf + o_y_test;
    blas.r_train = d_buf + o_r_train;
    blas.r_test = d_buf + o_r_test;
    blas.c_one = d_small;
    blas.c_minus_one = d_small + 1;
    blas.c_zero = d_small + 2;
    blas.c_step = d_small + 3;   // -2 lr / n_train
    blas.g = d_small + 4;        // (sum r x, sum r)
    blas.soft = false;
    blas.status = CUBLAS_STATUS_SUCCESS;
    float *const scratch_p = d_small + 6;    // warm-up only
    float *const scratch_sum = d_small + 8;
    float *const p = d_report;               // (w, b) live in the report

    float h_small[RG05_SMALL];
    for (int i = 0; i < RG05_SMALL; i++) h_small[i] = 0.f;
    h_small[0] = 1.f;
    h_small[1] = -1.f;
    h_small[2] = 0.f;
    h_small[3] = (float)(-2.0 * (double)cfg->lr / (double)n_train);
    cudaCheck(cudaMemcpy(d_small, h_small, sizeof(h_small), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemsetAsync(d_buf, 0, n_floats * sizeof(float), stream));
    cudaCheck(cudaMemsetAsync(d_report, 0xFF, report_count * sizeof(float), stream));  // NaN until written
    if (n_train > 0) rg05_fill_kernel<<<1024, 256, 0, stream>>>(d_buf + o_a_train + lda_train, n_train, 1.f);
    if (n_test > 0) rg05_fill_kernel<<<1024, 256, 0, stream>>>(d_buf + o_a_test + lda_test, n_test, 1.f);
    cudaCheck(cudaGetLastError());
    // warm-up on the zeroed buffers, results into scratch: loads cuBLAS's kernels here rather than inside e2e
    rg05_blas_forward(&blas, scratch_p);
    rg05_blas_train_sq(&blas, scratch_sum);
    rg05_blas_backward(&blas);
    rg05_blas_update(&blas, scratch_p);
    rg05_blas_test_sq(&blas, scratch_p, scratch_sum);
    cudaCheck(cudaStreamSynchronize(stream));

    // every epoch and the final test sum, captured once and instantiated here, replayed once inside e2e. Not with
    // --breakdown: each step is then its own timed phase, issued directly
    cudaGraphExec_t graph_exec = NULL;
    if (!cfg->breakdown) graph_exec = rg05_blas_capture(&blas, stream, p, d_report, epochs, log_every, n_logged);
    cudaCheck(cudaDeviceSynchronize());
    h_init[0] = data->w_init;
    h_init[1] = data->b_init;

    // the staging pool (same offsets as the device buffer), helper threads waiting for the start of e2e
    Rg05Uploader up;
    up.stage = h_stage;
    rg05_add_pieces(up.pieces, data->x_train, o_a_train * sizeof(float), (size_t)n_train * sizeof(float));
    rg05_add_pieces(up.pieces, data->y_train, o_y_train * sizeof(float), (size_t)n_train * sizeof(float));
    rg05_add_pieces(up.pieces, data->x_test, o_a_test * sizeof(float), (size_t)n_test * sizeof(float));
    rg05_add_pieces(up.pieces, data->y_test, o_y_test * sizeof(float), (size_t)n_test * sizeof(float));
    const int n_pieces = (int)up.pieces.size();
    rg05_start_helpers(&up);

    TrainClock clock;
    train_clock_init(&clock, epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start_ms;

    // e2e starts with the data (and the initial parameters) in host memory
    train_clock_e2e_start(&clock, stream);
    TIMED_PHASE(&clock, PHASE_H2D, stream) {
        cudaCheck(cudaMemcpyAsync(p, h_init, 2 * sizeof(float), cudaMemcpyHostToDevice, stream));
        rg05_upload(&up, 0, n_pieces, (unsigned char *)d_buf, stream);
    }
    train_clock_loop_start(&clock, stream);

    if (graph_exec != NULL) {
        // every epoch (and the trained parameters' test sum) in one graph launch; the epochs ran inside it, so their
        // events can only follow it (loop_ms is the honest total)
        cudaCheck(cudaGraphLaunch(graph_exec, stream));
        for (int epoch = 0; epoch < epochs; epoch++) train_clock_epoch_end(&clock, epoch, stream);
    } else {
        for (int epoch = 0; epoch < epochs; epoch++) {
            const int slot = rg05_log_slot(epoch, epochs, log_every);
            // r = w x + b - y with the parameters at the start of the epoch
            TIMED_PHASE(&clock, PHASE_FORWARD, stream) rg05_blas_forward(&blas, p);
            if (slot >= 0) {
                TIMED_PHASE(&clock, PHASE_LOSS, stream) rg05_blas_train_sq(&blas, d_report + 3 + slot);
                TIMED_PHASE(&clock, PHASE_EVAL, stream) rg05_blas_test_sq(&blas, p, d_report + 3 + n_logged + slot);
            }
            // g = (sum r x, sum r); (w, b) += -2 lr / n g
            TIMED_PHASE(&clock, PHASE_BACKWARD, stream) rg05_blas_backward(&blas);
            TIMED_PHASE(&clock, PHASE_UPDATE, stream) rg05_blas_update(&blas, p);
            train_clock_epoch_end(&clock, epoch, stream);
        }
        // the trained parameters' test sum
        TIMED_PHASE(&clock, PHASE_EVAL, stream) rg05_blas_test_sq(&blas, p, d_report + 2);
    }

    TIMED_PHASE(&clock, PHASE_D2H, stream)
        cudaCheck(cudaMemcpyAsync(h_report, d_report, report_count * sizeof(float), cudaMemcpyDeviceToHost, stream));
    train_clock_e2e_stop(&clock, stream);
    cudaCheck(cudaStreamSynchronize(stream));
    train_clock_finish(&clock, &out->timing);

    // the sums of r^2 become MSEs
    out->w = h_report[0];
    out->b = h_report[1];
    out->final_test_loss = (float)((double)h_report[2] / (double)n_test);
    for (int i = 0; i < n_logged; i++) {
        out->train_loss[i] = (float)((double)h_report[3 + i] / (double)n_train);
        out->test_loss[i] = (float)((double)h_report[3 + n_logged + i] / (double)n_test);
    }

    rg05_join(&up);
    if (graph_exec != NULL) cudaCheck(cudaGraphExecDestroy(graph_exec));
    cublasCheck(cublasDestroy(handle));
    cudaCheck(cudaStreamDestroy(stream));
    cudaCheck(cudaFreeHost(h_init));
    cudaCheck(cudaFreeHost(h_report));
    cudaCheck(cudaFreeHost(h_stage));
    cudaCheck(cudaFree(d_buf));
    cudaCheck(cudaFree(d_report));
    cudaCheck(cudaFree(d_small));
    cudaCheck(cudaFree(d_work));
    return 0;
}

// ----------------------------------------------------------------------------

int train_regression(const RegressionConfig *cfg, const RegressionData *data, RegressionResult *out) {
    if (cfg->variant == 1) return rg05_train_cublas(cfg, data, out);
    return rg05_train_resident(cfg, data, out);
}
