// mnist.cu: the stage-02 MNIST trainer, loop round 6.
//
// Rounds 1-3: a cuBLAS graph, then one cooperative persistent kernel per epoch: block j owns hidden unit
// j (its column of W0, b0[j] and its row of W1 live in shared memory), the logits cross blocks through
// fp32 atomics into 4 copies of a triple-buffered accumulator, one grid-wide barrier per step. Round 4:
// padded sparse rows (per nonzero pixel a u16 slot offset and the u8 pixel byte, rows padded to 16 entries
// with zero bytes at 16 dummy slots), a per-epoch plan kernel, cp.async double buffering of the batch, a
// forward over 8 rows per warp reduced by a transposed butterfly, a byte b entering the sums as b (the
// 1/255 applied once per sum), the test set uploaded on a second stream while epoch 0 trains. Round 5: the
// grid barrier arrives with one red.release.gpu, vector logit atomics, dh computed in the softmax phase.
//
// Round 6 takes the forward off the chain of dependent phases. With b' the bytes of a row of batch s + 1,
//     sum_p b'[p] W0(s+1)[p] = sum_p b'[p] W0(s)[p] + (-lr/255) sum_r G_s[r][r'] dh(s)[r],
//     G_s[r][r'] = sum_p b(batch s, row r)[p] * b(batch s + 1, row r')[p],
// and G_s depends on the data alone. So:
//   * a per-epoch kernel computes the Gram matrices G_s exactly (dp4a on the bytes, u32, stored as float);
//   * the sparse forward of batch s + 1 against W0(s) (the "partial") runs inside the grid-barrier wait of
//     step s, where the block used to idle; after the softmax only the 128 x 128 mat-vec G_s dh(s) remains
//     before the logit atomics of step s + 1 (the first step of an epoch is a direct forward, as before);
//   * the backward is dense: a thread owns 4 pixels and walks the rows with dh != 0, reading their bytes
//     from the dense training set in L2 (each block warms its share of a batch a step ahead). No private
//     dW copies, no zeroing, no 16-way sum, no conflicted scatter; it also runs in the barrier wait (of the
//     next step), and the 51 KB of shared memory it frees go to the Gram rows of the step (64 KB, the
//     rows of the active batch rows copied);
//   * the next epoch's plan and Gram matrices are computed on the second stream while the eval runs.
//
// Any shape the fused kernel cannot hold (more layers, an input other than 784 pixels, a batch over 128,
// more than 128 hidden units) runs a plain cuBLAS path, with a note on stderr.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>
#include <utility>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "check.h"
#include "host.h"
#include "timing.h"
#include "trainer.h"

const char *const MNIST_VARIANTS[] = {"fused", NULL};
const char *const MNIST_PRECISIONS[] = {"fp32", NULL};

// ---------------------------------------------------------------------------------------------------
// fused path: constants and device helpers

#define FZ_P 784                                    // input pixels
#define FZ_C 10                                     // classes
#define FZ_THREADS 512
#define FZ_WARPS (FZ_THREADS / 32)
#define FZ_MAX_B 128
#define FZ_MAX_H 128
#define FZ_ROWS_PER_WARP (FZ_MAX_B / FZ_WARPS)      // 8 batch rows per warp in the forward
#define FZ_WPAD 800                                 // a W0 column, then 16 dummy slots (always 0)
#define FZ_REPL 4                                   // copies of the logit accumulator
#define FZ_LSTRIDE 12                               // floats per accumulator row
#define FZ_LSLOT (FZ_REPL * FZ_MAX_B * FZ_LSTRIDE)  // floats per step slot (3 slots)
#define FZ_DSTRIDE 11                               // dlogits row stride in shared memory (odd)
#define FZ_G_FLOATS (FZ_MAX_B * FZ_MAX_B)           // one Gram matrix (rows of batch s x rows of batch s + 1)
#define FZ_G_BYTES (FZ_G_FLOATS * 4)                // its copy in shared memory
#define FZ_BK_U 32                                  // backward: rows per thread per pass (loads in flight)
#define FZ_ARRIVE_TID (FZ_THREADS - 32)             // lane 0 of the last warp arrives at and polls the barrier
#define FZ_FULL 0xffffffffu
#define FZ_INV255 (1.0f / 255.0f)
#define FZ_DUMMY2 0x0C400C40u                       // an entry pair naming dummy slot 784 (byte offset 3136) twice

#define GR_THREADS 256                              // Gram kernel: 32 rows x 128 rows per block
#define GR_KW 16                                    // u32 words (64 pixels) per k-tile
#define GR_AS (32 + 4)                              // row stride of the A tile (words)
#define GR_BS (FZ_MAX_B + 4)                        // row stride of the B tile (words)

#define EV_ROWS 64  // test images per eval block
#define EV_THREADS 256
#define EV_KC 16  // pixels per k-tile
#define EV_XS (EV_ROWS + 4)
#define EV_HS (FZ_MAX_H + 1)
#define EV_FINISH_THREADS 256

#define GEN_THREADS 256

// byte 0 / byte 1 of v as an exact float: the bits 0x4B0000bb are the float 2^23 + b
static __device__ __forceinline__ float fz_byte0(uint32_t v) {
    return __int_as_float((int)__byte_perm(v, 0x4B000000u, 0x7440u)) - 8388608.0f;
}
static __device__ __forceinline__ float fz_byte1(uint32_t v) {
    return __int_as_float((int)__byte_perm(v, 0x4B000000u, 0x7441u)) - 8388608.0f;
}
static __device__ __forceinline__ float fz_byte2(uint32_t v) {
    return __int_as_float((int)__byte_perm(v, 0x4B000000u, 0x7442u)) - 8388608.0f;
}
static __device__ __forceinline__ float fz_byte3(uint32_t v) {
    return __int_as_float((int)__byte_perm(v, 0x4B000000u, 0x7443u)) - 8388608.0f;
}
static __device__ __forceinline__ float fz_ld_off(const float *base, uint32_t off) {
    return *(const float *)((const char *)base + off);
}
static __device__ __forceinline__ void fz_cp16(void *dst, const void *src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned saddr = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(src) : "memory");
#else
    *(uint4 *)dst = *(const uint4 *)src;
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
static __device__ __forceinline__ unsigned fz_ld_acquire(const unsigned *p) {
    unsigned v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
#else
    v = *(volatile const unsigned *)p;
    __threadfence();
#endif
    return v;
}
// Arrive at the grid barrier: one release reduction. __syncthreads before it makes every thread's atomics
// and stores of the step happen-before it, and release is cumulative, so a block that acquires the count
// sees them (the same pattern as CUTLASS's generic barrier).
static __device__ __forceinline__ void fz_red_release(unsigned *p, unsigned v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
#else
    __threadfence();
    atomicAdd(p, v);
#endif
}

// Vector fp32 atomic adds: atomicAdd(float4 *, float4) / (float2 *, float2) exist for sm_90 in recent
// toolkits (atomic per element, as the scalar ones). Whether the toolkit declares them is tested at
// compile time; without them the adds are scalar.
namespace {
template <typename P, typename V, typename = void>
struct FzHasVecAtomic : std::false_type {};
template <typename P, typename V>
struct FzHasVecAtomic<P, V, std::void_t<decltype(atomicAdd(std::declval<P>(), std::declval<V>()))>>
    : std::true_type {};
}  // namespace

static __device__ __forceinline__ void fz_red_scalar(float *dst, float4 v) {
    atomicAdd(dst, v.x);
    atomicAdd(dst + 1, v.y);
    atomicAdd(dst + 2, v.z);
    atomicAdd(dst + 3, v.w);
}
static __device__ __forceinline__ void fz_red_scalar(float *dst, float2 v) {
    atomicAdd(dst, v.x);
    atomicAdd(dst + 1, v.y);
}
template <typename V>
static __device__ __forceinline__ void fz_red_vec(float *dst, V v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (FzHasVecAtomic<V *, V>::value) {
        atomicAdd(reinterpret_cast<V *>(dst), v);
    } else {
        fz_red_scalar(dst, v);
    }
#else
    fz_red_scalar(dst, v);
#endif
}

// a hint: bring the 128-byte line of p into L2
static __device__ __forceinline__ void fz_prefetch_l2(const void *p) {
#if defined(__CUDA_ARCH__)
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
#endif
}

// c + the dot product of the 4 bytes of a and of b (exact in u32: at most 784 * 255 * 255 over a row)
static __device__ __forceinline__ unsigned fz_dp4(unsigned a, unsigned b, unsigned c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
    return __dp4a(a, b, c);
#else
    return c + (a & 0xFFu) * (b & 0xFFu) + ((a >> 8) & 0xFFu) * ((b >> 8) & 0xFFu) +
           ((a >> 16) & 0xFFu) * ((b >> 16) & 0xFFu) + (a >> 24) * (b >> 24);
#endif
}

// ---------------------------------------------------------------------------------------------------
// fused path: sparse rows and the per-epoch plan

// nonzero bytes of a 16-byte chunk
static __device__ __forceinline__ int fz_nz16(uint4 c) {
    const unsigned w[4] = {c.x, c.y, c.z, c.w};
    int n = 0;
#pragma unroll
    for (int k = 0; k < 16; ++k) n += ((w[k >> 2] >> (8 * (k & 3))) & 0xFFu) != 0u ? 1 : 0;
    return n;
}
// the entries of a 16-byte chunk of pixels p0.., in pixel order, from position pos
static __device__ __forceinline__ void fz_emit16(uint4 c, int p0, int pos, uint16_t *ri, uint8_t *rv) {
    const unsigned w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int k = 0; k < 16; ++k) {
        const unsigned b = (w[k >> 2] >> (8 * (k & 3))) & 0xFFu;
        if (b != 0u) {
            ri[pos] = (uint16_t)((p0 + k) * 4);
            rv[pos] = (uint8_t)b;
            ++pos;
        }
    }
}

