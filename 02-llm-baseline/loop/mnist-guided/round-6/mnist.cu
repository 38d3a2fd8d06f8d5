// mnist.cu: the MNIST MLP trainer, round 6: stage 08's idea (persistent kernels) on top of round 5.
//
// Round 5 replayed each epoch's steps as one CUDA graph with two dependent nodes a step (uf_kernel, then
// head_fused_kernel) and a side branch (finish_kernel): about 17 us a step for under 1 us of FLOPs, nearly all of it
// node latency, launch gaps, and W0, the split-K partials and the activations going round through L2 between kernels.
// This round runs an epoch's steps inside one cooperative kernel.
//
// Variant "persistent" (the default; one hidden layer):
//   persist_kernel  one block per SM: KB k-chunks x HB hidden tiles of 16 (16 x 8 = 128 blocks of 52 x 16 for
//                   784 x 128 on 132 SMs). Each block keeps its tile of W0 in shared memory for the whole epoch (read
//                   once at the start, written back once at the end). A step is three phases and two grid barriers:
//                     F  the tile's share of the forward: part[kchunk][b, htile] = x[b, kchunk] @ W0[kchunk, htile]
//                     -- grid barrier --
//                     H  one batch row per block: the KB partials added in chunk order, + b0, ReLU (act), the logits,
//                        softmax cross-entropy, dlogits, dpre0 through the ReLU (head_fused_kernel's arithmetic)
//                     -- grid barrier --
//                     U  W0 tile -= lr * x^T dpre0[:, htile], from the x slab still in shared memory; spread over
//                        every block, b0, b1, W1 and the step's loss in double (finish_kernel's arithmetic)
//                   and on to the next step's F, which needs only the block's own tile: no barrier there. The next
//                   step's x slab is gathered through the batch order with cp.async while the barriers and the head
//                   run, so there is no per-epoch gather pass either.
//                   Shapes or devices it cannot take (P % 4 != 0, shared memory over the opt-in limit, no cooperative
//                   launch) run the "fused" graph instead. --breakdown launches it one phase at a time.
// Variant "fused": round 5's graph, as it was (uf_kernel, head_fused_kernel, finish_kernel on a side branch).
// Variant "cublaslt": round 4's path, as it was (cuBLASLt GEMMs planned and timed once, bias+ReLU epilogues); every
// variant runs it for any other number of layers.
//
// The data: when the driver's float images are in pinned memory they go up as they are (4x the bytes of the pixels,
// but at full PCIe speed instead of through pageable staging); otherwise the pixel bytes go up (and, for the
// persistent kernel, are turned into floats once, on the device). The test set goes up on its own stream while
// epoch 0 trains.
//
// Parameters live on the device in a padded layout (each tensor on a 256-byte boundary, the alignment cublasLt's
// heuristics assume); one kernel unpacks them after the upload and packs them before the download.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cublasLt.h>

#include "check.h"
#include "host.h"
#include "timing.h"
#include "trainer.h"

const char *const MNIST_VARIANTS[] = {"persistent", "fused", "cublaslt", NULL};
const char *const MNIST_PRECISIONS[] = {"fp32", NULL};

namespace {

constexpr int NCLS = MNIST_CLASSES;
constexpr int MAXL = MNIST_MAX_LAYERS;
constexpr int VARIANT_PERSIST = 0;                 // indices into MNIST_VARIANTS
constexpr int VARIANT_FUSED = 1;
constexpr int HEAD_WARPS = 4;                      // head: one warp per row, 4 rows per block
constexpr int HF_THREADS = 128;                    // head_fused: one block per row
constexpr int UF_TILE = 32;                        // uf_kernel: a 32 x 32 tile of W0 per block
constexpr int UF_SLAB = 128;                       // batch rows staged in shared memory at a time
constexpr int UF_THREADS = 256;                    // 4 groups of 64 threads, a 4 x 4 register tile each
constexpr int UF_XT = UF_SLAB + 4;                 // row stride of the transposed x slab (keeps float4 alignment)
constexpr int FIN_LANES = 8;                       // finish: 8 lanes add up one output over the batch
constexpr int FIN_THREADS = 256;
constexpr int EVAL_THREADS = 256;
constexpr int EW_THREADS = 256;                    // element-wise kernels
constexpr int64_t PAD_FLOATS = 64;                 // each parameter tensor starts on a 256-byte boundary
constexpr size_t LT_WS_BYTES = (size_t)32 << 20;   // cublasLt workspace (split-K partials)
constexpr size_t BLAS_WS_BYTES = (size_t)8 << 20;  // classic cuBLAS workspace (fallback GEMMs only)
constexpr int TUNE_CANDIDATES = 8;                 // heuristic candidates timed per GEMM shape
constexpr int TUNE_WARMUP = 2;
constexpr int TUNE_REPS = 10;
constexpr int64_t GRAPH_MAX_NODES = 60000;         // larger epochs launch step by step

// the persistent kernel
constexpr int PK_THREADS = 256;                    // 8 warps a block, one block per SM
constexpr int PK_WARPS = PK_THREADS / 32;
constexpr int PK_HT = 16;                          // hidden units per block: the W0 tile is kc x 16
constexpr int PK_RED = PK_THREADS * PK_HT;         // floats of the group-sum scratch
constexpr int PK_FWD_GROUPS = 4;                   // at most this many k groups in the forward
constexpr int PK_UPD_GROUPS = 8;                   // at most this many batch groups in the update
constexpr int PK_FWD = 1, PK_HEAD = 2, PK_UPD = 4, PK_ALL = 7;  // the phases a launch runs

static_assert(UF_THREADS == 4 * 64 && UF_SLAB == 4 * UF_TILE, "uf_kernel: 4 groups of 8 x 8 threads, 4 x 4 each");
static_assert(UF_TILE * UF_XT >= 4 * UF_TILE * UF_TILE, "uf_kernel: the group sums reuse the x buffer");
static_assert(UF_SLAB * UF_TILE <= UF_TILE * UF_XT, "uf_kernel: the update's x slab fits the x buffer");
static_assert(PK_HT == 16 && PK_THREADS % 32 == 0 && 32 % FIN_LANES == 0, "persist_kernel: 4 x 4 tiles of 16 columns");

static int cdiv64(int64_t a, int64_t b) { return (int)((a + b - 1) / b); }
static int64_t pad_to(int64_t a, int64_t b) { return (a + b - 1) / b * b; }
static int ew_grid(int64_t work, int threads, int cap) {
    int g = cdiv64(work, threads);
    if (g > cap) g = cap;
    return g < 1 ? 1 : g;
}

// every device buffer starts zeroed (the GEMM tuning runs read them before any data arrives)
static void *zeroed_buffer(size_t bytes) {
    void *p = NULL;
    if (bytes < 256) bytes = 256;
    cudaCheck(cudaMalloc(&p, bytes));
    cudaCheck(cudaMemset(p, 0, bytes));
    return p;
}

// the largest power of two (<= 256) dividing a per-step pointer stride: the alignment cublasLt may assume
static uint32_t stride_alignment(size_t bytes) {
    uint32_t a = 256;
    while (a > 4 && bytes % a != 0) a >>= 1;
    return a;
}

// host memory the CUDA driver has pinned (cudaMallocHost / cudaHostAlloc / cudaHostRegister): copies from it run at
// full PCIe speed and asynchronously; pageable memory goes through the driver's staging buffers
static bool host_is_pinned(const void *p) {
    if (!p) return false;
    cudaPointerAttributes a;
    memset(&a, 0, sizeof a);
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();  // not a CUDA pointer at all: pageable (clears the non-sticky error)
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}

// ---------------------------------------------------------------------------------------------------------------
// kernels

// x[r, :] = image row src and y[r] = labels[src], src = order[r] (order NULL: src = r), r < rows. The source is the
// float images when floats is given (mnist_pixel_value of each byte already, bit for bit), else the bytes, scaled.
// An entry outside 0..n_src-1 reads row 0 instead and sets *err; the host reports it once the run is over.
__global__ void gather_scale_kernel(const uint8_t *__restrict__ bytes, const float *__restrict__ floats,
                                    const uint8_t *__restrict__ labels, const int32_t *__restrict__ order, int n_src,
                                    int rows, int pixels, float *__restrict__ x, uint8_t *__restrict__ y,
                                    int *__restrict__ err) {
    const bool vec = (pixels & 3) == 0;
    const int per_row = vec ? pixels >> 2 : pixels;
    const int64_t total = (int64_t)rows * per_row;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        const int r = (int)(t / per_row);
        const int q = (int)(t - (int64_t)r * per_row);
        int src = order ? order[r] : r;
        if ((unsigned)src >= (unsigned)n_src) {
            if (err && q == 0) atomicOr(err, 1);
            src = 0;
        }
        if (vec) {
            float4 v4;
            if (floats) {
                v4 = reinterpret_cast<const float4 *>(floats + (size_t)src * pixels)[q];
            } else {
                const uchar4 v = reinterpret_cast<const uchar4 *>(bytes + (size_t)src * pixels)[q];
                v4 = make_float4(mnist_pixel_value(v.x), mnist_pixel_value(v.y), mnist_pixel_value(v.z),
                                 mnist_pixel_value(v.w));
            }
            reinterpret_cast<float4 *>(x + (size_t)r * pixels)[q] = v4;
        } else {
            const size_t i = (size_t)src * pixels + q;
            x[(size_t)r * pixels + q] = floats ? floats[i] : mnist_pixel_value(bytes[i]);
        }
        if (y && q == 0) y[r] = labels[src];
    }
}

// the parameters' two layouts: packed (the caller's, tensor after tensor) and padded (each tensor on 256 bytes)
struct Repack {
    int n;                     // segments: W_0, b_0, W_1, b_1, ...
    int64_t packed[2 * MAXL];  // first element in the packed layout; the segments are contiguous there
    int64_t padded[2 * MAXL];  // first element in the padded layout
};

__global__ void repack_kernel(Repack rp, const float *__restrict__ src, float *__restrict__ dst, int64_t total,
                              int to_padded) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int s = 0;
        while (s + 1 < rp.n && i >= rp.packed[s + 1]) s++;
        const int64_t p = rp.padded[s] + (i - rp.packed[s]);
        if (to_padded) dst[p] = src[i];
        else dst[i] = src[p];
    }
}

// fallback epilogue, for a GEMM cublasLt would not fuse: out (rows, cols) += bias (cols), then ReLU if relu
__global__ void bias_act_kernel(float *__restrict__ out, const float *__restrict__ bias, int64_t total, int cols,
                                int relu) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const float v = out[i] + bias[(int)(i % cols)];
        out[i] = relu ? fmaxf(v, 0.0f) : v;
    }
}

// a middle layer's gradient through its ReLU: dpre = dact where act > 0, else 0
__global__ void drelu_kernel(const float *__restrict__ dact, const float *__restrict__ act, float *__restrict__ dpre,
                             int64_t total) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride)
        dpre[i] = act[i] > 0.0f ? dact[i] : 0.0f;
}

// The head, one warp per row: z = a[row] @ W + b (W: K x NCLS row-major), softmax cross-entropy.
// TRAIN: row_loss[row]; dlogits[row] = (softmax - onehot) * inv_batch; and, when dprev is given (a hidden layer
//        feeds the head), dprev[row] = (a[row] > 0) * (dlogits[row] @ W^T), from the W of this step (not updated yet).
// eval:  row_loss[row] and correct[row] (first index of the largest logit == label).
template <bool TRAIN>
__global__ void __launch_bounds__(HEAD_WARPS * 32)
head_kernel(const float *__restrict__ a, int rows, int K, const float *__restrict__ W, const float *__restrict__ b,
            const uint8_t *__restrict__ labels, float inv_batch, float *__restrict__ row_loss,
            float *__restrict__ dlogits, float *__restrict__ dprev, int *__restrict__ correct) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * HEAD_WARPS + (threadIdx.x >> 5);
    if (row >= rows) return;  // the whole warp leaves together
    const float *ar = a + (size_t)row * K;

    float z[NCLS];
