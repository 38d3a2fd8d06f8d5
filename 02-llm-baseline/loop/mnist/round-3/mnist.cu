// mnist.cu: the stage-02 MNIST trainer, loop round 3.
//
// Rounds 1-2: a cuBLAS graph, then one cooperative persistent kernel per epoch (block j owns hidden unit j:
// its column of W0, b0[j] and its row of W1 live in shared memory; the logits cross blocks through fp32
// atomics and one grid-wide barrier per step). Round 3 keeps that design and shortens the step's critical
// path:
//
//   * forward: a warp owns 8 batch rows x the whole 784-pixel row (no cross-warp partials); all-zero
//     chunks of 8 rows x 16 pixels are skipped warp-uniformly; the 4 lanes of a row split the 10 logit
//     atomics, only rows with h > 0 add, into copy j % 4 of the accumulator (4x less contention);
//   * the barrier is split: arrive (fence + atomic, as cg::grid.sync does), then the next batch's pixel
//     rows are issued as cp.async (a warp per row, no integer division) and the next labels and row
//     indices loaded, then wait;
//   * softmax with 4 threads per row; every block computes it identically (fixed order of the copies);
//   * the active rows (h > 0) are known before the barrier: dW0[:, j] = X^T dh runs over a compacted
//     list of them, split in two balanced halves, while two other warps do dW1, db1, db0 and the loss;
//   * the step index runs across epochs: accumulators are triple-buffered and zeroed by slices after each
//     barrier, the barrier counter only grows, so an epoch needs no memset.
//
// Pixels stay bytes on the device; a byte becomes exactly mnist_pixel_value(byte) (bit for bit: the
// fma below with 1/255 split into a high and a low float is correctly rounded for all 256 values).
// Test evaluation is a separate tiled kernel per epoch. Any shape the fused kernel cannot hold (more
// layers, an input other than 784 pixels, a batch over 128, more hidden units than co-resident blocks)
// runs a plain cuBLAS path, with a note on stderr.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "check.h"
#include "host.h"
#include "timing.h"
#include "trainer.h"

const char *const MNIST_VARIANTS[] = {"fused", NULL};
const char *const MNIST_PRECISIONS[] = {"fp32", NULL};

#ifdef EXIT_DATA
#define FZ_EXIT_DATA EXIT_DATA
#else
#define FZ_EXIT_DATA 3
#endif

#define FZ_THREADS 512                // fused kernel: 16 warps, one block per SM
#define FZ_WARPS (FZ_THREADS / 32)
#define FZ_P MNIST_PIXELS             // the fused kernel is built for 784 pixels:
#define FZ_PW (FZ_P / 4)              //   196 words of 4 pixel bytes
#define FZ_NCH (FZ_P / 16)            //   49 chunks of 16 bytes
#define FZ_MAX_B 128                  // forward: 16 warps x 8 rows; softmax: 4 threads per row
#define FZ_LSTRIDE 16                 // padded row of the logit accumulator (10 classes in one 64-byte run)
#define FZ_REPL 4                     // copies of the logit accumulator; block j adds into copy j % FZ_REPL
#define FZ_HALF 224                   // dW0: threads per half of the active rows (7 warps, 196 words busy)
#define EV_ROWS 80                    // evaluation tile: 80 test rows x 128 hidden units, k in steps of 16
#define EV_UNITS 128
#define EV_K 16
#define EV_THREADS 256
#define EV_FINISH_THREADS 256
#define GEN_THREADS 256

static_assert(FZ_P % 16 == 0 && FZ_NCH % 7 == 0, "the forward loads 7 chunks of 16 pixels at a time");
static_assert(4 * FZ_MAX_B == FZ_THREADS && FZ_MAX_B == 8 * FZ_WARPS, "row mappings of the fused kernel");
static_assert(FZ_HALF % 32 == 0 && FZ_HALF >= FZ_PW && FZ_THREADS - 2 * FZ_HALF >= 2 * (2 * MNIST_CLASSES + 2),
              "dW0 halves and the small-sum warps");

// 1/255 as hi + lo: fmaf(p, hi, p * lo) == (float)p / 255.0f for every byte p (checked for all 256).
#define FZ_PX_HI (0x1.010102p-8f)
#define FZ_PX_LO (-0x1.fdfdfep-33f)

// Byte `b` of `word` as mnist_pixel_value: 0x4B0000pp is the float 2^23 + p, so one PRMT and one FADD
// give (float)p exactly, and one FMUL + one FFMA the correctly rounded p / 255.
static __device__ __forceinline__ float fz_px(uint32_t word, int b) {
    const float f = __uint_as_float(__byte_perm(word, 0x4B000000u, 0x7540u | (unsigned)b));
    const float p = __fsub_rn(f, 8388608.0f);
    return __fmaf_rn(p, FZ_PX_HI, __fmul_rn(p, FZ_PX_LO));
}

static __device__ __forceinline__ void fz_cp16(void *smem_dst, const void *gmem_src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem_dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem_src) : "memory");
#else
    *(uint4 *)smem_dst = *(const uint4 *)gmem_src;
#endif
}

