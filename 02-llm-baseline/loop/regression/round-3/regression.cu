// Stage 02, regression: y = w x + b by full-batch gradient descent.
// Round 3 of the loop. The whole training loop is one persistent (cooperative) kernel, and the training set stays on chip:
//  - one block of 1024 threads per SM, each owning a fixed, contiguous slice of the training set and of the test set.
//    At the start a block copies as much of its training slice as fits into shared memory (227 KB per SM: 3.81M of
//    the 4M training points on an H200), so an epoch reads its data from shared memory, not from HBM; the rest of the
//    slice (1,408 points per block there) and the test slice are read from global memory, where they stay in L2;
//  - an epoch: the block's pass with the current w, b gives 4 FP64 sums (train sum r^2, sum r x, sum r; test sum r^2
//    on logged epochs). The block publishes them, and every block gathers every block's sums and reduces them in one
//    fixed order, so all blocks hold bitwise the same w, b after the update; no relaunch, no host round trip;
//  - the exchange is its own grid barrier: each published 64-bit word carries the round number in its 8 low mantissa
//    bits (a relative change below 2^-44), so a reader spins on the word itself and pays a single L2 round trip. The
//    words are double-buffered by round parity, so a word is rewritten only after every block has read it;
//  - numerics as round 2: the residual in FP32 with the parameters' FP32 rounding error added back, FP32 sums over
//    8 points moved to FP64, every sum above the thread in FP64;
//  - the caller's host arrays are pinned during set-up, so the upload is a DMA at full PCIe speed.
// With --breakdown every epoch (and every evaluation) is its own launch of the same kernel, so that phases can be timed.
#include <stdint.h>
#include <stddef.h>
#include <cuda_runtime.h>

#include "check.h"
#include "host.h"
#include "timing.h"
#include "trainer.h"

// the name is kept so that the drivers' and the loop's variant flags still select it
const char *const REGRESSION_VARIANTS[] = {"baseline", NULL};

#define RG_THREADS 1024                      // one block per SM
#define RG_WARPS (RG_THREADS / 32)
#define RG_QTY 4                             // exchanged sums: train r^2, r x, r; test r^2
#define RG_MAX_BLOCKS (RG_THREADS / RG_QTY)  // 256: one gathering thread per (sum, block)
#define RG_GU 4                              // float4s of x (and of y) in flight per thread in the global loops
#define RG_MIN_BLOCK_POINTS 8192             // small data sets use fewer blocks (a cheaper exchange)
#define RG_PAD_FLOATS 64                     // each device array starts on a 256-byte boundary
#define RG_TAG_MASK 0xFFull                  // the low mantissa bits of an exchanged word: its round number

static_assert(RG_THREADS == RG_QTY * RG_MAX_BLOCKS, "one gathering thread per (sum, block)");
static_assert(RG_MAX_BLOCKS % 32 == 0, "each warp gathers a single sum");
static_assert(RG_WARPS == 32, "warp 0 reduces one value per warp");

typedef struct {
    const float *x, *y;         // training set (n,)
    int64_t n;
    const float *xt, *yt;       // test set (nt,)
    int64_t nt;
    int64_t chunk, tchunk;      // training / test points per block (multiples of 4)
    int cache4;                 // capacity of the shared-memory copy: float4s of x (and as many of y)
    int e_begin, e_end;         // the epochs this launch runs
    int epochs, log_every;
    int do_train;               // 0: no training pass and no update (an evaluation launch)
    int do_test;                // logged epochs evaluate the test set with their own parameters
    int final_eval;             // after e_end: one more round, the test set with the trained parameters
    int use_init;               // 1: start from w0, b0; 0: from params
    double w0, b0;
    unsigned int seq0;          // round number of this launch's first exchange (1, 2, ... over a call)
    double step;                // lr * 2 / n
    double n_div, nt_div;
    double *params;             // (2,) w, b: read at the start unless use_init, written at the end by block 0
    unsigned long long *xchg;   // [2][RG_QTY][RG_MAX_BLOCKS] published sums, tagged with their round
    float *train_loss, *test_loss, *final_test_loss;
} RgArgs;

// ----------------------------------------------------------------------------
// device helpers

