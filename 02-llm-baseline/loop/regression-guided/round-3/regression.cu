// Stage 05-style regression: y = w x + b by full-batch gradient descent, with an asynchronous upload and the whole run
// in one cooperative launch that keeps the training set on chip (registers + shared memory) for every epoch.
//
// Upload. Set-up (untimed) allocates one device buffer and one pinned staging buffer with the same layout
// (x_train | y_train | x_test | y_test, each at a 256-byte boundary), pre-faults the staging buffer and starts a pool of
// host threads that wait on a flag. Once e2e starts, the helpers copy 256 KB pieces of the caller's pageable arrays into
// the staging buffer, in order; the calling thread only queues DMAs: whenever the staged prefix has grown and the DMAs
// already queued are about to run out (a host-clock estimate), or 8 MB have piled up, it queues one cudaMemcpyAsync for
// the whole staged range. Nothing synchronizes the host until the trained parameters are back: the results return by an
// asynchronous copy into pinned memory on the same stream, and the clock's events do the rest.
//
// Training. One 512-thread block per SM, all resident. Each block owns a contiguous slice of the training set and loads
// it once: RG05_REG_QUADS float4 pairs (x, y) per thread into registers, the rest of the slice into shared memory, and
// whatever still does not fit (larger sets, smaller GPUs) is re-read from global memory every epoch. On an H200 (132
// SMs), 4,000,000 points = 7,576 quads a block: 2,048 in registers, 5,528 (177 KB) in shared memory.
//
// Every epoch a thread forms r = w x + b - y in fp32 (as stage 02), sums r x, r (and r^2 on logged epochs) in fp32 over
// at most RG05_CHUNK quads and then in fp64; warp shuffles and shared memory reduce the block. Blocks then exchange
// their sums instead of ending the kernel: warp k of every block publishes the block's sum k as a 64-bit word (the
// sum's fp32 bits, the step's tag in the high half: a word is either this step's value or a stale one, never torn),
// double-buffered by step parity, then polls every block's word k and sums them in fp64 in a fixed order. Only the
// sums a step needs travel: two on ordinary epochs, four on logged ones, one on the last step. Every block thus computes
// the same w, b bit for bit; block 0 records the losses. Logged epochs also sum the test set's r^2 (read from L2) with
// the start-of-epoch parameters; a last step does the same with the trained ones.
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

const char *const REGRESSION_VARIANTS[] = {"resident-async", NULL};

#define RG05_THREADS 512                         // one block per SM
#define RG05_WARPS (RG05_THREADS / 32)
#define RG05_REG_QUADS 4                         // training quads (4 points of x and y) a thread keeps in registers
#define RG05_CHUNK 8                             // quads a thread sums in fp32 before adding to its fp64 sums
#define RG05_TEST_QUADS 4                        // test quads a thread has in flight
#define RG05_SUMS 4                              // exchanged sums: train r x, train r, train r^2, test r^2
#define RG05_POLL 8                              // published words one gathering lane polls
#define RG05_MAX_GRID (32 * RG05_POLL)           // so that one gathering warp covers every block
#define RG05_SPIN_LIMIT (1u << 26)               // polls (seconds of them) before a trap instead of a hang
#define RG05_ALIGN ((size_t)256)                 // every array starts at a 256-byte boundary (float4 loads)
#define RG05_PIECE ((size_t)256 << 10)           // bytes a host thread stages at a time
#define RG05_BATCH_MAX ((size_t)8 << 20)         // the largest single DMA
#define RG05_MAX_HELPERS 12                      // host threads staging pieces
#define RG05_DMA_BYTES_PER_MS 5.0e7              // what the issuing thread assumes of the copy engine (50 GB/s) ...
#define RG05_DMA_FIXED_MS 0.002                  // ... and of each DMA's fixed cost
#define RG05_DMA_SLACK_MS 0.01                   // queue a DMA once the queued ones have less than this left
#define RG05_HELP_MS 0.08                        // the issuing thread stages a piece itself only with this much queued

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
    unsigned long long *pub;         // (2, RG05_SUMS, grid) published block sums: fp32 bits | step tag << 32
    float *report;                   // w, b, final test loss, train losses [n_logged], test losses [n_logged]
} Rg05Args;

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
static __device__ __forceinline__ int rg05_log_slot(int e, int epochs, int log_every) {
    if (e % log_every == 0) return e / log_every;
    if (e == epochs - 1) return e / log_every + 1;
    return -1;
}

// published words: single 64-bit accesses that bypass L1, so a poll sees another block's store
static __device__ __forceinline__ unsigned long long rg05_load_word(const unsigned long long *p) {
    return *(const volatile unsigned long long *)p;
}