static __device__ __forceinline__ void fz_cp_commit(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

static __device__ __forceinline__ void fz_cp_wait_all(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

static __device__ __forceinline__ float fz_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}


static __device__ __forceinline__ unsigned fz_ld_volatile(const unsigned *p) { return *(const volatile unsigned *)p; }

// ---------------------------------------------------------------------------------------------------
// fused path: shared-memory layout of the epoch kernel (bytes), the same on host and device

typedef struct {
    int xs, ws, red, hs, ds, dsa, alist, dlog, lossb, ridx, lab, mask, w1, b1, b0, total;
} FzLayout;

static __host__ __device__ __forceinline__ int fz_align16(int x) { return (x + 15) & ~15; }

static __host__ __device__ __forceinline__ FzLayout fz_layout(int B) {
    FzLayout L;
    int o = 0;
    L.xs = o;    o = fz_align16(o + 2 * B * FZ_P);                  // two batches of pixel bytes
    L.ws = o;    o = fz_align16(o + FZ_P * 4);                      // W0[:, j]
    L.red = o;   o = fz_align16(o + FZ_P * 4);                      // second half of dW0[:, j]
    L.hs = o;    o = fz_align16(o + FZ_MAX_B * 4);                  // h[:, j]
    L.ds = o;    o = fz_align16(o + FZ_MAX_B * 4);                  // dh[:, j]
    L.dsa = o;   o = fz_align16(o + FZ_MAX_B * 4);                  // dh of the active rows, compacted
    L.alist = o; o = fz_align16(o + FZ_MAX_B * 4);                  // the active rows (h > 0), in order
    L.dlog = o;  o = fz_align16(o + FZ_MAX_B * MNIST_CLASSES * 4);  // dlogits (B, 10)
    L.lossb = o; o = fz_align16(o + FZ_MAX_B * 4);                  // per-row loss
    L.ridx = o;  o = fz_align16(o + FZ_MAX_B * 4);                  // rows of the next step (to fetch)
    L.lab = o;   o = fz_align16(o + FZ_MAX_B * 4);                  // labels of the current step
    L.mask = o;  o = fz_align16(o + FZ_MAX_B / 8);                  // active-row bits, one byte per warp
    L.w1 = o;    o = fz_align16(o + 16 * 4);                        // W1[j, :] (10 used, 6 zero)
    L.b1 = o;    o = fz_align16(o + 16 * 4);                        // b1 (a copy in every block)
    L.b0 = o;    o = fz_align16(o + 4);                             // b0[j]
    L.total = o;
    return L;
}

typedef struct {
    float *params;
    const uint8_t *pixels;   // (n_train, 784) bytes
    const uint8_t *labels;   // (n_train,)
    const int32_t *order;    // (epochs, n_train)
    float *lacc;             // 3 steps x FZ_REPL copies x (B, FZ_LSTRIDE) logit accumulators
    unsigned *bar;           // arrivals at the per-step barrier, counted over the whole run
    float *step_loss;        // (epochs * steps,)
    int64_t w0_off, b0_off, w1_off, b1_off;
    int64_t g0;              // global index of the epoch's first step (epoch * steps)
    int batch, hidden, steps, n_train, epoch;
    float lr;
} FzArgs;

// cp.async of B pixel rows (row indices in rows[], shared memory) into dst: a warp per row, a lane per
// 16-byte chunk (49 chunks: two passes of the warp).
static __device__ __forceinline__ void fz_fetch_rows(unsigned char *dst, const uint8_t *pixels, const int *rows, int B,
                                                     int warp, int lane) {
    for (int i = warp; i < B; i += FZ_WARPS) {
        const uint8_t *src = pixels + (int64_t)rows[i] * FZ_P;
        unsigned char *d = dst + (size_t)i * FZ_P;
        for (int cc = lane; cc < FZ_NCH; cc += 32) fz_cp16(d + cc * 16, src + cc * 16);
    }
}

// One epoch of SGD; grid = hidden blocks (block j owns hidden unit j), launched cooperatively so that every
// block is resident (the per-step barrier below spins on a global counter).
static __global__ void __launch_bounds__(FZ_THREADS, 1) fz_epoch_kernel(FzArgs a) {
    constexpr int C = MNIST_CLASSES;
    constexpr unsigned FULL = 0xffffffffu;
    extern __shared__ __align__(16) unsigned char fz_smem[];
    const int B = a.batch, H = a.hidden, steps = a.steps;
    const FzLayout L = fz_layout(B);
    unsigned char *xs = fz_smem + L.xs;
    float *ws = (float *)(fz_smem + L.ws);
    float4 *ws4 = (float4 *)ws;
    float4 *red4 = (float4 *)(fz_smem + L.red);
    float *hs = (float *)(fz_smem + L.hs);
    float *ds = (float *)(fz_smem + L.ds);
    float *dsa = (float *)(fz_smem + L.dsa);
    int *alist = (int *)(fz_smem + L.alist);
    float *dlog = (float *)(fz_smem + L.dlog);
    float *lossb = (float *)(fz_smem + L.lossb);
    int *ridx = (int *)(fz_smem + L.ridx);
    int *lab = (int *)(fz_smem + L.lab);
    unsigned char *mask8 = fz_smem + L.mask;
    const uint32_t *mask32 = (const uint32_t *)(fz_smem + L.mask);
    float *w1 = (float *)(fz_smem + L.w1);
    float *b1 = (float *)(fz_smem + L.b1);
    float *b0s = (float *)(fz_smem + L.b0);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int j = blockIdx.x;
    const float lr = a.lr;
    const int64_t ebase = (int64_t)a.epoch * a.n_train;
    const size_t buf_bytes = (size_t)B * FZ_P;               // one batch of pixel bytes
    const size_t rep_stride = (size_t)B * FZ_LSTRIDE;        // floats in one copy of the accumulator
    const size_t acc_stride = (size_t)FZ_REPL * rep_stride;  // floats in one step's accumulators

    // the block's parameters, the first step's rows, labels and pixels, the second step's rows
    for (int k = tid; k < FZ_P; k += FZ_THREADS) ws[k] = a.params[a.w0_off + (int64_t)k * H + j];
    if (tid < 16) {
        w1[tid] = tid < C ? a.params[a.w1_off + (int64_t)j * C + tid] : 0.f;
        b1[tid] = tid < C ? a.params[a.b1_off + tid] : 0.f;
    }
    if (tid == 0) b0s[0] = a.params[a.b0_off + j];
    if (tid < B) {
        const int r0 = a.order[ebase + tid];
        ridx[tid] = r0;
        lab[tid] = a.labels[r0];
    }
    __syncthreads();
    fz_fetch_rows(xs, a.pixels, ridx, B, warp, lane);
    fz_cp_commit();
    __syncthreads();  // every warp has read ridx
    if (tid < B && steps > 1) ridx[tid] = a.order[ebase + B + tid];
    fz_cp_wait_all();
    __syncthreads();

    for (int s = 0; s < steps; s++) {
        const int cur = s & 1;
        const int64_t g = a.g0 + s;
        const uint32_t *x32 = (const uint32_t *)(xs + (size_t)cur * buf_bytes);
        float *acc_cur = a.lacc + (size_t)(g % 3) * acc_stride;

        // forward: z[row] = X[row, :] . W0[:, j]. A warp owns 8 rows; lane = (row r, word jj of each 16-byte
        // chunk): conflict-free (a row is 196 words = 4 mod 32 banks). A chunk that is zero in all 8 rows
        // is skipped by the whole warp (0 * w adds exactly nothing).
        if (warp * 8 < B) {
            const int r = lane >> 2, jj = lane & 3, row = warp * 8 + r;
            const bool valid = row < B;
            const uint32_t *xr = x32 + (size_t)(valid ? row : 0) * FZ_PW + jj;
            float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
#pragma unroll 1
            for (int c0 = 0; c0 < FZ_NCH; c0 += 7) {
                uint32_t v[7];
#pragma unroll
                for (int u = 0; u < 7; u++) v[u] = valid ? xr[4 * (c0 + u)] : 0u;
#pragma unroll
                for (int u = 0; u < 7; u++) {
                    if (__any_sync(FULL, v[u] != 0u)) {
                        const float4 w = ws4[4 * (c0 + u) + jj];
                        a0 = fmaf(fz_px(v[u], 0), w.x, a0);
                        a1 = fmaf(fz_px(v[u], 1), w.y, a1);
                        a2 = fmaf(fz_px(v[u], 2), w.z, a2);
                        a3 = fmaf(fz_px(v[u], 3), w.w, a3);
                    }
                }
            }
            float z = (a0 + a1) + (a2 + a3);
            z += __shfl_xor_sync(FULL, z, 1);  // the 4 lanes of a row end with the same sum
            z += __shfl_xor_sync(FULL, z, 2);
            const float h = fmaxf(z + b0s[0], 0.f);
            const bool act = valid && h > 0.f;
            if (act) {  // the block's share of the logits: lane jj adds classes jj, jj + 4 (and jj + 8)
                float *dst = acc_cur + (size_t)(j % FZ_REPL) * rep_stride + (size_t)row * FZ_LSTRIDE;
                atomicAdd(dst + jj, h * w1[jj]);
                atomicAdd(dst + jj + 4, h * w1[jj + 4]);
                if (jj < 2) atomicAdd(dst + jj + 8, h * w1[jj + 8]);
            }
            if (jj == 0 && valid) hs[row] = h;
            const unsigned bal = __ballot_sync(FULL, act && jj == 0);
            if (lane == 0) {
                unsigned m8 = 0u;
#pragma unroll
                for (int q = 0; q < 8; q++) m8 |= ((bal >> (4 * q)) & 1u) << q;
                mask8[warp] = (unsigned char)m8;
            }
        } else if (lane == 0) {
            mask8[warp] = 0;
        }
        __syncthreads();

        // barrier, arrive: every thread's atomics are issued; the fence orders them before the arrival
        if (tid == 0) {
            __threadfence();
            atomicAdd(a.bar, 1u);
        }
        // while the other blocks finish: the next step's pixels (cp.async into the other buffer, last read
        // in step s-1), its labels, and the row indices of step s+2
        if (s + 1 < steps) fz_fetch_rows(xs + (size_t)(cur ^ 1) * buf_bytes, a.pixels, ridx, B, warp, lane);
        fz_cp_commit();
        int lab_n = 0, rn2 = 0;
        if (tid < B) {
            if (s + 1 < steps) lab_n = a.labels[ridx[tid]];
            if (s + 2 < steps) rn2 = a.order[ebase + (int64_t)(s + 2) * B + tid];
        }
        // barrier, wait: all H blocks have arrived for step g
        if (tid == 0) {
            const unsigned target = (unsigned)H * (unsigned)(g + 1);
            while ((int)(fz_ld_volatile(a.bar) - target) < 0) {
            }
            __threadfence();
        }
        __syncthreads();

        // softmax, loss and dlogits for the whole batch (every block, identically): 4 threads per row,
        // thread q takes classes q, q + 4 and (q < 2) q + 8; dh[:, j] = dlogits . W1[j, :] where h > 0
        {
            const int b = tid >> 2, q = tid & 3;
            const bool valid = b < B, has2 = q < 2;
            const int c0 = q, c1 = q + 4, c2 = q + 8;
            float l0 = 0.f, l1 = 0.f, l2 = -INFINITY;
            int label = -1;
            if (valid) {
                const float *lp = acc_cur + (size_t)b * FZ_LSTRIDE;
                float s0 = 0.f, s1 = 0.f, s2 = 0.f;
#pragma unroll
                for (int rp = 0; rp < FZ_REPL; rp++) {  // the copies in a fixed order: the same in every block
                    s0 += __ldcg(lp + rp * rep_stride + c0);
                    s1 += __ldcg(lp + rp * rep_stride + c1);
                    if (has2) s2 += __ldcg(lp + rp * rep_stride + c2);
                }
                l0 = s0 + b1[c0];
                l1 = s1 + b1[c1];
                if (has2) l2 = s2 + b1[c2];
                label = lab[b];
            }
            float m = fmaxf(fmaxf(l0, l1), l2);
            m = fmaxf(m, __shfl_xor_sync(FULL, m, 1));
            m = fmaxf(m, __shfl_xor_sync(FULL, m, 2));
            const float e0 = expf(l0 - m), e1 = expf(l1 - m), e2 = has2 ? expf(l2 - m) : 0.f;
            float sum = (e0 + e1) + e2;
            sum += __shfl_xor_sync(FULL, sum, 1);
            sum += __shfl_xor_sync(FULL, sum, 2);
            float ll = (c0 == label ? l0 : 0.f) + (c1 == label ? l1 : 0.f) + (has2 && c2 == label ? l2 : 0.f);
            ll += __shfl_xor_sync(FULL, ll, 1);  // one term is the label's logit, the others are 0: exact
            ll += __shfl_xor_sync(FULL, ll, 2);
            const float d0 = (e0 / sum - (c0 == label ? 1.f : 0.f)) / (float)B;
            const float d1 = (e1 / sum - (c1 == label ? 1.f : 0.f)) / (float)B;
            const float d2 = has2 ? (e2 / sum - (c2 == label ? 1.f : 0.f)) / (float)B : 0.f;
            float dp = d0 * w1[c0];
            dp = fmaf(d1, w1[c1], dp);
            if (has2) dp = fmaf(d2, w1[c2], dp);
            dp += __shfl_xor_sync(FULL, dp, 1);
            dp += __shfl_xor_sync(FULL, dp, 2);
            if (valid) {
                dlog[b * C + c0] = d0;
                dlog[b * C + c1] = d1;
                if (has2) dlog[b * C + c2] = d2;
                if (q == 0) {
                    const float h = hs[b];
                    const float dv = h > 0.f ? dp : 0.f;
                    ds[b] = dv;
                    lossb[b] = logf(sum) + m - ll;
                    if (h > 0.f) {  // the same test that set the row's mask bit: rank = active rows before b
                        const int wi = b >> 5;
                        int rank = __popc(mask32[wi] & ((1u << (b & 31)) - 1u));
                        for (int w = 0; w < wi; w++) rank += __popc(mask32[w]);
                        alist[rank] = b;
                        dsa[rank] = dv;
                    }
                }
            }
        }
        // the accumulators of step g+2, by slices over the blocks: their last readers (step g-1) and
        // writers are behind this barrier, their next writers behind the next one
        {
            float4 *zb = (float4 *)(a.lacc + (size_t)((g + 2) % 3) * acc_stride);
            const int n4 = (int)(acc_stride >> 2);
            for (int idx = j * FZ_THREADS + tid; idx < n4; idx += H * FZ_THREADS) zb[idx] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
        __syncthreads();

        // dW0[:, j] = X^T dh[:, j] over the active rows only (dh = 0 elsewhere): warps 0-6 take the first
        // half of the compacted list, warps 7-13 the second, a thread per word (4 pixels). Warps 14-15 sum
        // dW1[j, :], db1, db0[j] and the loss, and update W1[j, :], b1, b0[j].
        float g0 = 0.f, g1 = 0.f, g2 = 0.f, g3 = 0.f;
        const int hsel = tid / FZ_HALF;
        const int wi = tid - hsel * FZ_HALF;
        if (hsel < 2) {
            const int na = __popc(mask32[0]) + __popc(mask32[1]) + __popc(mask32[2]) + __popc(mask32[3]);
            const int mid = (na + 1) >> 1;
            const int k0 = hsel ? mid : 0, k1 = hsel ? na : mid;
            const uint32_t *xc = x32 + (wi < FZ_PW ? wi : FZ_PW - 1);
#pragma unroll 4
            for (int k = k0; k < k1; k++) {
                const int b = alist[k];
                const float d = dsa[k];
                const uint32_t v = xc[(size_t)b * FZ_PW];
                if (__any_sync(FULL, v != 0u)) {
                    g0 = fmaf(fz_px(v, 0), d, g0);
                    g1 = fmaf(fz_px(v, 1), d, g1);
                    g2 = fmaf(fz_px(v, 2), d, g2);
                    g3 = fmaf(fz_px(v, 3), d, g3);
                }
            }
            if (hsel == 1 && wi < FZ_PW) red4[wi] = make_float4(g0, g1, g2, g3);
        } else {
            // task t < 10: dW1[j, t] = sum h dlog[:, t]; t < 20: db1[t-10]; t = 20: db0[j]; t = 21: the loss.
            // Two lanes per task (even and odd rows), one branch-free loop for all.
            const int u = tid - 2 * FZ_HALF;
            const int task = u >> 1, hf = u & 1;
            const float *vp = task < C ? dlog + task : task < 2 * C ? dlog + (task - C) : task == 2 * C ? ds : lossb;
            const int vs = task < 2 * C ? C : 1;
            const bool use_h = task < C;
            float acc = 0.f;
            for (int b = hf; b < B; b += 2) acc = fmaf(use_h ? hs[b] : 1.f, vp[b * vs], acc);
            acc += __shfl_xor_sync(FULL, acc, 1);
            if (hf == 0) {
                if (task < C) w1[task] -= lr * acc;
                else if (task < 2 * C) b1[task - C] -= lr * acc;
                else if (task == 2 * C) b0s[0] -= lr * acc;
                else if (task == 2 * C + 1 && j == 0) a.step_loss[g] = acc / (float)B;
            }
        }
        __syncthreads();

        // SGD on the block's column of W0; the next step's labels and the rows of step s+2
        if (hsel == 0 && wi < FZ_PW) {
            const float4 r4 = red4[wi];
            float4 w = ws4[wi];
            w.x -= lr * (g0 + r4.x);
            w.y -= lr * (g1 + r4.y);
            w.z -= lr * (g2 + r4.z);
            w.w -= lr * (g3 + r4.w);
            ws4[wi] = w;
        }
        if (tid < B) {
            if (s + 1 < steps) lab[tid] = lab_n;
            if (s + 2 < steps) ridx[tid] = rn2;
        }
        fz_cp_wait_all();
        __syncthreads();
    }

    // the block's parameters back to global memory (read by the evaluation and the next epoch)
    for (int k = tid; k < FZ_P; k += FZ_THREADS) a.params[a.w0_off + (int64_t)k * H + j] = ws[k];
    if (tid < C) {
        a.params[a.w1_off + (int64_t)j * C + tid] = w1[tid];
        if (j == 0) a.params[a.b1_off + tid] = b1[tid];
    }
    if (tid == 0) a.params[a.b0_off + j] = b0s[0];
}


// Test evaluation: a block takes 80 test rows (10,000 rows: 125 blocks, one per SM), computes
// h = relu(X W0 + b0) in tiles of 128 units (k in chunks of 16, loaded into registers one chunk ahead;
// a thread 5 rows x 8 units), accumulates the logits, and writes its loss sum and number of correct
// rows; fz_eval_finish_kernel sums the blocks in a fixed order.
static __global__ void __launch_bounds__(EV_THREADS) fz_eval_kernel(const float *params, const uint8_t *pixels,
                                                                    const uint8_t *labels, int n, int P, int H,
                                                                    int64_t w0_off, int64_t b0_off, int64_t w1_off,
                                                                    int64_t b1_off, float *part_loss,
                                                                    int *part_correct) {
    constexpr int C = MNIST_CLASSES;
    constexpr int RM = EV_ROWS / 16;
    __shared__ __align__(16) float buf[EV_ROWS * (EV_UNITS + 1)];
    __shared__ float lg[EV_ROWS * C];
    __shared__ float red_loss[EV_THREADS / 32];
    __shared__ int red_correct[EV_THREADS / 32];
    float *As = buf;                     // [EV_K][EV_ROWS]
    float *Bs = buf + EV_K * EV_ROWS;    // [EV_K][EV_UNITS]
    float *Hs = buf;                     // [EV_ROWS][EV_UNITS + 1], after the k loop
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int row0 = blockIdx.x * EV_ROWS;
    const int prow = row0 + tid;         // the pixel row this thread loads (tid < EV_ROWS)
    const int bk = tid >> 7, bu = tid & (EV_UNITS - 1);  // its W0 elements: k = k0 + bk + 2t, unit bu
    for (int e = tid; e < EV_ROWS * C; e += EV_THREADS) lg[e] = 0.f;

    for (int u0 = 0; u0 < H; u0 += EV_UNITS) {
        const bool bvalid = u0 + bu < H;
        float acc[RM][8];
#pragma unroll
        for (int i = 0; i < RM; i++)
#pragma unroll
            for (int jx = 0; jx < 8; jx++) acc[i][jx] = 0.f;
        uint4 pv = make_uint4(0u, 0u, 0u, 0u);
        float wv[EV_K / 2];
        if (tid < EV_ROWS && prow < n) pv = *(const uint4 *)(pixels + (int64_t)prow * P);
#pragma unroll
        for (int t = 0; t < EV_K / 2; t++) wv[t] = bvalid ? params[w0_off + (int64_t)(bk + 2 * t) * H + u0 + bu] : 0.f;
        for (int k0 = 0; k0 < P; k0 += EV_K) {
            __syncthreads();  // the previous chunk (or the previous tile's logits) is done with buf
            if (tid < EV_ROWS) {
                const uint32_t pw[4] = {pv.x, pv.y, pv.z, pv.w};
#pragma unroll
                for (int q = 0; q < 4; q++)
#pragma unroll
                    for (int bb = 0; bb < 4; bb++) As[(q * 4 + bb) * EV_ROWS + tid] = fz_px(pw[q], bb);
            }
#pragma unroll
            for (int t = 0; t < EV_K / 2; t++) Bs[(bk + 2 * t) * EV_UNITS + bu] = wv[t];
            __syncthreads();
            if (k0 + EV_K < P) {  // the next chunk, in flight during this one's FMAs
                if (tid < EV_ROWS && prow < n) pv = *(const uint4 *)(pixels + (int64_t)prow * P + k0 + EV_K);
#pragma unroll
                for (int t = 0; t < EV_K / 2; t++)
                    wv[t] = bvalid ? params[w0_off + (int64_t)(k0 + EV_K + bk + 2 * t) * H + u0 + bu] : 0.f;
            }
#pragma unroll
            for (int kk = 0; kk < EV_K; kk++) {
                const float4 bv0 = *(const float4 *)(Bs + kk * EV_UNITS + tx * 4);
                const float4 bv1 = *(const float4 *)(Bs + kk * EV_UNITS + 64 + tx * 4);
                const float br[8] = {bv0.x, bv0.y, bv0.z, bv0.w, bv1.x, bv1.y, bv1.z, bv1.w};
#pragma unroll
                for (int i = 0; i < RM; i++) {
                    const float av = As[kk * EV_ROWS + ty * RM + i];
#pragma unroll
                    for (int jx = 0; jx < 8; jx++) acc[i][jx] = fmaf(av, br[jx], acc[i][jx]);
                }
            }
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < RM; i++) {
#pragma unroll
            for (int jx = 0; jx < 8; jx++) {
                const int r = ty * RM + i, u = jx < 4 ? tx * 4 + jx : 64 + tx * 4 + (jx - 4), uu = u0 + u;
                Hs[r * (EV_UNITS + 1) + u] = uu < H ? fmaxf(acc[i][jx] + params[b0_off + uu], 0.f) : 0.f;
            }
        }
        __syncthreads();
        const int nu = H - u0 < EV_UNITS ? H - u0 : EV_UNITS;
        for (int e = tid; e < EV_ROWS * C; e += EV_THREADS) {
            const int r = e / C, c = e - r * C;
            float s = 0.f;
            for (int u = 0; u < nu; u++)
                s = fmaf(Hs[r * (EV_UNITS + 1) + u], params[w1_off + (int64_t)(u0 + u) * C + c], s);
            lg[e] += s;
        }
    }
    __syncthreads();

    float loss = 0.f;
    int correct = 0;
    if (tid < EV_ROWS && row0 + tid < n) {
        const int label = labels[row0 + tid];
        float l[C];
        int best = 0;
        float m = -INFINITY;
#pragma unroll
        for (int c = 0; c < C; c++) {
            l[c] = lg[tid * C + c] + params[b1_off + c];
            if (c == 0 || l[c] > m) {  // the first largest logit, as an argmax
                m = l[c];
                best = c;
            }
        }
        float sum = 0.f, ll = 0.f;
#pragma unroll
        for (int c = 0; c < C; c++) {
            if (c == label) ll = l[c];
            sum += expf(l[c] - m);
        }
        loss = logf(sum) + m - ll;
        correct = best == label;
    }
    loss = fz_warp_sum(loss);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) correct += __shfl_xor_sync(0xffffffffu, correct, o);
    if ((tid & 31) == 0) {
        red_loss[tid >> 5] = loss;
        red_correct[tid >> 5] = correct;
    }
    __syncthreads();
    if (tid == 0) {
        float tl = 0.f;
        int tc = 0;
        for (int w = 0; w < EV_THREADS / 32; w++) {
            tl += red_loss[w];
            tc += red_correct[w];
        }
        part_loss[blockIdx.x] = tl;
        part_correct[blockIdx.x] = tc;
    }
}

static __global__ void fz_eval_finish_kernel(const float *part_loss, const int *part_correct, int nblocks, int n,
                                             float *test_loss, float *test_acc, int epoch) {
    __shared__ double sl[EV_FINISH_THREADS];
    __shared__ long long sc[EV_FINISH_THREADS];
    double l = 0.0;
    long long c = 0;
    for (int i = threadIdx.x; i < nblocks; i += EV_FINISH_THREADS) {
        l += (double)part_loss[i];
        c += part_correct[i];
    }
    sl[threadIdx.x] = l;
    sc[threadIdx.x] = c;
    __syncthreads();
    for (int o = EV_FINISH_THREADS / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) {
            sl[threadIdx.x] += sl[threadIdx.x + o];
            sc[threadIdx.x] += sc[threadIdx.x + o];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        test_loss[epoch] = n > 0 ? (float)(sl[0] / n) : 0.f;
        test_acc[epoch] = n > 0 ? (float)((double)sc[0] / n) : 0.f;
    }
}

// ---------------------------------------------------------------------------------------------------
// cuBLAS path, for the shapes the fused kernel cannot hold (any number of layers and sizes)

static __global__ void gen_gather_kernel(float *act0, int *blab, const uint8_t *pixels, const uint8_t *labels,
                                         const int32_t *order, int64_t first, int P) {
    const int i = blockIdx.x;
    const int32_t row = order[first + i];
    for (int k = threadIdx.x; k < P; k += blockDim.x)
        act0[(int64_t)i * P + k] = mnist_pixel_value(pixels[(int64_t)row * P + k]);
    if (threadIdx.x == 0) blab[i] = labels[row];
}

static __global__ void gen_pixels_kernel(float *out, const uint8_t *pixels, int64_t n) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) out[idx] = mnist_pixel_value(pixels[idx]);
}