// A warp per image: row r's entries at cidx/cval + r * 784 (fixed stride), its padded length in clen[r].
// Padding entry k (k < 16) has byte 0 and points at dummy slot 784 + k, so the entries of a row always
// name distinct slots (a pair past a row's end reads a zero byte at a dummy slot).
static __global__ void __launch_bounds__(256) fz_csr_kernel(const uint8_t *__restrict__ pixels, int n,
                                                            uint16_t *__restrict__ cidx, uint8_t *__restrict__ cval,
                                                            int *__restrict__ clen) {
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= n) return;  // warp-uniform
    const uint4 *src = (const uint4 *)(pixels + row * FZ_P);
    const uint4 c0 = src[lane];
    const uint4 c1 = lane < FZ_P / 16 - 32 ? src[32 + lane] : make_uint4(0u, 0u, 0u, 0u);
    const int n0 = fz_nz16(c0), n1 = fz_nz16(c1);
    int s0 = n0, s1 = n1;  // inclusive scans over the lanes
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int t0 = __shfl_up_sync(FZ_FULL, s0, o), t1 = __shfl_up_sync(FZ_FULL, s1, o);
        if (lane >= o) {
            s0 += t0;
            s1 += t1;
        }
    }
    const int tot0 = __shfl_sync(FZ_FULL, s0, 31), tot1 = __shfl_sync(FZ_FULL, s1, 31);
    uint16_t *ri = cidx + row * FZ_P;
    uint8_t *rv = cval + row * FZ_P;
    fz_emit16(c0, 16 * lane, s0 - n0, ri, rv);
    if (lane < FZ_P / 16 - 32) fz_emit16(c1, 16 * (32 + lane), tot0 + s1 - n1, ri, rv);
    const int nnz = tot0 + tot1, len = (nnz + 15) & ~15;
    for (int k = nnz + lane; k < len; k += 32) {
        ri[k] = (uint16_t)((FZ_P + k - nnz) * 4);
        rv[k] = 0;
    }
    if (lane == 0) clen[row] = len;
}

// A block per step: plan[s * B + i] = (row, offset of the row in the batch's shared buffer, length, label)
static __global__ void __launch_bounds__(FZ_MAX_B) fz_plan_kernel(const int32_t *__restrict__ order,
                                                                  const int *__restrict__ clen,
                                                                  const uint8_t *__restrict__ labels, int n_train,
                                                                  int B, int4 *__restrict__ plan) {
    __shared__ int wsum[FZ_MAX_B / 32];
    const int s = blockIdx.x, i = threadIdx.x, lane = i & 31, w = i >> 5;
    int row = 0, len = 0, lab = 0;
    if (i < B) {
        row = order[(size_t)s * B + i];
        row = row < 0 ? 0 : (row >= n_train ? n_train - 1 : row);
        len = clen[row];
        lab = labels[row];
    }
    int v = len;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int t = __shfl_up_sync(FZ_FULL, v, o);
        if (lane >= o) v += t;
    }
    if (lane == 31) wsum[w] = v;
    __syncthreads();
    int off = v - len;
    for (int k = 0; k < w; ++k) off += wsum[k];
    if (i < B) plan[(size_t)s * B + i] = make_int4(row, off, len, lab);
}

// Issue the cp.async copies of one batch (rows first, first + stride, ..., a warp per row) and record where
// each row's entries will be: in the shared buffer when the row fits, else in global memory.
static __device__ __forceinline__ void fz_prefetch(const int4 *meta, const uint32_t **pi, const uint16_t **pv,
                                                   uint16_t *bi, uint8_t *bv, const uint16_t *cidx,
                                                   const uint8_t *cval, int B, int cap, int first, int stride,
                                                   int lane) {
    for (int r = first; r < B; r += stride) {
        const int4 m = meta[r];  // row, offset, length, label
        const uint16_t *gi = cidx + (size_t)m.x * FZ_P;
        const uint8_t *gv = cval + (size_t)m.x * FZ_P;
        const bool fits = m.y + m.z <= cap;
        if (fits) {
            const int ci = m.z >> 3, cv = m.z >> 4;  // 16-byte chunks of indices, of values
            uint16_t *di = bi + m.y;
            uint8_t *dv = bv + m.y;
            for (int k = lane; k < ci + cv; k += 32) {
                if (k < ci)
                    fz_cp16(di + 8 * k, gi + 8 * k);
                else
                    fz_cp16(dv + 16 * (k - ci), gv + 16 * (k - ci));
            }
        }
        if (lane == 0) {
            pi[r] = fits ? (const uint32_t *)(bi + m.y) : (const uint32_t *)gi;
            pv[r] = fits ? (const uint16_t *)(bv + m.y) : (const uint16_t *)gv;
        }
    }
}

// The Gram matrices of one epoch: gram[s][r][r'] = sum_p px(batch s, row r)[p] * px(batch s + 1, row r')[p]
// for s < steps - 1, exact in u32 (dp4a on the bytes) and stored as float (exact below 2^24); rows or
// columns past the batch are 0. Block (s, qy) computes the rows r = 32 qy .. 32 qy + 31 against all r',
// a thread a 4 x 4 tile; a k-tile whose 160 rows are all zero (the image borders) is skipped.
static __global__ void __launch_bounds__(GR_THREADS) fz_gram_kernel(const uint8_t *__restrict__ pixels,
                                                                    const int4 *__restrict__ plan, int B,
                                                                    float *__restrict__ gram) {
    __shared__ __align__(16) unsigned gs_a[GR_KW * GR_AS];  // [kk][row of batch s]
    __shared__ __align__(16) unsigned gs_b[GR_KW * GR_BS];  // [kk][row of batch s + 1]
    __shared__ const unsigned *gs_arow[32];
    __shared__ const unsigned *gs_brow[FZ_MAX_B];
    const int s = blockIdx.x, qy = blockIdx.y, tid = threadIdx.x;
    if (tid < 32) {
        const int r = 32 * qy + tid;
        gs_arow[tid] = r < B ? (const unsigned *)(pixels + (size_t)plan[(size_t)s * B + r].x * FZ_P) : NULL;
    }
    if (tid < FZ_MAX_B)
        gs_brow[tid] = tid < B ? (const unsigned *)(pixels + (size_t)plan[(size_t)(s + 1) * B + tid].x * FZ_P) : NULL;
    __syncthreads();
    const int ty = tid >> 5, tx = tid & 31;
    unsigned acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][c] = 0u;

    for (int k0 = 0; k0 < FZ_P / 4; k0 += GR_KW) {
        unsigned any = 0u;
#pragma unroll
        for (int u = 0; u < (32 * GR_KW) / GR_THREADS; ++u) {
            const int e = tid + GR_THREADS * u, i = e >> 4, kk = e & 15, k = k0 + kk;
            const unsigned *p = gs_arow[i];
            const unsigned v = (p != NULL && k < FZ_P / 4) ? __ldg(p + k) : 0u;
            gs_a[kk * GR_AS + i] = v;
            any |= v;
        }
#pragma unroll
        for (int u = 0; u < (FZ_MAX_B * GR_KW) / GR_THREADS; ++u) {
            const int e = tid + GR_THREADS * u, i = e >> 4, kk = e & 15, k = k0 + kk;
            const unsigned *p = gs_brow[i];
            const unsigned v = (p != NULL && k < FZ_P / 4) ? __ldg(p + k) : 0u;
            gs_b[kk * GR_BS + i] = v;
            any |= v;
        }
        if (__syncthreads_or(any != 0u)) {
#pragma unroll
            for (int kk = 0; kk < GR_KW; ++kk) {
                const uint4 av = *(const uint4 *)(gs_a + kk * GR_AS + 4 * ty);
                const uint4 bv = *(const uint4 *)(gs_b + kk * GR_BS + 4 * tx);
                const unsigned ar[4] = {av.x, av.y, av.z, av.w};
                const unsigned br[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int c = 0; c < 4; ++c) acc[i][c] = fz_dp4(ar[i], br[c], acc[i][c]);
            }
        }
        __syncthreads();
    }
    float *dst = gram + (size_t)s * FZ_G_FLOATS;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = 32 * qy + 4 * ty + i;
        *(float4 *)(dst + (size_t)r * FZ_MAX_B + 4 * tx) =
            make_float4((float)acc[i][0], (float)acc[i][1], (float)acc[i][2], (float)acc[i][3]);
    }
}

// ---------------------------------------------------------------------------------------------------
// fused path: one cooperative kernel per epoch

typedef struct {
    float *params;
    const uint16_t *cidx;
    const uint8_t *cval;
    const uint8_t *pixels;  // the dense training bytes: the backward reads the rows with dh != 0
    const int4 *plan;
    const float *gram;      // [steps - 1][FZ_MAX_B][FZ_MAX_B], from fz_gram_kernel
    float *lacc;            // 3 step slots x FZ_REPL copies x FZ_MAX_B rows x FZ_LSTRIDE
    unsigned *bar;
    float *step_loss;
    long long w0_off, b0_off, w1_off, b1_off;
    long long g0;  // global index of the epoch's first step: the barrier counter and the slots run on
    int batch, hidden, steps, cap;
    float lr, nlr255;
} FzArgs;