static __device__ __forceinline__ void rg05_store_word(unsigned long long *p, unsigned long long v) {
    *(volatile unsigned long long *)p = v;
}

static __device__ __forceinline__ void rg05_backoff() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    __nanosleep(32);
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

// one thread's share of the test set's sum of r^2: quads first, first + stride, ... (RG05_TEST_QUADS in flight), and
// the last n_test % 4 points for their owner
static __device__ __forceinline__ double rg05_test_sum(const float4 *__restrict__ tx, const float4 *__restrict__ ty,
                                                       long long tquads, const float *__restrict__ tail_x,
                                                       const float *__restrict__ tail_y, int n_tail, long long first,
                                                       long long stride, float w, float b) {
    double acc = 0.0;
    for (long long i = first; i < tquads; i += (long long)RG05_TEST_QUADS * stride) {
        float4 xv[RG05_TEST_QUADS], yv[RG05_TEST_QUADS];
#pragma unroll
        for (int c = 0; c < RG05_TEST_QUADS; c++) {
            const long long k = i + (long long)c * stride;
            if (k < tquads) {
                xv[c] = __ldg(tx + k);
                yv[c] = __ldg(ty + k);
            } else {
                xv[c] = make_float4(0.f, 0.f, 0.f, 0.f);
                yv[c] = xv[c];
            }
        }
        float sq = 0.f;
#pragma unroll
        for (int c = 0; c < RG05_TEST_QUADS; c++)
            if (i + (long long)c * stride < tquads) sq = rg05_quad_sq(xv[c], yv[c], w, b, sq);
        acc += (double)sq;
    }
    float sq = 0.f;
    for (int t = 0; t < n_tail; t++) {
        const float r = fmaf(w, __ldg(tail_x + t), b) - __ldg(tail_y + t);
        sq = fmaf(r, r, sq);
    }
    return acc + (double)sq;
}

// one warp waits until every block's word carries this step's tag, then sums the words in fp64 in a fixed order
// (lane, then shuffle tree): the same total, bit for bit, in every block
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
        rg05_backoff();
    }
    double t = 0.0;
#pragma unroll
    for (int j = 0; j < RG05_POLL; j++)
        if (lane + 32 * j < grid) t += (double)__uint_as_float((unsigned int)(v[j] & 0xffffffffull));
    return rg05_warp_sum(t);
}