static __global__ void gen_bias_act_kernel(float *out, const float *bias, int64_t rows, int cols, int relu) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * cols) return;
    const float v = out[idx] + bias[idx % cols];
    out[idx] = relu ? fmaxf(v, 0.f) : v;
}

static __global__ void gen_loss_kernel(float *dlogits, float *loss_slot, const float *logits, const int *blab, int B,
                                       int C) {
    __shared__ float red[GEN_THREADS];
    float lsum = 0.f;
    for (int b = threadIdx.x; b < B; b += GEN_THREADS) {
        const float *l = logits + (int64_t)b * C;
        const int label = blab[b];
        float m = -INFINITY;
        for (int c = 0; c < C; c++) m = fmaxf(m, l[c]);
        float sum = 0.f;
        for (int c = 0; c < C; c++) sum += expf(l[c] - m);
        lsum += logf(sum) + m - l[label];
        for (int c = 0; c < C; c++)
            dlogits[(int64_t)b * C + c] = (expf(l[c] - m) / sum - (c == label ? 1.f : 0.f)) / (float)B;
    }
    red[threadIdx.x] = lsum;
    __syncthreads();
    for (int o = GEN_THREADS / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) *loss_slot = red[0] / (float)B;
}

static __global__ void gen_bias_update_kernel(float *bias, const float *dout, int B, int N, float lr) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float s = 0.f;
    for (int b = 0; b < B; b++) s += dout[(int64_t)b * N + n];
    bias[n] -= lr * s;
}