// The partial forward of one batch: s_part[r] = sum over row r's entries of b * W0[p][j] (the W0 column in
// s_w0 as it is now). Warp w owns rows w + 16k (k < 8); a lane past a row's end reads the zero entry (slot
// 784, byte 0), so the loads of the 8 rows issue together; a transposed butterfly reduces the 8 row sums.
static __device__ __forceinline__ void fz_forward_part(const float *s_w0, const int4 *meta, const uint32_t *const *pis,
                                                       const uint16_t *const *pvs, float *s_part, int B, int warp,
                                                       int lane) {
    const uint32_t *ip[FZ_ROWS_PER_WARP];
    const uint16_t *vp[FZ_ROWS_PER_WARP];
    int np[FZ_ROWS_PER_WARP];
    float acc[FZ_ROWS_PER_WARP];
    int maxnp = 0;
#pragma unroll
    for (int k = 0; k < FZ_ROWS_PER_WARP; ++k) {
        const int r = warp + FZ_WARPS * k;
        acc[k] = 0.0f;
        if (r < B) {
            ip[k] = pis[r];
            vp[k] = pvs[r];
            np[k] = meta[r].z >> 1;  // pairs of entries
        } else {
            ip[k] = NULL;
            vp[k] = NULL;
            np[k] = 0;
        }
        maxnp = max(maxnp, np[k]);
    }
    for (int e = lane; e < maxnp; e += 32) {
#pragma unroll
        for (int k = 0; k < FZ_ROWS_PER_WARP; ++k) {
            const bool ok = e < np[k];
            const uint32_t ii = ok ? ip[k][e] : FZ_DUMMY2;
            const uint32_t vv = ok ? (uint32_t)vp[k][e] : 0u;
            acc[k] = fmaf(fz_byte0(vv), fz_ld_off(s_w0, ii & 0xFFFFu), acc[k]);
            acc[k] = fmaf(fz_byte1(vv), fz_ld_off(s_w0, ii >> 16), acc[k]);
        }
    }
    // transposed butterfly: 8 row sums over 32 lanes in 9 shuffles; lane l ends with the row
    // kk = 4 * bit4(l) + 2 * bit3(l) + bit2(l), the 4 lanes of a group bit-identical
    const bool b16 = (lane & 16) != 0, b8 = (lane & 8) != 0, b4 = (lane & 4) != 0;
    float q4[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float send = b16 ? acc[k] : acc[k + 4];
        const float keep = b16 ? acc[k + 4] : acc[k];
        q4[k] = keep + __shfl_xor_sync(FZ_FULL, send, 16);
    }
    float q2[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const float send = b8 ? q4[k] : q4[k + 2];
        const float keep = b8 ? q4[k + 2] : q4[k];
        q2[k] = keep + __shfl_xor_sync(FZ_FULL, send, 8);
    }
    float t;
    {
        const float send = b4 ? q2[0] : q2[1];
        const float keep = b4 ? q2[1] : q2[0];
        t = keep + __shfl_xor_sync(FZ_FULL, send, 4);
    }
    t += __shfl_xor_sync(FZ_FULL, t, 2);
    t += __shfl_xor_sync(FZ_FULL, t, 1);
    const int kk = (b16 ? 4 : 0) + (b8 ? 2 : 0) + (b4 ? 1 : 0);
    const int r = warp + FZ_WARPS * kk;
    if (r < B && (lane & 3) == 0) s_part[r] = t;
}

// The dense backward of one step and its W0 update: W0[p][j] += (-lr/255) * sum_k b(row k)[p] * dh[k] over
// the nact listed rows (training row s_arow[k], dh s_adh[k]). Thread group g (threads 256 g ..) takes the
// list entries k = g, g + 2, ..., a thread 4 pixels (one u32 of bytes, read from L2); group 1 hands its sums
// to group 0 through shared memory. Called by every thread of the block (two block barriers inside).
static __device__ __forceinline__ void fz_backward_dense(float *s_w0, float4 *s_bsum, const int *s_arow,
                                                         const float *s_adh, int nact,
                                                         const uint8_t *__restrict__ pixels, float nlr255, int tid) {
    const int grp = tid >> 8, w = tid & 255;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (w < FZ_P / 4) {
        const unsigned int *base = (const unsigned int *)pixels + w;
        for (int k0 = grp; k0 < nact; k0 += 2 * FZ_BK_U) {
            uint32_t v[FZ_BK_U];
#pragma unroll
            for (int u = 0; u < FZ_BK_U; ++u) {
                const int k = k0 + 2 * u;
                v[u] = k < nact ? __ldg(base + (size_t)s_arow[k] * (FZ_P / 4)) : 0u;
            }
#pragma unroll
            for (int u = 0; u < FZ_BK_U; ++u) {
                const int k = k0 + 2 * u;
                if (k < nact) {
                    const float d = s_adh[k];
                    acc.x = fmaf(fz_byte0(v[u]), d, acc.x);
                    acc.y = fmaf(fz_byte1(v[u]), d, acc.y);
                    acc.z = fmaf(fz_byte2(v[u]), d, acc.z);
                    acc.w = fmaf(fz_byte3(v[u]), d, acc.w);
                }
            }
        }
        if (grp == 1) s_bsum[w] = acc;
    }
    __syncthreads();
    if (grp == 0 && w < FZ_P / 4) {
        const float4 o = s_bsum[w];
        float4 wv = *(const float4 *)(s_w0 + 4 * w);
        wv.x = fmaf(nlr255, acc.x + o.x, wv.x);
        wv.y = fmaf(nlr255, acc.y + o.y, wv.y);
        wv.z = fmaf(nlr255, acc.z + o.z, wv.z);
        wv.w = fmaf(nlr255, acc.w + o.w, wv.w);
        *(float4 *)(s_w0 + 4 * w) = wv;
    }
    __syncthreads();
}