// ----------------------------------------------------------------------------
// the whole training: load the slice once, then every epoch (and a last test-only step) in one launch

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

    // shared memory: the next smem_n local quads; global memory: the rest [g_begin, nq)
    const long long reg_span = (long long)RG05_REG_QUADS * RG05_THREADS;
    const long long rest = nq > reg_span ? nq - reg_span : 0;
    const int smem_n = (int)(rest < (long long)a.smem_quads ? rest : (long long)a.smem_quads);
    float4 *xs = rg05_smem;
    float4 *ys = rg05_smem + a.smem_quads;
    for (int s = tid; s < smem_n; s += RG05_THREADS) {
        xs[s] = __ldg(gx + reg_span + s);
        ys[s] = __ldg(gy + reg_span + s);
    }
    const long long g_begin = reg_span + smem_n;

    // the n % 4 last points of each set belong to thread 0 of block 0
    const bool owner = blk == 0 && tid == 0;
    const int n_tail = owner ? (int)(a.n_train - 4 * quads) : 0;
    const float *tail_x = a.x_train + 4 * quads;
    const float *tail_y = a.y_train + 4 * quads;
    const long long tquads = a.n_test >> 2;
    const int n_ttail = owner ? (int)(a.n_test - 4 * tquads) : 0;
    const float4 *tx = reinterpret_cast<const float4 *>(a.x_test);
    const float4 *ty = reinterpret_cast<const float4 *>(a.y_test);
    const float *ttail_x = a.x_test + 4 * tquads;
    const float *ttail_y = a.y_test + 4 * tquads;
    const long long first = (long long)blk * RG05_THREADS + tid;
    const long long stride = (long long)grid * RG05_THREADS;
    __syncthreads();

    float w = a.w0, b = a.b0;
    const double scale = 2.0 / (double)a.n_train;
    for (int step = 0; step <= a.epochs; step++) {
        const bool train = step < a.epochs;  // the last step only measures the trained parameters
        const int slot = train ? rg05_log_slot(step, a.epochs, a.log_every) : -1;
        const bool logged = slot >= 0;
        const bool test = logged || !train;
        const unsigned int tag = (unsigned int)step + 1u;  // 0 = nothing published yet

        // this thread's share, with the parameters at the start of the epoch
        double p_rx = 0.0, p_rs = 0.0, p_sq = 0.0, p_tq = 0.0;
        if (logged)
            rg05_train_sums<true>(rx4, ry4, n_reg, xs, ys, smem_n, gx, gy, g_begin, nq, tail_x, tail_y, n_tail, w, b,
                                  p_sq, p_rx, p_rs);
        else if (train)
            rg05_train_sums<false>(rx4, ry4, n_reg, xs, ys, smem_n, gx, gy, g_begin, nq, tail_x, tail_y, n_tail, w, b,
                                   p_sq, p_rx, p_rs);
        if (test) p_tq = rg05_test_sum(tx, ty, tquads, ttail_x, ttail_y, n_ttail, first, stride, w, b);

        // warp sums, then one warp per needed sum: the block's total
        if (train) {
            p_rx = rg05_warp_sum(p_rx);
            p_rs = rg05_warp_sum(p_rs);
        }
        if (logged) p_sq = rg05_warp_sum(p_sq);
        if (test) p_tq = rg05_warp_sum(p_tq);
        if (lane == 0) {
            s_red[warp][0] = p_rx;
            s_red[warp][1] = p_rs;
            s_red[warp][2] = p_sq;
            s_red[warp][3] = p_tq;
        }
        __syncthreads();

        const bool needed = (warp == 0 || warp == 1) ? train : (warp == 2 ? logged : (warp == 3 ? test : false));
        if (needed) {
            double v = lane < RG05_WARPS ? s_red[lane][warp] : 0.0;
            v = rg05_warp_sum(v);
            unsigned long long *words = a.pub + ((size_t)(step & 1) * RG05_SUMS + (size_t)warp) * (size_t)grid;
            if (lane == 0)
                rg05_store_word(words + blk, ((unsigned long long)tag << 32) |
                                                 (unsigned long long)__float_as_uint((float)v));
            // every block's word for this sum: the grid-wide total, the same in every block
            const double t = rg05_gather(words, grid, lane, tag);
            if (lane == 0) s_tot[warp] = t;
        }
        __syncthreads();

        if (owner) {
            if (logged) {  // train and test MSE with the parameters at the start of the epoch
                a.report[3 + slot] = (float)(s_tot[2] / (double)a.n_train);
                a.report[3 + a.n_logged + slot] = (float)(s_tot[3] / (double)a.n_test);
            }
            if (!train) {  // the trained parameters and their test MSE
                a.report[0] = w;
                a.report[1] = b;
                a.report[2] = (float)(s_tot[3] / (double)a.n_test);
            }
        }
        if (train) {
            // w -= lr * 2/n * sum(r x); b -= lr * 2/n * sum(r)   (as stage 02), the same in every thread of every block
            w = (float)((double)w - (double)a.lr * scale * s_tot[0]);
            b = (float)((double)b - (double)a.lr * scale * s_tot[1]);
        }
    }
}

// ----------------------------------------------------------------------------
// upload: pageable host arrays -> pinned staging (a pool of host threads, started during set-up) -> device (DMAs
// queued by the calling thread as the staged prefix grows)

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

