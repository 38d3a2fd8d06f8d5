// Stage 02, regression: y = w x + b by full-batch gradient descent.
// Round 6 of the loop. The whole training loop is still one persistent (cooperative) kernel with the data on chip:
// one block of 512 threads per SM, each thread keeps 24 training points in registers, shared memory holds the rest of
// the block's training slice and its test slice; per point 4 FP32 instructions, FP32 per-thread and per-warp sums,
// FP64 above. What changed is what an epoch waits for:
//  - the grid exchange carries only what the next update needs: two words per block (sum r x, sum r), every epoch.
//    Loss sums never travel through it: thread 0 of each block writes its block's partial loss sums to its own slot of
//    a device array, and block 0 adds them up once, at the end, after one fenced round;
//  - a logged epoch's test pass runs in warps 1 .. 15 while warp 0 waits for the exchange (it does not feed the update);
//  - one warp does the whole exchange: a 16-lane FP64 butterfly of the 16 per-warp sums (every lane ends with the same
//    bits), one 32-lane store (lane l writes replica l of the block's entry), polls of its replica (at most 5 16-byte
//    loads per lane), a fixed-order sum and a 32-lane butterfly, so every block computes the same parameter bits;
//  - 32 replicas of the published words: each 128-byte line of them is polled by at most 5 blocks;
//  - no memory fence inside an epoch, two block barriers per epoch.
// Every word is tagged with its round number in its 8 low mantissa bits and the words are double-buffered by round
// parity, so a stale word always carries the tag of round seq - 2 (or 0, before its first write).
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

#define RG_THREADS 512                     // one block per SM, up to 128 registers per thread
#define RG_WARPS (RG_THREADS / 32)
#define RG_RQ 6                            // float4s of x (and as many of y) that each thread keeps in registers
#define RG_REG4 (RG_RQ * RG_THREADS)       // float4s of a block's training slice held in registers (12,288 points)
#define RG_MAX_BLOCKS 160                  // most blocks a launch uses
#define RG_GJ ((RG_MAX_BLOCKS + 31) / 32)  // published entries each lane of the exchange warp reads (5)
#define RG_REPL 32                         // replicas of the published words; block b polls replica b % RG_REPL
#define RG_MIN_BLOCK_POINTS 8192           // small data sets use fewer blocks (a cheaper exchange)
#define RG_PAD_FLOATS 64                   // each device array starts on a 256-byte boundary
#define RG_TAG_MASK 0xFFull                // the low mantissa bits of an exchanged word: its round number
#define RG_FULL_MASK 0xffffffffu

static_assert(RG_WARPS == 16, "warp 0 adds the 16 per-warp sums with a 16-lane butterfly");
static_assert(RG_REPL == 32, "lane l of warp 0 publishes replica l");

typedef struct {
    const float *x, *y;          // training set (n,)
    int64_t n;
    const float *xt, *yt;        // test set (nt,)
    int64_t nt;
    int64_t chunk, tchunk;       // training / test points per block (multiples of 4)
    int cache4;                  // shared-memory capacity for the training slice: float4s of x (and as many of y)
    int tcache4;                 // shared-memory capacity for the test slice: float4s of x (and as many of y)
    int e_begin, e_end;          // the epochs this launch runs
    int epochs, log_every;
    int do_train;                // 0: no training pass and no update (an evaluation launch)
    int do_test;                 // logged epochs evaluate the test set with their own parameters
    int final_eval;              // after e_end: the test set with the trained parameters, then every loss written
    int use_init;                // 1: start from w0, b0; 0: from params
    int n_logged;                // logged epochs of the whole call
    unsigned int seq0;           // round number of this launch's first exchange (1, 2, ... over a call)
    double w0, b0;
    double step;                 // lr * 2 / n
    double n_div, nt_div;
    double *params;              // (2,) w, b: read at the start unless use_init, written at the end by block 0
    unsigned long long *xchg;    // [RG_REPL][2 parity][RG_MAX_BLOCKS][2] published sums, tagged with their round
    double *lpart;               // [n_logged][2: train, test][gridDim.x] per-block loss sums (sum of r^2)
    float *train_loss, *test_loss, *final_test_loss;
} RgArgs;