// Step s (g = a.g0 + s). Entering it: s_part = partial(s) = sum b * W0(s-1) over batch s (W0(0) for s = 0) and
// s_gq = G_{s-1} dh(s-1) (0 for s = 0), so that sum b * W0(s) = s_part + (-lr/255) s_gq.
//   [A] h(s), logit atomics -> block barrier -> arrive at the grid barrier (release)
//   [wait] issue batch s + 2 and the Gram rows of s (active rows); warm L2 with batch s's dense rows;
//          backward of s - 1 (W0(s-1) -> W0(s)); partial(s + 1) against W0(s); poll -> block barrier
//   [E] softmax, dlogits, dh(s) -> block barrier
//   [G] warps 0-7: s_gq = G_s dh(s); warps 8-15: dW1, db1, db0, the loss, the list of rows with dh != 0
//       -> block barrier
// Buffers: meta ring slot = batch & 3 (batches s-1 .. s+2 live), sparse buffer = batch & 1.
static __global__ void __launch_bounds__(FZ_THREADS, 1) fz_epoch_kernel(const FzArgs a) {
    extern __shared__ __align__(16) unsigned char fz_dyn[];
    __shared__ __align__(16) float s_w0[FZ_WPAD];
    __shared__ float s_d[FZ_MAX_B * FZ_DSTRIDE];
    __shared__ float s_h[FZ_MAX_B];
    __shared__ float s_dh[FZ_MAX_B];
    __shared__ float s_lrow[FZ_MAX_B];
    __shared__ float s_part[FZ_MAX_B];
    __shared__ float s_gq[2][FZ_MAX_B];
    __shared__ int s_arow[FZ_MAX_B];    // the step's rows with dh != 0: training row
    __shared__ float s_adh[FZ_MAX_B];   // and dh
    __shared__ __align__(16) float4 s_bsum[FZ_P / 4];
    __shared__ int4 s_meta[4][FZ_MAX_B];
    __shared__ const uint32_t *s_pi[2][FZ_MAX_B];
    __shared__ const uint16_t *s_pv[2][FZ_MAX_B];
    __shared__ __align__(16) float s_w1[FZ_LSTRIDE];  // W1[j][0..9], then 2 zeros
    __shared__ __align__(16) float s_b1[FZ_LSTRIDE];  // b1[0..9], then 2 zeros
    __shared__ float s_b0;
    __shared__ int s_nact;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int j = blockIdx.x;
    const int B = a.batch, H = a.hidden, steps = a.steps, cap = a.cap;
    const float lr = a.lr;
    const int copy = j % FZ_REPL;
    float *s_g = (float *)fz_dyn;                             // [FZ_MAX_B][FZ_MAX_B] Gram rows of the step
    uint16_t *s_bi = (uint16_t *)(fz_dyn + FZ_G_BYTES);       // [2][cap] entry indices
    uint8_t *s_bv = fz_dyn + FZ_G_BYTES + (size_t)4 * cap;    // [2][cap] entry bytes

    // prologue: this block's parameters, the plans of batches 0..2, batches 0 and 1, partial(0)
    for (int p = tid; p < FZ_WPAD; p += FZ_THREADS) s_w0[p] = p < FZ_P ? a.params[a.w0_off + (long long)p * H + j] : 0.0f;
    if (tid < FZ_LSTRIDE) {
        s_w1[tid] = tid < FZ_C ? a.params[a.w1_off + (long long)j * FZ_C + tid] : 0.0f;
        s_b1[tid] = tid < FZ_C ? a.params[a.b1_off + tid] : 0.0f;
    }
    if (tid == 0) {
        s_b0 = a.params[a.b0_off + j];
        s_nact = 0;
    }
    if (tid < FZ_MAX_B) {
        s_h[tid] = 0.0f;
        s_dh[tid] = 0.0f;
        s_part[tid] = 0.0f;
        s_gq[0][tid] = 0.0f;
        s_gq[1][tid] = 0.0f;
    }
    {
        float4 *g4 = (float4 *)s_g;  // rows never copied stay finite (they meet dh = 0)
        for (int k = tid; k < FZ_G_FLOATS / 4; k += FZ_THREADS) g4[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    if (tid < B) {
        for (int t = 0; t < 3 && t < steps; ++t) s_meta[t][tid] = a.plan[(size_t)t * B + tid];
    }
    __syncthreads();
    fz_prefetch(s_meta[0], s_pi[0], s_pv[0], s_bi, s_bv, a.cidx, a.cval, B, cap, warp, FZ_WARPS, lane);
    if (steps > 1)
        fz_prefetch(s_meta[1], s_pi[1], s_pv[1], s_bi + cap, s_bv + cap, a.cidx, a.cval, B, cap, warp, FZ_WARPS, lane);
    fz_cp_commit();
    fz_cp_wait_all();
    __syncthreads();
    fz_forward_part(s_w0, s_meta[0], s_pi[0], s_pv[0], s_part, B, warp, lane);
    __syncthreads();

    for (int s = 0; s < steps; ++s) {
        const long long g = a.g0 + s;
        float *lacc = a.lacc + (size_t)(g % 3) * FZ_LSLOT;
        int4 pl = make_int4(0, 0, 0, 0);  // the plan of batch s + 3, stored at the end of the step
        if (tid < B && s + 3 < steps) pl = a.plan[(size_t)(s + 3) * B + tid];

        // [A] h(s) = (sum b * W0(s)) / 255 + b0(s), 4 threads per row (bit-identical); relu(h) * W1[j][:] into
        // copy j % 4, row r: lane q = 0, 1 adds classes 4q..4q+3 (a float4 atomic), lane q = 2 classes 8, 9
        {
            const int r = tid >> 2, q = tid & 3;
            if (r < B) {
                const float t = fmaf(a.nlr255, s_gq[0][r] + s_gq[1][r], s_part[r]);
                const float h = fmaf(t, FZ_INV255, s_b0);
                if (q == 0) s_h[r] = h;
                if (h > 0.0f && q < 3) {
                    float *dst = lacc + ((size_t)copy * FZ_MAX_B + r) * FZ_LSTRIDE + 4 * q;
                    const float *w1 = s_w1 + 4 * q;
                    if (q < 2)
                        fz_red_vec(dst, make_float4(h * w1[0], h * w1[1], h * w1[2], h * w1[3]));
                    else
                        fz_red_vec(dst, make_float2(h * w1[0], h * w1[1]));
                }
            }
        }
        __syncthreads();  // s_h is complete and this block's atomics are issued
        if (tid == FZ_ARRIVE_TID) fz_red_release(a.bar, 1u);

        // [wait] everything here needs no other block. Warps 0..14 issue the copies: batch s + 2 into sparse
        // buffer s & 1 (its last reader was partial(s), in the previous wait) and the Gram rows G_s[r][:] of
        // the rows with h(s) > 0 (the others meet dh(s) = 0); the last warp arrived above and warms L2 with
        // this block's share of batch s's dense rows, which the backward of step s reads in the next wait.
        if (warp < FZ_WARPS - 1) {
            if (s + 2 < steps) {
                const int nb = s & 1;
                fz_prefetch(s_meta[(s + 2) & 3], s_pi[nb], s_pv[nb], s_bi + (size_t)nb * cap, s_bv + (size_t)nb * cap,
                            a.cidx, a.cval, B, cap, warp, FZ_WARPS - 1, lane);
            }
            if (s + 1 < steps) {
                const float *gsrc = a.gram + (size_t)s * FZ_G_FLOATS;
                for (int c = tid; c < FZ_G_FLOATS / 4; c += FZ_THREADS - 32)  // 16-byte chunks, 32 per row
                    if (s_h[c >> 5] > 0.0f) fz_cp16(s_g + 4 * c, gsrc + 4 * c);
            }
        } else {
            for (int r = j; r < B; r += H) {
                const uint8_t *row = a.pixels + (size_t)s_meta[s & 3][r].x * FZ_P;
                if (lane < 7)
                    fz_prefetch_l2(row + 128 * lane);
                else if (lane == 7)
                    fz_prefetch_l2(row + (FZ_P - 1));
            }
        }
        fz_cp_commit();
        if (s > 0) fz_backward_dense(s_w0, s_bsum, s_arow, s_adh, s_nact, a.pixels, a.nlr255, tid);
        if (s + 1 < steps) {
            const int cb = (s + 1) & 1;
            fz_forward_part(s_w0, s_meta[(s + 1) & 3], s_pi[cb], s_pv[cb], s_part, B, warp, lane);
        }
        if (tid == FZ_ARRIVE_TID) {
            const unsigned target = (unsigned)((g + 1) * (long long)H);
            while ((int)(fz_ld_acquire(a.bar) - target) < 0) {
            }
        }
        fz_cp_wait_all();
        __syncthreads();  // every block has arrived: slot g % 3 holds the step's logits; the copies have landed

        // every block has read the slot of step g - 1: zero this block's slice of it (it serves step g + 2)
        {
            float *zs = a.lacc + (size_t)((g + 2) % 3) * FZ_LSLOT;
            const int per = (FZ_LSLOT + H - 1) / H;
            const int zlo = j * per, zhi = min(zlo + per, FZ_LSLOT);
            for (int k = zlo + tid; k < zhi; k += FZ_THREADS) zs[k] = 0.0f;
        }
        // [E] softmax cross-entropy, dlogits and dh = relu'(h) * (dlogits . W1[j, :]): 4 threads per row, thread
        // q holding classes 4q..4q+3 (q = 2: 8 and 9, q = 3: none); the same in every block but dh
        {
            const int r = tid >> 2, q = tid & 3;
            const bool valid = r < B;
            const bool has = valid && q < 3;
            const int lab = valid ? s_meta[s & 3][r].w : -1;
            float z[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) z[u] = -INFINITY;
            if (has) {
                const float *src = lacc + (size_t)r * FZ_LSTRIDE + 4 * q;
                float4 v = __ldcg((const float4 *)src);
#pragma unroll
                for (int k = 1; k < FZ_REPL; ++k) {
                    const float4 w = __ldcg((const float4 *)(src + (size_t)k * FZ_MAX_B * FZ_LSTRIDE));
                    v.x += w.x;
                    v.y += w.y;
                    v.z += w.z;
                    v.w += w.w;
                }
                z[0] = v.x + s_b1[4 * q];
                z[1] = v.y + s_b1[4 * q + 1];
                if (q < 2) {
                    z[2] = v.z + s_b1[4 * q + 2];
                    z[3] = v.w + s_b1[4 * q + 3];
                }
            }
            float m = fmaxf(fmaxf(z[0], z[1]), fmaxf(z[2], z[3]));
            m = fmaxf(m, __shfl_xor_sync(FZ_FULL, m, 1));
            m = fmaxf(m, __shfl_xor_sync(FZ_FULL, m, 2));
            float ex[4];
            float se = 0.0f;
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                ex[u] = (has && 4 * q + u < FZ_C) ? expf(z[u] - m) : 0.0f;
                se += ex[u];
            }
            se += __shfl_xor_sync(FZ_FULL, se, 1);
            se += __shfl_xor_sync(FZ_FULL, se, 2);
            float dhp = 0.0f;
            if (has) {
                const float lse = m + logf(se);
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const int c = 4 * q + u;
                    if (c < FZ_C) {
                        const float p = ex[u] / se;
                        const float d = (p - (c == lab ? 1.0f : 0.0f)) / (float)B;
                        s_d[r * FZ_DSTRIDE + c] = d;
                        dhp = fmaf(d, s_w1[c], dhp);
                        if (c == lab) s_lrow[r] = lse - z[u];
                    }
                }
            }
            dhp += __shfl_xor_sync(FZ_FULL, dhp, 1);
            dhp += __shfl_xor_sync(FZ_FULL, dhp, 2);
            if (valid && q == 0) s_dh[r] = s_h[r] > 0.0f ? dhp : 0.0f;
        }
        __syncthreads();

        // [G] warps 0..7: s_gq[half][r'] = sum over the half's 64 rows r of G_s[r][r'] * dh(s)[r] (rows with
        // dh = 0 add an exact 0). Warps 8..15: dW1[j][c], db1[c] (a class per warp), then db0 and the loss;
        // the last warp lists the rows with dh != 0 for the backward of this step (in the next wait).
        if (warp < FZ_WARPS / 2) {
            if (s + 1 < steps) {
                const int rp = tid & (FZ_MAX_B - 1), half = tid >> 7;
                const int r0 = half * (FZ_MAX_B / 2);
                const float *gcol = s_g + rp;
                float acc = 0.0f;
#pragma unroll 8
                for (int r = r0; r < r0 + FZ_MAX_B / 2; ++r) acc = fmaf(gcol[r * FZ_MAX_B], s_dh[r], acc);
                s_gq[half][rp] = acc;
            }
        } else {
            for (int u = warp - FZ_WARPS / 2; u <= FZ_C; u += FZ_WARPS / 2) {
                float x = 0.0f, y = 0.0f;
                if (u < FZ_C) {  // x = dW1[j][u] = sum relu(h) * d, y = db1[u] = sum d
                    for (int r = lane; r < B; r += 32) {
                        const float d = s_d[r * FZ_DSTRIDE + u];
                        const float h = s_h[r];
                        y += d;
                        if (h > 0.0f) x = fmaf(h, d, x);
                    }
                } else {  // x = sum of the row losses, y = db0 = sum dh
                    for (int r = lane; r < B; r += 32) {
                        y += s_dh[r];
                        x += s_lrow[r];
                    }
                }
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) {
                    x += __shfl_xor_sync(FZ_FULL, x, o);
                    y += __shfl_xor_sync(FZ_FULL, y, o);
                }
                if (lane == 0) {
                    if (u < FZ_C) {
                        s_w1[u] = fmaf(-lr, x, s_w1[u]);
                        s_b1[u] = fmaf(-lr, y, s_b1[u]);
                    } else {
                        s_b0 = fmaf(-lr, y, s_b0);
                        if (j == 0) a.step_loss[g] = x / (float)B;
                    }
                }
            }
            if (warp == FZ_WARPS - 1) {
                const int4 *meta = s_meta[s & 3];
                int base = 0;
#pragma unroll
                for (int k = 0; k < FZ_MAX_B / 32; ++k) {
                    const int rr = lane + 32 * k;
                    const float dh = rr < B ? s_dh[rr] : 0.0f;
                    const bool act = dh != 0.0f;
                    const unsigned m = __ballot_sync(FZ_FULL, act);
                    if (act) {
                        const int pos = base + __popc(m & ((1u << lane) - 1u));
                        s_arow[pos] = meta[rr].x;
                        s_adh[pos] = dh;
                    }
                    base += __popc(m);
                }
                if (lane == 0) s_nact = base;
            }
        }
        if (tid < B && s + 3 < steps) s_meta[(s + 3) & 3][tid] = pl;  // slot of batch s - 1: its backward is done
        __syncthreads();
    }

    // epilogue: the backward of the last step, then this block's parameters back to global memory (block 0
    // writes b1)
    if (steps > 0) fz_backward_dense(s_w0, s_bsum, s_arow, s_adh, s_nact, a.pixels, a.nlr255, tid);
    for (int p = tid; p < FZ_P; p += FZ_THREADS) a.params[a.w0_off + (long long)p * H + j] = s_w0[p];
    if (tid < FZ_C) a.params[a.w1_off + (long long)j * FZ_C + tid] = s_w1[tid];
    if (tid == 0) a.params[a.b0_off + j] = s_b0;
    if (j == 0 && tid < FZ_C) a.params[a.b1_off + tid] = s_b1[tid];
}

