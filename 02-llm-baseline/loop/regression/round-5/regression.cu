// Stage 02, regression: y = w x + b by full-batch gradient descent.
// Round 5 of the loop. As in rounds 3 and 4 the whole training loop is one persistent (cooperative) kernel with the
// data on chip (each of 512 threads keeps 24 training points in registers, shared memory holds the rest of the block's
// training slice and its test slice); per point 4 FP32 instructions, FP32 per-thread and per-warp sums, FP64 above.
// What changed is the exchange, where an epoch's time went:
//  - the published words are split by half ([replica][parity][half][block], 16 bytes each): an unlogged epoch polls
//    16 contiguous bytes per lane (16 sectors per warp load instead of 32), a logged one both halves;
//  - 16 replicas instead of 4: every 128-byte line of published words is polled by about 8 blocks instead of 33;
//    warp 0 publishes all 16 replicas x 2 halves with one 32-lane store;
//  - a lane re-polls only the half that has not arrived yet;
//  - warp 0 only publishes; warps 1 .. ngw gather (one lane per published block), so no gathering waits behind the
//    block's own reduction;
//  - warp 0 reduces the 16 per-warp sums with a butterfly inside each 16-lane half (every lane ends with the same
//    bits, no broadcast) and only the 2 sums an unlogged epoch needs.
// Every word is tagged with its round number in its 8 low mantissa bits; both halves are written every round and the
// words are double-buffered by round parity, so a stale word always carries the tag of round seq - 2.
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

#define RG_THREADS 512                  // one block per SM, up to 128 registers per thread
#define RG_WARPS (RG_THREADS / 32)
#define RG_RQ 6                         // float4s of x (and as many of y) that each thread keeps in registers
#define RG_REG4 (RG_RQ * RG_THREADS)    // float4s of a block's training slice held in registers (12,288 points)
#define RG_QTY 4                        // sums of a round: train r^2, r x, r; test r^2
#define RG_MAX_BLOCKS 256               // most blocks a launch uses
#define RG_GW (RG_MAX_BLOCKS / 32)      // most gathering warps (warps 1 .. RG_GW, one lane per published block)
#define RG_REPL 16                      // replicas of the published words; block b reads replica b % RG_REPL
#define RG_LU 4                         // float4s of x (and of y) in flight per thread while the copies load
#define RG_MIN_BLOCK_POINTS 8192        // small data sets use fewer blocks (a cheaper exchange)
#define RG_PAD_FLOATS 64                // each device array starts on a 256-byte boundary
#define RG_TAG_MASK 0xFFull             // the low mantissa bits of an exchanged word: its round number
#define RG_FULL_MASK 0xffffffffu

static_assert(RG_GW + 1 <= RG_WARPS, "the gathering warps are warps 1 .. RG_GW of the block");
static_assert(RG_WARPS == 16, "warp 0 reduces the 16 per-warp sums inside each 16-lane half");
static_assert(2 * RG_REPL == 32, "one publishing lane of warp 0 per (replica, half)");

typedef struct {
    const float *x, *y;         // training set (n,)
    int64_t n;
    const float *xt, *yt;       // test set (nt,)
    int64_t nt;
    int64_t chunk, tchunk;      // training / test points per block (multiples of 4)
    int cache4;                 // shared-memory capacity for the training slice: float4s of x (and as many of y)
    int tcache4;                // shared-memory capacity for the test slice: float4s of x (and as many of y)
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
    unsigned long long *xchg;   // [RG_REPL][2 parity][2 half][RG_MAX_BLOCKS][2] published sums, tagged with their round
    float *train_loss, *test_loss, *final_test_loss;
} RgArgs;

// ----------------------------------------------------------------------------
// device helpers

// the exchange words: 16-byte volatile accesses (never served from L1); each 64-bit element is single-copy atomic
// and carries its own round tag, so a reader never needs the two elements (or the two halves) to arrive together
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