#pragma unroll
    for (int j = 0; j < NCLS; j++) z[j] = 0.0f;
    for (int k = lane; k < K; k += 32) {
        const float av = ar[k];
        const float *wr = W + (size_t)k * NCLS;
#pragma unroll
        for (int j = 0; j < NCLS; j++) z[j] = fmaf(av, wr[j], z[j]);
    }
    // butterfly sums: every lane ends with the same bits
#pragma unroll
    for (int j = 0; j < NCLS; j++) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) z[j] += __shfl_xor_sync(0xffffffffu, z[j], o);
        z[j] += b[j];
    }

    const int y = labels[row];
    float m = z[0];
    int arg = 0;
#pragma unroll
    for (int j = 1; j < NCLS; j++) {
        if (z[j] > m) {
            m = z[j];
            arg = j;
        }
    }
    float e[NCLS], s = 0.0f, zy = m;
#pragma unroll
    for (int j = 0; j < NCLS; j++) {
        e[j] = expf(z[j] - m);
        s += e[j];
        if (j == y) zy = z[j];
    }
    const float loss = logf(s) + (m - zy);

    if constexpr (TRAIN) {
        float g[NCLS];
#pragma unroll
        for (int j = 0; j < NCLS; j++) g[j] = (e[j] / s - (j == y ? 1.0f : 0.0f)) * inv_batch;
        if (lane == 0) row_loss[row] = loss;
#pragma unroll
        for (int j = 0; j < NCLS; j++)
            if (lane == j) dlogits[(size_t)row * NCLS + j] = g[j];
        if (dprev) {
            float *dr = dprev + (size_t)row * K;
            for (int k = lane; k < K; k += 32) {
                const float *wr = W + (size_t)k * NCLS;
                float acc = 0.0f;
#pragma unroll
                for (int j = 0; j < NCLS; j++) acc = fmaf(g[j], wr[j], acc);
                dr[k] = ar[k] > 0.0f ? acc : 0.0f;
            }
        }
    } else {
        if (lane == 0) {
            row_loss[row] = loss;
            correct[row] = arg == y ? 1 : 0;
        }
    }
}

// acc[i][j] += a[i] * w[j]: one step of a 4 x 4 register tile
__device__ __forceinline__ void outer4(float (&acc)[4][4], const float4 a, const float4 w) {
    const float av[4] = {a.x, a.y, a.z, a.w};
    const float wv[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = fmaf(av[i], wv[j], acc[i][j]);
}

// The first layer's update and the next step's forward through it, one 32 x 32 tile of W0 (P x H row-major) per
// block: rows k0.., columns h0..; grid (ceil(P / 32), ceil(H / 32)). B is the batch.
//   x_upd given: step s's update of the tile, W0[k, h] = fmaf(-lr, sum_b x_upd[b, k] * dpre0[b, h], W0[k, h]).
//   x_fwd given: step s+1's forward through the tile, from W0 as it is after the update (the same block wrote it):
//                part[blockIdx.x][b, h] = sum_{k in the tile} x_fwd[b, k] * W0[k, h]; head_fused adds the chunks up.
// Thread t: group g = t / 64, and within it an 8 x 8 grid of 4 x 4 register tiles (tr rows, tc columns). The update
// splits the batch between the 4 groups and adds their sums in group order; the forward gives each group 32 rows of
// the batch. Every sum has a fixed order: no atomics, the same bits on every run.
__global__ void __launch_bounds__(UF_THREADS)
uf_kernel(float *__restrict__ W0, const float *__restrict__ x_upd, const float *__restrict__ dpre0,
          const float *__restrict__ x_fwd, float *__restrict__ part, int B, int P, int H, float lr) {
    // s_a: the update's x slab [b][k] (row stride 32), then the 4 groups' sums, then the forward's x slab
    //      transposed, [k][b] (row stride UF_XT); s_b: the update's dpre0 slab [b][h]; s_w: the W0 tile [k][h]
    __shared__ __align__(16) float s_a[UF_TILE * UF_XT];
    __shared__ __align__(16) float s_b[UF_SLAB * UF_TILE];
    __shared__ __align__(16) float s_w[UF_TILE * UF_TILE];

    const int t = threadIdx.x;
    const int g = t >> 6, u = t & 63, tr = u >> 3, tc = u & 7;
    const int k0 = blockIdx.x * UF_TILE, h0 = blockIdx.y * UF_TILE;

    if (x_upd) {
        float acc[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
        for (int b0 = 0; b0 < B; b0 += UF_SLAB) {
#pragma unroll 4
            for (int i = t; i < UF_SLAB * UF_TILE; i += UF_THREADS) {
                const int bb = i >> 5, c = i & 31;
                const int b = b0 + bb, k = k0 + c, h = h0 + c;
                s_a[i] = (b < B && k < P) ? x_upd[(size_t)b * P + k] : 0.0f;
                s_b[i] = (b < B && h < H) ? dpre0[(size_t)b * H + h] : 0.0f;
            }
            __syncthreads();
            const float *pa = s_a + g * 32 * UF_TILE + tr * 4;
            const float *pb = s_b + g * 32 * UF_TILE + tc * 4;
#pragma unroll 8
            for (int bb = 0; bb < 32; bb++) {
                const float4 a = *reinterpret_cast<const float4 *>(pa + bb * UF_TILE);
                const float4 w = *reinterpret_cast<const float4 *>(pb + bb * UF_TILE);
                outer4(acc, a, w);
            }
            __syncthreads();  // the slab buffers are refilled (or reused for the sums) next
        }
        // the four groups' sums, added in group order; the tile's rows k0 + kk, columns h0 + hh
        float *red = s_a;
#pragma unroll
        for (int i = 0; i < 4; i++)
            *reinterpret_cast<float4 *>(red + g * UF_TILE * UF_TILE + (tr * 4 + i) * UF_TILE + tc * 4) =
                make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        __syncthreads();
        for (int o = t; o < UF_TILE * UF_TILE; o += UF_THREADS) {
            const int kk = o >> 5, hh = o & 31, k = k0 + kk, h = h0 + hh;
            const int q = UF_TILE * UF_TILE;
            const float sum = ((red[o] + red[q + o]) + red[2 * q + o]) + red[3 * q + o];
            float wn = 0.0f;
            if (k < P && h < H) {
                float *wp = W0 + (size_t)k * H + h;
                wn = fmaf(-lr, sum, *wp);
                *wp = wn;
            }
            s_w[o] = wn;
        }
        __syncthreads();  // s_w is complete and s_a (the sums) free again
    } else if (x_fwd) {
        for (int o = t; o < UF_TILE * UF_TILE; o += UF_THREADS) {
            const int kk = o >> 5, hh = o & 31, k = k0 + kk, h = h0 + hh;
            s_w[o] = (k < P && h < H) ? W0[(size_t)k * H + h] : 0.0f;
        }
        __syncthreads();
    }
    if (!x_fwd) return;  // the whole block leaves together

    float *pout = part + (size_t)blockIdx.x * B * H;
    for (int b0 = 0; b0 < B; b0 += UF_SLAB) {
#pragma unroll 4
        for (int i = t; i < UF_SLAB * UF_TILE; i += UF_THREADS) {
            const int bb = i >> 5, kk = i & 31;
            const int b = b0 + bb, k = k0 + kk;
            s_a[kk * UF_XT + bb] = (b < B && k < P) ? x_fwd[(size_t)b * P + k] : 0.0f;
        }
        __syncthreads();
        float acc[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
        const float *pa = s_a + g * 32 + tr * 4;
        const float *pw = s_w + tc * 4;
#pragma unroll 8
        for (int kk = 0; kk < UF_TILE; kk++) {
            const float4 a = *reinterpret_cast<const float4 *>(pa + kk * UF_XT);
            const float4 w = *reinterpret_cast<const float4 *>(pw + kk * UF_TILE);
            outer4(acc, a, w);
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int b = b0 + g * 32 + tr * 4 + i;
            if (b < B) {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int h = h0 + tc * 4 + j;
                    if (h < H) pout[(size_t)b * H + h] = acc[i][j];
                }
            }
        }
        __syncthreads();  // s_a is refilled by the next slab
    }
}

// The fused variant's head, one block per row (grid = rows): the hidden layer's pre-activation is the sum of
// uf_kernel's nchunks partial planes (part[c] is (rows, K)), added in chunk order, then + b0; act = ReLU of it.
// Then as head_kernel<true>: z = act @ W + b, softmax cross-entropy, row_loss, dlogits, and
// dprev = (act > 0) * (dlogits @ W^T), from this step's W (the finish kernel updates it later).
__global__ void __launch_bounds__(HF_THREADS)
head_fused_kernel(const float *__restrict__ part, int nchunks, const float *__restrict__ b0, int rows, int K,
                  const float *__restrict__ W, const float *__restrict__ b, const uint8_t *__restrict__ labels,
                  float inv_batch, float *__restrict__ act, float *__restrict__ row_loss,
                  float *__restrict__ dlogits, float *__restrict__ dprev) {
    constexpr int NW = HF_THREADS / 32;
    __shared__ float s_z[NW][NCLS];
    const int row = blockIdx.x, t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const size_t plane = (size_t)rows * K;
    const float *pr = part + (size_t)row * K;
    float *ar = act + (size_t)row * K;

    float z[NCLS];
#pragma unroll
    for (int j = 0; j < NCLS; j++) z[j] = 0.0f;
    for (int k = t; k < K; k += HF_THREADS) {
        float s = 0.0f;
#pragma unroll 16
        for (int c = 0; c < nchunks; c++) s += pr[(size_t)c * plane + k];
        const float av = fmaxf(s + b0[k], 0.0f);
        ar[k] = av;
        const float *wr = W + (size_t)k * NCLS;
#pragma unroll
        for (int j = 0; j < NCLS; j++) z[j] = fmaf(av, wr[j], z[j]);
    }
    // warp butterflies, then the warps in order: every thread ends with the same bits
#pragma unroll
    for (int j = 0; j < NCLS; j++) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) z[j] += __shfl_xor_sync(0xffffffffu, z[j], o);
    }
    if (lane == 0) {
#pragma unroll
        for (int j = 0; j < NCLS; j++) s_z[warp][j] = z[j];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < NCLS; j++) {
        float v = s_z[0][j];
#pragma unroll
        for (int w = 1; w < NW; w++) v += s_z[w][j];
        z[j] = v + b[j];
    }

    const int y = labels[row];
    float m = z[0];
#pragma unroll
    for (int j = 1; j < NCLS; j++) m = z[j] > m ? z[j] : m;
    float e[NCLS], s = 0.0f, zy = m;
#pragma unroll
    for (int j = 0; j < NCLS; j++) {
        e[j] = expf(z[j] - m);
        s += e[j];
        if (j == y) zy = z[j];
    }
    const float loss = logf(s) + (m - zy);
    float g[NCLS];
#pragma unroll
    for (int j = 0; j < NCLS; j++) g[j] = (e[j] / s - (j == y ? 1.0f : 0.0f)) * inv_batch;
    if (t == 0) row_loss[row] = loss;
#pragma unroll
    for (int j = 0; j < NCLS; j++)
        if (t == j) dlogits[(size_t)row * NCLS + j] = g[j];
    float *dr = dprev + (size_t)row * K;
    for (int k = t; k < K; k += HF_THREADS) {  // the same k as above: each thread reads back its own act
        const float *wr = W + (size_t)k * NCLS;
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < NCLS; j++) acc = fmaf(g[j], wr[j], acc);
        dr[k] = ar[k] > 0.0f ? acc : 0.0f;
    }
}