static __global__ void gen_relu_back_kernel(float *d, const float *act, int64_t n) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n && !(act[idx] > 0.f)) d[idx] = 0.f;
}

static __global__ void gen_eval_kernel(float *test_loss, float *test_acc, const float *logits, const uint8_t *labels,
                                       int n, int C, int epoch) {
    __shared__ double sl[GEN_THREADS];
    __shared__ int sc[GEN_THREADS];
    double lsum = 0.0;
    int correct = 0;
    for (int r = threadIdx.x; r < n; r += GEN_THREADS) {
        const float *l = logits + (int64_t)r * C;
        int best = 0;
        for (int c = 1; c < C; c++)
            if (l[c] > l[best]) best = c;
        const float m = l[best];
        float sum = 0.f;
        for (int c = 0; c < C; c++) sum += expf(l[c] - m);
        lsum += (double)(logf(sum) + m - l[labels[r]]);
        correct += best == (int)labels[r];
    }
    sl[threadIdx.x] = lsum;
    sc[threadIdx.x] = correct;
    __syncthreads();
    for (int o = GEN_THREADS / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) {
            sl[threadIdx.x] += sl[threadIdx.x + o];
            sc[threadIdx.x] += sc[threadIdx.x + o];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        test_loss[epoch] = n > 0 ? (float)(sl[0] / n) : 0.f;
        test_acc[epoch] = n > 0 ? (float)((double)sc[0] / n) : 0.f;
    }
}