// runs inside e2e: releases the helpers, then queues one DMA per staged range, each as soon as the copy engine is
// about to run dry (host-clock estimate) or RG05_BATCH_MAX bytes are staged; stages pieces itself only when alone or
// when plenty is queued
static void rg05_upload(Rg05Uploader *u, unsigned char *dev, cudaStream_t stream) {
    const int n = (int)u->pieces.size();
    u->go.store(1, std::memory_order_release);
    const bool alone = u->helpers.empty();
    int issued = 0, staged = 0;
    double dma_end_ms = 0.0;  // when the queued DMAs should be done
    while (issued < n) {
        while (staged < n && u->ready[staged].load(std::memory_order_acquire)) staged++;
        const double now = host_ms();
        if (staged > issued) {
            const size_t lo = u->pieces[issued].off;
            const size_t hi = u->pieces[staged - 1].off + u->pieces[staged - 1].bytes;
            if (staged == n || hi - lo >= RG05_BATCH_MAX || now + RG05_DMA_SLACK_MS >= dma_end_ms) {
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
// training

int train_regression(const RegressionConfig *cfg, const RegressionData *data, RegressionResult *out) {
    const long long n_train = data->n_train, n_test = data->n_test;
    const int epochs = cfg->epochs;
    const int log_every = cfg->log_every > 0 ? cfg->log_every : 1;
    const int n_logged = regression_logged_count(epochs, log_every);

    // setup (not timed): launch geometry, buffers, pinned staging, stream, staging threads
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
    cudaCheck(cudaFuncGetAttributes(&attr, rg05_resident_kernel));

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

    // one layout for the staging buffer and the device buffer: x_train | y_train | x_test | y_test
    const size_t train_bytes = (size_t)n_train * sizeof(float), test_bytes = (size_t)n_test * sizeof(float);
    const size_t off_x_train = 0;
    const size_t off_y_train = rg05_align(off_x_train + train_bytes);
    const size_t off_x_test = rg05_align(off_y_train + train_bytes);
    const size_t off_y_test = rg05_align(off_x_test + test_bytes);
    size_t total_bytes = rg05_align(off_y_test + test_bytes);
    if (total_bytes == 0) total_bytes = RG05_ALIGN;

    const size_t report_count = 3 + 2 * (size_t)n_logged;
    const size_t pub_bytes = 2 * (size_t)RG05_SUMS * (size_t)grid * sizeof(unsigned long long);
    unsigned char *d_data = NULL;     // device: the four arrays
    unsigned char *h_stage = NULL;    // pinned: the same layout
    float *d_report = NULL;           // w, b, final test loss, train losses [n_logged], test losses [n_logged]
    float *h_report = NULL;           // pinned copy of it
    unsigned long long *d_pub = NULL; // (2, RG05_SUMS, grid)
    cudaCheck(cudaMalloc((void **)&d_data, total_bytes));
    cudaCheck(cudaMalloc((void **)&d_report, report_count * sizeof(float)));
    cudaCheck(cudaMalloc((void **)&d_pub, pub_bytes));
    cudaCheck(cudaMallocHost((void **)&h_stage, total_bytes));
    cudaCheck(cudaMallocHost((void **)&h_report, report_count * sizeof(float)));
    memset(h_stage, 0, total_bytes);  // every staging page faulted in now, not inside e2e
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaCheck(cudaMemsetAsync(d_report, 0xFF, report_count * sizeof(float), stream));  // NaN until written
    cudaCheck(cudaMemsetAsync(d_pub, 0, pub_bytes, stream));                           // tag 0: nothing published
    cudaCheck(cudaStreamSynchronize(stream));
    cudaCheck(cudaDeviceSynchronize());

    Rg05Args args;
    args.x_train = (const float *)(d_data + off_x_train);
    args.y_train = (const float *)(d_data + off_y_train);
    args.x_test = (const float *)(d_data + off_x_test);
    args.y_test = (const float *)(d_data + off_y_test);
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

    // the staging pool: pieces in offset order, helper threads waiting for the start of e2e
    Rg05Uploader up;
    up.stage = h_stage;
    rg05_add_pieces(up.pieces, data->x_train, off_x_train, train_bytes);
    rg05_add_pieces(up.pieces, data->y_train, off_y_train, train_bytes);
    rg05_add_pieces(up.pieces, data->x_test, off_x_test, test_bytes);
    rg05_add_pieces(up.pieces, data->y_test, off_y_test, test_bytes);
    const int n_pieces = (int)up.pieces.size();
    up.ready.reset(new std::atomic<int>[n_pieces > 0 ? n_pieces : 1]);
    for (int k = 0; k < n_pieces; k++) up.ready[k].store(0, std::memory_order_relaxed);
    up.next.store(0, std::memory_order_relaxed);
    up.go.store(0, std::memory_order_release);
    const unsigned int cores = std::thread::hardware_concurrency();
    int helpers = cores > 4 ? (int)cores - 4 : (cores > 1 ? 1 : 0);
    if (helpers > RG05_MAX_HELPERS) helpers = RG05_MAX_HELPERS;
    if (helpers > n_pieces - 1) helpers = n_pieces - 1;
    if (helpers < 0) helpers = 0;
    try {
        for (int p = 0; p < helpers; p++) up.helpers.emplace_back(rg05_helper, &up);
    } catch (...) {
        // fewer helpers (or none): the calling thread stages whatever they leave
    }

    TrainClock clock;
    train_clock_init(&clock, epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start_ms;

    // e2e starts with the data in host memory
    train_clock_e2e_start(&clock, stream);
    TIMED_PHASE(&clock, PHASE_H2D, stream) rg05_upload(&up, d_data, stream);
    train_clock_loop_start(&clock, stream);

    // every epoch (forward, loss, gradient, update, logged test losses) and the final test loss in one launch:
    // timed as the loss phase (loss + fused gradient, as the earlier rounds)
    TIMED_PHASE(&clock, PHASE_LOSS, stream)
        cudaCheck(cudaLaunchCooperativeKernel((const void *)rg05_resident_kernel, dim3((unsigned int)grid),
                                              dim3(RG05_THREADS), kernel_args, dyn_bytes, stream));
    // the epochs run inside that launch: their events can only follow it (loop_ms is the honest total)
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
    cudaCheck(cudaStreamDestroy(stream));
    cudaCheck(cudaFreeHost(h_report));
    cudaCheck(cudaFreeHost(h_stage));
    cudaCheck(cudaFree(d_data));
    cudaCheck(cudaFree(d_report));
    cudaCheck(cudaFree(d_pub));
    return 0;
}