// What the finish kernel of a step reads and writes (by value: the step's own pointers are filled in per step).
struct FinishArgs {
    int batch;
    int items;                 // bias entries of every layer, then the last layer's k_last * NCLS weights
    int bias_total;            // sum of the layers' widths
    int k_last;                // rows of the last layer's W
    float lr;
    float *bias[MAXL];         // b_l (padded parameters)
    const float *dpre[MAXL];   // (batch, width[l]): the gradient before layer l's activation (l = last: dlogits)
    int width[MAXL];           // sizes[l + 1]
    int bias_end[MAXL];        // running sum of width[]
    float *w_last;             // W of the last layer (k_last x NCLS)
    const float *a_last;       // its input (batch, k_last): this step's x slice or the last hidden activation
    const float *g_last;       // dlogits (batch, NCLS)
    const float *row_loss;     // (batch)
    float *loss_out;           // the step's mean loss
};

// One output per group of FIN_LANES lanes, each lane adding every FIN_LANES-th row in double, then a butterfly:
// a fixed order. b -= lr * sum_i dpre[i, j]; W_last[h, j] -= lr * sum_i a_last[i, h] * dlogits[i, j]; rounded once.
// The last block reduces the step's loss. It runs beside the weight updates, which touch none of these.
__global__ void __launch_bounds__(FIN_THREADS) finish_kernel(FinishArgs f) {
    if (blockIdx.x == gridDim.x - 1) {
        if (threadIdx.x < 32) {
            double s = 0.0;
            for (int i = threadIdx.x; i < f.batch; i += 32) s += (double)f.row_loss[i];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (threadIdx.x == 0) *f.loss_out = (float)(s / f.batch);
        }
        return;
    }
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const int item = t / FIN_LANES, r = t % FIN_LANES;
    const bool active = item < f.items;
    double acc = 0.0;
    float *dst = NULL;
    if (active) {
        if (item < f.bias_total) {
            int l = 0;
            while (item >= f.bias_end[l]) l++;
            const int j = item - (l > 0 ? f.bias_end[l - 1] : 0);
            const int w = f.width[l];
            const float *g = f.dpre[l] + j;
#pragma unroll 4
            for (int i = r; i < f.batch; i += FIN_LANES) acc += (double)g[(size_t)i * w];
            dst = f.bias[l] + j;
        } else {
            const int u = item - f.bias_total;
            const int h = u / NCLS, j = u - h * NCLS;
            const float *a = f.a_last + h;
            const float *g = f.g_last + j;
#pragma unroll 4
            for (int i = r; i < f.batch; i += FIN_LANES)
                acc += (double)a[(size_t)i * f.k_last] * (double)g[(size_t)i * NCLS];
            dst = f.w_last + (size_t)h * NCLS + j;
        }
    }
    // groups are FIN_LANES-aligned inside the warp; every lane takes part (inactive ones add 0)
#pragma unroll
    for (int o = FIN_LANES / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (active && r == 0) *dst = (float)((double)*dst - (double)f.lr * acc);
}

// test loss and accuracy from the per-row results: one block, fixed order
__global__ void __launch_bounds__(EVAL_THREADS)
eval_finish_kernel(const float *__restrict__ row_loss, const int *__restrict__ correct, int n,
                   float *__restrict__ loss_out, float *__restrict__ acc_out) {
    __shared__ double s_loss[EVAL_THREADS];
    __shared__ int s_correct[EVAL_THREADS];
    double l = 0.0;
    int c = 0;
    for (int i = threadIdx.x; i < n; i += EVAL_THREADS) {
        l += (double)row_loss[i];
        c += correct[i];
    }
    s_loss[threadIdx.x] = l;
    s_correct[threadIdx.x] = c;
    __syncthreads();
    for (int h = EVAL_THREADS / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) {
            s_loss[threadIdx.x] += s_loss[threadIdx.x + h];
            s_correct[threadIdx.x] += s_correct[threadIdx.x + h];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        *loss_out = n > 0 ? (float)(s_loss[0] / n) : 0.0f;
        *acc_out = n > 0 ? (float)((double)s_correct[0] / n) : 0.0f;
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The persistent kernel (variant "persistent", one hidden layer): an epoch's steps inside one cooperative launch.
//
// Block i owns the tile W0[k0 .. k0 + klen, h0 .. h0 + hlen) (k chunk kb = i % KB, hidden tile hb = i / KB), kept in
// shared memory from the launch's start to its end. Everything another block wrote inside this launch is read
// through L2 (ld.global.cg / cp.async.cg) after a grid barrier, never from a possibly stale L1 line.

struct PersistArgs {
    float *W0, *b0, *W1, *b1;  // the padded parameters: W0 (P x H), b0 (H), W1 (H x NCLS), b1 (NCLS)
    const float *train;        // (n_train, P) the training images as floats
    const uint8_t *labels;     // (n_train)
    const int32_t *order;      // this epoch's batch order: step s, row b -> order[s * B + b]
    float *part;               // (KB, B, H) the forward's partial sums, one plane per k chunk
    float *act;                // (B, H) the hidden activation after the ReLU
    float *dpre0;              // (B, H) the gradient before the ReLU
    float *dlogits;            // (B, NCLS)
    float *row_loss;           // (B)
    float *step_loss;          // this epoch's step losses, indexed by step
    unsigned *bar;             // the grid barrier's counter: zero when a PK_ALL launch starts
    int *err;                  // set when the batch order has an entry outside 0..n_train-1
    int n_train, B, Bp, P, H, KB, kc;
    float lr;
    int s_begin, s_end, mode;  // the steps [s_begin, s_end) and the phases (PK_*) this launch runs
};

// shared memory, in floats: two x slabs (Bp x kc each), the W0 tile (kc x 16), the dpre0 slab (Bp x 16), the
// group-sum scratch, the head's per-warp logits
static size_t pk_smem_floats(int Bp, int kc) {
    return 2 * (size_t)Bp * kc + (size_t)kc * PK_HT + (size_t)Bp * PK_HT + PK_RED + PK_WARPS * NCLS;
}

// 16 bytes global -> shared, asynchronous on sm_80 and later (through L2 only), a plain copy before
__device__ __forceinline__ void pk_cp16(float *sdst, const float *gsrc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned s = (unsigned)__cvta_generic_to_shared(sdst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gsrc) : "memory");
#else
    *reinterpret_cast<float4 *>(sdst) = __ldcg(reinterpret_cast<const float4 *>(gsrc));
#endif
}

// this thread's cp.async copies have landed (a __syncthreads makes them everyone's)
__device__ __forceinline__ void pk_cp_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Every block arrives once; target counts the arrivals this launch has seen so far. Thread 0 publishes the block's
// writes (the __syncthreads before orders the others' before its fence), arrives, waits for the rest, and fences
// again before the block goes on.
__device__ __forceinline__ void pk_grid_sync(unsigned *bar, unsigned &target) {
    target += gridDim.x;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(bar, 1u);
        const volatile unsigned *vb = bar;
        while ((int)(*vb - target) < 0) {
        }
        __threadfence();
    }
    __syncthreads();
}

// the training row of step s, batch row b (an entry outside 0..n_train-1 reads row 0 and sets *err)
__device__ __forceinline__ int pk_src(const PersistArgs &a, int s, int b) {
    int src = __ldg(a.order + (size_t)s * a.B + b);
    if ((unsigned)src >= (unsigned)a.n_train) {
        atomicOr(a.err, 1);
        src = 0;
    }
    return src;
}

// X[b, 0 .. klen) = x_s[b, k0 .. k0 + klen) for b < B (row stride kc), 16 bytes a copy, not waited for
__device__ __forceinline__ void pk_load_x(const PersistArgs &a, int s, int k0, int klen, float *X) {
    const int q = klen >> 2;
    const int total = a.B * q;
    for (int i = threadIdx.x; i < total; i += PK_THREADS) {
        const int b = i / q, c = i - b * q;
        const int src = pk_src(a, s, b);
        pk_cp16(X + (size_t)b * a.kc + 4 * c, a.train + (size_t)src * a.P + k0 + 4 * c);
    }
}

// F: part[kb][b, h0 + h] = sum_{k < klen} X[b, k] * w[k, h], b < B, h < hlen. Thread tiles of 4 rows x 4 columns
// (Bp of them); when there are threads to spare the k columns split into G groups, added in group order.
__device__ __forceinline__ void pk_forward(const PersistArgs &a, const float *X, const float *w, float *red, int kb,
                                           int h0, int hlen, int klen) {
    const int t = threadIdx.x, B = a.B, Bp = a.Bp, kc = a.kc, H = a.H;
    const int ncol = klen >> 2;  // float4 columns of X, row quads of w
    const int ntile = Bp;        // (Bp / 4) row quads x 4 column quads
    int G = PK_THREADS / ntile;
    if (G > PK_FWD_GROUPS) G = PK_FWD_GROUPS;
    if (G > ncol) G = ncol;
    if (G < 1) G = 1;
    const int cpg = (ncol + G - 1) / G;
    float *out = a.part + (size_t)kb * B * H + h0;
    for (int u = t; u < ntile * G; u += PK_THREADS) {
        const int g = u / ntile, tile = u - g * ntile;
        const int bt = tile >> 2, ht = tile & 3;
        float acc[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
        const float *xr = X + (size_t)bt * 4 * kc;
        const float *wr = w + ht * 4;
        const int c1 = min(ncol, (g + 1) * cpg);
        for (int c = g * cpg; c < c1; c++) {
            float4 xv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) xv[i] = *reinterpret_cast<const float4 *>(xr + (size_t)i * kc + 4 * c);
            const float4 w0 = *reinterpret_cast<const float4 *>(wr + (4 * c + 0) * PK_HT);
            const float4 w1 = *reinterpret_cast<const float4 *>(wr + (4 * c + 1) * PK_HT);
            const float4 w2 = *reinterpret_cast<const float4 *>(wr + (4 * c + 2) * PK_HT);
            const float4 w3 = *reinterpret_cast<const float4 *>(wr + (4 * c + 3) * PK_HT);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float x0 = xv[i].x, x1 = xv[i].y, x2 = xv[i].z, x3 = xv[i].w;
                acc[i][0] = fmaf(x3, w3.x, fmaf(x2, w2.x, fmaf(x1, w1.x, fmaf(x0, w0.x, acc[i][0]))));
                acc[i][1] = fmaf(x3, w3.y, fmaf(x2, w2.y, fmaf(x1, w1.y, fmaf(x0, w0.y, acc[i][1]))));
                acc[i][2] = fmaf(x3, w3.z, fmaf(x2, w2.z, fmaf(x1, w1.z, fmaf(x0, w0.z, acc[i][2]))));
                acc[i][3] = fmaf(x3, w3.w, fmaf(x2, w2.w, fmaf(x1, w1.w, fmaf(x0, w0.w, acc[i][3]))));
            }
        }
        if (G == 1) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int b = bt * 4 + i;
                if (b < B) {
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        if (ht * 4 + j < hlen) __stcg(out + (size_t)b * H + ht * 4 + j, acc[i][j]);
                }
            }
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++)
                *reinterpret_cast<float4 *>(red + ((size_t)g * Bp + bt * 4 + i) * PK_HT + ht * 4) =
                    make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        }
    }
    if (G > 1) {  // the same for every thread of the block
        __syncthreads();
        for (int o = t; o < B * PK_HT; o += PK_THREADS) {
            const int b = o >> 4, h = o & 15;
            if (h < hlen) {
                float v = red[o];
                for (int g = 1; g < G; g++) v += red[(size_t)g * Bp * PK_HT + o];
                __stcg(out + (size_t)b * H + h, v);
            }
        }
    }
}