static unsigned mnist_fz_blocks(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

static void *mnist_fz_zeros(size_t bytes) {
    void *p = NULL;
    cudaCheck(cudaMalloc(&p, bytes > 0 ? bytes : 16));
    cudaCheck(cudaMemset(p, 0, bytes > 0 ? bytes : 16));
    return p;
}

// The device copies of the inputs and outputs, shared by both paths.
typedef struct {
    float *params, *step_loss, *test_loss, *test_acc;
    uint8_t *train_pixels, *train_labels, *test_pixels, *test_labels;
    int32_t *order;
} MnistFzData;

static void mnist_fz_alloc_data(MnistFzData *d, int64_t n_params, int n_train, int n_test, int pixels, int epochs,
                                int64_t total_steps) {
    d->params = (float *)mnist_fz_zeros((size_t)n_params * sizeof(float));
    d->step_loss = (float *)mnist_fz_zeros((size_t)(total_steps > 0 ? total_steps : 1) * sizeof(float));
    d->test_loss = (float *)mnist_fz_zeros((size_t)(epochs > 0 ? epochs : 1) * sizeof(float));
    d->test_acc = (float *)mnist_fz_zeros((size_t)(epochs > 0 ? epochs : 1) * sizeof(float));
    d->train_pixels = (uint8_t *)mnist_fz_zeros((size_t)n_train * pixels);
    d->train_labels = (uint8_t *)mnist_fz_zeros((size_t)n_train);
    d->test_pixels = (uint8_t *)mnist_fz_zeros((size_t)n_test * pixels);
    d->test_labels = (uint8_t *)mnist_fz_zeros((size_t)n_test);
    d->order = (int32_t *)mnist_fz_zeros((size_t)epochs * n_train * sizeof(int32_t));
}

static void mnist_fz_free_data(MnistFzData *d) {
    cudaCheck(cudaFree(d->params));
    cudaCheck(cudaFree(d->step_loss));
    cudaCheck(cudaFree(d->test_loss));
    cudaCheck(cudaFree(d->test_acc));
    cudaCheck(cudaFree(d->train_pixels));
    cudaCheck(cudaFree(d->train_labels));
    cudaCheck(cudaFree(d->test_pixels));
    cudaCheck(cudaFree(d->test_labels));
    cudaCheck(cudaFree(d->order));
}

// Host-side check of the batch order (inside e2e: it reads the training data).
static void mnist_fz_check_order(const MnistData *data, int epochs, int steps, int batch) {
    const int n_train = data->n_train;
    for (int epoch = 0; epoch < epochs; epoch++) {
        const int32_t *rows = data->batch_order + (int64_t)epoch * n_train;
        int bad = 0;
        for (int64_t p = 0; p < (int64_t)steps * batch; p++) bad |= (uint32_t)rows[p] >= (uint32_t)n_train;
        if (bad) {
            for (int64_t p = 0; p < (int64_t)steps * batch; p++) {
                if ((uint32_t)rows[p] >= (uint32_t)n_train) {
                    fprintf(stderr, "error: batch order entry %lld of epoch %d is %d, outside 0..%d\n", (long long)p,
                            epoch, rows[p], n_train - 1);
                    exit(FZ_EXIT_DATA);
                }
            }
        }
    }
}

static void mnist_fz_upload(const MnistFzData *d, const MnistData *data, int64_t n_params, int pixels, int epochs,
                            cudaStream_t stream) {
    const int n_train = data->n_train, n_test = data->n_test;
    cudaCheck(cudaMemcpyAsync(d->params, data->init_params, (size_t)n_params * sizeof(float), cudaMemcpyHostToDevice,
                              stream));
    if (n_train > 0) {
        cudaCheck(cudaMemcpyAsync(d->train_pixels, data->train_pixels, (size_t)n_train * pixels,
                                  cudaMemcpyHostToDevice, stream));
        cudaCheck(cudaMemcpyAsync(d->train_labels, data->train_labels, (size_t)n_train, cudaMemcpyHostToDevice, stream));
        if (epochs > 0)
            cudaCheck(cudaMemcpyAsync(d->order, data->batch_order, (size_t)epochs * n_train * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, stream));
    }
    if (n_test > 0) {
        cudaCheck(cudaMemcpyAsync(d->test_pixels, data->test_pixels, (size_t)n_test * pixels, cudaMemcpyHostToDevice,
                                  stream));
        cudaCheck(cudaMemcpyAsync(d->test_labels, data->test_labels, (size_t)n_test, cudaMemcpyHostToDevice, stream));
    }
}

static void mnist_fz_download(const MnistFzData *d, MnistResult *out, int64_t n_params, int epochs,
                              int64_t total_steps, cudaStream_t stream) {
    cudaCheck(cudaMemcpyAsync(out->params, d->params, (size_t)n_params * sizeof(float), cudaMemcpyDeviceToHost, stream));
    if (total_steps > 0)
        cudaCheck(cudaMemcpyAsync(out->step_loss, d->step_loss, (size_t)total_steps * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream));
    if (epochs > 0) {
        cudaCheck(cudaMemcpyAsync(out->test_loss, d->test_loss, (size_t)epochs * sizeof(float), cudaMemcpyDeviceToHost,
                                  stream));
        cudaCheck(cudaMemcpyAsync(out->test_acc, d->test_acc, (size_t)epochs * sizeof(float), cudaMemcpyDeviceToHost,
                                  stream));
    }
    cudaCheck(cudaStreamSynchronize(stream));
}

typedef struct {
    const MnistConfig *cfg;
    int L, B, P, C, n_test;
    float lr, neg_lr;
    int64_t woff[MNIST_MAX_LAYERS], boff[MNIST_MAX_LAYERS];
    cudaStream_t stream;
    cublasHandle_t blas;
    MnistFzData *d;
    float *act[MNIST_MAX_LAYERS + 1], *dact[MNIST_MAX_LAYERS + 1], *tact[MNIST_MAX_LAYERS + 1];
    int *blab;
} MnistGen;

static void gen_forward(const MnistGen *g, float *const *acts, int rows) {
    const float one = 1.f, zero = 0.f;
    for (int l = 0; l < g->L; l++) {
        const int K = g->cfg->sizes[l], N = g->cfg->sizes[l + 1];
        // row-major out (rows, N) = in (rows, K) @ W (K, N), as column-major out^T = W^T in^T
        cublasCheck(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, N, rows, K, &one, g->d->params + g->woff[l], N,
                                acts[l], K, &zero, acts[l + 1], N));
        const int64_t n = (int64_t)rows * N;
        gen_bias_act_kernel<<<mnist_fz_blocks(n, GEN_THREADS), GEN_THREADS, 0, g->stream>>>(
            acts[l + 1], g->d->params + g->boff[l], rows, N, l < g->L - 1);
        cudaCheck(cudaGetLastError());
    }
}