// offset (in 64-bit words) of the 16-byte entry of block blk, half half (0: r x, r; 1: r^2, test r^2), round parity
// par, replica rep
static __device__ __forceinline__ size_t rg_word(int rep, unsigned int par, int half, int blk) {
    return ((((size_t)rep * 2 + (size_t)par) * 2 + (size_t)half) * RG_MAX_BLOCKS + (size_t)blk) * 2;
}

// sums over a warp, the result in lane 0 (a fixed tree: the same bits wherever it runs)
static __device__ __forceinline__ float rg_warp_sum_f(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(RG_FULL_MASK, v, offset);
    return v;
}

static __device__ __forceinline__ double rg_warp_sum_d(double v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(RG_FULL_MASK, v, offset);
    return v;
}

// one training point: r = w x + b - y in FP32; s0 += r^2 (only on logged epochs), s1 += r x, s2 += r
template <bool LOSS>
static __device__ __forceinline__ void rg_train_pt(float wf, float bf, float x, float y, float &s0, float &s1,
                                                   float &s2) {
    const float r = fmaf(wf, x, bf) - y;
    if (LOSS) s0 = fmaf(r, r, s0);
    s1 = fmaf(r, x, s1);
    s2 += r;
}

template <bool LOSS>
static __device__ __forceinline__ void rg_train_quad(float wf, float bf, const float4 &x, const float4 &y, float &s0,
                                                     float &s1, float &s2) {
    rg_train_pt<LOSS>(wf, bf, x.x, y.x, s0, s1, s2);
    rg_train_pt<LOSS>(wf, bf, x.y, y.y, s0, s1, s2);
    rg_train_pt<LOSS>(wf, bf, x.z, y.z, s0, s1, s2);
    rg_train_pt<LOSS>(wf, bf, x.w, y.w, s0, s1, s2);
}

// four test points: s + sum r^2
static __device__ __forceinline__ float rg_test_quad(float wf, float bf, const float4 &x, const float4 &y, float s) {
    float r = fmaf(wf, x.x, bf) - y.x;
    s = fmaf(r, r, s);
    r = fmaf(wf, x.y, bf) - y.y;
    s = fmaf(r, r, s);
    r = fmaf(wf, x.z, bf) - y.z;
    s = fmaf(r, r, s);
    r = fmaf(wf, x.w, bf) - y.w;
    s = fmaf(r, r, s);
    return s;
}

// a block's copy of c4 float4s of x and of y from global into shared memory (RG_LU of each in flight per thread)
static __device__ __forceinline__ void rg_copy(float4 *dx, float4 *dy, const float4 *__restrict__ sx,
                                               const float4 *__restrict__ sy, int c4) {
    for (int base = (int)threadIdx.x; base < c4; base += RG_LU * RG_THREADS) {
        float4 xa[RG_LU], ya[RG_LU];
#pragma unroll
        for (int u = 0; u < RG_LU; u++) {
            const int k = base + u * RG_THREADS;
            if (k < c4) {
                xa[u] = __ldg(sx + k);
                ya[u] = __ldg(sy + k);
            } else {
                xa[u] = make_float4(0.f, 0.f, 0.f, 0.f);
                ya[u] = xa[u];
            }
        }
#pragma unroll
        for (int u = 0; u < RG_LU; u++) {
            const int k = base + u * RG_THREADS;
            if (k < c4) {
                dx[k] = xa[u];
                dy[k] = ya[u];
            }
        }
    }
}