// U, the W0 tile: w[k, h] = fmaf(-lr, sum_b X[b, k] * D[b, h], w[k, h]) for k < klen (every column: D's padding
// columns are zero, so the tile's padding stays zero). Thread tiles of 4 k x 4 h (klen of them); the batch splits
// into G contiguous groups, added in group order.
__device__ __forceinline__ void pk_update_w(const PersistArgs &a, const float *X, const float *D, float *w,
                                            float *red, int klen) {
    const int t = threadIdx.x, B = a.B, kc = a.kc;
    const int tiles = klen;  // (klen / 4) row quads x 4 column quads
    int G = PK_THREADS / tiles;
    if (G > PK_UPD_GROUPS) G = PK_UPD_GROUPS;
    if (G > B) G = B;
    if (G < 1) G = 1;
    const int bpg = (B + G - 1) / G;
    for (int u = t; u < tiles * G; u += PK_THREADS) {
        const int g = u / tiles, tile = u - g * tiles;
        const int kt = tile >> 2, ht = tile & 3;
        float acc[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
        const int b1 = min(B, (g + 1) * bpg);
#pragma unroll 4
        for (int b = g * bpg; b < b1; b++) {
            const float4 xv = *reinterpret_cast<const float4 *>(X + (size_t)b * kc + kt * 4);
            const float4 dv = *reinterpret_cast<const float4 *>(D + (size_t)b * PK_HT + ht * 4);
            outer4(acc, xv, dv);
        }
        if (G == 1) {
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    float *wp = w + (kt * 4 + i) * PK_HT + ht * 4 + j;
                    *wp = fmaf(-a.lr, acc[i][j], *wp);
                }
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++)
                *reinterpret_cast<float4 *>(red + ((size_t)g * klen + kt * 4 + i) * PK_HT + ht * 4) =
                    make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        }
    }
    if (G > 1) {  // the same for every thread of the block
        __syncthreads();
        for (int o = t; o < klen * PK_HT; o += PK_THREADS) {
            float v = red[o];
            for (int g = 1; g < G; g++) v += red[(size_t)g * klen * PK_HT + o];
            w[o] = fmaf(-a.lr, v, w[o]);
        }
    }
}

// H: head_fused_kernel's arithmetic, one batch row per block at a time (rows blockIdx.x, + gridDim.x, ...).
// pre = the KB partial planes added in chunk order, + b0; act = ReLU; z = act @ W1 + b1 (thread order, warp
// butterflies, then the warps in order); softmax cross-entropy; dlogits; dpre0 = (act > 0) * (dlogits @ W1^T).
__device__ __forceinline__ void pk_head(const PersistArgs &a, int s, float *hz) {
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int B = a.B, H = a.H, KB = a.KB;
    const size_t plane = (size_t)B * H;
    const float inv_batch = 1.0f / (float)B;
    for (int r = blockIdx.x; r < B; r += gridDim.x) {
        const int src = pk_src(a, s, r);
        const int y = __ldg(a.labels + src);
        const float *pr = a.part + (size_t)r * H;
        float *ar = a.act + (size_t)r * H;
        float z[NCLS];
#pragma unroll
        for (int j = 0; j < NCLS; j++) z[j] = 0.0f;
        for (int h = t; h < H; h += PK_THREADS) {
            float v = 0.0f;
#pragma unroll 8
            for (int c = 0; c < KB; c++) v += __ldcg(pr + (size_t)c * plane + h);
            const float av = fmaxf(v + __ldcg(a.b0 + h), 0.0f);
            __stcg(ar + h, av);
            const float *wr = a.W1 + (size_t)h * NCLS;
#pragma unroll
            for (int j = 0; j < NCLS; j++) z[j] = fmaf(av, __ldcg(wr + j), z[j]);
        }
#pragma unroll
        for (int j = 0; j < NCLS; j++) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) z[j] += __shfl_xor_sync(0xffffffffu, z[j], o);
        }
        if (lane == 0) {
#pragma unroll
            for (int j = 0; j < NCLS; j++) hz[warp * NCLS + j] = z[j];
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < NCLS; j++) {
            float v = hz[j];
#pragma unroll
            for (int w2 = 1; w2 < PK_WARPS; w2++) v += hz[w2 * NCLS + j];
            z[j] = v + __ldcg(a.b1 + j);
        }
        float m = z[0];
#pragma unroll
        for (int j = 1; j < NCLS; j++) m = z[j] > m ? z[j] : m;
        float e[NCLS], ssum = 0.0f, zy = m;
#pragma unroll
        for (int j = 0; j < NCLS; j++) {
            e[j] = expf(z[j] - m);
            ssum += e[j];
            if (j == y) zy = z[j];
        }
        const float loss = logf(ssum) + (m - zy);
        float g[NCLS];
#pragma unroll
        for (int j = 0; j < NCLS; j++) g[j] = (e[j] / ssum - (j == y ? 1.0f : 0.0f)) * inv_batch;
        if (t == 0) __stcg(a.row_loss + r, loss);
#pragma unroll
        for (int j = 0; j < NCLS; j++)
            if (t == j) __stcg(a.dlogits + (size_t)r * NCLS + j, g[j]);
        float *dr = a.dpre0 + (size_t)r * H;
        for (int h = t; h < H; h += PK_THREADS) {  // the same h as above: each thread reads back its own act
            const float *wr = a.W1 + (size_t)h * NCLS;
            float acc = 0.0f;
#pragma unroll
            for (int j = 0; j < NCLS; j++) acc = fmaf(g[j], __ldcg(wr + j), acc);
            __stcg(dr + h, __ldcg(ar + h) > 0.0f ? acc : 0.0f);
        }
        __syncthreads();  // hz is rewritten by the next row
    }
}