static void gen_gather(const MnistGen *g, int epoch, int step, int n_train) {
    const int64_t first = (int64_t)epoch * n_train + (int64_t)step * g->B;
    gen_gather_kernel<<<g->B, GEN_THREADS, 0, g->stream>>>(g->act[0], g->blab, g->d->train_pixels, g->d->train_labels,
                                                          g->d->order, first, g->P);
    cudaCheck(cudaGetLastError());
}

static void gen_loss(const MnistGen *g, int64_t slot) {
    gen_loss_kernel<<<1, GEN_THREADS, 0, g->stream>>>(g->dact[g->L], g->d->step_loss + slot, g->act[g->L], g->blab,
                                                     g->B, g->C);
    cudaCheck(cudaGetLastError());
}

static void gen_backward(const MnistGen *g) {
    const float one = 1.f, zero = 0.f;
    for (int l = g->L - 1; l >= 0; l--) {
        const int K = g->cfg->sizes[l], N = g->cfg->sizes[l + 1];
        float *W = g->d->params + g->woff[l];
        const float *dout = g->dact[l + 1];
        if (l > 0)  // din (B, K) = dout (B, N) @ W^T, before W changes
            cublasCheck(cublasSgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, K, g->B, N, &one, W, N, dout, N, &zero,
                                    g->dact[l], K));
        // W += -lr * in^T (K, B) @ dout (B, N)
        cublasCheck(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_T, N, K, g->B, &g->neg_lr, dout, N, g->act[l], K, &one,
                                W, N));
        gen_bias_update_kernel<<<mnist_fz_blocks(N, GEN_THREADS), GEN_THREADS, 0, g->stream>>>(
            g->d->params + g->boff[l], dout, g->B, N, g->lr);
        cudaCheck(cudaGetLastError());
        if (l > 0) {
            const int64_t n = (int64_t)g->B * K;
            gen_relu_back_kernel<<<mnist_fz_blocks(n, GEN_THREADS), GEN_THREADS, 0, g->stream>>>(g->dact[l], g->act[l],
                                                                                                 n);
            cudaCheck(cudaGetLastError());
        }
    }
}