// One thread's share of the block's training slice: its register copy (nreg float4s of x in rx, of y in ry), the
// shared-memory copy (c4 float4s at sx4, sy4), then what fit in neither (g4 float4s at gx4, gy4, then tail single
// points at gx, gy). Two accumulator sets (a, b) halve the dependency chains; the sums are FP32 until the warp sum.
template <bool LOSS>
static __device__ __forceinline__ void rg_train_pass(const float4 (&rx)[RG_RQ], const float4 (&ry)[RG_RQ], int nreg,
                                                     const float4 *sx4, const float4 *sy4, int c4,
                                                     const float4 *__restrict__ gx4, const float4 *__restrict__ gy4,
                                                     int64_t g4, const float *__restrict__ gx,
                                                     const float *__restrict__ gy, int tail, float wf, float bf,
                                                     float &s0, float &s1, float &s2) {
    const int tid = (int)threadIdx.x;
    float a0 = 0.f, a1 = 0.f, a2 = 0.f, b0 = 0.f, b1 = 0.f, b2 = 0.f;

    // registers: float4 u of this thread is float4 tid + u * RG_THREADS of the slice
#pragma unroll
    for (int u = 0; u < RG_RQ; u++) {
        if (u < nreg) {
            if (u & 1) rg_train_quad<LOSS>(wf, bf, rx[u], ry[u], b0, b1, b2);
            else rg_train_quad<LOSS>(wf, bf, rx[u], ry[u], a0, a1, a2);
        }
    }

    // shared memory: two float4s of x and of y per step
    int i = tid;
    for (; i + RG_THREADS < c4; i += 2 * RG_THREADS) {
        const float4 x0 = sx4[i], y0 = sy4[i];
        const float4 x1 = sx4[i + RG_THREADS], y1 = sy4[i + RG_THREADS];
        rg_train_quad<LOSS>(wf, bf, x0, y0, a0, a1, a2);
        rg_train_quad<LOSS>(wf, bf, x1, y1, b0, b1, b2);
    }
    if (i < c4) {
        const float4 x0 = sx4[i], y0 = sy4[i];
        rg_train_quad<LOSS>(wf, bf, x0, y0, a0, a1, a2);
    }

    // global memory (none on an H200 with 5M points): two float4s of x and of y per step
    for (int64_t k = tid; k < g4; k += 2 * RG_THREADS) {
        const int64_t k1 = k + RG_THREADS;
        const float4 x0 = __ldg(gx4 + k), y0 = __ldg(gy4 + k);
        float4 x1 = make_float4(0.f, 0.f, 0.f, 0.f), y1 = x1;
        if (k1 < g4) {
            x1 = __ldg(gx4 + k1);
            y1 = __ldg(gy4 + k1);
        }
        rg_train_quad<LOSS>(wf, bf, x0, y0, a0, a1, a2);
        if (k1 < g4) rg_train_quad<LOSS>(wf, bf, x1, y1, b0, b1, b2);
    }
    if (tid < tail) rg_train_pt<LOSS>(wf, bf, __ldg(gx + tid), __ldg(gy + tid), a0, a1, a2);  // last n % 4 points

    s0 = a0 + b0;
    s1 = a1 + b1;
    s2 = a2 + b2;
}

// One thread's share of the block's test slice: the shared-memory copy (tc4 float4s at stx4, sty4), then what did not
// fit (tg4 float4s at tgx4, tgy4, then ttail single points at tx, ty). Returns this thread's sum r^2 (FP32).
static __device__ __forceinline__ float rg_test_pass(const float4 *stx4, const float4 *sty4, int tc4,
                                                     const float4 *__restrict__ tgx4, const float4 *__restrict__ tgy4,
                                                     int64_t tg4, const float *__restrict__ tx,
                                                     const float *__restrict__ ty, int ttail, float wf, float bf) {
    const int tid = (int)threadIdx.x;
    float a = 0.f, c = 0.f;
    int i = tid;
    for (; i + RG_THREADS < tc4; i += 2 * RG_THREADS) {
        const float4 x0 = stx4[i], y0 = sty4[i];
        const float4 x1 = stx4[i + RG_THREADS], y1 = sty4[i + RG_THREADS];
        a = rg_test_quad(wf, bf, x0, y0, a);
        c = rg_test_quad(wf, bf, x1, y1, c);
    }
    if (i < tc4) {
        const float4 x0 = stx4[i], y0 = sty4[i];
        a = rg_test_quad(wf, bf, x0, y0, a);
    }
    for (int64_t k = tid; k < tg4; k += 2 * RG_THREADS) {
        const int64_t k1 = k + RG_THREADS;
        const float4 x0 = __ldg(tgx4 + k), y0 = __ldg(tgy4 + k);
        float4 x1 = make_float4(0.f, 0.f, 0.f, 0.f), y1 = x1;
        if (k1 < tg4) {
            x1 = __ldg(tgx4 + k1);
            y1 = __ldg(tgy4 + k1);
        }
        a = rg_test_quad(wf, bf, x0, y0, a);
        if (k1 < tg4) c = rg_test_quad(wf, bf, x1, y1, c);
    }
    if (tid < ttail) {  // the last nt % 4 points (last block only)
        const float r = fmaf(wf, __ldg(tx + tid), bf) - __ldg(ty + tid);
        a = fmaf(r, r, a);
    }
    return a + c;
}