// U, the rest: finish_kernel's arithmetic over every block. Item = b0[j] (j < H), b1[j] (H + j), W1[h, j] (after);
// FIN_LANES lanes add up one item over the batch in double (lane r takes rows r, r + FIN_LANES, ...), a butterfly,
// rounded once. The loop runs the same number of times for every lane of a warp (the shuffles need them all).
// The last block's first warp reduces the step's loss.
__device__ __forceinline__ void pk_finish(const PersistArgs &a, int s) {
    const int t = threadIdx.x, B = a.B, H = a.H;
    const int r = t % FIN_LANES;
    constexpr int groups_per_block = PK_THREADS / FIN_LANES;
    const int items = H + NCLS + H * NCLS;
    const int stride = gridDim.x * groups_per_block;
    for (int base = blockIdx.x * groups_per_block + (t >> 5) * (32 / FIN_LANES); base < items; base += stride) {
        const int item = base + (t & 31) / FIN_LANES;
        const bool active = item < items;
        double acc = 0.0;
        float *dst = NULL;
        if (active) {
            if (item < H) {
                const float *g = a.dpre0 + item;
#pragma unroll 4
                for (int i = r; i < B; i += FIN_LANES) acc += (double)__ldcg(g + (size_t)i * H);
                dst = a.b0 + item;
            } else if (item < H + NCLS) {
                const int j = item - H;
                const float *g = a.dlogits + j;
#pragma unroll 4
                for (int i = r; i < B; i += FIN_LANES) acc += (double)__ldcg(g + (size_t)i * NCLS);
                dst = a.b1 + j;
            } else {
                const int u = item - H - NCLS;
                const int h = u / NCLS, j = u - h * NCLS;
                const float *av = a.act + h;
                const float *g = a.dlogits + j;
#pragma unroll 4
                for (int i = r; i < B; i += FIN_LANES)
                    acc += (double)__ldcg(av + (size_t)i * H) * (double)__ldcg(g + (size_t)i * NCLS);
                dst = a.W1 + (size_t)h * NCLS + j;
            }
        }
#pragma unroll
        for (int o = FIN_LANES / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (active && r == 0) __stcg(dst, (float)((double)__ldcg(dst) - (double)a.lr * acc));
    }
    if (blockIdx.x == gridDim.x - 1 && t < 32) {
        double sum = 0.0;
        for (int i = t; i < B; i += 32) sum += (double)__ldcg(a.row_loss + i);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (t == 0) a.step_loss[s] = (float)(sum / B);
    }
}

// The steps [s_begin, s_end) of one epoch. mode PK_ALL (one cooperative launch, every block resident): per step
// F, grid barrier, H, grid barrier, U. A single phase (PK_FWD, PK_HEAD or PK_UPD: --breakdown, an ordinary launch
// per phase and step) runs without barriers: the launches in stream order are the barriers.
__global__ void __launch_bounds__(PK_THREADS, 1) persist_kernel(PersistArgs a) {
    extern __shared__ float4 pk_smem4[];
    float *sm = reinterpret_cast<float *>(pk_smem4);
    const int Bp = a.Bp, kc = a.kc, t = threadIdx.x;
    float *xs0 = sm;                            // x slab of the even steps (Bp x kc)
    float *xs1 = xs0 + (size_t)Bp * kc;         // of the odd steps
    float *w = xs1 + (size_t)Bp * kc;           // the W0 tile (kc x 16), zero outside klen x hlen
    float *D = w + (size_t)kc * PK_HT;          // the step's dpre0 for the tile's columns (Bp x 16)
    float *red = D + (size_t)Bp * PK_HT;        // group sums (PK_RED)
    float *hz = red + PK_RED;                   // the head's per-warp logits (PK_WARPS x NCLS)

    const int kb = blockIdx.x % a.KB, hb = blockIdx.x / a.KB;
    const int k0 = kb * kc, h0 = hb * PK_HT;
    const int klen = min(kc, a.P - k0), hlen = min(PK_HT, a.H - h0);
    const bool tile_work = (a.mode & (PK_FWD | PK_UPD)) != 0 && a.s_begin < a.s_end;

    if (tile_work) {
        for (int i = t; i < kc * PK_HT; i += PK_THREADS) {
            const int k = i >> 4, h = i & 15;
            w[i] = (k < klen && h < hlen) ? __ldcg(a.W0 + (size_t)(k0 + k) * a.H + h0 + h) : 0.0f;
        }
        pk_load_x(a, a.s_begin, k0, klen, (a.s_begin & 1) ? xs1 : xs0);
        pk_cp_wait();
        __syncthreads();
    }

    unsigned target = 0;
    for (int s = a.s_begin; s < a.s_end; s++) {
        float *X = (s & 1) ? xs1 : xs0;
        if (a.mode & PK_FWD) pk_forward(a, X, w, red, kb, h0, hlen, klen);
        if (a.mode == PK_ALL) {
            // the next step's slab goes into the other buffer, last read by the previous step's U (which ended in
            // a __syncthreads); it lands while the barriers and the head run
            if (s + 1 < a.s_end) pk_load_x(a, s + 1, k0, klen, (s & 1) ? xs0 : xs1);
            pk_grid_sync(a.bar, target);  // every partial plane is written
        }
        if (a.mode & PK_HEAD) pk_head(a, s, hz);
        if (a.mode == PK_ALL) pk_grid_sync(a.bar, target);  // act, dpre0, dlogits and row_loss are written
        if (a.mode & PK_UPD) {
            // D = dpre0[:, h0 .. h0 + 16), zero past hlen; asynchronous while the finish items load
            if ((a.H & 3) == 0) {
                for (int i = t; i < a.B * 4; i += PK_THREADS) {
                    const int b = i >> 2, q = i & 3;
                    float *dst = D + (size_t)b * PK_HT + 4 * q;
                    if (4 * q < hlen) pk_cp16(dst, a.dpre0 + (size_t)b * a.H + h0 + 4 * q);
                    else *reinterpret_cast<float4 *>(dst) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
            } else {
                for (int i = t; i < a.B * PK_HT; i += PK_THREADS) {
                    const int b = i >> 4, h = i & 15;
                    D[i] = h < hlen ? __ldcg(a.dpre0 + (size_t)b * a.H + h0 + h) : 0.0f;
                }
            }
            pk_finish(a, s);
            pk_cp_wait();  // D, and the next step's x slab
            __syncthreads();
            pk_update_w(a, X, D, w, red, klen);
            __syncthreads();  // the tile is complete before the next F reads it; red and D are free again
        }
    }

    if (tile_work && (a.mode & PK_UPD)) {
        for (int i = t; i < kc * PK_HT; i += PK_THREADS) {
            const int k = i >> 4, h = i & 15;
            if (k < klen && h < hlen) __stcg(a.W0 + (size_t)(k0 + k) * a.H + h0 + h, w[i]);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// GEMM plans (the "cublaslt" variant, and the test-set forward of both). Every matrix is row-major, so cuBLAS
// (column-major) sees each one transposed:
//   forward  out (rows, n_out) = in (rows, n_in) @ W (n_in, n_out) + b  ->  D (n_out x rows) = W' (n_out x n_in) * in'
//   update   W (n_in, n_out) -= lr * act^T (n_in, B) @ dpre (B, n_out)  ->  D (n_out x n_in) = dpre' * op_T(act')
//   backward dact (B, n_in) = dpre (B, n_out) @ W^T                      ->  D (n_in x B) = op_T(W') * dpre'
// cublasLt's bias has the length of D's rows (n_out) and is broadcast along its columns (the batch): b_l as is.

struct Blas {
    cublasHandle_t handle;  // classic cuBLAS: only for a shape cublasLt offers no algorithm for
    cublasLtHandle_t lt;
    void *lt_ws;
    size_t lt_ws_bytes;
    void *blas_ws;
};

enum { GEMM_LT_FUSED = 0, GEMM_LT_PLAIN = 1, GEMM_CLASSIC = 2 };

struct Gemm {
    int m, n, k;  // column-major D (m x n) = alpha * op(A) (m x k) * op(B) (k x n) + beta * D
    cublasOperation_t ta, tb;
    int lda, ldb, ldd;
    float alpha, beta;
    const float *bias;  // epilogue D += bias (length m), then ReLU if relu; NULL: none
    int relu;
    int mode;           // GEMM_LT_FUSED: everything in one cublasLt call; otherwise bias_act_kernel follows
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
};

static Gemm gemm_shape(int m, int n, int k, cublasOperation_t ta, cublasOperation_t tb, int lda, int ldb, int ldd,
                       float alpha, float beta, const float *bias, int relu) {
    Gemm g;
    memset(&g, 0, sizeof g);
    g.m = m;
    g.n = n;
    g.k = k;
    g.ta = ta;
    g.tb = tb;
    g.lda = lda;
    g.ldb = ldb;
    g.ldd = ldd;
    g.alpha = alpha;
    g.beta = beta;
    g.bias = bias;
    g.relu = relu;
    g.mode = GEMM_CLASSIC;
    return g;
}

static void gemm_run(const Blas &bl, const Gemm &g, const float *A, const float *B, float *D, cudaStream_t s) {
    if (g.mode == GEMM_CLASSIC) {
        // the handle's stream was set once, to the compute stream (setting it again would reset the workspace)
        cublasCheck(cublasSgemm(bl.handle, g.ta, g.tb, g.m, g.n, g.k, &g.alpha, A, g.lda, B, g.ldb, &g.beta, D, g.ldd));
    } else {
        cublasCheck(cublasLtMatmul(bl.lt, g.desc, &g.alpha, A, g.la, B, g.lb, &g.beta, D, g.ld, D, g.ld, &g.algo,
                                   bl.lt_ws, bl.lt_ws_bytes, s));
    }
    if (g.mode != GEMM_LT_FUSED && g.bias) {
        const int64_t total = (int64_t)g.n * g.m;
        bias_act_kernel<<<ew_grid(total, EW_THREADS, 4096), EW_THREADS, 0, s>>>(D, g.bias, total, g.m, g.relu);
        cudaCheck(cudaGetLastError());
    }
}

// A cublasLt plan for g (with the bias/ReLU epilogue when fuse): the heuristic's candidates for this shape,
// each timed on the real buffers (A, B, D), the fastest kept. False when none runs.
static bool lt_plan(const Blas &bl, Gemm &g, bool fuse, uint32_t align_b, const float *A, const float *B, float *D,
                    cudaStream_t s, cudaEvent_t t0, cudaEvent_t t1) {
    const cublasStatus_t ok = CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res[TUNE_CANDIDATES];
    memset(res, 0, sizeof res);
    int best = -1;
    do {
        if (cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != ok) break;  // strict fp32, no TF32
        const int32_t ta = (int32_t)g.ta, tb = (int32_t)g.tb;
        if (cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) != ok) break;
        if (cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) != ok) break;
        if (fuse && g.bias) {
            const cublasLtEpilogue_t epi = g.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
            if (cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) != ok) break;
            const void *bias = g.bias;
            if (cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) != ok)
                break;
        }
        // layouts as stored, before the transposes
        const bool an = g.ta == CUBLAS_OP_N, bn = g.tb == CUBLAS_OP_N;
        if (cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, an ? g.m : g.k, an ? g.k : g.m, g.lda) != ok) break;
        if (cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, bn ? g.k : g.n, bn ? g.n : g.k, g.ldb) != ok) break;
        if (cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, g.m, g.n, g.ldd) != ok) break;
        if (cublasLtMatmulPreferenceCreate(&pref) != ok) break;
        const uint64_t ws = bl.lt_ws_bytes;
        const uint32_t a256 = 256;
        if (cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) != ok)
            break;
        if (cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a256,
                                                 sizeof a256) != ok)
            break;
        if (cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                 sizeof align_b) != ok)
            break;
        if (cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &a256,
                                                 sizeof a256) != ok)
            break;
        if (cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &a256,
                                                 sizeof a256) != ok)
            break;
        int found = 0;
        if (cublasLtMatmulAlgoGetHeuristic(bl.lt, desc, la, lb, ld, ld, pref, TUNE_CANDIDATES, res, &found) != ok)
            break;
        float best_ms = 0.0f;
        for (int i = 0; i < found; i++) {
            if (res[i].state != ok || res[i].workspaceSize > bl.lt_ws_bytes) continue;
            bool good = true;
            for (int w = 0; w < TUNE_WARMUP && good; w++)
                good = cublasLtMatmul(bl.lt, desc, &g.alpha, A, la, B, lb, &g.beta, D, ld, D, ld, &res[i].algo,
                                      bl.lt_ws, bl.lt_ws_bytes, s) == ok;
            if (!good) continue;
            cudaCheck(cudaEventRecord(t0, s));
            for (int r = 0; r < TUNE_REPS && good; r++)
                good = cublasLtMatmul(bl.lt, desc, &g.alpha, A, la, B, lb, &g.beta, D, ld, D, ld, &res[i].algo,
                                      bl.lt_ws, bl.lt_ws_bytes, s) == ok;
            cudaCheck(cudaEventRecord(t1, s));
            cudaCheck(cudaEventSynchronize(t1));
            float ms = 0.0f;
            cudaCheck(cudaEventElapsedTime(&ms, t0, t1));
            if (good && (best < 0 || ms < best_ms)) {
                best = i;
                best_ms = ms;
            }
        }
    } while (0);
    if (pref) cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    if (best < 0) {
        if (ld) cublasCheck(cublasLtMatrixLayoutDestroy(ld));
        if (lb) cublasCheck(cublasLtMatrixLayoutDestroy(lb));
        if (la) cublasCheck(cublasLtMatrixLayoutDestroy(la));
        if (desc) cublasCheck(cublasLtMatmulDescDestroy(desc));
        return false;
    }
    g.desc = desc;
    g.la = la;
    g.lb = lb;
    g.ld = ld;
    g.algo = res[best].algo;
    return true;
}

// cublasLt with the fused epilogue; else cublasLt plus bias_act_kernel; else cublasSgemm plus bias_act_kernel
static void gemm_plan(const Blas &bl, Gemm &g, uint32_t align_b, const float *A, const float *B, float *D,
                      cudaStream_t s, cudaEvent_t t0, cudaEvent_t t1) {
    if (lt_plan(bl, g, true, align_b, A, B, D, s, t0, t1)) {
        g.mode = GEMM_LT_FUSED;
    } else if (g.bias && lt_plan(bl, g, false, align_b, A, B, D, s, t0, t1)) {
        g.mode = GEMM_LT_PLAIN;
    } else {
        g.mode = GEMM_CLASSIC;
        gemm_run(bl, g, A, B, D, s);  // loads its kernels now, not inside the graph capture
    }
    cudaCheck(cudaStreamSynchronize(s));
}

static void gemm_destroy(Gemm &g) {
    if (g.ld) cublasCheck(cublasLtMatrixLayoutDestroy(g.ld));
    if (g.lb) cublasCheck(cublasLtMatrixLayoutDestroy(g.lb));
    if (g.la) cublasCheck(cublasLtMatrixLayoutDestroy(g.la));
    if (g.desc) cublasCheck(cublasLtMatmulDescDestroy(g.desc));
    g.ld = g.lb = g.la = NULL;
    g.desc = NULL;
}

// ---------------------------------------------------------------------------------------------------------------
// the network on the device

struct Net {
    int L, batch, steps, pixels, n_test;
    int size[MAXL + 1];
    float lr;
    float *params;                  // padded layout
    int64_t w_off[MAXL], b_off[MAXL];
    float *xperm;                   // (steps * batch, pixels): this epoch's minibatches, in batch order, as floats
    uint8_t *yperm;                 // (steps * batch): their labels
    float *act[MAXL];               // act[l], 1 <= l < L: (batch, size[l]) after the ReLU
    float *dpre[MAXL];              // dpre[l], 0 <= l < L: (batch, size[l + 1]), gradient before the activation
    float *tmp;                     // (batch, widest hidden): a middle layer's dact
    float *row_loss;                // (batch)
    int n_chunks;                   // fused: ceil(pixels / UF_TILE), the forward's partial planes
    float *part;                    // fused: (n_chunks, batch, size[1])
    float *test_img;                // (n_test, pixels)
    uint8_t *test_labels;
    float *test_act[MAXL];          // (n_test, size[l])
    float *test_row_loss;
    int *test_correct;
    Gemm fwd[MAXL], upd[MAXL], bwd[MAXL], efwd[MAXL];
    FinishArgs fin;
    Blas blas;
    cudaStream_t side;              // the finish kernel's branch
    cudaEvent_t ev_fork, ev_join;
};

static float *layer_w(const Net &n, int l) { return n.params + n.w_off[l]; }
static float *layer_b(const Net &n, int l) { return n.params + n.b_off[l]; }
static const float *step_x(const Net &n, int step) { return n.xperm + (size_t)step * n.batch * n.pixels; }

// ---- the "cublaslt" step (round 4) ----

// hidden layers: act[l + 1] = relu(act[l] @ W_l + b_l), one cublasLt call each
static void step_forward(const Net &n, int step, cudaStream_t s) {
    const float *x = step_x(n, step);
    for (int l = 0; l + 1 < n.L; l++)
        gemm_run(n.blas, n.fwd[l], layer_w(n, l), l == 0 ? x : n.act[l], n.act[l + 1], s);
}