// ---------------------------------------------------------------------------------------------------
// fused path: test evaluation, 64 images x up to 128 hidden units per block (thread: 8 images x 4 units)

static __global__ void __launch_bounds__(EV_THREADS)
    fz_eval_kernel(const float *__restrict__ params, const uint8_t *__restrict__ pixels,
                   const uint8_t *__restrict__ labels, int n_test, int H, long long w0_off, long long b0_off,
                   long long w1_off, long long b1_off, float *__restrict__ part_loss, int *__restrict__ part_correct) {
    __shared__ __align__(16) float ev_buf[EV_ROWS * EV_HS];  // k loop: Xs then Ws; after it: Hs
    __shared__ float ev_w1[FZ_MAX_H * FZ_C];
    __shared__ float ev_b0[FZ_MAX_H];
    __shared__ float ev_b1[FZ_C];
    __shared__ float ev_rl[EV_THREADS / 32];
    __shared__ int ev_rc[EV_THREADS / 32];
    float *Xs = ev_buf;                  // [EV_KC][EV_XS]: pixel values, transposed
    float *Ws = ev_buf + EV_KC * EV_XS;  // [EV_KC][FZ_MAX_H]
    float *Hs = ev_buf;                  // [EV_ROWS][EV_HS]

    const int tid = threadIdx.x, tx = tid & 31, ty = tid >> 5;
    const int row0 = blockIdx.x * EV_ROWS;
    for (int k = tid; k < H * FZ_C; k += EV_THREADS) ev_w1[k] = params[w1_off + k];
    for (int k = tid; k < FZ_MAX_H; k += EV_THREADS) ev_b0[k] = k < H ? params[b0_off + k] : 0.0f;
    if (tid < FZ_C) ev_b1[tid] = params[b1_off + tid];

    // loaders: 4 pixel bytes of one image and 8 weights per thread per k-tile, one tile ahead
    const int xi = tid >> 2, xq = tid & 3;
    const bool xok = row0 + xi < n_test;
    const uint8_t *xsrc = pixels + (size_t)(xok ? row0 + xi : 0) * FZ_P + 4 * xq;
    unsigned xr = xok ? __ldg((const unsigned *)xsrc) : 0u;
    float wr[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
        const int e = tid + EV_THREADS * u, k = e >> 7, h = e & 127;
        wr[u] = h < H ? __ldg(params + w0_off + (long long)k * H + h) : 0.0f;
    }
    float acc[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][c] = 0.0f;

    for (int kc = 0; kc < FZ_P; kc += EV_KC) {
        __syncthreads();
#pragma unroll
        for (int b = 0; b < 4; ++b) Xs[(4 * xq + b) * EV_XS + xi] = mnist_pixel_value((uint8_t)(xr >> (8 * b)));
#pragma unroll
        for (int u = 0; u < 8; ++u) Ws[tid + EV_THREADS * u] = wr[u];
        __syncthreads();
        if (kc + EV_KC < FZ_P) {
            xr = xok ? __ldg((const unsigned *)(xsrc + kc + EV_KC)) : 0u;
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const int e = tid + EV_THREADS * u, k = e >> 7, h = e & 127;
                wr[u] = h < H ? __ldg(params + w0_off + (long long)(kc + EV_KC + k) * H + h) : 0.0f;
            }
        }
#pragma unroll
        for (int k = 0; k < EV_KC; ++k) {
            const float4 xa = *(const float4 *)(Xs + k * EV_XS + ty * 8);
            const float4 xb = *(const float4 *)(Xs + k * EV_XS + ty * 8 + 4);
            const float4 w = *(const float4 *)(Ws + k * FZ_MAX_H + tx * 4);
            const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
            const float wv[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int c = 0; c < 4; ++c) acc[i][c] = fmaf(xv[i], wv[c], acc[i][c]);
        }
    }
    __syncthreads();  // Hs overwrites Xs and Ws
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int h = tx * 4 + c;
            if (h < H) Hs[(ty * 8 + i) * EV_HS + h] = fmaxf(acc[i][c] + ev_b0[h], 0.0f);
        }
    __syncthreads();

    // logits, softmax cross-entropy and argmax: 4 threads per image
    const int i = tid >> 2, q = tid & 3, img = row0 + i;
    const bool ok = img < n_test;
    float z[3];
#pragma unroll
    for (int u = 0; u < 3; ++u) {
        const int c = q + 4 * u;
        float v = -INFINITY;
        if (c < FZ_C) {
            float s = 0.0f;
            for (int h = 0; h < H; ++h) s = fmaf(Hs[i * EV_HS + h], ev_w1[h * FZ_C + c], s);
            v = s + ev_b1[c];
        }
        z[u] = v;
    }
    float m = fmaxf(fmaxf(z[0], z[1]), z[2]);
    m = fmaxf(m, __shfl_xor_sync(FZ_FULL, m, 1));
    m = fmaxf(m, __shfl_xor_sync(FZ_FULL, m, 2));
    float se = 0.0f;
#pragma unroll
    for (int u = 0; u < 3; ++u)
        if (q + 4 * u < FZ_C) se += expf(z[u] - m);
    se += __shfl_xor_sync(FZ_FULL, se, 1);
    se += __shfl_xor_sync(FZ_FULL, se, 2);
    const int lab = ok ? (int)labels[img] : 0;
    float zl = 0.0f;
#pragma unroll
    for (int u = 0; u < 3; ++u)
        if (q + 4 * u == lab) zl = z[u];
    zl += __shfl_xor_sync(FZ_FULL, zl, 1);
    zl += __shfl_xor_sync(FZ_FULL, zl, 2);
    float bv = z[0];
    int bc = q;  // the first maximum wins, as in a plain argmax
    if (z[1] > bv) {
        bv = z[1];
        bc = q + 4;
    }
    if (q + 8 < FZ_C && z[2] > bv) {
        bv = z[2];
        bc = q + 8;
    }
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
        const float ov = __shfl_xor_sync(FZ_FULL, bv, o);
        const int oc = __shfl_xor_sync(FZ_FULL, bc, o);
        if (ov > bv || (ov == bv && oc < bc)) {
            bv = ov;
            bc = oc;
        }
    }
    float loss = (ok && q == 0) ? (m + logf(se)) - zl : 0.0f;
    int corr = (ok && q == 0 && bc == lab) ? 1 : 0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        loss += __shfl_xor_sync(FZ_FULL, loss, o);
        corr += __shfl_xor_sync(FZ_FULL, corr, o);
    }
    if (tx == 0) {
        ev_rl[ty] = loss;
        ev_rc[ty] = corr;
    }
    __syncthreads();
    if (tid == 0) {
        float l = 0.0f;
        int c = 0;
        for (int w = 0; w < EV_THREADS / 32; ++w) {
            l += ev_rl[w];
            c += ev_rc[w];
        }
        part_loss[blockIdx.x] = l;
        part_correct[blockIdx.x] = c;
    }
}