// ----------------------------------------------------------------------------
// the kernel: rounds e_begin .. e_end - 1 (epochs), then the final evaluation round when asked. Launched with every
// block co-resident (cooperative launch, one block per SM), which the spinning exchange relies on.

static __global__ void __launch_bounds__(RG_THREADS, 1) rg_train_kernel(const RgArgs p) {
    extern __shared__ float4 rg_smem[];          // train x [cache4], train y [cache4], test x [tcache4], test y [tcache4]
    __shared__ float s_blk[RG_QTY][RG_WARPS];    // per-warp sums of this block's passes (FP32 warp sums)
    __shared__ double s_all[RG_QTY][RG_GW];      // per-gathering-warp sums of every block's published sums

    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int nb = (int)gridDim.x, blk = (int)blockIdx.x;

    // this block's training slice [lo, hi): q float4s and tail points; the first rq float4s in registers, the next c4
    // in shared memory, the remaining g4 (and the tail) read from global memory
    int64_t lo = (int64_t)blk * p.chunk;
    if (lo > p.n) lo = p.n;
    const int64_t hi = lo + p.chunk < p.n ? lo + p.chunk : p.n;
    const int64_t m = p.do_train ? hi - lo : 0;
    const int64_t q = m >> 2;
    const int tail = (int)(m & 3);
    const int rq = (int)(q < (int64_t)RG_REG4 ? q : (int64_t)RG_REG4);
    const int64_t rest = q - rq;
    const int c4 = (int)(rest < (int64_t)p.cache4 ? rest : (int64_t)p.cache4);
    const int64_t g4 = rest - c4;
    const float4 *x4 = reinterpret_cast<const float4 *>(p.x + lo);
    const float4 *y4 = reinterpret_cast<const float4 *>(p.y + lo);
    const float4 *gx4 = x4 + rq + c4, *gy4 = y4 + rq + c4;
    const float *gx = p.x + lo + 4 * q, *gy = p.y + lo + 4 * q;

    // this block's test slice [tlo, thi): the first tc4 float4s in shared memory, the rest from global memory
    const bool any_test = p.do_test || p.final_eval;
    int64_t tlo = (int64_t)blk * p.tchunk;
    if (tlo > p.nt) tlo = p.nt;
    const int64_t thi = tlo + p.tchunk < p.nt ? tlo + p.tchunk : p.nt;
    const int64_t tm = any_test ? thi - tlo : 0;
    const int64_t tq = tm >> 2;
    const int ttail = (int)(tm & 3);
    const int tc4 = (int)(tq < (int64_t)p.tcache4 ? tq : (int64_t)p.tcache4);
    const int64_t tg4 = tq - tc4;
    const float4 *tx4 = reinterpret_cast<const float4 *>(p.xt + tlo);
    const float4 *ty4 = reinterpret_cast<const float4 *>(p.yt + tlo);
    const float4 *tgx4 = tx4 + tc4, *tgy4 = ty4 + tc4;
    const float *tx = p.xt + tlo + 4 * tq, *ty = p.yt + tlo + 4 * tq;

    // the on-chip copies, loaded once per launch: shared memory first, then the registers
    float4 *sx4 = rg_smem, *sy4 = rg_smem + p.cache4;
    float4 *stx4 = rg_smem + 2 * (size_t)p.cache4, *sty4 = stx4 + p.tcache4;
    rg_copy(sx4, sy4, x4 + rq, y4 + rq, c4);
    rg_copy(stx4, sty4, tx4, ty4, tc4);

    float4 rx[RG_RQ], ry[RG_RQ];
#pragma unroll
    for (int u = 0; u < RG_RQ; u++) {
        const int k = tid + u * RG_THREADS;
        if (k < rq) {
            rx[u] = __ldg(x4 + k);
            ry[u] = __ldg(y4 + k);
        } else {
            rx[u] = make_float4(0.f, 0.f, 0.f, 0.f);
            ry[u] = rx[u];
        }
    }
    const int nreg = tid < rq ? (rq - tid + RG_THREADS - 1) / RG_THREADS : 0;  // float4 u is ours iff u < nreg

    double w = p.w0, b = p.b0;
    if (!p.use_init) {
        w = __ldcg(p.params);
        b = __ldcg(p.params + 1);
    }
    __syncthreads();

    const int le = p.log_every > 0 ? p.log_every : 1;
    const int rounds = (p.e_end > p.e_begin ? p.e_end - p.e_begin : 0) + (p.final_eval ? 1 : 0);
    const int ngw = (nb + 31) >> 5;   // gathering warps: lane l of warp 1 + g reads block 32 g + l
    const int rep = blk % RG_REPL;    // the replica this block reads
    for (int r = 0; r < rounds; r++) {
        const int e = p.e_begin + r;
        const unsigned int seq = p.seq0 + (unsigned int)r;
        const bool final_round = e >= p.e_end;
        const bool logged = !final_round && (e % le == 0 || e == p.epochs - 1);
        const bool train = !final_round && p.do_train;
        const bool test = final_round || (logged && p.do_test);
        const bool need4 = (train && logged) || test;  // the loss sums are exchanged too

        // this round's parameters in FP32
        const float wf = (float)w, bf = (float)b;

        // 1. the passes over this block's slices (FP32 per thread)
        float t0 = 0.f, t1 = 0.f, t2 = 0.f, t3 = 0.f;
        if (train) {
            if (logged) rg_train_pass<true>(rx, ry, nreg, sx4, sy4, c4, gx4, gy4, g4, gx, gy, tail, wf, bf, t0, t1, t2);
            else rg_train_pass<false>(rx, ry, nreg, sx4, sy4, c4, gx4, gy4, g4, gx, gy, tail, wf, bf, t0, t1, t2);
        }
        if (test) t3 = rg_test_pass(stx4, sty4, tc4, tgx4, tgy4, tg4, tx, ty, ttail, wf, bf);

        // 2. per-warp sums (FP32 shuffles), only the sums the round needs
        t1 = rg_warp_sum_f(t1);
        t2 = rg_warp_sum_f(t2);
        if (need4) {
            t0 = rg_warp_sum_f(t0);
            t3 = rg_warp_sum_f(t3);
        }
        if (lane == 0) {
            s_blk[0][warp] = t0;
            s_blk[1][warp] = t1;
            s_blk[2][warp] = t2;
            s_blk[3][warp] = t3;
        }
        __syncthreads();

        const unsigned long long tag = (unsigned long long)seq & RG_TAG_MASK;
        const unsigned int par = seq & 1u;

        if (warp == 0) {
            // 3. warp 0: the block's sums in FP64. Lanes l and l + 16 both read warp (l & 15)'s sums and reduce them
            //    with a butterfly inside their 16-lane half, so every lane ends with the same bits. Lane l then
            //    publishes half (l & 1) of replica (l >> 1): half 0 = (r x, r), half 1 = (r^2, test r^2). Both halves
            //    are written every round (zeros in half 1 when the losses are not exchanged), so a stale word is
            //    always from round seq - 2 (a different tag).
            const int src = lane & (RG_WARPS - 1);
            double v0 = 0.0, v3 = 0.0;
            double v1 = (double)s_blk[1][src], v2 = (double)s_blk[2][src];
            if (need4) {
                v0 = (double)s_blk[0][src];
                v3 = (double)s_blk[3][src];
            }
#pragma unroll
            for (int offset = RG_WARPS / 2; offset > 0; offset >>= 1) {
                v1 += __shfl_xor_sync(RG_FULL_MASK, v1, offset);
                v2 += __shfl_xor_sync(RG_FULL_MASK, v2, offset);
                if (need4) {
                    v0 += __shfl_xor_sync(RG_FULL_MASK, v0, offset);
                    v3 += __shfl_xor_sync(RG_FULL_MASK, v3, offset);
                }
            }
            const int half = lane & 1;
            const double lo_v = half ? v0 : v1, hi_v = half ? v3 : v2;
            rg_store2(p.xchg + rg_word(lane >> 1, par, half, blk), rg_tagged(lo_v, tag), rg_tagged(hi_v, tag));
        } else if (warp <= ngw) {
            // 4. warps 1 .. ngw gather: lane l of warp 1 + g waits for block 32 g + l's words of this round in this
            //    block's replica (half 0 always, half 1 on rounds that exchange the losses), re-polling only the half
            //    still missing; then each warp sums its 32 blocks in a fixed tree
            const int g = warp - 1;
            const int j = (g << 5) + lane;
            double v0 = 0.0, v1 = 0.0, v2 = 0.0, v3 = 0.0;
            if (j < nb) {
                const unsigned long long *src0 = p.xchg + rg_word(rep, par, 0, j);
                const unsigned long long *src1 = p.xchg + rg_word(rep, par, 1, j);
                unsigned long long a0, a1, a2 = tag, a3 = tag;
                rg_load2(src0, a0, a1);
                if (need4) rg_load2(src1, a2, a3);
                for (;;) {
                    const bool ok0 = (((a0 ^ tag) | (a1 ^ tag)) & RG_TAG_MASK) == 0ull;
                    const bool ok1 = (((a2 ^ tag) | (a3 ^ tag)) & RG_TAG_MASK) == 0ull;
                    if (ok0 && ok1) break;
                    if (!ok0) rg_load2(src0, a0, a1);
                    if (!ok1) rg_load2(src1, a2, a3);
                }
                v1 = rg_word_value(a0);
                v2 = rg_word_value(a1);
                if (need4) {
                    v0 = rg_word_value(a2);
                    v3 = rg_word_value(a3);
                }
            }
            v1 = rg_warp_sum_d(v1);
            v2 = rg_warp_sum_d(v2);
            if (need4) {
                v0 = rg_warp_sum_d(v0);
                v3 = rg_warp_sum_d(v3);
            }
            if (lane == 0) {
                s_all[0][g] = v0;
                s_all[1][g] = v1;
                s_all[2][g] = v2;
                s_all[3][g] = v3;
            }
        }
        __syncthreads();

        // 5. the totals in one fixed order (the same bits in every thread of every block), the losses, the update
        double g1 = 0.0, g2 = 0.0;
        for (int k = 0; k < ngw; k++) {
            g1 += s_all[1][k];
            g2 += s_all[2][k];
        }
        if (blk == 0 && tid == 0) {
            double g0 = 0.0, g3 = 0.0;
            for (int k = 0; k < ngw; k++) {
                g0 += s_all[0][k];
                g3 += s_all[3][k];
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
    size_t smem;  // dynamic shared memory per block: the copies of the training and test slices
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

    // exchange words [RG_REPL][2 parity][2 half][RG_MAX_BLOCKS][2]: zero (round tag 0, never a live round before every
    // word has been rewritten) before the first launch
    unsigned long long *d_xchg;
    const size_t xchg_bytes = (size_t)RG_REPL * 2 * 2 * RG_MAX_BLOCKS * 2 * sizeof(unsigned long long);
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
        // each launch reloads its on-chip copies, so these runs are slower, as every --breakdown run is
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