// last layer, loss, dlogits and the last hidden layer's dpre: one launch
static void step_head(const Net &n, int step, cudaStream_t s) {
    const int last = n.L - 1;
    const float *a = last == 0 ? step_x(n, step) : n.act[last];
    head_kernel<true><<<cdiv64(n.batch, HEAD_WARPS), HEAD_WARPS * 32, 0, s>>>(
        a, n.batch, n.size[last], layer_w(n, last), layer_b(n, last), n.yperm + (size_t)step * n.batch,
        1.0f / (float)n.batch, n.row_loss, n.dpre[last], last > 0 ? n.dpre[last - 1] : NULL, NULL);
    cudaCheck(cudaGetLastError());
}

// middle layers (two or more hidden layers only): dpre[l - 1] = (dpre[l] @ W_l^T) * (act[l] > 0)
static void step_backward(const Net &n, cudaStream_t s) {
    for (int l = n.L - 2; l >= 1; l--) {
        gemm_run(n.blas, n.bwd[l], layer_w(n, l), n.dpre[l], n.tmp, s);
        const int64_t total = (int64_t)n.batch * n.size[l];
        drelu_kernel<<<ew_grid(total, EW_THREADS, 4096), EW_THREADS, 0, s>>>(n.tmp, n.act[l], n.dpre[l - 1], total);
        cudaCheck(cudaGetLastError());
    }
}

// Every gradient above came from this step's weights; now the updates. W_l -= lr * act_l^T dpre_l is one
// cublasLt call per hidden-input layer (alpha = -lr, beta = 1, in place); the biases, the last layer's weights
// and the loss are the finish kernel, on the side stream when fork (graph branches), joined before the next step.
static void step_update(const Net &n, int step, float *loss_out, cudaStream_t s, bool fork) {
    cudaStream_t fs = s;
    if (fork) {
        cudaCheck(cudaEventRecord(n.ev_fork, s));
        cudaCheck(cudaStreamWaitEvent(n.side, n.ev_fork, 0));
        fs = n.side;
    }
    const float *x = step_x(n, step);
    FinishArgs f = n.fin;
    f.a_last = n.L == 1 ? x : n.act[n.L - 1];
    f.loss_out = loss_out;
    finish_kernel<<<cdiv64((int64_t)f.items * FIN_LANES, FIN_THREADS) + 1, FIN_THREADS, 0, fs>>>(f);
    cudaCheck(cudaGetLastError());
    for (int l = 0; l + 1 < n.L; l++) gemm_run(n.blas, n.upd[l], n.dpre[l], l == 0 ? x : n.act[l], layer_w(n, l), s);
    if (fork) {
        cudaCheck(cudaEventRecord(n.ev_join, fs));
        cudaCheck(cudaStreamWaitEvent(s, n.ev_join, 0));
    }
}

static void mlp_step(const Net &n, int step, float *loss_out, cudaStream_t s) {
    step_forward(n, step, s);
    step_head(n, step, s);
    step_backward(n, s);
    step_update(n, step, loss_out, s, true);
}

// ---- the "fused" step (one hidden layer) ----

// x_upd: step s's update of W0 (NULL: none); x_fwd: the forward partials of the step whose input it is (NULL: none)
static void fused_uf(const Net &n, const float *x_upd, const float *x_fwd, cudaStream_t s) {
    const dim3 grid((unsigned)cdiv64(n.size[0], UF_TILE), (unsigned)cdiv64(n.size[1], UF_TILE));
    uf_kernel<<<grid, UF_THREADS, 0, s>>>(layer_w(n, 0), x_upd, n.dpre[0], x_fwd, n.part, n.batch, n.size[0],
                                          n.size[1], n.lr);
    cudaCheck(cudaGetLastError());
}

// the hidden activation from the partials, the head, dlogits and dpre0: one launch
static void fused_head(const Net &n, int step, cudaStream_t s) {
    head_fused_kernel<<<n.batch, HF_THREADS, 0, s>>>(n.part, n.n_chunks, layer_b(n, 0), n.batch, n.size[1],
                                                     layer_w(n, 1), layer_b(n, 1), n.yperm + (size_t)step * n.batch,
                                                     1.0f / (float)n.batch, n.act[1], n.row_loss, n.dpre[1],
                                                     n.dpre[0]);
    cudaCheck(cudaGetLastError());
}

// b0, b1, W1 and the step's loss (round 4's finish kernel)
static void fused_finish(const Net &n, float *loss_out, cudaStream_t s) {
    FinishArgs f = n.fin;
    f.a_last = n.act[1];
    f.loss_out = loss_out;
    finish_kernel<<<cdiv64((int64_t)f.items * FIN_LANES, FIN_THREADS) + 1, FIN_THREADS, 0, s>>>(f);
    cudaCheck(cudaGetLastError());
}

// An epoch's steps, as the graph holds them:
//   uf(fwd 0) -> head 0 -> uf(upd 0, fwd 1) -> head 1 -> ... -> head S-1 -> uf(upd S-1)
//                      \-> finish 0 --------------/\-> finish 1 ...          \-> finish S-1 --> (end)
// finish s joins before head s+1: the first node that writes what it reads (act1, dpre0, dlogits, row_loss) or reads
// what it writes (b0, W1, b1). uf_kernel touches neither, so finish s runs under uf(upd s, fwd s+1).
static void fused_steps(const Net &n, float *losses, cudaStream_t s) {
    fused_uf(n, NULL, step_x(n, 0), s);
    for (int step = 0; step < n.steps; step++) {
        fused_head(n, step, s);
        cudaCheck(cudaEventRecord(n.ev_fork, s));
        cudaCheck(cudaStreamWaitEvent(n.side, n.ev_fork, 0));
        fused_finish(n, losses + step, n.side);
        cudaCheck(cudaEventRecord(n.ev_join, n.side));
        fused_uf(n, step_x(n, step), step + 1 < n.steps ? step_x(n, step + 1) : NULL, s);
        cudaCheck(cudaStreamWaitEvent(s, n.ev_join, 0));
    }
}

// the test set: the forward GEMMs over all of it, the head in eval mode, one reduction
static void mlp_eval(const Net &n, float *loss_out, float *acc_out, cudaStream_t s) {
    if (n.n_test > 0) {
        for (int l = 0; l + 1 < n.L; l++)
            gemm_run(n.blas, n.efwd[l], layer_w(n, l), l == 0 ? n.test_img : n.test_act[l], n.test_act[l + 1], s);
        const int last = n.L - 1;
        head_kernel<false><<<cdiv64(n.n_test, HEAD_WARPS), HEAD_WARPS * 32, 0, s>>>(
            last == 0 ? n.test_img : n.test_act[last], n.n_test, n.size[last], layer_w(n, last), layer_b(n, last),
            n.test_labels, 0.0f, n.test_row_loss, NULL, NULL, n.test_correct);
        cudaCheck(cudaGetLastError());
    }
    eval_finish_kernel<<<1, EVAL_THREADS, 0, s>>>(n.test_row_loss, n.test_correct, n.n_test, loss_out, acc_out);
    cudaCheck(cudaGetLastError());
}


// ---- the "persistent" epoch ----

struct Persist {
    int KB, HB, kc, Bp, blocks;  // the tiling: KB k chunks of kc rows (a multiple of 4) x HB tiles of 16 columns
    size_t smem;                 // dynamic shared memory a block
    float *part;                 // (KB, batch, H)
    unsigned *bar;               // the grid barrier's counter
};

// The tiling for this shape on this device, one block per SM at most; false when the kernel cannot run it (16-byte
// rows need P % 4 == 0; the two x slabs must fit the opt-in shared memory; every block must be resident at once).
static bool persist_plan(int B, int P, int H, int sms, int device, Persist &p) {
    memset(&p, 0, sizeof p);
    if (B < 1 || H < 1 || P < 4 || (P & 3) != 0) return false;
    int coop = 0, optin = 0;
    cudaCheck(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device));
    cudaCheck(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (!coop) return false;
    p.HB = cdiv64(H, PK_HT);
    int kb0 = sms / p.HB;
    if (kb0 < 1) kb0 = 1;
    p.kc = (int)pad_to(cdiv64(P, kb0), 4);
    p.KB = cdiv64(P, p.kc);
    p.Bp = (int)pad_to(B, 4);
    p.blocks = p.KB * p.HB;
    p.smem = pk_smem_floats(p.Bp, p.kc) * sizeof(float);
    if (p.smem > (size_t)optin) return false;
    cudaCheck(cudaFuncSetAttribute(persist_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p.smem));
    int per_sm = 0;
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persist_kernel, PK_THREADS, p.smem));
    return per_sm >= 1 && (int64_t)p.blocks <= (int64_t)per_sm * sms;
}

// coop: a cooperative launch (every block resident: the grid barriers need it); else an ordinary one (single phases)
static void persist_launch(const PersistArgs &pa, const Persist &p, cudaStream_t s, bool coop) {
    if (coop) {
        PersistArgs arg = pa;
        void *args[] = {(void *)&arg};
        cudaCheck(cudaLaunchCooperativeKernel((const void *)persist_kernel, dim3((unsigned)p.blocks),
                                              dim3(PK_THREADS), args, p.smem, s));
    } else {
        persist_kernel<<<p.blocks, PK_THREADS, p.smem, s>>>(pa);
        cudaCheck(cudaGetLastError());
    }
}

}  // namespace