static __global__ void __launch_bounds__(EV_FINISH_THREADS)
    fz_eval_finish_kernel(const float *part_loss, const int *part_correct, int nparts, int n_test, float *test_loss,
                          float *test_acc, int epoch) {
    __shared__ double rl[EV_FINISH_THREADS];
    __shared__ int rc[EV_FINISH_THREADS];
    double l = 0.0;
    int c = 0;
    for (int k = threadIdx.x; k < nparts; k += EV_FINISH_THREADS) {
        l += part_loss[k];
        c += part_correct[k];
    }
    rl[threadIdx.x] = l;
    rc[threadIdx.x] = c;
    __syncthreads();
    for (int h = EV_FINISH_THREADS / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) {
            rl[threadIdx.x] += rl[threadIdx.x + h];
            rc[threadIdx.x] += rc[threadIdx.x + h];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        test_loss[epoch] = n_test > 0 ? (float)(rl[0] / n_test) : 0.0f;
        test_acc[epoch] = n_test > 0 ? (float)((double)rc[0] / n_test) : 0.0f;
    }
}

// ---------------------------------------------------------------------------------------------------
// generic path: cuBLAS GEMMs and small kernels, any number of layers

static int gen_grid(int64_t n) {
    int64_t b = (n + GEN_THREADS - 1) / GEN_THREADS;
    if (b < 1) b = 1;
    if (b > 8192) b = 8192;
    return (int)b;
}

static __global__ void gen_pixels_kernel(float *out, const uint8_t *px, int64_t n) {
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x)
        out[k] = mnist_pixel_value(px[k]);
}

static __global__ void gen_gather_kernel(float *act0, int *blab, const uint8_t *px, const uint8_t *labels,
                                         const int32_t *order, int n_train, int B, int P) {
    const int64_t n = (int64_t)B * P;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
        const int i = (int)(k / P), p = (int)(k % P);
        int row = order[i];
        row = row < 0 ? 0 : (row >= n_train ? n_train - 1 : row);
        act0[k] = mnist_pixel_value(px[(int64_t)row * P + p]);
        if (p == 0) blab[i] = labels[row];
    }
}

static __global__ void gen_bias_act_kernel(float *y, const float *b, int64_t n, int N, int relu) {
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
        const float v = y[k] + b[k % N];
        y[k] = relu ? fmaxf(v, 0.0f) : v;
    }
}

// dlogits = (softmax - onehot) / B and the mean cross-entropy of the batch (one block)
static __global__ void __launch_bounds__(GEN_THREADS)
    gen_loss_kernel(const float *logits, const int *lab, int B, int C, float *dlogits, float *loss_out) {
    __shared__ double red[GEN_THREADS];
    double acc = 0.0;
    for (int i = threadIdx.x; i < B; i += GEN_THREADS) {
        const float *z = logits + (int64_t)i * C;
        float m = z[0];
        for (int c = 1; c < C; ++c) m = fmaxf(m, z[c]);
        float se = 0.0f;
        for (int c = 0; c < C; ++c) se += expf(z[c] - m);
        const int y = lab[i];
        for (int c = 0; c < C; ++c)
            dlogits[(int64_t)i * C + c] = (expf(z[c] - m) / se - (c == y ? 1.0f : 0.0f)) / (float)B;
        acc += (double)(m + logf(se) - ((y >= 0 && y < C) ? z[y] : 0.0f));
    }
    red[threadIdx.x] = acc;
    __syncthreads();
    for (int h = GEN_THREADS / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) red[threadIdx.x] += red[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) *loss_out = (float)(red[0] / B);
}

static __global__ void gen_bias_update_kernel(float *b, const float *dout, int B, int N, float lr) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float s = 0.0f;
    for (int i = 0; i < B; i++) s += dout[(int64_t)i * N + n];
    b[n] = fmaf(-lr, s, b[n]);
}

static __global__ void gen_relu_back_kernel(float *din, const float *act, int64_t n) {
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x)
        if (!(act[k] > 0.0f)) din[k] = 0.0f;
}

static __global__ void __launch_bounds__(GEN_THREADS)
    gen_eval_kernel(float *test_loss, float *test_acc, const float *logits, const uint8_t *labels, int n, int C,
                    int epoch) {
    __shared__ double rl[GEN_THREADS];
    __shared__ int rc[GEN_THREADS];
    double l = 0.0;
    int correct = 0;
    for (int i = threadIdx.x; i < n; i += GEN_THREADS) {
        const float *z = logits + (int64_t)i * C;
        float m = z[0];
        int best = 0;
        for (int c = 1; c < C; ++c)
            if (z[c] > m) {
                m = z[c];
                best = c;
            }
        float se = 0.0f;
        for (int c = 0; c < C; ++c) se += expf(z[c] - m);
        const int y = labels[i];
        l += (double)(m + logf(se) - (y < C ? z[y] : 0.0f));
        correct += best == y ? 1 : 0;
    }
    rl[threadIdx.x] = l;
    rc[threadIdx.x] = correct;
    __syncthreads();
    for (int h = GEN_THREADS / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) {
            rl[threadIdx.x] += rl[threadIdx.x + h];
            rc[threadIdx.x] += rc[threadIdx.x + h];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        test_loss[epoch] = n > 0 ? (float)(rl[0] / n) : 0.0f;
        test_acc[epoch] = n > 0 ? (float)((double)rc[0] / n) : 0.0f;
    }
}

// ---------------------------------------------------------------------------------------------------
// host side: device data shared by both paths

typedef struct {
    float *params;
    uint8_t *train_pixels, *train_labels, *test_pixels, *test_labels;
    int32_t *order;
    float *step_loss, *test_loss, *test_acc;
} MnistDev;

static void *fz_alloc(size_t bytes) {
    void *p = NULL;
    cudaCheck(cudaMalloc(&p, bytes > 0 ? bytes : 16));
    return p;
}

static void *fz_zeros(size_t bytes) {
    void *p = fz_alloc(bytes);
    cudaCheck(cudaMemset(p, 0, bytes > 0 ? bytes : 16));
    return p;
}

static void fz_h2d(void *dst, const void *src, size_t bytes, cudaStream_t stream) {
    if (bytes > 0) cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
}

static void mnist_dev_alloc(MnistDev *d, int64_t n_params, int n_train, int n_test, int P, int epochs,
                            int64_t total_steps) {
    d->params = (float *)fz_alloc((size_t)n_params * sizeof(float));
    d->train_pixels = (uint8_t *)fz_alloc((size_t)n_train * P);
    d->train_labels = (uint8_t *)fz_alloc((size_t)n_train);
    d->test_pixels = (uint8_t *)fz_alloc((size_t)n_test * P);
    d->test_labels = (uint8_t *)fz_alloc((size_t)n_test);
    d->order = (int32_t *)fz_alloc((size_t)epochs * n_train * sizeof(int32_t));
    d->step_loss = (float *)fz_zeros((size_t)total_steps * sizeof(float));
    d->test_loss = (float *)fz_zeros((size_t)epochs * sizeof(float));
    d->test_acc = (float *)fz_zeros((size_t)epochs * sizeof(float));
}

static void mnist_dev_free(MnistDev *d) {
    cudaCheck(cudaFree(d->params));
    cudaCheck(cudaFree(d->train_pixels));
    cudaCheck(cudaFree(d->train_labels));
    cudaCheck(cudaFree(d->test_pixels));
    cudaCheck(cudaFree(d->test_labels));
    cudaCheck(cudaFree(d->order));
    cudaCheck(cudaFree(d->step_loss));
    cudaCheck(cudaFree(d->test_loss));
    cudaCheck(cudaFree(d->test_acc));
}

static void mnist_dev_download(const MnistDev *d, MnistResult *out, int64_t n_params, int epochs,
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
}

// ---------------------------------------------------------------------------------------------------
// generic path: host side

typedef struct {
    int L, B;
    int sizes[MNIST_MAX_LAYERS + 1];
    int64_t woff[MNIST_MAX_LAYERS], boff[MNIST_MAX_LAYERS];
    float *params;
    float *act[MNIST_MAX_LAYERS + 1], *dact[MNIST_MAX_LAYERS + 1], *tact[MNIST_MAX_LAYERS + 1];
    int *blab;
    float lr;
    cublasHandle_t blas;
    cudaStream_t stream;
} GenCtx;

// row-major out (rows, N) = in (rows, K) @ W (K, N) + b, ReLU but after the last layer
static void gen_forward(const GenCtx *g, float *const *act, int rows) {
    const float one = 1.0f, zero = 0.0f;
    for (int l = 0; l < g->L; l++) {
        const int K = g->sizes[l], N = g->sizes[l + 1];
        cublasCheck(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, N, rows, K, &one, g->params + g->woff[l], N, act[l],
                                K, &zero, act[l + 1], N));
        const int64_t n = (int64_t)rows * N;
        gen_bias_act_kernel<<<gen_grid(n), GEN_THREADS, 0, g->stream>>>(act[l + 1], g->params + g->boff[l], n, N,
                                                                         l < g->L - 1);
        cudaCheck(cudaGetLastError());
    }
}