// the exchange words: 64-bit volatile accesses (single-copy atomic, never served from L1)
static __device__ __forceinline__ unsigned long long rg_load_word(const unsigned long long *p) {
    return *(const volatile unsigned long long *)p;
}

static __device__ __forceinline__ void rg_store_word(unsigned long long *p, unsigned long long v) {
    *(volatile unsigned long long *)p = v;
}

static __device__ __forceinline__ double rg_warp_sum(double v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

// r = w x + b - y in FP32, with (dw, db) = the FP32 rounding error of the FP64 parameters added back
static __device__ __forceinline__ float rg_residual(float wf, float bf, float dw, float db, float x, float y) {
    return (fmaf(wf, x, bf) - y) + fmaf(dw, x, db);
}

// one training point: s0 += r^2 (only on logged epochs), s1 += r x, s2 += r
template <bool LOSS>
static __device__ __forceinline__ void rg_train_pt(float wf, float bf, float dw, float db, float x, float y, float &s0,
                                                   float &s1, float &s2) {
    const float r = rg_residual(wf, bf, dw, db, x, y);
    if (LOSS) s0 = fmaf(r, r, s0);
    s1 = fmaf(r, x, s1);
    s2 += r;
}

template <bool LOSS>
static __device__ __forceinline__ void rg_train_quad(float wf, float bf, float dw, float db, const float4 &x,
                                                     const float4 &y, float &s0, float &s1, float &s2) {
    rg_train_pt<LOSS>(wf, bf, dw, db, x.x, y.x, s0, s1, s2);
    rg_train_pt<LOSS>(wf, bf, dw, db, x.y, y.y, s0, s1, s2);
    rg_train_pt<LOSS>(wf, bf, dw, db, x.z, y.z, s0, s1, s2);
    rg_train_pt<LOSS>(wf, bf, dw, db, x.w, y.w, s0, s1, s2);
}

// four test points: s + sum r^2
static __device__ __forceinline__ float rg_test_quad(float wf, float bf, float dw, float db, const float4 &x,
                                                     const float4 &y, float s) {
    float r = rg_residual(wf, bf, dw, db, x.x, y.x);
    s = fmaf(r, r, s);
    r = rg_residual(wf, bf, dw, db, x.y, y.y);
    s = fmaf(r, r, s);
    r = rg_residual(wf, bf, dw, db, x.z, y.z);
    s = fmaf(r, r, s);
    r = rg_residual(wf, bf, dw, db, x.w, y.w);
    s = fmaf(r, r, s);
    return s;
}

// One thread's share of the block's training slice: the shared-memory copy (c4 float4s of x at sx4, of y at sy4), then
// the part of the slice that did not fit (g4 float4s at gx4, gy4, then gtail single points at gx, gy). The first global
// float4 is requested before the shared-memory loop, so its latency hides behind it.
template <bool LOSS>
static __device__ __forceinline__ void rg_train_pass(const float4 *sx4, const float4 *sy4, int c4,
                                                     const float4 *__restrict__ gx4, const float4 *__restrict__ gy4,
                                                     int64_t g4, const float *__restrict__ gx,
                                                     const float *__restrict__ gy, int gtail, float wf, float bf,
                                                     float dw, float db, double &a0, double &a1, double &a2) {
    const int tid = threadIdx.x;
    const bool pre = (int64_t)tid < g4;
    float4 px = make_float4(0.f, 0.f, 0.f, 0.f), py = px;
    if (pre) {
        px = __ldg(gx4 + tid);
        py = __ldg(gy4 + tid);
    }

    // shared memory: two float4s of x and of y per step (8 points in FP32, then FP64)
    int i = tid;
    for (; i + RG_THREADS < c4; i += 2 * RG_THREADS) {
        const float4 x0 = sx4[i], y0 = sy4[i];
        const float4 x1 = sx4[i + RG_THREADS], y1 = sy4[i + RG_THREADS];
        float s0 = 0.f, s1 = 0.f, s2 = 0.f;
        rg_train_quad<LOSS>(wf, bf, dw, db, x0, y0, s0, s1, s2);
        rg_train_quad<LOSS>(wf, bf, dw, db, x1, y1, s0, s1, s2);
        if (LOSS) a0 += (double)s0;
        a1 += (double)s1;
        a2 += (double)s2;
    }
    if (i < c4) {
        const float4 x0 = sx4[i], y0 = sy4[i];
        float s0 = 0.f, s1 = 0.f, s2 = 0.f;
        rg_train_quad<LOSS>(wf, bf, dw, db, x0, y0, s0, s1, s2);
        if (LOSS) a0 += (double)s0;
        a1 += (double)s1;
        a2 += (double)s2;
    }

    // global memory: the float4 loaded above, then rounds of RG_GU float4s (only when a slice far exceeds the copy)
    if (pre) {
        float s0 = 0.f, s1 = 0.f, s2 = 0.f;
        rg_train_quad<LOSS>(wf, bf, dw, db, px, py, s0, s1, s2);
        if (LOSS) a0 += (double)s0;
        a1 += (double)s1;
        a2 += (double)s2;
    }
    for (int64_t base = (int64_t)RG_THREADS + tid; base < g4; base += (int64_t)RG_GU * RG_THREADS) {
        float4 xa[RG_GU], ya[RG_GU];
#pragma unroll
        for (int u = 0; u < RG_GU; u++) {
            const int64_t k = base + (int64_t)u * RG_THREADS;
            if (k < g4) {
                xa[u] = __ldg(gx4 + k);
                ya[u] = __ldg(gy4 + k);
            } else {
                xa[u] = make_float4(0.f, 0.f, 0.f, 0.f);
                ya[u] = xa[u];
            }
        }
        float s0 = 0.f, s1 = 0.f, s2 = 0.f;
#pragma unroll
        for (int u = 0; u < RG_GU; u++) {
            if (base + (int64_t)u * RG_THREADS < g4) rg_train_quad<LOSS>(wf, bf, dw, db, xa[u], ya[u], s0, s1, s2);
        }
        if (LOSS) a0 += (double)s0;
        a1 += (double)s1;
        a2 += (double)s2;
    }
    if (tid < gtail) {  // the last n % 4 points (last block only)
        float s0 = 0.f, s1 = 0.f, s2 = 0.f;
        rg_train_pt<LOSS>(wf, bf, dw, db, __ldg(gx + tid), __ldg(gy + tid), s0, s1, s2);
        if (LOSS) a0 += (double)s0;
        a1 += (double)s1;
        a2 += (double)s2;
    }
}

// One thread's share of the block's test slice (t4 float4s at tx4, ty4, then ttail single points): a3 += sum r^2
static __device__ __forceinline__ void rg_test_pass(const float4 *__restrict__ tx4, const float4 *__restrict__ ty4,
                                                    int64_t t4, const float *__restrict__ tx,
                                                    const float *__restrict__ ty, int ttail, float wf, float bf,
                                                    float dw, float db, double &a3) {
    const int tid = threadIdx.x;
    for (int64_t base = tid; base < t4; base += (int64_t)RG_GU * RG_THREADS) {
        float4 xa[RG_GU], ya[RG_GU];
#pragma unroll
        for (int u = 0; u < RG_GU; u++) {
            const int64_t k = base + (int64_t)u * RG_THREADS;
            if (k < t4) {
                xa[u] = __ldg(tx4 + k);
                ya[u] = __ldg(ty4 + k);
            } else {
                xa[u] = make_float4(0.f, 0.f, 0.f, 0.f);
                ya[u] = xa[u];
            }
        }
        float s = 0.f;
#pragma unroll
        for (int u = 0; u < RG_GU; u++) {
            if (base + (int64_t)u * RG_THREADS < t4) s = rg_test_quad(wf, bf, dw, db, xa[u], ya[u], s);
        }
        a3 += (double)s;
    }
    if (tid < ttail) {  // the last nt % 4 points (last block only)
        const float r = rg_residual(wf, bf, dw, db, __ldg(tx + tid), __ldg(ty + tid));
        a3 += (double)(r * r);
    }
}

// ----------------------------------------------------------------------------
// the kernel: rounds e_begin .. e_end - 1 (epochs), then the final evaluation round when asked. Launched with every
// block co-resident (cooperative launch, one block per SM), which the spinning exchange relies on.

static __global__ void __launch_bounds__(RG_THREADS, 1) rg_train_kernel(const RgArgs p) {
    extern __shared__ float4 rg_cache[];        // x: [cache4] float4s, then y: [cache4] float4s
    __shared__ double s_blk[RG_QTY][RG_WARPS];  // per-warp sums of this block's pass
    __shared__ double s_all[RG_WARPS];          // per-warp sums of the gathered words

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int nb = (int)gridDim.x, blk = (int)blockIdx.x;

    // this block's training slice [lo, hi): its first 4 c4 points in shared memory, the rest read from global memory
    int64_t lo = (int64_t)blk * p.chunk;
    if (lo > p.n) lo = p.n;
    const int64_t hi = lo + p.chunk < p.n ? lo + p.chunk : p.n;
    int c4 = 0;
    if (p.do_train) {
        const int64_t quads = (hi - lo) >> 2;
        c4 = quads < (int64_t)p.cache4 ? (int)quads : p.cache4;
    }
    const int64_t glo = lo + 4 * (int64_t)c4;
    const int64_t g4 = (hi - glo) >> 2;
    const int gtail = (int)((hi - glo) & 3);
    const float4 *gx4 = reinterpret_cast<const float4 *>(p.x + glo);
    const float4 *gy4 = reinterpret_cast<const float4 *>(p.y + glo);
    const float *gx = p.x + glo + 4 * g4, *gy = p.y + glo + 4 * g4;

    // this block's test slice [tlo, thi)
    int64_t tlo = (int64_t)blk * p.tchunk;
    if (tlo > p.nt) tlo = p.nt;
    const int64_t thi = tlo + p.tchunk < p.nt ? tlo + p.tchunk : p.nt;
    const int64_t t4 = (thi - tlo) >> 2;
    const int ttail = (int)((thi - tlo) & 3);
    const float4 *tx4 = reinterpret_cast<const float4 *>(p.xt + tlo);
    const float4 *ty4 = reinterpret_cast<const float4 *>(p.yt + tlo);
    const float *tx = p.xt + tlo + 4 * t4, *ty = p.yt + tlo + 4 * t4;

    // the shared-memory copy of the slice, loaded once per launch (RG_GU float4s of x and of y in flight per thread)
    float4 *sx4 = rg_cache, *sy4 = rg_cache + p.cache4;
    if (c4 > 0) {
        const float4 *x4 = reinterpret_cast<const float4 *>(p.x + lo);
        const float4 *y4 = reinterpret_cast<const float4 *>(p.y + lo);
        for (int base = tid; base < c4; base += RG_GU * RG_THREADS) {
            float4 xa[RG_GU], ya[RG_GU];
#pragma unroll
            for (int u = 0; u < RG_GU; u++) {
                const int k = base + u * RG_THREADS;
                if (k < c4) {
                    xa[u] = __ldg(x4 + k);
                    ya[u] = __ldg(y4 + k);
                } else {
                    xa[u] = make_float4(0.f, 0.f, 0.f, 0.f);
                    ya[u] = xa[u];
                }
            }
#pragma unroll
            for (int u = 0; u < RG_GU; u++) {
                const int k = base + u * RG_THREADS;
                if (k < c4) {
                    sx4[k] = xa[u];
                    sy4[k] = ya[u];
                }
            }
        }
    }
    double w = p.w0, b = p.b0;
    if (!p.use_init) {
        w = __ldcg(p.params);
        b = __ldcg(p.params + 1);
    }
    __syncthreads();

    const int le = p.log_every > 0 ? p.log_every : 1;
    const int rounds = (p.e_end > p.e_begin ? p.e_end - p.e_begin : 0) + (p.final_eval ? 1 : 0);
    const int wpq = RG_MAX_BLOCKS / 32;  // warps per gathered sum
    for (int r = 0; r < rounds; r++) {
        const int e = p.e_begin + r;
        const unsigned int seq = p.seq0 + (unsigned int)r;
        const bool final_round = e >= p.e_end;
        const bool logged = !final_round && (e % le == 0 || e == p.epochs - 1);
        const bool train = !final_round && p.do_train;
        const bool test = final_round || (logged && p.do_test);

        // this round's parameters, as FP32 plus their FP32 rounding error
        const float wf = (float)w, bf = (float)b;
        const float dw = (float)(w - (double)wf), db = (float)(b - (double)bf);

        // 1. the passes over this block's slices
        double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
        if (train) {
            if (logged) rg_train_pass<true>(sx4, sy4, c4, gx4, gy4, g4, gx, gy, gtail, wf, bf, dw, db, a0, a1, a2);
            else rg_train_pass<false>(sx4, sy4, c4, gx4, gy4, g4, gx, gy, gtail, wf, bf, dw, db, a0, a1, a2);
        }
        if (test) rg_test_pass(tx4, ty4, t4, tx, ty, ttail, wf, bf, dw, db, a3);

        // 2. the block's four sums, published by thread 0 with the round number in their low mantissa bits
        a0 = rg_warp_sum(a0);
        a1 = rg_warp_sum(a1);
        a2 = rg_warp_sum(a2);
        a3 = rg_warp_sum(a3);
        if (lane == 0) {
            s_blk[0][warp] = a0;
            s_blk[1][warp] = a1;
            s_blk[2][warp] = a2;
            s_blk[3][warp] = a3;
        }
        __syncthreads();
        const unsigned long long tag = (unsigned long long)seq & RG_TAG_MASK;
        unsigned long long *words = p.xchg + (size_t)(seq & 1u) * (RG_QTY * RG_MAX_BLOCKS);
        if (warp == 0) {
#pragma unroll
            for (int k = 0; k < RG_QTY; k++) {
                const double v = rg_warp_sum(s_blk[k][lane]);
                if (lane == 0) {
                    const unsigned long long bits = (unsigned long long)__double_as_longlong(v);
                    rg_store_word(words + k * RG_MAX_BLOCKS + blk, (bits & ~RG_TAG_MASK) | tag);
                }
            }
        }

        // 3. every block's sums of this round: thread (k, j) waits for sum k of block j, then a fixed-order reduction
        {
            const int k = tid / RG_MAX_BLOCKS, j = tid % RG_MAX_BLOCKS;
            double v = 0.0;
            if (j < nb) {
                const unsigned long long *src = words + k * RG_MAX_BLOCKS + j;
                unsigned long long bits = rg_load_word(src);
                while ((bits & RG_TAG_MASK) != tag) bits = rg_load_word(src);
                v = __longlong_as_double((long long)bits);
            }
            v = rg_warp_sum(v);
            if (lane == 0) s_all[warp] = v;
        }
        __syncthreads();

        // 4. the totals in one fixed order (the same bits in every thread of every block), the update, the losses
        double g1 = 0.0, g2 = 0.0;
#pragma unroll
        for (int q = 0; q < wpq; q++) {
            g1 += s_all[wpq + q];
            g2 += s_all[2 * wpq + q];
        }
        if (blk == 0 && tid == 0) {
            double g0 = 0.0, g3 = 0.0;
            for (int q = 0; q < wpq; q++) {
                g0 += s_all[q];
                g3 += s_all[3 * wpq + q];
            }
            const int idx = (e + le - 1) / le;  // logged epochs before e
            if (train && logged) p.train_loss[idx] = p.n > 0 ? (float)(g0 / p.n_div) : 0.f;
            if (test && !final_round) p.test_loss[idx] = p.nt > 0 ? (float)(g3 / p.nt_div) : 0.f;
            if (final_round) *p.final_test_loss = p.nt > 0 ? (float)(g3 / p.nt_div) : 0.f;
        }
        if (train) {
            w = w - p.step * g1;
            b = b - p.step * g2;
        }
    }
    if (blk == 0 && tid == 0) {
        p.params[0] = w;
        p.params[1] = b;
    }
}

// ----------------------------------------------------------------------------
// host helpers

typedef struct {
    cudaStream_t stream;
    unsigned int grid;
    size_t smem;  // dynamic shared memory per block: the copy of the training slice
    int coop;     // the device supports cooperative launches (co-residency of all blocks guaranteed)
} RgLaunch;

static size_t rg_pad(int64_t n) {
    int64_t padded = (n + RG_PAD_FLOATS - 1) / RG_PAD_FLOATS * RG_PAD_FLOATS;
    return (size_t)(padded > 0 ? padded : RG_PAD_FLOATS);
}

static int64_t rg_round4(int64_t v) { return (v + 3) / 4 * 4; }

static void rg_launch(const RgLaunch *L, const RgArgs *a) {
    if (L->coop) {
        void *args[1] = {(void *)a};
        cudaCheck(cudaLaunchCooperativeKernel((const void *)rg_train_kernel, dim3(L->grid, 1, 1),
                                              dim3(RG_THREADS, 1, 1), args, L->smem, L->stream));
    } else {  // one block per SM on an otherwise idle device: all resident in practice
        rg_train_kernel<<<L->grid, RG_THREADS, L->smem, L->stream>>>(*a);
        launchCheck();
    }
}

// pinning of the caller's input arrays (set-up, not timed): ranges that overlap or share a page are merged first, so
// that no page is registered twice; a range the driver refuses stays pageable (slower copy, same result)
typedef struct {
    uintptr_t lo, hi;
    int registered;
} RgPin;

static int rg_pin_inputs(const void *const ptrs[4], const size_t bytes[4], RgPin pins[4]) {
    RgPin r[4];
    int m = 0;
    for (int i = 0; i < 4; i++) {
        if (ptrs[i] && bytes[i] > 0) {
            r[m].lo = (uintptr_t)ptrs[i];
            r[m].hi = r[m].lo + bytes[i];
            r[m].registered = 0;
            m++;
        }
    }
    for (int i = 1; i < m; i++) {
        for (int j = i; j > 0 && r[j].lo < r[j - 1].lo; j--) {
            RgPin t = r[j];
            r[j] = r[j - 1];
            r[j - 1] = t;
        }
    }
    int k = 0;
    for (int i = 0; i < m; i++) {
        // a gap under 4096 bytes lies within pages that hold data of one range or the other: safe to include
        if (k > 0 && r[i].lo < pins[k - 1].hi + 4096) {
            if (r[i].hi > pins[k - 1].hi) pins[k - 1].hi = r[i].hi;
        } else {
            pins[k++] = r[i];
        }
    }
    for (int i = 0; i < k; i++) {
        cudaError_t e = cudaHostRegister((void *)pins[i].lo, (size_t)(pins[i].hi - pins[i].lo), cudaHostRegisterDefault);
        pins[i].registered = e == cudaSuccess;
        if (e != cudaSuccess) (void)cudaGetLastError();
    }
    return k;
}

static void rg_unpin_inputs(RgPin pins[4], int k) {
    for (int i = 0; i < k; i++) {
        if (pins[i].registered && cudaHostUnregister((void *)pins[i].lo) != cudaSuccess) (void)cudaGetLastError();
    }
}

// ----------------------------------------------------------------------------
// training

int train_regression(const RegressionConfig *cfg, const RegressionData *data, RegressionResult *out) {
    const int64_t n_train = data->n_train > 0 ? data->n_train : 0;
    const int64_t n_test = data->n_test > 0 ? data->n_test : 0;
    const int epochs = cfg->epochs;
    const int n_logged_raw = regression_logged_count(epochs, cfg->log_every);
    const int n_logged = n_logged_raw > 0 ? n_logged_raw : 0;
    const double lr = (double)cfg->lr;

    // setup (not timed): buffers, stream, launch geometry, the kernel loaded, host pages pinned
    const double setup_start_ms = host_ms();

    // the data in one device buffer: train x | train y | test x | test y, each on a 256-byte boundary
    const size_t pad_train = rg_pad(n_train), pad_test = rg_pad(n_test);
    const size_t total_bytes = (2 * pad_train + 2 * pad_test) * sizeof(float);
    float *d_data;
    cudaCheck(cudaMalloc(&d_data, total_bytes));
    float *d_x_train = d_data, *d_y_train = d_data + pad_train;
    float *d_x_test = d_data + 2 * pad_train, *d_y_test = d_data + 2 * pad_train + pad_test;

    // launch geometry: up to one block per SM, each with as much of its training slice in shared memory as fits
    int device = 0, num_sms = 0, smem_optin = 0, coop = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
    cudaCheck(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device) != cudaSuccess) {
        coop = 0;
        (void)cudaGetLastError();
    }
    cudaFuncAttributes attr;  // also loads the kernel now rather than inside the timed loop
    cudaCheck(cudaFuncGetAttributes(&attr, rg_train_kernel));

    const int64_t biggest = n_train > n_test ? n_train : n_test;
    int max_nb = num_sms < RG_MAX_BLOCKS ? num_sms : RG_MAX_BLOCKS;
    if (max_nb < 1) max_nb = 1;
    int64_t nb64 = (biggest + RG_MIN_BLOCK_POINTS - 1) / RG_MIN_BLOCK_POINTS;
    if (nb64 > max_nb) nb64 = max_nb;
    if (nb64 < 1) nb64 = 1;
    int nb = (int)nb64;

    const size_t smem_static = attr.sharedSizeBytes;
    const size_t dyn_cap = (size_t)smem_optin > smem_static ? (size_t)smem_optin - smem_static : 0;
    int64_t cache4 = rg_round4((n_train + nb - 1) / nb) / 4;
    if (cache4 > (int64_t)(dyn_cap / (2 * sizeof(float4)))) cache4 = (int64_t)(dyn_cap / (2 * sizeof(float4)));
    if (cudaFuncSetAttribute(rg_train_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                             (int)cudaSharedmemCarveoutMaxShared) != cudaSuccess)
        (void)cudaGetLastError();  // a hint only
    int blocks_per_sm = 0;
    for (;;) {
        const size_t dyn = (size_t)cache4 * 2 * sizeof(float4);
        cudaCheck(cudaFuncSetAttribute(rg_train_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn));
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, rg_train_kernel, RG_THREADS, dyn));
        if (blocks_per_sm >= 1 || cache4 == 0) break;
        cache4 = cache4 * 7 / 8;  // not on sm_70+: the opt-in maximum is granted to one block per SM
    }
    if (blocks_per_sm >= 1 && (int64_t)blocks_per_sm * num_sms < nb) nb = blocks_per_sm * num_sms;
    const int64_t chunk = rg_round4((n_train + nb - 1) / nb);
    const int64_t tchunk = rg_round4((n_test + nb - 1) / nb);
    if (cache4 > chunk / 4) cache4 = chunk / 4;

    // exchange words [2][RG_QTY][RG_MAX_BLOCKS]: zero (round tag 0, never a live round) before the first launch
    unsigned long long *d_xchg;
    const size_t xchg_bytes = 2 * (size_t)RG_QTY * RG_MAX_BLOCKS * sizeof(unsigned long long);
    cudaCheck(cudaMalloc(&d_xchg, xchg_bytes));

    // the outputs in one block of device memory, brought back by one copy:
    // w, b (double), then train_loss[n_logged], test_loss[n_logged], final_test_loss (float)
    const size_t out_bytes = 2 * sizeof(double) + (2 * (size_t)n_logged + 1) * sizeof(float);
    unsigned char *d_out, *h_out;
    cudaCheck(cudaMalloc(&d_out, out_bytes));
    cudaCheck(cudaMallocHost(&h_out, out_bytes));
    double *d_params = (double *)d_out;
    float *d_losses = (float *)(d_out + 2 * sizeof(double));
    float *d_train_loss = d_losses, *d_test_loss = d_losses + n_logged, *d_final_test_loss = d_losses + 2 * n_logged;

    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaCheck(cudaMemsetAsync(d_xchg, 0, xchg_bytes, stream));
    cudaCheck(cudaMemsetAsync(d_out, 0, out_bytes, stream));

    RgLaunch L;
    L.stream = stream;
    L.grid = (unsigned int)nb;
    L.smem = (size_t)cache4 * 2 * sizeof(float4);
    L.coop = coop != 0;

    // the caller's arrays pinned, so that the upload is an asynchronous DMA
    const void *const pin_ptrs[4] = {data->x_train, data->y_train, data->x_test, data->y_test};
    const size_t pin_bytes[4] = {(size_t)n_train * sizeof(float), (size_t)n_train * sizeof(float),
                                 (size_t)n_test * sizeof(float), (size_t)n_test * sizeof(float)};
    RgPin pins[4];
    const int n_pins = rg_pin_inputs(pin_ptrs, pin_bytes, pins);

    // the invariant part of every launch
    RgArgs base = {};
    base.x = d_x_train;
    base.y = d_y_train;
    base.n = n_train;
    base.xt = d_x_test;
    base.yt = d_y_test;
    base.nt = n_test;
    base.chunk = chunk;
    base.tchunk = tchunk;
    base.cache4 = (int)cache4;
    base.epochs = epochs;
    base.log_every = cfg->log_every;
    base.w0 = (double)data->w_init;
    base.b0 = (double)data->b_init;
    base.step = n_train > 0 ? lr * (2.0 / (double)n_train) : 0.0;
    base.n_div = (double)n_train;
    base.nt_div = (double)n_test;
    base.params = d_params;
    base.xchg = d_xchg;
    base.train_loss = d_train_loss;
    base.test_loss = d_test_loss;
    base.final_test_loss = d_final_test_loss;

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
    }
    train_clock_loop_start(&clock, stream);

    if (!cfg->breakdown) {
        // the whole loop in one launch: every epoch (its training pass, its update, on logged epochs its test pass with
        // the same parameters), then the test pass with the trained parameters. The epochs have no boundaries on the
        // stream, so their events are recorded once the launch is done.
        RgArgs a = base;
        a.e_begin = 0;
        a.e_end = epochs > 0 ? epochs : 0;
        a.do_train = 1;
        a.do_test = 1;
        a.final_eval = 1;
        a.use_init = 1;
        a.seq0 = 1;
        rg_launch(&L, &a);
        for (int epoch = 0; epoch < epochs; epoch++) train_clock_epoch_end(&clock, epoch, stream);
    } else {
        // one launch per phase: the test pass of a logged epoch (eval), then its training pass and update (forward);
        // each launch reloads its shared-memory copy, so these runs are slower, as every --breakdown run is
        unsigned int seq = 1;
        int first = 1;
        for (int epoch = 0; epoch < epochs; epoch++) {
            if (regression_epoch_logged(epoch, epochs, cfg->log_every) && n_test > 0) {
                RgArgs q = base;
                q.e_begin = epoch;
                q.e_end = epoch + 1;
                q.do_train = 0;
                q.do_test = 1;
                q.use_init = first;
                q.seq0 = seq;
                TIMED_PHASE(&clock, PHASE_EVAL, stream) {
                    rg_launch(&L, &q);
                }
                seq += 1;
                first = 0;
            }
            RgArgs a = base;
            a.e_begin = epoch;
            a.e_end = epoch + 1;
            a.do_train = 1;
            a.do_test = 0;
            a.use_init = first;
            a.seq0 = seq;
            TIMED_PHASE(&clock, PHASE_FORWARD, stream) {
                rg_launch(&L, &a);
            }
            seq += 1;
            first = 0;
            if (epoch < epochs - 1) train_clock_epoch_end(&clock, epoch, stream);  // the last one: below
        }
        RgArgs f = base;
        f.e_begin = epochs > 0 ? epochs : 0;
        f.e_end = f.e_begin;
        f.final_eval = 1;
        f.use_init = first;
        f.seq0 = seq;
        TIMED_PHASE(&clock, PHASE_EVAL, stream) {
            rg_launch(&L, &f);
        }
        if (epochs > 0) train_clock_epoch_end(&clock, epochs - 1, stream);
    }

    // the trained parameters and every loss, in one copy into pinned memory
    TIMED_PHASE(&clock, PHASE_D2H, stream) {
        cudaCheck(cudaMemcpyAsync(h_out, d_out, out_bytes, cudaMemcpyDeviceToHost, stream));
    }
    train_clock_e2e_stop(&clock, stream);
    train_clock_finish(&clock, &out->timing);
    cudaCheck(cudaStreamSynchronize(stream));

    const double *h_params = (const double *)h_out;
    const float *h_losses = (const float *)(h_out + 2 * sizeof(double));
    out->w = (float)h_params[0];
    out->b = (float)h_params[1];
    for (int i = 0; i < n_logged; i++) {
        out->train_loss[i] = h_losses[i];
        out->test_loss[i] = h_losses[n_logged + i];
    }
    out->final_test_loss = h_losses[2 * n_logged];

    // teardown (not timed): host pages unpinned, buffers freed
    rg_unpin_inputs(pins, n_pins);
    cudaCheck(cudaStreamDestroy(stream));
    cudaCheck(cudaFree(d_data));
    cudaCheck(cudaFree(d_xchg));
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFreeHost(h_out));
    return 0;
}