int train_mnist(const MnistConfig *cfg, const MnistData *data, MnistResult *out) {
    const int L = cfg->n_layers, batch = cfg->batch, epochs = cfg->epochs;
    const int n_train = data->n_train, n_test = data->n_test;
    if (L < 1 || L > MAXL || cfg->sizes[L] != NCLS) {
        fprintf(stderr, "error: %d layers ending in %d classes; this trainer takes 1..%d layers and %d classes\n", L,
                (L >= 1 && L <= MAXL) ? cfg->sizes[L] : -1, MAXL, NCLS);
        return 1;
    }
    if (cfg->precision != PRECISION_FP32) {
        fprintf(stderr, "error: precision %d: this trainer runs fp32 GEMMs only (see MNIST_PRECISIONS)\n",
                (int)cfg->precision);
        return 1;
    }
    const int pixels = cfg->sizes[0];
    const int steps = mnist_steps_per_epoch(cfg, n_train);
    const int64_t n_params = mnist_param_count(cfg);
    const size_t train_px = (size_t)n_train * pixels, test_px = (size_t)n_test * pixels;

    double setup_start_ms = host_ms();
    cudaStream_t stream, up, side;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&up, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    cudaEvent_t ev_start, ev_test, ev_fork, ev_join, tune0, tune1;
    cudaCheck(cudaEventCreateWithFlags(&ev_start, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&ev_test, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&ev_fork, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&ev_join, cudaEventDisableTiming));
    cudaCheck(cudaEventCreate(&tune0));
    cudaCheck(cudaEventCreate(&tune1));
    int device = 0, sms = 1;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    if (sms < 1) sms = 1;
    // which copy of the images goes up: the floats when the driver pinned them (a fast, asynchronous copy), else
    // the bytes (a quarter of the size, but through pageable staging)
    const bool train_f = train_px > 0 && host_is_pinned(data->train_images);
    const bool test_f = test_px > 0 && host_is_pinned(data->test_images);

    // the persistent kernel when the variant asks for it and this shape and device allow it; otherwise round 5's
    // fused graph for one hidden layer, the cuBLASLt step for any other depth
    Persist pk;
    memset(&pk, 0, sizeof pk);
    const bool persist = cfg->variant == VARIANT_PERSIST && L == 2 && steps > 0 &&
                         persist_plan(batch, pixels, cfg->sizes[1], sms, device, pk);
    const bool fused = L == 2 && !persist && (cfg->variant == VARIANT_FUSED || cfg->variant == VARIANT_PERSIST);
    const int64_t used = persist ? 0 : (int64_t)steps * batch;  // rows gathered per epoch (the persistent kernel
                                                                // reads them through the batch order instead)

    Net net;
    memset(&net, 0, sizeof net);
    net.L = L;
    net.batch = batch;
    net.steps = steps;
    net.pixels = pixels;
    net.n_test = n_test;
    net.lr = cfg->lr;
    for (int l = 0; l <= L; l++) net.size[l] = cfg->sizes[l];
    net.side = side;
    net.ev_fork = ev_fork;
    net.ev_join = ev_join;

    // cuBLAS handles, each with a fixed workspace so that nothing is allocated inside the graph capture
    cublasCheck(cublasCreate(&net.blas.handle));
    cublasCheck(cublasSetStream(net.blas.handle, stream));
    net.blas.blas_ws = zeroed_buffer(BLAS_WS_BYTES);
    cublasCheck(cublasSetWorkspace(net.blas.handle, net.blas.blas_ws, BLAS_WS_BYTES));
    cublasCheck(cublasSetMathMode(net.blas.handle, CUBLAS_DEFAULT_MATH));  // fp32 FFMA, no TF32
    cublasCheck(cublasLtCreate(&net.blas.lt));
    net.blas.lt_ws_bytes = LT_WS_BYTES;
    net.blas.lt_ws = zeroed_buffer(LT_WS_BYTES);

    // parameters: the padded layout and its map to the packed one
    Repack rp;
    memset(&rp, 0, sizeof rp);
    int64_t off = 0;
    for (int l = 0; l < L; l++) {
        rp.packed[2 * l] = mnist_weight_offset(cfg, l);
        rp.padded[2 * l] = off;
        net.w_off[l] = off;
        off = pad_to(off + (int64_t)net.size[l] * net.size[l + 1], PAD_FLOATS);
        rp.packed[2 * l + 1] = mnist_bias_offset(cfg, l);
        rp.padded[2 * l + 1] = off;
        net.b_off[l] = off;
        off = pad_to(off + net.size[l + 1], PAD_FLOATS);
    }
    rp.n = 2 * L;
    const int64_t n_padded = off;
    net.params = (float *)zeroed_buffer((size_t)n_padded * sizeof(float));
    float *d_packed = (float *)zeroed_buffer((size_t)n_params * sizeof(float));

    // the training images on the device: the floats as they came (pinned), else the bytes; the persistent kernel
    // reads floats, which it then gets from the bytes once, right after the upload
    uint8_t *d_train_bytes = (uint8_t *)zeroed_buffer(train_f ? 0 : train_px);
    float *d_train_f = (float *)zeroed_buffer((train_f || persist) ? train_px * sizeof(float) : 0);
    uint8_t *d_train_labels = (uint8_t *)zeroed_buffer((size_t)n_train);
    int32_t *d_order = (int32_t *)zeroed_buffer((size_t)epochs * n_train * sizeof(int32_t));
    net.xperm = (float *)zeroed_buffer((size_t)used * pixels * sizeof(float));
    net.yperm = (uint8_t *)zeroed_buffer((size_t)used);
    int widest = 1;
    for (int l = 1; l < L; l++) {
        net.act[l] = (float *)zeroed_buffer((size_t)batch * net.size[l] * sizeof(float));
        net.test_act[l] = (float *)zeroed_buffer((size_t)n_test * net.size[l] * sizeof(float));
        if (net.size[l] > widest) widest = net.size[l];
    }
    for (int l = 0; l < L; l++) net.dpre[l] = (float *)zeroed_buffer((size_t)batch * net.size[l + 1] * sizeof(float));
    net.tmp = (float *)zeroed_buffer((size_t)batch * widest * sizeof(float));
    net.row_loss = (float *)zeroed_buffer((size_t)batch * sizeof(float));
    if (fused) {
        net.n_chunks = cdiv64(pixels, UF_TILE);
        net.part = (float *)zeroed_buffer((size_t)net.n_chunks * batch * net.size[1] * sizeof(float));
    }
    uint8_t *d_test_bytes = (uint8_t *)zeroed_buffer(test_f ? 0 : test_px);
    net.test_img = (float *)zeroed_buffer(test_px * sizeof(float));
    net.test_labels = (uint8_t *)zeroed_buffer((size_t)n_test);
    net.test_row_loss = (float *)zeroed_buffer((size_t)n_test * sizeof(float));
    net.test_correct = (int *)zeroed_buffer((size_t)n_test * sizeof(int));
    float *d_cur_loss = (float *)zeroed_buffer((size_t)steps * sizeof(float));
    float *d_step_loss = (float *)zeroed_buffer((size_t)epochs * steps * sizeof(float));
    float *d_test_loss = (float *)zeroed_buffer((size_t)epochs * sizeof(float));
    float *d_test_acc = (float *)zeroed_buffer((size_t)epochs * sizeof(float));
    int *d_err = (int *)zeroed_buffer(sizeof(int));
    if (persist) {
        pk.part = (float *)zeroed_buffer((size_t)pk.KB * batch * net.size[1] * sizeof(float));
        pk.bar = (unsigned *)zeroed_buffer(sizeof(unsigned));
    }
    cudaCheck(cudaDeviceSynchronize());  // the zeroed buffers are ready before the tuning runs read them

    // the finish kernel's fixed arguments
    {
        FinishArgs &f = net.fin;
        f.batch = batch;
        f.lr = cfg->lr;
        int total = 0;
        for (int l = 0; l < L; l++) {
            f.bias[l] = layer_b(net, l);
            f.dpre[l] = net.dpre[l];
            f.width[l] = net.size[l + 1];
            total += net.size[l + 1];
            f.bias_end[l] = total;
        }
        f.bias_total = total;
        f.k_last = net.size[L - 1];
        f.items = total + net.size[L - 1] * NCLS;
        f.w_last = layer_w(net, L - 1);
        f.g_last = net.dpre[L - 1];
        f.row_loss = net.row_loss;
    }

    // GEMM plans, tuned on the real buffers (all zero now; the upload overwrites the parameters later). The fused and
    // persistent steps need only the test-set forward.
    const uint32_t x_align = stride_alignment((size_t)batch * pixels * sizeof(float));
    for (int l = 0; l + 1 < L; l++) {
        const int in = net.size[l], outw = net.size[l + 1];
        if (steps > 0 && !fused && !persist) {
            const float *x_in = l == 0 ? net.xperm : net.act[l];
            const uint32_t in_align = l == 0 ? x_align : 256;
            net.fwd[l] = gemm_shape(outw, batch, in, CUBLAS_OP_N, CUBLAS_OP_N, outw, in, outw, 1.0f, 0.0f,
                                    layer_b(net, l), 1);
            gemm_plan(net.blas, net.fwd[l], in_align, layer_w(net, l), x_in, net.act[l + 1], stream, tune0, tune1);
            net.upd[l] = gemm_shape(outw, in, batch, CUBLAS_OP_N, CUBLAS_OP_T, outw, in, outw, -cfg->lr, 1.0f, NULL, 0);
            gemm_plan(net.blas, net.upd[l], in_align, net.dpre[l], x_in, layer_w(net, l), stream, tune0, tune1);
            if (l >= 1) {
                net.bwd[l] = gemm_shape(in, batch, outw, CUBLAS_OP_T, CUBLAS_OP_N, outw, outw, in, 1.0f, 0.0f, NULL, 0);
                gemm_plan(net.blas, net.bwd[l], 256, layer_w(net, l), net.dpre[l], net.tmp, stream, tune0, tune1);
            }
        }
        if (n_test > 0) {
            net.efwd[l] = gemm_shape(outw, n_test, in, CUBLAS_OP_N, CUBLAS_OP_N, outw, in, outw, 1.0f, 0.0f,
                                     layer_b(net, l), 1);
            gemm_plan(net.blas, net.efwd[l], 256, layer_w(net, l), l == 0 ? net.test_img : net.test_act[l],
                      net.test_act[l + 1], stream, tune0, tune1);
        }
    }

    // load every kernel's module now rather than on its first launch inside the clock
    {
        cudaFuncAttributes fa;
        cudaCheck(cudaFuncGetAttributes(&fa, gather_scale_kernel));
        cudaCheck(cudaFuncGetAttributes(&fa, repack_kernel));
        cudaCheck(cudaFuncGetAttributes(&fa, bias_act_kernel));
        cudaCheck(cudaFuncGetAttributes(&fa, drelu_kernel));
        cudaCheck(cudaFuncGetAttributes(&fa, head_kernel<true>));
        cudaCheck(cudaFuncGetAttributes(&fa, head_kernel<false>));
        cudaCheck(cudaFuncGetAttributes(&fa, uf_kernel));
        cudaCheck(cudaFuncGetAttributes(&fa, head_fused_kernel));
        cudaCheck(cudaFuncGetAttributes(&fa, finish_kernel));
        cudaCheck(cudaFuncGetAttributes(&fa, eval_finish_kernel));
        cudaCheck(cudaFuncGetAttributes(&fa, persist_kernel));
    }

    // the persistent kernel's fixed arguments; one empty cooperative launch now, so that the first real one inside
    // the clock pays no first-launch cost (mode 0 and no steps: it touches nothing)
    PersistArgs pa;
    memset(&pa, 0, sizeof pa);
    if (persist) {
        pa.W0 = layer_w(net, 0);
        pa.b0 = layer_b(net, 0);
        pa.W1 = layer_w(net, 1);
        pa.b1 = layer_b(net, 1);
        pa.train = d_train_f;
        pa.labels = d_train_labels;
        pa.order = d_order;
        pa.part = pk.part;
        pa.act = net.act[1];
        pa.dpre0 = net.dpre[0];
        pa.dlogits = net.dpre[1];
        pa.row_loss = net.row_loss;
        pa.step_loss = d_step_loss;
        pa.bar = pk.bar;
        pa.err = d_err;
        pa.n_train = n_train;
        pa.B = batch;
        pa.Bp = pk.Bp;
        pa.P = pixels;
        pa.H = net.size[1];
        pa.KB = pk.KB;
        pa.kc = pk.kc;
        pa.lr = cfg->lr;
        PersistArgs warm = pa;
        warm.mode = 0;
        warm.s_begin = warm.s_end = 0;
        persist_launch(warm, pk, stream, true);
    }

    // one graph per epoch's steps, captured once (not for the persistent kernel: it is one launch an epoch already).
    // Fused: per step uf, head and (on the side branch) finish; cublaslt: per step the forward GEMM(s), the head, then
    // the weight GEMMs beside the finish kernel.
    cudaGraph_t graph = NULL;
    cudaGraphExec_t graph_exec = NULL;
    const int64_t nodes_per_step = fused ? 3 : 4 * (int64_t)L + 4;
    const int use_graph =
        !persist && !cfg->breakdown && steps > 0 && (int64_t)steps * nodes_per_step <= GRAPH_MAX_NODES;
    if (use_graph) {
        cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        if (fused) {
            fused_steps(net, d_cur_loss, stream);
        } else {
            for (int step = 0; step < steps; step++) mlp_step(net, step, d_cur_loss + step, stream);
        }
        cudaCheck(cudaStreamEndCapture(stream, &graph));
        cudaCheck(cudaGraphInstantiateWithFlags(&graph_exec, graph, 0));
        cudaCheck(cudaGraphUpload(graph_exec, stream));
    }
    cudaCheck(cudaStreamSynchronize(stream));

    TrainClock clock;
    train_clock_init(&clock, epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start_ms;

    train_clock_e2e_start(&clock, stream);
    const int gather_per_row = (pixels & 3) == 0 ? pixels / 4 : pixels;
    TIMED_PHASE(&clock, PHASE_H2D, stream) {
        // the upload stream (test set, during epoch 0) starts after e2e does
        cudaCheck(cudaEventRecord(ev_start, stream));
        cudaCheck(cudaStreamWaitEvent(up, ev_start, 0));
        if (train_px > 0) {
            if (train_f) {
                cudaCheck(cudaMemcpyAsync(d_train_f, data->train_images, train_px * sizeof(float),
                                          cudaMemcpyHostToDevice, stream));
            } else {
                cudaCheck(cudaMemcpyAsync(d_train_bytes, data->train_pixels, train_px, cudaMemcpyHostToDevice,
                                          stream));
                if (persist) {
                    // the persistent kernel reads floats: every training image scaled once, in place of a gather
                    // pass every epoch
                    gather_scale_kernel<<<ew_grid((int64_t)n_train * gather_per_row, EW_THREADS, sms * 16),
                                          EW_THREADS, 0, stream>>>(d_train_bytes, NULL, NULL, NULL, n_train, n_train,
                                                                   pixels, d_train_f, NULL, NULL);
                    cudaCheck(cudaGetLastError());
                }
            }
        }
        if (n_train > 0)
            cudaCheck(cudaMemcpyAsync(d_train_labels, data->train_labels, (size_t)n_train, cudaMemcpyHostToDevice,
                                      stream));
        if ((int64_t)epochs * n_train > 0)
            cudaCheck(cudaMemcpyAsync(d_order, data->batch_order, (size_t)epochs * n_train * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, stream));
        cudaCheck(cudaMemcpyAsync(d_packed, data->init_params, (size_t)n_params * sizeof(float),
                                  cudaMemcpyHostToDevice, stream));
        repack_kernel<<<ew_grid(n_params, EW_THREADS, sms * 8), EW_THREADS, 0, stream>>>(rp, d_packed, net.params,
                                                                                         n_params, 1);
        cudaCheck(cudaGetLastError());
    }
    train_clock_loop_start(&clock, stream);

    for (int epoch = 0; epoch < epochs; epoch++) {
        if (persist) {
            // the whole epoch: one cooperative launch (or, with --breakdown, one ordinary launch a phase and step);
            // the step losses go straight into their place in d_step_loss
            pa.order = d_order + (size_t)epoch * n_train;
            pa.step_loss = d_step_loss + (size_t)epoch * steps;
            if (cfg->breakdown) {
                for (int step = 0; step < steps; step++) {
                    PersistArgs ps = pa;
                    ps.s_begin = step;
                    ps.s_end = step + 1;
                    TIMED_PHASE(&clock, PHASE_FORWARD, stream) {
                        ps.mode = PK_FWD;
                        persist_launch(ps, pk, stream, false);
                    }
                    TIMED_PHASE(&clock, PHASE_LOSS, stream) {
                        ps.mode = PK_HEAD;
                        persist_launch(ps, pk, stream, false);
                    }
                    TIMED_PHASE(&clock, PHASE_BACKWARD, stream) {}  // dpre0 comes out of the head
                    TIMED_PHASE(&clock, PHASE_UPDATE, stream) {
                        ps.mode = PK_UPD;
                        persist_launch(ps, pk, stream, false);
                    }
                }
            } else {
                cudaCheck(cudaMemsetAsync(pk.bar, 0, sizeof(unsigned), stream));
                PersistArgs ps = pa;
                ps.s_begin = 0;
                ps.s_end = steps;
                ps.mode = PK_ALL;
                persist_launch(ps, pk, stream, true);
            }
        } else if (steps > 0) {
            TIMED_PHASE(&clock, PHASE_FORWARD, stream) {
                // this epoch's minibatches, gathered in batch order as floats: one pass over the training set
                gather_scale_kernel<<<ew_grid(used * gather_per_row, EW_THREADS, sms * 16), EW_THREADS, 0, stream>>>(
                    train_f ? NULL : d_train_bytes, train_f ? d_train_f : NULL, d_train_labels,
                    d_order + (size_t)epoch * n_train, n_train, (int)used, pixels, net.xperm, net.yperm, d_err);
                cudaCheck(cudaGetLastError());
            }
            if (use_graph) {
                cudaCheck(cudaGraphLaunch(graph_exec, stream));
            } else if (cfg->breakdown) {
                for (int step = 0; step < steps; step++) {
                    float *loss = d_cur_loss + step;
                    if (fused) {
                        // the same kernels as the graph's, the update and the next forward launched apart
                        TIMED_PHASE(&clock, PHASE_FORWARD, stream) { fused_uf(net, NULL, step_x(net, step), stream); }
                        TIMED_PHASE(&clock, PHASE_LOSS, stream) { fused_head(net, step, stream); }
                        TIMED_PHASE(&clock, PHASE_BACKWARD, stream) {}  // dpre0 comes out of the head
                        TIMED_PHASE(&clock, PHASE_UPDATE, stream) {
                            fused_finish(net, loss, stream);
                            fused_uf(net, step_x(net, step), NULL, stream);
                        }
                    } else {
                        TIMED_PHASE(&clock, PHASE_FORWARD, stream) { step_forward(net, step, stream); }
                        TIMED_PHASE(&clock, PHASE_LOSS, stream) { step_head(net, step, stream); }
                        TIMED_PHASE(&clock, PHASE_BACKWARD, stream) { step_backward(net, stream); }
                        TIMED_PHASE(&clock, PHASE_UPDATE, stream) { step_update(net, step, loss, stream, false); }
                    }
                }
            } else if (fused) {
                fused_steps(net, d_cur_loss, stream);
            } else {
                for (int step = 0; step < steps; step++) mlp_step(net, step, d_cur_loss + step, stream);
            }
            TIMED_PHASE(&clock, PHASE_LOSS, stream) {
                cudaCheck(cudaMemcpyAsync(d_step_loss + (size_t)epoch * steps, d_cur_loss,
                                          (size_t)steps * sizeof(float), cudaMemcpyDeviceToDevice, stream));
            }
        }

        if (epoch == 0 && n_test > 0) {
            // the test set goes up while epoch 0 trains; only the evaluation waits for it
            TIMED_PHASE(&clock, PHASE_H2D, stream) {
                if (test_f) {
                    cudaCheck(cudaMemcpyAsync(net.test_img, data->test_images, test_px * sizeof(float),
                                              cudaMemcpyHostToDevice, up));
                } else {
                    cudaCheck(cudaMemcpyAsync(d_test_bytes, data->test_pixels, test_px, cudaMemcpyHostToDevice, up));
                    gather_scale_kernel<<<ew_grid((int64_t)n_test * gather_per_row, EW_THREADS, sms * 16), EW_THREADS,
                                          0, up>>>(d_test_bytes, NULL, NULL, NULL, n_test, n_test, pixels,
                                                   net.test_img, NULL, NULL);
                    cudaCheck(cudaGetLastError());
                }
                cudaCheck(cudaMemcpyAsync(net.test_labels, data->test_labels, (size_t)n_test, cudaMemcpyHostToDevice,
                                          up));
                cudaCheck(cudaEventRecord(ev_test, up));
                cudaCheck(cudaStreamWaitEvent(stream, ev_test, 0));
            }
        }

        TIMED_PHASE(&clock, PHASE_EVAL, stream) { mlp_eval(net, d_test_loss + epoch, d_test_acc + epoch, stream); }

        train_clock_epoch_end(&clock, epoch, stream);
    }

    TIMED_PHASE(&clock, PHASE_D2H, stream) {
        repack_kernel<<<ew_grid(n_params, EW_THREADS, sms * 8), EW_THREADS, 0, stream>>>(rp, net.params, d_packed,
                                                                                         n_params, 0);
        cudaCheck(cudaGetLastError());
        cudaCheck(cudaMemcpyAsync(out->params, d_packed, (size_t)n_params * sizeof(float), cudaMemcpyDeviceToHost,
                                  stream));
        if ((int64_t)epochs * steps > 0)
            cudaCheck(cudaMemcpyAsync(out->step_loss, d_step_loss, (size_t)epochs * steps * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream));
        if (epochs > 0) {
            cudaCheck(cudaMemcpyAsync(out->test_loss, d_test_loss, (size_t)epochs * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream));
            cudaCheck(cudaMemcpyAsync(out->test_acc, d_test_acc, (size_t)epochs * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream));
        }
    }
    train_clock_e2e_stop(&clock, stream);
    train_clock_finish(&clock, &out->timing);
    cudaCheck(cudaStreamSynchronize(stream));
    cudaCheck(cudaStreamSynchronize(side));
    cudaCheck(cudaStreamSynchronize(up));

    // the batch order was checked on the device, as the gathers read it
    int bad_order = 0;
    cudaCheck(cudaMemcpy(&bad_order, d_err, sizeof bad_order, cudaMemcpyDeviceToHost));
    if (bad_order) {
        fprintf(stderr, "error: the batch order has an entry outside 0..%d\n", n_train - 1);
        exit(EXIT_DATA);
    }

    if (graph_exec) cudaCheck(cudaGraphExecDestroy(graph_exec));
    if (graph) cudaCheck(cudaGraphDestroy(graph));
    for (int l = 0; l < MAXL; l++) {
        gemm_destroy(net.fwd[l]);
        gemm_destroy(net.upd[l]);
        gemm_destroy(net.bwd[l]);
        gemm_destroy(net.efwd[l]);
    }
    cublasCheck(cublasLtDestroy(net.blas.lt));
    cublasCheck(cublasDestroy(net.blas.handle));
    for (int l = 0; l < L; l++) {
        if (net.act[l]) cudaCheck(cudaFree(net.act[l]));
        if (net.test_act[l]) cudaCheck(cudaFree(net.test_act[l]));
        if (net.dpre[l]) cudaCheck(cudaFree(net.dpre[l]));
    }
    if (net.part) cudaCheck(cudaFree(net.part));
    cudaCheck(cudaFree(net.tmp));
    cudaCheck(cudaFree(net.row_loss));
    cudaCheck(cudaFree(net.xperm));
    cudaCheck(cudaFree(net.yperm));
    cudaCheck(cudaFree(net.test_img));
    cudaCheck(cudaFree(net.test_labels));
    cudaCheck(cudaFree(net.test_row_loss));
    cudaCheck(cudaFree(net.test_correct));
    cudaCheck(cudaFree(net.params));
    cudaCheck(cudaFree(net.blas.lt_ws));
    cudaCheck(cudaFree(net.blas.blas_ws));
    cudaCheck(cudaFree(d_packed));
    cudaCheck(cudaFree(d_train_bytes));
    cudaCheck(cudaFree(d_train_f));
    cudaCheck(cudaFree(d_train_labels));
    cudaCheck(cudaFree(d_order));
    cudaCheck(cudaFree(d_test_bytes));
    cudaCheck(cudaFree(d_cur_loss));
    cudaCheck(cudaFree(d_step_loss));
    cudaCheck(cudaFree(d_test_loss));
    cudaCheck(cudaFree(d_test_acc));
    cudaCheck(cudaFree(d_err));
    if (pk.part) cudaCheck(cudaFree(pk.part));
    if (pk.bar) cudaCheck(cudaFree(pk.bar));
    cudaCheck(cudaEventDestroy(ev_start));
    cudaCheck(cudaEventDestroy(ev_test));
    cudaCheck(cudaEventDestroy(ev_fork));
    cudaCheck(cudaEventDestroy(ev_join));
    cudaCheck(cudaEventDestroy(tune0));
    cudaCheck(cudaEventDestroy(tune1));
    cudaCheck(cudaStreamDestroy(side));
    cudaCheck(cudaStreamDestroy(up));
    cudaCheck(cudaStreamDestroy(stream));
    return 0;
}