static void gen_backward(const GenCtx *g) {
    const float one = 1.0f, zero = 0.0f, neg_lr = -g->lr;
    for (int l = g->L - 1; l >= 0; l--) {
        const int K = g->sizes[l], N = g->sizes[l + 1];
        float *W = g->params + g->woff[l];
        const float *dout = g->dact[l + 1];
        if (l > 0)  // din (B, K) = dout (B, N) @ W^T, before W changes
            cublasCheck(cublasSgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, K, g->B, N, &one, W, N, dout, N, &zero,
                                    g->dact[l], K));
        // W += -lr * in^T (K, B) @ dout (B, N)
        cublasCheck(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_T, N, K, g->B, &neg_lr, dout, N, g->act[l], K, &one, W,
                                N));
        gen_bias_update_kernel<<<gen_grid(N), GEN_THREADS, 0, g->stream>>>(g->params + g->boff[l], dout, g->B, N, g->lr);
        cudaCheck(cudaGetLastError());
        if (l > 0) {
            const int64_t n = (int64_t)g->B * K;
            gen_relu_back_kernel<<<gen_grid(n), GEN_THREADS, 0, g->stream>>>(g->dact[l], g->act[l], n);
            cudaCheck(cudaGetLastError());
        }
    }
}

static void gen_gather(const GenCtx *g, const MnistDev *d, const int32_t *ord, int n_train) {
    const int64_t n = (int64_t)g->B * g->sizes[0];
    gen_gather_kernel<<<gen_grid(n), GEN_THREADS, 0, g->stream>>>(g->act[0], g->blab, d->train_pixels, d->train_labels,
                                                                   ord, n_train, g->B, g->sizes[0]);
    cudaCheck(cudaGetLastError());
}

static void gen_loss(const GenCtx *g, float *loss_out) {
    gen_loss_kernel<<<1, GEN_THREADS, 0, g->stream>>>(g->act[g->L], g->blab, g->B, g->sizes[g->L], g->dact[g->L],
                                                      loss_out);
    cudaCheck(cudaGetLastError());
}

static void gen_eval(const GenCtx *g, const MnistDev *d, int n_test, int epoch) {
    if (n_test > 0) gen_forward(g, g->tact, n_test);
    gen_eval_kernel<<<1, GEN_THREADS, 0, g->stream>>>(d->test_loss, d->test_acc, g->tact[g->L], d->test_labels, n_test,
                                                      g->sizes[g->L], epoch);
    cudaCheck(cudaGetLastError());
}