// one block's slice of a data set: float4s [0, ncache) in shared memory (after the register part, for the training
// set), float4s [gbeg, nq4) read from global memory every pass, fewer than 4 leftover points in shared memory
typedef struct {
    const float4 *s_x, *s_y;
    int ncache;
    const float4 *g_x, *g_y;
    int gbeg, nq4;
    const float *tail_x, *tail_y;
    int rem;
} RgSlice;

// ----------------------------------------------------------------------------
// device helpers

// the exchange words: 16-byte volatile accesses (never served from L1); each 64-bit element is single-copy atomic
// and carries its own round tag, so a reader never needs the two elements to arrive together
static __device__ __forceinline__ void rg_load2(const unsigned long long *p, unsigned long long &a,
                                                unsigned long long &b) {
    asm volatile("ld.volatile.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

static __device__ __forceinline__ void rg_store2(unsigned long long *p, unsigned long long a, unsigned long long b) {
    asm volatile("st.volatile.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}

static __device__ __forceinline__ unsigned long long rg_tagged(double v, unsigned long long tag) {
    return ((unsigned long long)__double_as_longlong(v) & ~RG_TAG_MASK) | tag;
}

static __device__ __forceinline__ double rg_word_value(unsigned long long bits) {
    return __longlong_as_double((long long)bits);
}

// offset (in 64-bit words) of the 16-byte entry of block blk, round parity par, replica rep
static __device__ __forceinline__ size_t rg_word(int rep, unsigned int par, int blk) {
    return (((size_t)rep * 2 + (size_t)par) * RG_MAX_BLOCKS + (size_t)blk) * 2;
}

// a sum over a warp by an xor butterfly (every lane ends with the same bits)
static __device__ __forceinline__ float rg_warp_sum(float v) {
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1) v += __shfl_xor_sync(RG_FULL_MASK, v, m);
    return v;
}

static __device__ __forceinline__ int rg_clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

static __device__ __forceinline__ bool rg_logged(int e, int epochs, int log_every) {
    return e % log_every == 0 || e == epochs - 1;
}

// the index of a logged epoch among the logged epochs (regression_logged_count's order)
static __device__ __forceinline__ int rg_logged_index(int e, int log_every) {
    return e % log_every == 0 ? e / log_every : e / log_every + 1;
}

// 16 bytes from global to shared memory without a register round trip (cp.async from sm_80 on)
static __device__ __forceinline__ void rg_copy16(float4 *dst, const float4 *src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
#else
    *dst = *src;
#endif
}

static __device__ __forceinline__ void rg_copy_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

// one training point: r = w x + b - y; sums of r x, r (and r^2 on a logged epoch)
template <bool LOSS>
static __device__ __forceinline__ void rg_acc1(float x, float y, float w, float b, float &sx, float &s, float &ss) {
    const float r = fmaf(w, x, b) - y;
    sx = fmaf(r, x, sx);
    s += r;
    if (LOSS) ss = fmaf(r, r, ss);
}

template <bool LOSS>
static __device__ __forceinline__ void rg_acc4(const float4 x, const float4 y, float w, float b, float &sx, float &s,
                                               float &ss) {
    rg_acc1<LOSS>(x.x, y.x, w, b, sx, s, ss);
    rg_acc1<LOSS>(x.y, y.y, w, b, sx, s, ss);
    rg_acc1<LOSS>(x.z, y.z, w, b, sx, s, ss);
    rg_acc1<LOSS>(x.w, y.w, w, b, sx, s, ss);
}

// four test points: the sum of r^2
static __device__ __forceinline__ float rg_sq4(const float4 x, const float4 y, float w, float b, float ss) {
    float r;
    r = fmaf(w, x.x, b) - y.x;
    ss = fmaf(r, r, ss);
    r = fmaf(w, x.y, b) - y.y;
    ss = fmaf(r, r, ss);
    r = fmaf(w, x.z, b) - y.z;
    ss = fmaf(r, r, ss);
    r = fmaf(w, x.w, b) - y.w;
    ss = fmaf(r, r, ss);
    return ss;
}

// this thread's share of the block's training slice: registers, shared memory, global memory, leftover points
template <bool LOSS>
static __device__ __forceinline__ void rg_train_pass(const float4 (&rx)[RG_RQ], const float4 (&ry)[RG_RQ], int nreg,
                                                     const RgSlice &sl, int tid, float w, float b, float &sx,
                                                     float &s, float &ss) {
#pragma unroll
    for (int j = 0; j < RG_RQ; j++) {
        if (j < nreg) rg_acc4<LOSS>(rx[j], ry[j], w, b, sx, s, ss);
    }
#pragma unroll 4
    for (int i = tid; i < sl.ncache; i += RG_THREADS) rg_acc4<LOSS>(sl.s_x[i], sl.s_y[i], w, b, sx, s, ss);
    for (int i = sl.gbeg + tid; i < sl.nq4; i += RG_THREADS)
        rg_acc4<LOSS>(__ldg(sl.g_x + i), __ldg(sl.g_y + i), w, b, sx, s, ss);
    if (tid == 0) {
        for (int k = 0; k < sl.rem; k++) rg_acc1<LOSS>(sl.tail_x[k], sl.tail_y[k], w, b, sx, s, ss);
    }
}

// the share of thread g of a group of gsize threads in the block's test slice: the sum of r^2
static __device__ __forceinline__ float rg_test_pass(const RgSlice &sl, int g, int gsize, float w, float b) {
    float ss = 0.0f;
#pragma unroll 4
    for (int i = g; i < sl.ncache; i += gsize) ss = rg_sq4(sl.s_x[i], sl.s_y[i], w, b, ss);
    for (int i = sl.gbeg + g; i < sl.nq4; i += gsize) ss = rg_sq4(__ldg(sl.g_x + i), __ldg(sl.g_y + i), w, b, ss);
    if (g == 0) {
        for (int k = 0; k < sl.rem; k++) {
            const float r = fmaf(w, sl.tail_x[k], b) - sl.tail_y[k];
            ss = fmaf(r, r, ss);
        }
    }
    return ss;
}

// warp 0: waits until every block's entry of round `tag` is in replica `rep` (lane l reads the entries of blocks
// l, l + 32, ...), then adds them in a fixed order: every lane of every block ends with the same bits
static __device__ __forceinline__ void rg_gather(const unsigned long long *rep, int nb, unsigned long long tag, int lane,
                                                 double &t0, double &t1) {
    unsigned long long v0[RG_GJ], v1[RG_GJ];
#pragma unroll
    for (int j = 0; j < RG_GJ; j++) {
        v0[j] = 0ull;
        v1[j] = 0ull;
    }
    for (;;) {
        // every load of a poll is in flight at once; then the tags are checked
#pragma unroll
        for (int j = 0; j < RG_GJ; j++) {
            const int src = lane + 32 * j;
            if (src < nb) rg_load2(rep + 2 * (size_t)src, v0[j], v1[j]);
        }
        int ok = 1;
#pragma unroll
        for (int j = 0; j < RG_GJ; j++) {
            const int src = lane + 32 * j;
            if (src < nb) ok &= (int)(((v0[j] & RG_TAG_MASK) == tag) & ((v1[j] & RG_TAG_MASK) == tag));
        }
        if (__all_sync(RG_FULL_MASK, ok)) break;
    }
    double a0 = 0.0, a1 = 0.0;
#pragma unroll
    for (int j = 0; j < RG_GJ; j++) {
        const int src = lane + 32 * j;
        if (src < nb) {
            a0 += rg_word_value(v0[j]);
            a1 += rg_word_value(v1[j]);
        }
    }
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1) {
        a0 += __shfl_xor_sync(RG_FULL_MASK, a0, m);
        a1 += __shfl_xor_sync(RG_FULL_MASK, a1, m);
    }
    t0 = a0;
    t1 = a1;
}

// ----------------------------------------------------------------------------
// the kernel: every epoch of [e_begin, e_end), then (final_eval) the test set with the trained parameters

static __global__ void __launch_bounds__(RG_THREADS, 1) rg_train_kernel(const RgArgs a) {
    extern __shared__ float4 rg_smem[];        // [cache4 x][cache4 y][tcache4 x][tcache4 y]
    __shared__ float s_warp[2][3][RG_WARPS];   // per-warp training sums (r x, r, r^2), double-buffered by epoch parity
    __shared__ float s_test[RG_WARPS];         // per-warp test sums (r^2)
    __shared__ double s_wb[2];                 // the parameters after this epoch's update
    __shared__ float s_tail[4][4];             // leftover points (fewer than 4): train x, train y, test x, test y

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int blk = blockIdx.x, nb = gridDim.x;

    // the block's slices
    int64_t lo = (int64_t)blk * a.chunk;
    if (lo > a.n) lo = a.n;
    int64_t hi = lo + a.chunk;
    if (hi > a.n) hi = a.n;
    int64_t tlo = (int64_t)blk * a.tchunk;
    if (tlo > a.nt) tlo = a.nt;
    int64_t thi = tlo + a.tchunk;
    if (thi > a.nt) thi = a.nt;
    const int nq4 = (int)((hi - lo) >> 2), tq4 = (int)((thi - tlo) >> 2);

    RgSlice tr, te;
    tr.s_x = rg_smem;
    tr.s_y = rg_smem + a.cache4;
    tr.ncache = rg_clampi(nq4 - RG_REG4, 0, a.cache4);
    tr.g_x = reinterpret_cast<const float4 *>(a.x + lo);
    tr.g_y = reinterpret_cast<const float4 *>(a.y + lo);
    tr.gbeg = RG_REG4 + tr.ncache;
    tr.nq4 = nq4;
    tr.tail_x = s_tail[0];
    tr.tail_y = s_tail[1];
    tr.rem = (int)((hi - lo) & 3);
    te.s_x = rg_smem + 2 * (size_t)a.cache4;
    te.s_y = te.s_x + a.tcache4;
    te.ncache = rg_clampi(tq4, 0, a.tcache4);
    te.g_x = reinterpret_cast<const float4 *>(a.xt + tlo);
    te.g_y = reinterpret_cast<const float4 *>(a.yt + tlo);
    te.gbeg = te.ncache;
    te.nq4 = tq4;
    te.tail_x = s_tail[2];
    te.tail_y = s_tail[3];
    te.rem = (int)((thi - tlo) & 3);

    // the on-chip copies, every load in flight at once: shared memory by cp.async, then the registers
    {
        float4 *const cx = rg_smem, *const cy = rg_smem + a.cache4;
        for (int i = tid; i < tr.ncache; i += RG_THREADS) {
            rg_copy16(cx + i, tr.g_x + RG_REG4 + i);
            rg_copy16(cy + i, tr.g_y + RG_REG4 + i);
        }
        float4 *const tx = rg_smem + 2 * (size_t)a.cache4, *const ty = tx + a.tcache4;
        for (int i = tid; i < te.ncache; i += RG_THREADS) {
            rg_copy16(tx + i, te.g_x + i);
            rg_copy16(ty + i, te.g_y + i);
        }
    }
    float4 rx[RG_RQ], ry[RG_RQ];
    int nreg = 0;  // the valid register slots are a prefix: slot j holds float4 j * RG_THREADS + tid
#pragma unroll
    for (int j = 0; j < RG_RQ; j++) {
        const int i = j * RG_THREADS + tid;
        if (i < nq4) {
            rx[j] = __ldg(tr.g_x + i);
            ry[j] = __ldg(tr.g_y + i);
            nreg = j + 1;
        } else {
            rx[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            ry[j] = rx[j];
        }
    }
    if (tid < tr.rem) {
        s_tail[0][tid] = a.x[lo + 4 * (int64_t)nq4 + tid];
        s_tail[1][tid] = a.y[lo + 4 * (int64_t)nq4 + tid];
    }
    if (tid < te.rem) {
        s_tail[2][tid] = a.xt[tlo + 4 * (int64_t)tq4 + tid];
        s_tail[3][tid] = a.yt[tlo + 4 * (int64_t)tq4 + tid];
    }
    rg_copy_wait();
    __syncthreads();

    double w = a.use_init ? a.w0 : a.params[0];
    double b = a.use_init ? a.b0 : a.params[1];
    unsigned int seq = a.seq0;

    for (int e = a.e_begin; e < a.e_end; e++) {
        const bool logged = rg_logged(e, a.epochs, a.log_every);
        const float wf = (float)w, bf = (float)b;
        if (a.do_train) {
            // the training pass with this epoch's parameters
            const int buf = e & 1;
            float sx = 0.0f, s = 0.0f, ss = 0.0f;
            if (logged) rg_train_pass<true>(rx, ry, nreg, tr, tid, wf, bf, sx, s, ss);
            else rg_train_pass<false>(rx, ry, nreg, tr, tid, wf, bf, sx, s, ss);
            sx = rg_warp_sum(sx);
            s = rg_warp_sum(s);
            if (logged) ss = rg_warp_sum(ss);
            if (lane == 0) {
                s_warp[buf][0][warp] = sx;
                s_warp[buf][1][warp] = s;
                s_warp[buf][2][warp] = ss;
            }
            __syncthreads();
            if (warp == 0) {
                // the block's sums: a butterfly inside each 16-lane half (both halves hold the same 16 warp sums)
                const int src = lane & (RG_WARPS - 1);
                double bx = (double)s_warp[buf][0][src], bs = (double)s_warp[buf][1][src];
#pragma unroll
                for (int m = RG_WARPS / 2; m >= 1; m >>= 1) {
                    bx += __shfl_xor_sync(RG_FULL_MASK, bx, m);
                    bs += __shfl_xor_sync(RG_FULL_MASK, bs, m);
                }
                // publish (lane l: replica l), then gather every block's entry from this block's replica
                const unsigned int par = seq & 1u;
                const unsigned long long tag = (unsigned long long)(seq & 0xFFu);
                rg_store2(a.xchg + rg_word(lane, par, blk), rg_tagged(bx, tag), rg_tagged(bs, tag));
                double gx, gs;
                rg_gather(a.xchg + rg_word(blk % RG_REPL, par, 0), nb, tag, lane, gx, gs);
                if (lane == 0) {
                    s_wb[0] = w - a.step * gx;
                    s_wb[1] = b - a.step * gs;
                }
            } else if (logged && a.do_test) {
                // meanwhile the test pass, with the same (epoch-start) parameters: it does not feed the update
                float t = rg_test_pass(te, tid - 32, RG_THREADS - 32, wf, bf);
                t = rg_warp_sum(t);
                if (lane == 0) s_test[warp] = t;
            }
            __syncthreads();
            w = s_wb[0];
            b = s_wb[1];
            if (logged && tid == 0) {
                // this block's loss sums, to its own slots; block 0 adds them up at the end
                const size_t k = (size_t)rg_logged_index(e, a.log_every);
                double t = 0.0;
                for (int i = 0; i < RG_WARPS; i++) t += (double)s_warp[buf][2][i];
                a.lpart[(2 * k) * (size_t)nb + blk] = t;
                if (a.do_test) {
                    double u = 0.0;
                    for (int i = 1; i < RG_WARPS; i++) u += (double)s_test[i];
                    a.lpart[(2 * k + 1) * (size_t)nb + blk] = u;
                }
            }
            seq++;
        } else if (logged && a.do_test) {
            // an evaluation launch (--breakdown): the test pass alone, by every warp, no exchange
            float t = rg_test_pass(te, tid, RG_THREADS, wf, bf);
            t = rg_warp_sum(t);
            if (lane == 0) s_test[warp] = t;
            __syncthreads();
            if (tid == 0) {
                const size_t k = (size_t)rg_logged_index(e, a.log_every);
                double u = 0.0;
                for (int i = 0; i < RG_WARPS; i++) u += (double)s_test[i];
                a.lpart[(2 * k + 1) * (size_t)nb + blk] = u;
            }
            __syncthreads();
        }
    }

    if (a.final_eval) {
        __syncthreads();  // thread 0 may still be reading s_test for the last epoch
        const float wf = (float)w, bf = (float)b;
        float t = rg_test_pass(te, tid, RG_THREADS, wf, bf);
        t = rg_warp_sum(t);
        if (lane == 0) s_test[warp] = t;
        __syncthreads();
        if (warp == 0) {
            double u = 0.0;
            for (int i = 0; i < RG_WARPS; i++) u += (double)s_test[i];
            __threadfence();  // this block's loss slots (written by thread 0) before the word that announces them
            const unsigned int par = seq & 1u;
            const unsigned long long tag = (unsigned long long)(seq & 0xFFu);
            rg_store2(a.xchg + rg_word(lane, par, blk), rg_tagged(u, tag), rg_tagged(0.0, tag));
            if (blk == 0) {
                double g0, g1;
                rg_gather(a.xchg + rg_word(0, par, 0), nb, tag, lane, g0, g1);
                (void)g1;
                __threadfence();  // every block's loss slots are read after its word
                if (lane == 0) a.final_test_loss[0] = a.nt_div > 0.0 ? (float)(g0 / a.nt_div) : 0.0f;
            }
        }
        if (blk == 0) {
            __syncthreads();
            // every logged loss: one warp per (epoch, set), the blocks' slots added in a fixed order
            for (int p = warp; p < 2 * a.n_logged; p += RG_WARPS) {
                double v = 0.0;
                for (int j = lane; j < nb; j += 32) v += __ldcg(a.lpart + (size_t)p * nb + j);
#pragma unroll
                for (int m = 16; m >= 1; m >>= 1) v += __shfl_xor_sync(RG_FULL_MASK, v, m);
                if (lane == 0) {
                    const int k = p >> 1;
                    if (p & 1) a.test_loss[k] = a.nt_div > 0.0 ? (float)(v / a.nt_div) : 0.0f;
                    else a.train_loss[k] = a.n_div > 0.0 ? (float)(v / a.n_div) : 0.0f;
                }
            }
        }
    }

    // the parameters (every block holds the same bits)
    if (blk == 0 && tid == 0) {
        a.params[0] = w;
        a.params[1] = b;
    }
}

// ----------------------------------------------------------------------------
// host helpers

static size_t rg_pad(int64_t n) { return (size_t)((n + RG_PAD_FLOATS - 1) / RG_PAD_FLOATS) * RG_PAD_FLOATS; }

static int64_t rg_round4(int64_t v) { return (v + 3) & ~(int64_t)3; }

typedef struct {
    cudaStream_t stream;
    unsigned int grid;
    size_t smem;
    int coop;
} RgLaunch;

static void rg_launch(const RgLaunch *L, const RgArgs *a) {
    RgArgs args = *a;
    if (L->coop) {
        void *params[] = {(void *)&args};
        cudaCheck(cudaLaunchCooperativeKernel((const void *)rg_train_kernel, dim3(L->grid), dim3(RG_THREADS), params,
                                              L->smem, L->stream));
    } else {
        rg_train_kernel<<<L->grid, RG_THREADS, L->smem, L->stream>>>(args);
        launchCheck();
    }
}

// the caller's input arrays, page-locked for the call so that the upload is an asynchronous DMA
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
    const int log_every = cfg->log_every > 0 ? cfg->log_every : 1;
    const int n_logged_raw = regression_logged_count(epochs, log_every);
    const int n_logged = n_logged_raw > 0 ? n_logged_raw : 0;
    const double lr = (double)cfg->lr;

    // setup (not timed): buffers, stream, launch geometry, the kernel loaded, host pages pinned
    const double setup_start_ms = host_ms();

    // the data in one device buffer: train x | train y | test x | test y, each on a 256-byte boundary
    const size_t pad_train = rg_pad(n_train), pad_test = rg_pad(n_test);
    const size_t total_bytes = (2 * pad_train + 2 * pad_test) * sizeof(float);
    float *d_data;
    cudaCheck(cudaMalloc(&d_data, total_bytes > 0 ? total_bytes : 256));
    float *d_x_train = d_data, *d_y_train = d_data + pad_train;
    float *d_x_test = d_data + 2 * pad_train, *d_y_test = d_data + 2 * pad_train + pad_test;

    // launch geometry: up to one block per SM; each block keeps RG_REG4 float4s of its training slice in registers,
    // the rest of it in shared memory, then as much of its test slice as still fits
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
    const int nb = (int)nb64;
    const int64_t chunk = rg_round4((n_train + nb - 1) / nb);
    const int64_t tchunk = rg_round4((n_test + nb - 1) / nb);

    const size_t smem_static = attr.sharedSizeBytes;
    const size_t dyn_cap = (size_t)smem_optin > smem_static ? (size_t)smem_optin - smem_static : 0;
    const int64_t cap_pairs = (int64_t)(dyn_cap / (2 * sizeof(float4)));  // float4s of x and of y that fit
    int64_t cache4 = chunk / 4 - (int64_t)RG_REG4;
    if (cache4 < 0) cache4 = 0;
    if (cache4 > cap_pairs) cache4 = cap_pairs;
    int64_t tcache4 = tchunk / 4;
    if (tcache4 > cap_pairs - cache4) tcache4 = cap_pairs - cache4;
    if (tcache4 < 0) tcache4 = 0;
    if (cudaFuncSetAttribute(rg_train_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                             (int)cudaSharedmemCarveoutMaxShared) != cudaSuccess)
        (void)cudaGetLastError();  // a hint only
    int blocks_per_sm = 0;
    for (;;) {
        const size_t dyn = (size_t)(cache4 + tcache4) * 2 * sizeof(float4);
        cudaCheck(cudaFuncSetAttribute(rg_train_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn));
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, rg_train_kernel, RG_THREADS, dyn));
        if (blocks_per_sm >= 1 || cache4 + tcache4 == 0) break;
        if (tcache4 > 0) tcache4 = tcache4 * 7 / 8;  // the test copy gives way first, then the training copy
        else cache4 = cache4 * 7 / 8;
    }

    // exchange words [RG_REPL][2 parity][RG_MAX_BLOCKS][2]: zero (round tag 0, never a live round before every word
    // has been rewritten) before the first launch
    unsigned long long *d_xchg;
    const size_t xchg_bytes = (size_t)RG_REPL * 2 * RG_MAX_BLOCKS * 2 * sizeof(unsigned long long);
    cudaCheck(cudaMalloc(&d_xchg, xchg_bytes));

    // per-block loss sums [n_logged][2][nb]
    const size_t lpart_count = (size_t)(n_logged > 0 ? 2 * n_logged : 1) * (size_t)nb;
    double *d_lpart;
    cudaCheck(cudaMalloc(&d_lpart, lpart_count * sizeof(double)));

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
    cudaCheck(cudaMemsetAsync(d_lpart, 0, lpart_count * sizeof(double), stream));
    cudaCheck(cudaMemsetAsync(d_out, 0, out_bytes, stream));

    RgLaunch L;
    L.stream = stream;
    L.grid = (unsigned int)nb;
    L.smem = (size_t)(cache4 + tcache4) * 2 * sizeof(float4);
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
    base.tcache4 = (int)tcache4;
    base.epochs = epochs;
    base.log_every = log_every;
    base.n_logged = n_logged;
    base.w0 = (double)data->w_init;
    base.b0 = (double)data->b_init;
    base.step = n_train > 0 ? lr * (2.0 / (double)n_train) : 0.0;
    base.n_div = (double)n_train;
    base.nt_div = (double)n_test;
    base.params = d_params;
    base.xchg = d_xchg;
    base.lpart = d_lpart;
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
        // the same parameters), then the test pass with the trained parameters and every loss. The epochs have no
        // boundaries on the stream, so their events are recorded once the launch is done.
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
        // each launch reloads its on-chip copies, so these runs are slower, as every --breakdown run is
        unsigned int seq = 1;
        int first = 1;
        for (int epoch = 0; epoch < epochs; epoch++) {
            if (regression_epoch_logged(epoch, epochs, log_every) && n_test > 0) {
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
                first = 0;  // no exchange round in an evaluation launch
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
    cudaCheck(cudaFree(d_lpart));
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFreeHost(h_out));
    return 0;
}