static void gen_eval(const MnistGen *g, int epoch) {
    if (g->n_test > 0) gen_forward(g, g->tact, g->n_test);
    gen_eval_kernel<<<1, GEN_THREADS, 0, g->stream>>>(g->d->test_loss, g->d->test_acc, g->tact[g->L],
                                                     g->d->test_labels, g->n_test, g->C, epoch);
    cudaCheck(cudaGetLastError());
}

static int mnist_train_generic(const MnistConfig *cfg, const MnistData *data, MnistResult *out, double setup_start) {
    const int L = cfg->n_layers, B = cfg->batch, epochs = cfg->epochs;
    const int P = cfg->sizes[0], C = cfg->sizes[L];
    const int n_train = data->n_train, n_test = data->n_test;
    const int steps = mnist_steps_per_epoch(cfg, n_train);
    const int64_t n_params = mnist_param_count(cfg), total_steps = (int64_t)epochs * steps;

    MnistFzData d;
    MnistGen g;
    memset(&g, 0, sizeof g);
    g.cfg = cfg;
    g.L = L;
    g.B = B;
    g.P = P;
    g.C = C;
    g.n_test = n_test;
    g.lr = cfg->lr;
    g.neg_lr = -cfg->lr;
    g.d = &d;
    for (int l = 0; l < L; l++) {
        g.woff[l] = mnist_weight_offset(cfg, l);
        g.boff[l] = mnist_bias_offset(cfg, l);
    }
    cudaCheck(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
    cublasCheck(cublasCreate(&g.blas));
    cublasCheck(cublasSetStream(g.blas, g.stream));
    cublasCheck(cublasSetMathMode(g.blas, cfg->precision == PRECISION_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                           : CUBLAS_DEFAULT_MATH));
    mnist_fz_alloc_data(&d, n_params, n_train, n_test, P, epochs, total_steps);
    for (int l = 0; l <= L; l++) {
        g.act[l] = (float *)mnist_fz_zeros((size_t)B * cfg->sizes[l] * sizeof(float));
        g.dact[l] = l > 0 ? (float *)mnist_fz_zeros((size_t)B * cfg->sizes[l] * sizeof(float)) : NULL;
        g.tact[l] = (float *)mnist_fz_zeros((size_t)n_test * cfg->sizes[l] * sizeof(float));
    }
    g.blab = (int *)mnist_fz_zeros((size_t)(B > 0 ? B : 1) * sizeof(int));
    cudaCheck(cudaDeviceSynchronize());

    TrainClock clock;
    train_clock_init(&clock, epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start;

    cudaStream_t stream = g.stream;
    train_clock_e2e_start(&clock, stream);
    mnist_fz_check_order(data, epochs, steps, B);
    TIMED_PHASE(&clock, PHASE_H2D, stream) {
        mnist_fz_upload(&d, data, n_params, P, epochs, stream);
        const int64_t n = (int64_t)n_test * P;
        if (n > 0) {
            gen_pixels_kernel<<<mnist_fz_blocks(n, GEN_THREADS), GEN_THREADS, 0, stream>>>(g.tact[0], d.test_pixels, n);
            cudaCheck(cudaGetLastError());
        }
    }
    train_clock_loop_start(&clock, stream);
    for (int epoch = 0; epoch < epochs; epoch++) {
        for (int step = 0; step < steps; step++) {
            const int64_t slot = (int64_t)epoch * steps + step;
            if (cfg->breakdown) {
                TIMED_PHASE(&clock, PHASE_H2D, stream) gen_gather(&g, epoch, step, n_train);
                TIMED_PHASE(&clock, PHASE_FORWARD, stream) gen_forward(&g, g.act, B);
                TIMED_PHASE(&clock, PHASE_LOSS, stream) gen_loss(&g, slot);
                TIMED_PHASE(&clock, PHASE_BACKWARD, stream) gen_backward(&g);
            } else {
                gen_gather(&g, epoch, step, n_train);
                gen_forward(&g, g.act, B);
                gen_loss(&g, slot);
                gen_backward(&g);
            }
        }
        TIMED_PHASE(&clock, PHASE_EVAL, stream) gen_eval(&g, epoch);
        train_clock_epoch_end(&clock, epoch, stream);
    }
    TIMED_PHASE(&clock, PHASE_D2H, stream) mnist_fz_download(&d, out, n_params, epochs, total_steps, stream);
    train_clock_e2e_stop(&clock, stream);
    train_clock_finish(&clock, &out->timing);

    for (int l = 0; l <= L; l++) {
        cudaCheck(cudaFree(g.act[l]));
        if (g.dact[l]) cudaCheck(cudaFree(g.dact[l]));
        cudaCheck(cudaFree(g.tact[l]));
    }
    cudaCheck(cudaFree(g.blab));
    mnist_fz_free_data(&d);
    cublasCheck(cublasDestroy(g.blas));
    cudaCheck(cudaStreamDestroy(g.stream));
    return 0;
}

// ---------------------------------------------------------------------------------------------------
// fused path: host side

static int mnist_fz_supported(const MnistConfig *cfg, size_t *smem_bytes, const char **why) {
    if (cfg->precision != PRECISION_FP32) { *why = "its GEMMs are fp32 only"; return 0; }
    if (cfg->n_layers != 2) { *why = "it holds exactly one hidden layer"; return 0; }
    const int P = cfg->sizes[0], H = cfg->sizes[1], C = cfg->sizes[2], B = cfg->batch;
    if (P != FZ_P) { *why = "it is built for 784 input pixels"; return 0; }
    if (C != MNIST_CLASSES) { *why = "it is built for 10 classes"; return 0; }
    if (H < 1 || B < 1 || B > FZ_MAX_B) { *why = "hidden size or batch out of range (batch 1..128)"; return 0; }
    const FzLayout L = fz_layout(B);
    int dev = 0, coop = 0, smem_optin = 0, sms = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    cudaCheck(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    if (!coop) { *why = "this GPU has no cooperative launch"; return 0; }
    if (L.total > smem_optin) { *why = "two batches of pixels do not fit in shared memory"; return 0; }
    cudaCheck(cudaFuncSetAttribute((const void *)fz_epoch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L.total));
    int per_sm = 0;
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fz_epoch_kernel, FZ_THREADS, (size_t)L.total));
    if ((int64_t)per_sm * sms < H) { *why = "more hidden units than co-resident blocks"; return 0; }
    *smem_bytes = (size_t)L.total;
    return 1;
}

static int mnist_train_fused(const MnistConfig *cfg, const MnistData *data, MnistResult *out, double setup_start,
                             size_t smem_bytes) {
    const int B = cfg->batch, epochs = cfg->epochs;
    const int P = cfg->sizes[0], H = cfg->sizes[1];
    const int n_train = data->n_train, n_test = data->n_test;
    const int steps = mnist_steps_per_epoch(cfg, n_train);
    const int64_t n_params = mnist_param_count(cfg), total_steps = (int64_t)epochs * steps;
    const int ev_blocks = (n_test + EV_ROWS - 1) / EV_ROWS;

    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    MnistFzData d;
    mnist_fz_alloc_data(&d, n_params, n_train, n_test, P, epochs, total_steps);
    // 3 steps x FZ_REPL copies of the (B, FZ_LSTRIDE) logit accumulator and the barrier counter, zero once:
    // the kernel keeps both consistent from one epoch to the next (the step index runs across epochs)
    const size_t lacc_bytes = (size_t)3 * FZ_REPL * B * FZ_LSTRIDE * sizeof(float);
    float *lacc = (float *)mnist_fz_zeros(lacc_bytes);
    unsigned *bar = (unsigned *)mnist_fz_zeros(256);
    float *part_loss = (float *)mnist_fz_zeros((size_t)(ev_blocks > 0 ? ev_blocks : 1) * sizeof(float));
    int *part_correct = (int *)mnist_fz_zeros((size_t)(ev_blocks > 0 ? ev_blocks : 1) * sizeof(int));
    // load the kernels now, so that lazy module loading does not land inside e2e (nothing runs)
    cudaFuncAttributes attr;
    cudaCheck(cudaFuncGetAttributes(&attr, (const void *)fz_epoch_kernel));
    cudaCheck(cudaFuncGetAttributes(&attr, (const void *)fz_eval_kernel));
    cudaCheck(cudaFuncGetAttributes(&attr, (const void *)fz_eval_finish_kernel));
    cudaCheck(cudaDeviceSynchronize());

    FzArgs a;
    memset(&a, 0, sizeof a);
    a.params = d.params;
    a.pixels = d.train_pixels;
    a.labels = d.train_labels;
    a.order = d.order;
    a.lacc = lacc;
    a.bar = bar;
    a.step_loss = d.step_loss;
    a.w0_off = mnist_weight_offset(cfg, 0);
    a.b0_off = mnist_bias_offset(cfg, 0);
    a.w1_off = mnist_weight_offset(cfg, 1);
    a.b1_off = mnist_bias_offset(cfg, 1);
    a.batch = B;
    a.hidden = H;
    a.steps = steps;
    a.n_train = n_train;
    a.lr = cfg->lr;

    TrainClock clock;
    train_clock_init(&clock, epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start;

    train_clock_e2e_start(&clock, stream);
    mnist_fz_check_order(data, epochs, steps, B);
    TIMED_PHASE(&clock, PHASE_H2D, stream) mnist_fz_upload(&d, data, n_params, P, epochs, stream);
    train_clock_loop_start(&clock, stream);

    for (int epoch = 0; epoch < epochs; epoch++) {
        if (steps > 0) {
            // forward, loss, backward and update are one kernel: --breakdown reports it all as "forward"
            TIMED_PHASE(&clock, PHASE_FORWARD, stream) {
                a.epoch = epoch;
                a.g0 = (int64_t)epoch * steps;
                void *args[] = {(void *)&a};
                cudaCheck(cudaLaunchCooperativeKernel((const void *)fz_epoch_kernel, dim3(H), dim3(FZ_THREADS), args,
                                                      smem_bytes, stream));
            }
        }
        TIMED_PHASE(&clock, PHASE_EVAL, stream) {
            if (ev_blocks > 0) {
                fz_eval_kernel<<<ev_blocks, EV_THREADS, 0, stream>>>(d.params, d.test_pixels, d.test_labels, n_test, P,
                                                                     H, a.w0_off, a.b0_off, a.w1_off, a.b1_off,
                                                                     part_loss, part_correct);
                cudaCheck(cudaGetLastError());
            }
            fz_eval_finish_kernel<<<1, EV_FINISH_THREADS, 0, stream>>>(part_loss, part_correct, ev_blocks, n_test,
                                                                       d.test_loss, d.test_acc, epoch);
            cudaCheck(cudaGetLastError());
        }
        train_clock_epoch_end(&clock, epoch, stream);
    }

    TIMED_PHASE(&clock, PHASE_D2H, stream) mnist_fz_download(&d, out, n_params, epochs, total_steps, stream);
    train_clock_e2e_stop(&clock, stream);
    train_clock_finish(&clock, &out->timing);

    cudaCheck(cudaFree(lacc));
    cudaCheck(cudaFree(bar));
    cudaCheck(cudaFree(part_loss));
    cudaCheck(cudaFree(part_correct));
    mnist_fz_free_data(&d);
    cudaCheck(cudaStreamDestroy(stream));
    return 0;
}

int train_mnist(const MnistConfig *cfg, const MnistData *data, MnistResult *out) {
    const double setup_start = host_ms();
    size_t smem_bytes = 0;
    const char *why = "";
    if (mnist_fz_supported(cfg, &smem_bytes, &why)) return mnist_train_fused(cfg, data, out, setup_start, smem_bytes);
    fprintf(stderr, "note: the fused kernel cannot train this model (%s); running the cuBLAS path\n", why);
    return mnist_train_generic(cfg, data, out, setup_start);
}