static int mnist_train_generic(const MnistConfig *cfg, const MnistData *data, MnistResult *out, double setup_start) {
    const int L = cfg->n_layers, B = cfg->batch, epochs = cfg->epochs;
    const int P = cfg->sizes[0];
    const int n_train = data->n_train, n_test = data->n_test;
    const int steps = mnist_steps_per_epoch(cfg, n_train);
    const int64_t n_params = mnist_param_count(cfg), total_steps = (int64_t)epochs * steps;

    GenCtx g;
    memset(&g, 0, sizeof g);
    g.L = L;
    g.B = B;
    g.lr = cfg->lr;
    for (int l = 0; l <= L; l++) g.sizes[l] = cfg->sizes[l];
    for (int l = 0; l < L; l++) {
        g.woff[l] = mnist_weight_offset(cfg, l);
        g.boff[l] = mnist_bias_offset(cfg, l);
    }
    cudaCheck(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
    cublasCheck(cublasCreate(&g.blas));
    cublasCheck(cublasSetStream(g.blas, g.stream));
    cublasCheck(cublasSetMathMode(g.blas, cfg->precision == PRECISION_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                           : CUBLAS_DEFAULT_MATH));
    MnistDev d;
    mnist_dev_alloc(&d, n_params, n_train, n_test, P, epochs, total_steps);
    g.params = d.params;
    for (int l = 0; l <= L; l++) {
        g.act[l] = (float *)fz_zeros((size_t)B * cfg->sizes[l] * sizeof(float));
        g.dact[l] = l > 0 ? (float *)fz_zeros((size_t)B * cfg->sizes[l] * sizeof(float)) : NULL;
        g.tact[l] = (float *)fz_zeros((size_t)n_test * cfg->sizes[l] * sizeof(float));
    }
    g.blab = (int *)fz_zeros((size_t)(B > 0 ? B : 1) * sizeof(int));
    cudaCheck(cudaDeviceSynchronize());

    TrainClock clock;
    train_clock_init(&clock, epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start;

    cudaStream_t stream = g.stream;
    train_clock_e2e_start(&clock, stream);
    TIMED_PHASE(&clock, PHASE_H2D, stream) {
        fz_h2d(d.params, data->init_params, (size_t)n_params * sizeof(float), stream);
        fz_h2d(d.train_pixels, data->train_pixels, (size_t)n_train * P, stream);
        fz_h2d(d.train_labels, data->train_labels, (size_t)n_train, stream);
        fz_h2d(d.order, data->batch_order, (size_t)epochs * n_train * sizeof(int32_t), stream);
        fz_h2d(d.test_pixels, data->test_pixels, (size_t)n_test * P, stream);
        fz_h2d(d.test_labels, data->test_labels, (size_t)n_test, stream);
        const int64_t n = (int64_t)n_test * P;
        if (n > 0) {
            gen_pixels_kernel<<<gen_grid(n), GEN_THREADS, 0, stream>>>(g.tact[0], d.test_pixels, n);
            cudaCheck(cudaGetLastError());
        }
    }
    train_clock_loop_start(&clock, stream);
    for (int epoch = 0; epoch < epochs; epoch++) {
        for (int step = 0; step < steps; step++) {
            const int64_t slot = (int64_t)epoch * steps + step;
            const int32_t *ord = d.order + (int64_t)epoch * n_train + (int64_t)step * B;
            if (cfg->breakdown) {
                TIMED_PHASE(&clock, PHASE_H2D, stream) gen_gather(&g, &d, ord, n_train);
                TIMED_PHASE(&clock, PHASE_FORWARD, stream) gen_forward(&g, g.act, B);
                TIMED_PHASE(&clock, PHASE_LOSS, stream) gen_loss(&g, d.step_loss + slot);
                TIMED_PHASE(&clock, PHASE_BACKWARD, stream) gen_backward(&g);
            } else {
                gen_gather(&g, &d, ord, n_train);
                gen_forward(&g, g.act, B);
                gen_loss(&g, d.step_loss + slot);
                gen_backward(&g);
            }
        }
        TIMED_PHASE(&clock, PHASE_EVAL, stream) gen_eval(&g, &d, n_test, epoch);
        train_clock_epoch_end(&clock, epoch, stream);
    }
    TIMED_PHASE(&clock, PHASE_D2H, stream) mnist_dev_download(&d, out, n_params, epochs, total_steps, stream);
    train_clock_e2e_stop(&clock, stream);
    train_clock_finish(&clock, &out->timing);

    for (int l = 0; l <= L; l++) {
        cudaCheck(cudaFree(g.act[l]));
        if (g.dact[l]) cudaCheck(cudaFree(g.dact[l]));
        cudaCheck(cudaFree(g.tact[l]));
    }
    cudaCheck(cudaFree(g.blab));
    mnist_dev_free(&d);
    cublasCheck(cublasDestroy(g.blas));
    cudaCheck(cudaStreamDestroy(g.stream));
    return 0;
}

// ---------------------------------------------------------------------------------------------------
// fused path: host side

typedef struct {
    size_t dyn;  // dynamic shared memory: the Gram rows of a step + 2 batch buffers
    int cap;     // entries per batch buffer (a multiple of 16)
} FzLaunch;

static int mnist_fz_supported(const MnistConfig *cfg, FzLaunch *fl, const char **why) {
    if (cfg->precision != PRECISION_FP32) { *why = "its GEMMs are fp32 only"; return 0; }
    if (cfg->n_layers != 2) { *why = "it holds exactly one hidden layer"; return 0; }
    const int P = cfg->sizes[0], H = cfg->sizes[1], C = cfg->sizes[2], B = cfg->batch;
    if (P != FZ_P) { *why = "it is built for 784 input pixels"; return 0; }
    if (C != FZ_C) { *why = "it is built for 10 classes"; return 0; }
    if (H < 1 || H > FZ_MAX_H) { *why = "it holds 1..128 hidden units"; return 0; }
    if (B < 1 || B > FZ_MAX_B) { *why = "batch out of range (1..128)"; return 0; }
    int dev = 0, coop = 0, optin = 0, sms = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    cudaCheck(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    if (!coop) { *why = "this GPU has no cooperative launch"; return 0; }
    cudaFuncAttributes attr;
    cudaCheck(cudaFuncGetAttributes(&attr, (const void *)fz_epoch_kernel));
    const long long avail = (long long)optin - (long long)attr.sharedSizeBytes - FZ_G_BYTES - 1024;
    if (avail < 6 * 16) { *why = "too little shared memory per block"; return 0; }
    long long cap = (avail / 6) & ~15LL;
    if (cap > (long long)FZ_MAX_B * FZ_P) cap = (long long)FZ_MAX_B * FZ_P;
    const size_t dyn = (size_t)FZ_G_BYTES + 6 * (size_t)cap;
    cudaCheck(cudaFuncSetAttribute((const void *)fz_epoch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn));
    int per_sm = 0;
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fz_epoch_kernel, FZ_THREADS, dyn));
    if ((long long)per_sm * sms < H) { *why = "more hidden units than co-resident blocks"; return 0; }
    fl->dyn = dyn;
    fl->cap = (int)cap;
    return 1;
}

// One epoch's plan and Gram matrices (they read its order and the dense training bytes), on stream st.
static void fz_prep_epoch(const MnistDev *d, const int *clen, int4 *plan, float *gram, int epoch, int n_train, int B,
                          int steps, cudaStream_t st) {
    fz_plan_kernel<<<steps, FZ_MAX_B, 0, st>>>(d->order + (size_t)epoch * n_train, clen, d->train_labels, n_train, B,
                                               plan);
    cudaCheck(cudaGetLastError());
    if (steps > 1) {
        fz_gram_kernel<<<dim3((unsigned)(steps - 1), FZ_MAX_B / 32), GR_THREADS, 0, st>>>(d->train_pixels, plan, B,
                                                                                          gram);
        cudaCheck(cudaGetLastError());
    }
}

static int mnist_train_fused(const MnistConfig *cfg, const MnistData *data, MnistResult *out, double setup_start,
                             const FzLaunch *fl) {
    const int B = cfg->batch, epochs = cfg->epochs, H = cfg->sizes[1];
    const int n_train = data->n_train, n_test = data->n_test;
    const int steps = mnist_steps_per_epoch(cfg, n_train);
    const int64_t n_params = mnist_param_count(cfg), total_steps = (int64_t)epochs * steps;
    const int ev_blocks = (n_test + EV_ROWS - 1) / EV_ROWS;

    cudaStream_t sA, s_late;
    cudaCheck(cudaStreamCreateWithFlags(&sA, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&s_late, cudaStreamNonBlocking));
    cudaEvent_t ev_late, ev_kern, ev_prep;
    cudaCheck(cudaEventCreateWithFlags(&ev_late, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&ev_kern, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&ev_prep, cudaEventDisableTiming));
    MnistDev d;
    mnist_dev_alloc(&d, n_params, n_train, n_test, FZ_P, epochs, total_steps);
    const size_t n_rows = (size_t)(n_train > 0 ? n_train : 1);
    uint16_t *cidx = (uint16_t *)fz_alloc(n_rows * FZ_P * sizeof(uint16_t));
    uint8_t *cval = (uint8_t *)fz_alloc(n_rows * FZ_P);
    int *clen = (int *)fz_alloc(n_rows * sizeof(int));
    int4 *plan = (int4 *)fz_alloc((size_t)(steps > 0 ? steps : 1) * B * sizeof(int4));
    float *gram = (float *)fz_alloc((size_t)(steps > 1 ? steps - 1 : 1) * FZ_G_FLOATS * sizeof(float));
    // the accumulator and the barrier counter are zeroed once: the kernel keeps both consistent from one
    // epoch to the next (the step index runs across epochs)
    float *lacc = (float *)fz_zeros((size_t)3 * FZ_LSLOT * sizeof(float));
    unsigned *bar = (unsigned *)fz_zeros(256);
    float *part_loss = (float *)fz_zeros((size_t)(ev_blocks > 0 ? ev_blocks : 1) * sizeof(float));
    int *part_correct = (int *)fz_zeros((size_t)(ev_blocks > 0 ? ev_blocks : 1) * sizeof(int));
    // load every kernel now, so that lazy module loading does not land inside e2e (nothing runs)
    cudaFuncAttributes attr;
    cudaCheck(cudaFuncGetAttributes(&attr, (const void *)fz_csr_kernel));
    cudaCheck(cudaFuncGetAttributes(&attr, (const void *)fz_plan_kernel));
    cudaCheck(cudaFuncGetAttributes(&attr, (const void *)fz_gram_kernel));
    cudaCheck(cudaFuncGetAttributes(&attr, (const void *)fz_eval_kernel));
    cudaCheck(cudaFuncGetAttributes(&attr, (const void *)fz_eval_finish_kernel));
    cudaCheck(cudaDeviceSynchronize());

    FzArgs a;
    memset(&a, 0, sizeof a);
    a.params = d.params;
    a.cidx = cidx;
    a.cval = cval;
    a.pixels = d.train_pixels;
    a.plan = plan;
    a.gram = gram;
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
    a.cap = fl->cap;
    a.lr = cfg->lr;
    a.nlr255 = -(cfg->lr / 255.0f);

    TrainClock clock;
    train_clock_init(&clock, epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start;
    // with --breakdown everything runs in order on one stream, so that each phase times its own work
    cudaStream_t sB = cfg->breakdown ? sA : s_late;

    train_clock_e2e_start(&clock, sA);
    TIMED_PHASE(&clock, PHASE_H2D, sA) {
        fz_h2d(d.params, data->init_params, (size_t)n_params * sizeof(float), sA);
        fz_h2d(d.train_pixels, data->train_pixels, (size_t)n_train * FZ_P, sA);
        fz_h2d(d.train_labels, data->train_labels, (size_t)n_train, sA);
        if (epochs > 0) fz_h2d(d.order, data->batch_order, (size_t)n_train * sizeof(int32_t), sA);
        if (n_train > 0) {
            fz_csr_kernel<<<(n_train + 7) / 8, 256, 0, sA>>>(d.train_pixels, n_train, cidx, cval, clen);
            cudaCheck(cudaGetLastError());
        }
    }
    train_clock_loop_start(&clock, sA);

    int late_done = 0;
    for (int epoch = 0; epoch < epochs; epoch++) {
        if (steps > 0) {
            // plan, Gram matrices, forward, loss, backward and update: --breakdown reports it all as "forward"
            TIMED_PHASE(&clock, PHASE_FORWARD, sA) {
                if (epoch == 0) {
                    fz_prep_epoch(&d, clen, plan, gram, 0, n_train, B, steps, sA);
                } else {
                    cudaCheck(cudaStreamWaitEvent(sA, ev_prep, 0));  // prepared during the previous eval
                }
                a.g0 = (long long)epoch * steps;
                void *args[] = {(void *)&a};
                cudaCheck(cudaLaunchCooperativeKernel((const void *)fz_epoch_kernel, dim3(H), dim3(FZ_THREADS), args,
                                                      fl->dyn, sA));
            }
        }
        if (!late_done) {
            // the test set and the orders of epochs 1.. upload while epoch 0 trains
            TIMED_PHASE(&clock, PHASE_H2D, sA) {
                fz_h2d(d.test_pixels, data->test_pixels, (size_t)n_test * FZ_P, sB);
                fz_h2d(d.test_labels, data->test_labels, (size_t)n_test, sB);
                if (epochs > 1)
                    fz_h2d(d.order + n_train, data->batch_order + n_train,
                           (size_t)(epochs - 1) * n_train * sizeof(int32_t), sB);
                cudaCheck(cudaEventRecord(ev_late, sB));
                cudaCheck(cudaStreamWaitEvent(sA, ev_late, 0));
            }
            late_done = 1;
        }
        if (steps > 0 && epoch + 1 < epochs) {
            // the next epoch's plan and Gram matrices, on the second stream once this epoch's kernel is done
            // (it reads both), while this epoch's eval runs on the first
            TIMED_PHASE(&clock, PHASE_FORWARD, sA) {
                cudaCheck(cudaEventRecord(ev_kern, sA));
                cudaCheck(cudaStreamWaitEvent(sB, ev_kern, 0));
                fz_prep_epoch(&d, clen, plan, gram, epoch + 1, n_train, B, steps, sB);
                cudaCheck(cudaEventRecord(ev_prep, sB));
            }
        }
        TIMED_PHASE(&clock, PHASE_EVAL, sA) {
            if (ev_blocks > 0) {
                fz_eval_kernel<<<ev_blocks, EV_THREADS, 0, sA>>>(d.params, d.test_pixels, d.test_labels, n_test, H,
                                                                 a.w0_off, a.b0_off, a.w1_off, a.b1_off, part_loss,
                                                                 part_correct);
                cudaCheck(cudaGetLastError());
            }
            fz_eval_finish_kernel<<<1, EV_FINISH_THREADS, 0, sA>>>(part_loss, part_correct, ev_blocks, n_test,
                                                                   d.test_loss, d.test_acc, epoch);
            cudaCheck(cudaGetLastError());
        }
        train_clock_epoch_end(&clock, epoch, sA);
    }

    TIMED_PHASE(&clock, PHASE_D2H, sA) mnist_dev_download(&d, out, n_params, epochs, total_steps, sA);
    train_clock_e2e_stop(&clock, sA);
    train_clock_finish(&clock, &out->timing);

    cudaCheck(cudaStreamSynchronize(s_late));
    cudaCheck(cudaStreamSynchronize(sA));
    cudaCheck(cudaFree(cidx));
    cudaCheck(cudaFree(cval));
    cudaCheck(cudaFree(clen));
    cudaCheck(cudaFree(plan));
    cudaCheck(cudaFree(gram));
    cudaCheck(cudaFree(lacc));
    cudaCheck(cudaFree(bar));
    cudaCheck(cudaFree(part_loss));
    cudaCheck(cudaFree(part_correct));
    mnist_dev_free(&d);
    cudaCheck(cudaEventDestroy(ev_late));
    cudaCheck(cudaEventDestroy(ev_kern));
    cudaCheck(cudaEventDestroy(ev_prep));
    cudaCheck(cudaStreamDestroy(s_late));
    cudaCheck(cudaStreamDestroy(sA));
    return 0;
}

int train_mnist(const MnistConfig *cfg, const MnistData *data, MnistResult *out) {
    const double setup_start = host_ms();
    FzLaunch fl;
    const char *why = "";
    if (mnist_fz_supported(cfg, &fl, &why)) return mnist_train_fused(cfg, data, out, setup_start, &fl);
    fprintf(stderr, "note: the fused kernel cannot train this model (%s); running the cuBLAS path\n", why);
    return mnist_train_generic(cfg, data, out, setup_start);
}
