// mnist.cu: the MNIST MLP trainer, stage 04's idea (on-chip memory) applied to the whole training step.
//
// Every GEMM is a 32x32 output tile per block whose operands are staged in padded shared memory, a k-slab
// (up to 128) at a time with all of the slab's global loads in flight together; each thread keeps a 2x4
// register block. Small-M GEMMs split K across blocks and the last block of each tile adds the partials
// in a fixed order (one counter atomic per block, no atomicAdd per element). The last layer, softmax
// cross-entropy, the loss and the last layer's data gradient are one kernel (a warp per row, warp
// shuffles, then a shared-memory block reduction and a last-block reduction in double). The weight
// gradients and SGD updates of all layers are one launch. One hidden layer: three kernels per step,
// replayed per epoch from a CUDA graph.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>

#include "check.h"
#include "host.h"
#include "timing.h"
#include "trainer.h"

const char *const MNIST_VARIANTS[] = {"tiled", NULL};
const char *const MNIST_PRECISIONS[] = {"fp32", NULL};

namespace {

constexpr int TILE = 32;                           // output tile TILE x TILE per block
constexpr int KC = 128;                            // k-slab staged in shared memory per pass
constexpr int LDS = TILE + 4;                      // padded slab row: conflict-free stores, float4 reads
constexpr int GEMM_THREADS = 128;                  // 16 x 8 threads, 2 x 4 outputs each
constexpr int SLAB = TILE * KC / GEMM_THREADS;     // slab elements each thread loads
constexpr int SPLIT_MIN_K = 64;                    // no split below 64 k per block
constexpr int HEAD_WARPS = 4;                      // rows per head block (a warp per row)
constexpr int HEAD_THREADS = HEAD_WARPS * 32;
constexpr int HEAD_MAX_CLASSES = 16;
constexpr int COUNTERS = 1024;                     // split-K tile counters
constexpr int64_t GRAPH_MAX_KERNELS = 60000;

static_assert(SLAB == 32, "the slab mappings below assume 32 elements per thread");
static_assert(GEMM_THREADS == 128, "the slab mappings below assume 128 threads");

static inline int cdiv(int a, int b) { return (a + b - 1) / b; }

// ----------------------------------------------------------------------------------------------------
// Operand loaders: value(mn, k) of a GEMM operand; mn is the row of A (m) or the column of B (n).
// kMn: consecutive mn are consecutive in memory (else consecutive k are); it picks the slab mapping.

struct LoadMnK {  // p[mn * ld + k]: activations in the forward pass, dZ and W^T in the data gradient
    static constexpr bool kMn = false;
    const float *p;
    int ld;
    __device__ __forceinline__ float operator()(int mn, int k) const { return p[(size_t)mn * ld + k]; }
};

struct LoadKMn {  // p[k * ld + mn]: W in the forward pass, output gradients in the weight gradient
    static constexpr bool kMn = true;
    const float *p;
    int ld;
    __device__ __forceinline__ float operator()(int mn, int k) const { return p[(size_t)k * ld + mn]; }
};

struct LoadKMn1 {  // [act^T; 1]: act is (batch, in); row mn == in is the ones that give the bias gradient
    static constexpr bool kMn = true;
    const float *p;
    int in;
    __device__ __forceinline__ float operator()(int mn, int k) const {
        return mn < in ? p[(size_t)k * in + mn] : 1.0f;
    }
};

struct LoadPix {  // layer 0's input: pixel bytes of row rows[m] (m when rows is NULL), scaled on the fly
    static constexpr bool kMn = false;
    const uint8_t *pixels;
    const int32_t *rows;
    int ld;
    __device__ __forceinline__ float operator()(int m, int k) const {
        const int r = rows ? rows[m] : m;
        return mnist_pixel_value(pixels[(size_t)r * ld + k]);
    }
};

struct LoadPixT1 {  // [X^T; 1] for layer 0's weight gradient, X the minibatch's pixels
    static constexpr bool kMn = true;
    const uint8_t *pixels;
    const int32_t *rows;
    int in;
    __device__ __forceinline__ float operator()(int mn, int k) const {
        return mn < in ? mnist_pixel_value(pixels[(size_t)rows[k] * in + mn]) : 1.0f;
    }
};

// Epilogues: what happens to a finished output element.
struct EpiBiasRelu {  // hidden layer: out = relu(acc + b)
    float *out;
    const float *bias;
    int ld;
    __device__ __forceinline__ void operator()(int m, int n, float v) const {
        v += bias[n];
        out[(size_t)m * ld + n] = v > 0.0f ? v : 0.0f;
    }
};

struct EpiReluGrad {  // data gradient through ReLU: out = acc where the activation is positive
    float *out;
    const float *act;
    int ld;
    __device__ __forceinline__ void operator()(int m, int n, float v) const {
        const size_t i = (size_t)m * ld + n;
        out[i] = act[i] > 0.0f ? v : 0.0f;
    }
};

// ----------------------------------------------------------------------------------------------------
// The shared-memory tile: slabs are stored as S[k][mn] with a padded row of LDS floats.

template <bool kMn>
__device__ __forceinline__ void slab_coords(int t, int i, int &mn, int &k) {
    if (kMn) {  // a warp reads 32 consecutive mn of one k (coalesced, conflict-free stores)
        mn = t & 31;
        k = (t >> 5) + 4 * i;
    } else {  // a warp reads 8 consecutive k of 4 consecutive mn; banks (4k + mn) % 32 are all distinct
        mn = (t >> 3) + 16 * (i & 1);
        k = 8 * (i >> 1) + (t & 7);
    }
}

// All SLAB loads of a thread are issued before any is stored: one latency round per slab.
template <class L>
__device__ __forceinline__ void fetch_slab(float (&r)[SLAB], const L &ld, int mn0, int mn_end, int k0, int klen) {
#pragma unroll
    for (int i = 0; i < SLAB; i++) {
        int mn, k;
        slab_coords<L::kMn>((int)threadIdx.x, i, mn, k);
        r[i] = (k < klen && mn0 + mn < mn_end) ? ld(mn0 + mn, k0 + k) : 0.0f;
    }
}

template <bool kMn>
__device__ __forceinline__ void store_slab(float (*s)[LDS], const float (&r)[SLAB]) {
#pragma unroll
    for (int i = 0; i < SLAB; i++) {
        int mn, k;
        slab_coords<kMn>((int)threadIdx.x, i, mn, k);
        s[k][mn] = r[i];
    }
}

// acc = A[m0 .. m0+32, kb .. ke) @ B[kb .. ke, n0 .. n0+32) for this thread's 2 x 4 block.
template <class LA, class LB>
__device__ __forceinline__ void tile_product(float (&acc)[2][4], const LA &la, const LB &lb, int m0, int M, int n0,
                                             int N, int kb, int ke, float (*As)[LDS], float (*Bs)[LDS]) {
    const int tm = (int)threadIdx.x >> 3, tn = (int)threadIdx.x & 7;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (int k0 = kb; k0 < ke; k0 += KC) {
        const int klen = min(KC, ke - k0);
        float ra[SLAB], rb[SLAB];
        fetch_slab(ra, la, m0, M, k0, klen);
        fetch_slab(rb, lb, n0, N, k0, klen);
        if (k0 != kb) __syncthreads();  // everyone is done reading the previous slab
        store_slab<LA::kMn>(As, ra);
        store_slab<LB::kMn>(Bs, rb);
        __syncthreads();
        const int k8 = (klen + 7) & ~7;  // rows klen .. k8 hold zeros
        for (int kk = 0; kk < k8; kk += 8) {
#pragma unroll
            for (int k = kk; k < kk + 8; k++) {
                const float2 a = *reinterpret_cast<const float2 *>(&As[k][tm * 2]);
                const float4 b = *reinterpret_cast<const float4 *>(&Bs[k][tn * 4]);
                acc[0][0] = fmaf(a.x, b.x, acc[0][0]);
                acc[0][1] = fmaf(a.x, b.y, acc[0][1]);
                acc[0][2] = fmaf(a.x, b.z, acc[0][2]);
                acc[0][3] = fmaf(a.x, b.w, acc[0][3]);
                acc[1][0] = fmaf(a.y, b.x, acc[1][0]);
                acc[1][1] = fmaf(a.y, b.y, acc[1][1]);
                acc[1][2] = fmaf(a.y, b.z, acc[1][2]);
                acc[1][3] = fmaf(a.y, b.w, acc[1][3]);
            }
        }
    }
}

// C = A @ B with an epilogue; grid (tiles_n, tiles_m, splits). With splits > 1 each block covers kchunk
// of K, writes its partial tile to ws, and the last block of the tile (a counter) adds the partials in
// split order, applies the epilogue and resets the counter for the next launch.
template <class LA, class LB, class Epi>
__global__ void __launch_bounds__(GEMM_THREADS)
    tiled_gemm_kernel(LA la, LB lb, Epi ep, int M, int N, int K, int kchunk, float *ws, int *counters) {
    __shared__ __align__(16) float As[KC][LDS];
    __shared__ __align__(16) float Bs[KC][LDS];
    __shared__ int s_last;
    const int m0 = blockIdx.y * TILE, n0 = blockIdx.x * TILE;
    const int splits = gridDim.z, s = blockIdx.z;
    const int kb = s * kchunk, ke = min(K, kb + kchunk);
    const int tm = (int)threadIdx.x >> 3, tn = (int)threadIdx.x & 7;
    float acc[2][4];
    tile_product(acc, la, lb, m0, M, n0, N, kb, ke, As, Bs);

    if (splits > 1) {
        const int tile = blockIdx.y * gridDim.x + blockIdx.x;
        float *tile_ws = ws + (size_t)tile * splits * (TILE * TILE);
#pragma unroll
        for (int i = 0; i < 2; i++)
            *reinterpret_cast<float4 *>(tile_ws + (size_t)s * (TILE * TILE) + (tm * 2 + i) * TILE + tn * 4) =
                make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) s_last = atomicAdd(&counters[tile], 1) == splits - 1;
        __syncthreads();
        if (!s_last) return;
        __threadfence();
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            for (int q = 0; q < splits; q++) {
                const float4 v = __ldcg(reinterpret_cast<const float4 *>(tile_ws + (size_t)q * (TILE * TILE) +
                                                                         (tm * 2 + i) * TILE + tn * 4));
                sum.x += v.x;
                sum.y += v.y;
                sum.z += v.z;
                sum.w += v.w;
            }
            acc[i][0] = sum.x;
            acc[i][1] = sum.y;
            acc[i][2] = sum.z;
            acc[i][3] = sum.w;
        }
        if (threadIdx.x == 0) counters[tile] = 0;
    }

#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int m = m0 + tm * 2 + i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int n = n0 + tn * 4 + j;
            if (n < N) ep(m, n, acc[i][j]);
        }
    }
}

// ----------------------------------------------------------------------------------------------------
// Weight gradient and SGD of every layer in one launch: [W_l; b_l] -= lr * [act_l; 1]^T @ dout_l. W_l and
// b_l are packed back to back, so the bias is row `in` of an (in + 1, out) matrix. K is the batch.

struct WgradLayer {
    const float *act;   // (batch, in); NULL for layer 0, whose input is the pixels of `rows`
    const float *dout;  // (batch, out): gradient of the layer's output
    float *w;           // (in + 1, out): W_l then b_l
    int in, out, tiles_n, first_tile;
};

struct WgradArgs {
    WgradLayer layer[MNIST_MAX_LAYERS];
    int n_layers;
    const uint8_t *pixels;
    const int32_t *rows;
    int batch;
    float lr;
};

__global__ void __launch_bounds__(GEMM_THREADS) wgrad_sgd_kernel(const WgradArgs a) {
    __shared__ __align__(16) float As[KC][LDS];
    __shared__ __align__(16) float Bs[KC][LDS];
    WgradLayer p = a.layer[0];
#pragma unroll
    for (int l = 1; l < MNIST_MAX_LAYERS; l++)
        if (l < a.n_layers && (int)blockIdx.x >= a.layer[l].first_tile) p = a.layer[l];
    const int local = (int)blockIdx.x - p.first_tile;
    const int m0 = (local / p.tiles_n) * TILE, n0 = (local % p.tiles_n) * TILE;
    const int M = p.in + 1, N = p.out;
    const LoadKMn lb{p.dout, p.out};
    float acc[2][4];
    if (p.act)
        tile_product(acc, LoadKMn1{p.act, p.in}, lb, m0, M, n0, N, 0, a.batch, As, Bs);
    else
        tile_product(acc, LoadPixT1{a.pixels, a.rows, p.in}, lb, m0, M, n0, N, 0, a.batch, As, Bs);
    const int tm = (int)threadIdx.x >> 3, tn = (int)threadIdx.x & 7;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int m = m0 + tm * 2 + i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int n = n0 + tn * 4 + j;
            if (n < N) {
                float *w = p.w + (size_t)m * N + n;
                *w = *w - a.lr * acc[i][j];
            }
        }
    }
}

// ----------------------------------------------------------------------------------------------------
// The head: the last layer's forward, softmax cross-entropy, the mean loss (and accuracy), and for
// training dlogits = (softmax - onehot) / n and the last layer's data gradient through the ReLU. A warp
// per row: lanes split the K inputs, a shuffle butterfly sums the class logits. Per-row losses are summed
// per block in shared memory; the last block adds the block partials in order, in double.

struct HeadArgs {
    const float *act;       // (n, K) input activations, unless kPix
    const uint8_t *pixels;  // kPix: pixel bytes of row rows[r] (r when rows is NULL)
    const int32_t *rows;    // data rows of the minibatch (labels too); NULL: row r
    const uint8_t *labels;
    const float *w;         // (K, C)
    const float *bias;      // (C)
    int n, K, C;
    float *dlogits;         // (n, C) or NULL (evaluation)
    float *dact;            // (n, K) gradient of the input activations, or NULL
    double *part_loss;      // [blocks]
    int *part_correct;      // [blocks]
    int *counter;           // zero between launches
    float *loss_out;        // mean cross-entropy
    float *acc_out;         // accuracy, or NULL
};

template <bool kPix>
__global__ void __launch_bounds__(HEAD_THREADS) head_kernel(const HeadArgs a) {
    __shared__ double s_loss[HEAD_THREADS];
    __shared__ int s_correct[HEAD_THREADS];
    __shared__ int s_last;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int r = (int)blockIdx.x * HEAD_WARPS + warp;
    const int C = a.C, K = a.K;
    double row_loss = 0.0;
    int row_correct = 0;
    if (r < a.n) {
        const int src = a.rows ? a.rows[r] : r;
        float z[HEAD_MAX_CLASSES];
#pragma unroll
        for (int j = 0; j < HEAD_MAX_CLASSES; j++) z[j] = 0.0f;
        for (int k = lane; k < K; k += 32) {
            const float x = kPix ? mnist_pixel_value(a.pixels[(size_t)src * K + k]) : a.act[(size_t)r * K + k];
            const float *wk = a.w + (size_t)k * C;
#pragma unroll
            for (int j = 0; j < HEAD_MAX_CLASSES; j++)
                if (j < C) z[j] = fmaf(x, wk[j], z[j]);
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
#pragma unroll
            for (int j = 0; j < HEAD_MAX_CLASSES; j++)
                if (j < C) z[j] += __shfl_xor_sync(0xffffffffu, z[j], off);
        }
        // every lane now holds the same logits
        int pred = 0;
        z[0] += a.bias[0];
        float mx = z[0];
#pragma unroll
        for (int j = 1; j < HEAD_MAX_CLASSES; j++) {
            if (j < C) {
                z[j] += a.bias[j];
                if (z[j] > mx) {
                    mx = z[j];
                    pred = j;
                }
            }
        }
        const int y = a.labels[src];
        float e[HEAD_MAX_CLASSES];
        float sum = 0.0f, zy = 0.0f;
#pragma unroll
        for (int j = 0; j < HEAD_MAX_CLASSES; j++) {
            e[j] = 0.0f;
            if (j < C) {
                e[j] = expf(z[j] - mx);
                sum += e[j];
                if (j == y) zy = z[j];
            }
        }
        row_loss = (double)(logf(sum) - (zy - mx));
        row_correct = pred == y;
        if (a.dlogits) {
            const float n_f = (float)a.n;
            float g[HEAD_MAX_CLASSES];
            float mine = 0.0f;
#pragma unroll
            for (int j = 0; j < HEAD_MAX_CLASSES; j++) {
                g[j] = 0.0f;
                if (j < C) g[j] = (e[j] / sum - (j == y ? 1.0f : 0.0f)) / n_f;
                if (lane == j) mine = g[j];
            }
            if (lane < C) a.dlogits[(size_t)r * C + lane] = mine;
            if (a.dact) {
                for (int k = lane; k < K; k += 32) {
                    const float *wk = a.w + (size_t)k * C;
                    float v = 0.0f;
#pragma unroll
                    for (int j = 0; j < HEAD_MAX_CLASSES; j++)
                        if (j < C) v = fmaf(g[j], wk[j], v);
                    const size_t i = (size_t)r * K + k;
                    a.dact[i] = a.act[i] > 0.0f ? v : 0.0f;
                }
            }
        }
    }

    if (lane == 0) {
        s_loss[warp] = row_loss;
        s_correct[warp] = row_correct;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double l = 0.0;
        int c = 0;
        for (int w = 0; w < HEAD_WARPS; w++) {
            l += s_loss[w];
            c += s_correct[w];
        }
        a.part_loss[blockIdx.x] = l;
        a.part_correct[blockIdx.x] = c;
        __threadfence();
        s_last = atomicAdd(a.counter, 1) == (int)gridDim.x - 1;
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    double l = 0.0;
    int c = 0;
    for (int i = threadIdx.x; i < (int)gridDim.x; i += HEAD_THREADS) {
        l += __ldcg(a.part_loss + i);
        c += __ldcg(a.part_correct + i);
    }
    s_loss[threadIdx.x] = l;
    s_correct[threadIdx.x] = c;
    __syncthreads();
    for (int h = HEAD_THREADS / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) {
            s_loss[threadIdx.x] += s_loss[threadIdx.x + h];
            s_correct[threadIdx.x] += s_correct[threadIdx.x + h];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        *a.loss_out = (float)(s_loss[0] / (double)a.n);
        if (a.acc_out) *a.acc_out = (float)((double)s_correct[0] / (double)a.n);
        *a.counter = 0;
    }
}

// ----------------------------------------------------------------------------------------------------
// Host side

struct Gemm {
    int sms;
    float *ws;         // split-K partial tiles
    size_t ws_floats;
    int *counters;     // [COUNTERS], zero between launches
};

// Splits K only when the output has fewer tiles than the GPU has SMs, keeping at least SPLIT_MIN_K per
// block: 128x128x784 becomes 16 tiles x 7 splits of 112.
template <class LA, class LB, class Epi>
static void gemm(const Gemm &g, int M, int N, int K, const LA &la, const LB &lb, const Epi &ep, cudaStream_t stream) {
    const int tiles_m = cdiv(M, TILE), tiles_n = cdiv(N, TILE), tiles = tiles_m * tiles_n;
    int splits = 1, kchunk = K;
    if (tiles < g.sms && tiles <= COUNTERS) {
        int want = g.sms / tiles;
        const int by_k = K / SPLIT_MIN_K;
        if (want > by_k) want = by_k;
        while (want > 1 && (size_t)tiles * want * TILE * TILE > g.ws_floats) want--;
        if (want > 1) {
            kchunk = (cdiv(K, want) + 15) / 16 * 16;
            splits = cdiv(K, kchunk);
        }
    }
    if (splits <= 1) {
        splits = 1;
        kchunk = K;
    }
    const dim3 grid(tiles_n, tiles_m, splits);
    tiled_gemm_kernel<<<grid, GEMM_THREADS, 0, stream>>>(la, lb, ep, M, N, K, kchunk, g.ws, g.counters);
    cudaCheck(cudaGetLastError());
}

struct Net {
    const MnistConfig *cfg;
    Gemm g;
    float *params;
    int batch;
    float *act[MNIST_MAX_LAYERS + 1];       // hidden activations of the minibatch, 1 .. L-1
    float *dact[MNIST_MAX_LAYERS + 1];      // gradients, 1 .. L (dact[L]: dlogits)
    float *test_act[MNIST_MAX_LAYERS + 1];  // hidden activations of the test set, 1 .. L-1
    const uint8_t *train_pixels;
    const uint8_t *train_labels;
    const uint8_t *test_pixels;
    const uint8_t *test_labels;
    int n_test;
    double *part_loss;
    int *part_correct;
    int *head_counter;
};

static float *layer_w(const Net &net, int l) { return net.params + mnist_weight_offset(net.cfg, l); }
static float *layer_b(const Net &net, int l) { return net.params + mnist_bias_offset(net.cfg, l); }

// Hidden layers: act[l + 1] = relu(act[l] @ W_l + b_l), act[0] being the pixels of `rows`.
static void mlp_hidden(const Net &net, const uint8_t *pixels, const int32_t *rows, float *const *act, int n,
                       cudaStream_t stream) {
    const MnistConfig *cfg = net.cfg;
    for (int l = 0; l + 1 < cfg->n_layers; l++) {
        const int in = cfg->sizes[l], out = cfg->sizes[l + 1];
        const LoadKMn w{layer_w(net, l), out};
        const EpiBiasRelu ep{act[l + 1], layer_b(net, l), out};
        if (l == 0)
            gemm(net.g, n, out, in, LoadPix{pixels, rows, in}, w, ep, stream);
        else
            gemm(net.g, n, out, in, LoadMnK{act[l], in}, w, ep, stream);
    }
}

static void mlp_head(const Net &net, const uint8_t *pixels, const uint8_t *labels, const int32_t *rows,
                     float *const *act, int n, float *dlogits, float *dact, float *loss_out, float *acc_out,
                     cudaStream_t stream) {
    const MnistConfig *cfg = net.cfg;
    const int L = cfg->n_layers;
    HeadArgs a;
    memset(&a, 0, sizeof a);
    a.act = L > 1 ? act[L - 1] : NULL;
    a.pixels = pixels;
    a.rows = rows;
    a.labels = labels;
    a.w = layer_w(net, L - 1);
    a.bias = layer_b(net, L - 1);
    a.n = n;
    a.K = cfg->sizes[L - 1];
    a.C = cfg->sizes[L];
    a.dlogits = dlogits;
    a.dact = L > 1 ? dact : NULL;
    a.part_loss = net.part_loss;
    a.part_correct = net.part_correct;
    a.counter = net.head_counter;
    a.loss_out = loss_out;
    a.acc_out = acc_out;
    const int blocks = cdiv(n, HEAD_WARPS);
    if (L > 1)
        head_kernel<false><<<blocks, HEAD_THREADS, 0, stream>>>(a);
    else
        head_kernel<true><<<blocks, HEAD_THREADS, 0, stream>>>(a);
    cudaCheck(cudaGetLastError());
}

static void step_forward(const Net &net, const int32_t *rows, cudaStream_t stream) {
    mlp_hidden(net, net.train_pixels, rows, net.act, net.batch, stream);
}

// loss of the parameters before this step's update, dlogits, and the last layer's data gradient
static void step_loss(const Net &net, const int32_t *rows, float *loss_out, cudaStream_t stream) {
    const int L = net.cfg->n_layers;
    mlp_head(net, net.train_pixels, net.train_labels, rows, net.act, net.batch, net.dact[L], net.dact[L - 1],
             loss_out, NULL, stream);
}

// data gradients of the remaining hidden layers: dact[l] = (dact[l + 1] @ W_l^T) * (act[l] > 0)
static void step_backward(const Net &net, cudaStream_t stream) {
    const MnistConfig *cfg = net.cfg;
    for (int l = cfg->n_layers - 2; l >= 1; l--) {
        const int in = cfg->sizes[l], out = cfg->sizes[l + 1];
        gemm(net.g, net.batch, in, out, LoadMnK{net.dact[l + 1], out}, LoadMnK{layer_w(net, l), out},
             EpiReluGrad{net.dact[l], net.act[l], in}, stream);
    }
}

static void step_update(const Net &net, const int32_t *rows, cudaStream_t stream) {
    const MnistConfig *cfg = net.cfg;
    WgradArgs a;
    memset(&a, 0, sizeof a);
    int tiles = 0;
    for (int l = 0; l < cfg->n_layers; l++) {
        WgradLayer &p = a.layer[l];
        p.act = l > 0 ? net.act[l] : NULL;
        p.dout = net.dact[l + 1];
        p.w = layer_w(net, l);
        p.in = cfg->sizes[l];
        p.out = cfg->sizes[l + 1];
        p.tiles_n = cdiv(p.out, TILE);
        p.first_tile = tiles;
        tiles += cdiv(p.in + 1, TILE) * p.tiles_n;
    }
    a.n_layers = cfg->n_layers;
    a.pixels = net.train_pixels;
    a.rows = rows;
    a.batch = net.batch;
    a.lr = cfg->lr;
    wgrad_sgd_kernel<<<tiles, GEMM_THREADS, 0, stream>>>(a);
    cudaCheck(cudaGetLastError());
}

static void mlp_step(const Net &net, const int32_t *rows, float *loss_out, cudaStream_t stream) {
    step_forward(net, rows, stream);
    step_loss(net, rows, loss_out, stream);
    step_backward(net, stream);
    step_update(net, rows, stream);
}

static void mlp_eval(const Net &net, float *loss_out, float *acc_out, cudaStream_t stream) {
    if (net.n_test <= 0) {
        cudaCheck(cudaMemsetAsync(loss_out, 0, sizeof(float), stream));
        cudaCheck(cudaMemsetAsync(acc_out, 0, sizeof(float), stream));
        return;
    }
    mlp_hidden(net, net.test_pixels, NULL, net.test_act, net.n_test, stream);
    mlp_head(net, net.test_pixels, net.test_labels, NULL, net.test_act, net.n_test, NULL, NULL, loss_out, acc_out,
             stream);
}

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    cudaCheck(cudaMalloc(&p, bytes > 0 ? bytes : 16));
    return p;
}

}  // namespace

int train_mnist(const MnistConfig *cfg, const MnistData *data, MnistResult *out) {
    const int n_layers = cfg->n_layers, batch = cfg->batch, epochs = cfg->epochs;
    const int pixels = cfg->sizes[0];
    const int n_train = data->n_train, n_test = data->n_test;
    const int steps = mnist_steps_per_epoch(cfg, n_train);
    const int64_t n_params = mnist_param_count(cfg);

    if (cfg->sizes[n_layers] > HEAD_MAX_CLASSES) {
        fprintf(stderr, "error: %d classes, this trainer handles at most %d\n", cfg->sizes[n_layers],
                HEAD_MAX_CLASSES);
        return 1;
    }

    double setup_start_ms = host_ms();
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    Net net;
    memset(&net, 0, sizeof net);
    net.cfg = cfg;
    net.batch = batch;
    net.n_test = n_test;
    int device = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&net.g.sms, cudaDevAttrMultiProcessorCount, device));
    if (net.g.sms < 1) net.g.sms = 1;
    net.g.ws_floats = (size_t)net.g.sms * TILE * TILE;
    net.g.ws = (float *)dev_alloc(net.g.ws_floats * sizeof(float));
    net.g.counters = (int *)dev_alloc(COUNTERS * sizeof(int));
    cudaCheck(cudaMemsetAsync(net.g.counters, 0, COUNTERS * sizeof(int), stream));
    const int head_blocks = cdiv(batch > n_test ? batch : n_test, HEAD_WARPS);
    net.part_loss = (double *)dev_alloc((size_t)head_blocks * sizeof(double));
    net.part_correct = (int *)dev_alloc((size_t)head_blocks * sizeof(int));
    net.head_counter = (int *)dev_alloc(sizeof(int));
    cudaCheck(cudaMemsetAsync(net.head_counter, 0, sizeof(int), stream));

    float *d_params = (float *)dev_alloc(n_params * sizeof(float));
    uint8_t *d_train_pixels = (uint8_t *)dev_alloc((size_t)n_train * pixels);
    uint8_t *d_train_labels = (uint8_t *)dev_alloc((size_t)n_train);
    int32_t *d_order = (int32_t *)dev_alloc((size_t)epochs * n_train * sizeof(int32_t));
    uint8_t *d_test_pixels = (uint8_t *)dev_alloc((size_t)n_test * pixels);
    uint8_t *d_test_labels = (uint8_t *)dev_alloc((size_t)n_test);
    int32_t *d_cur_order = (int32_t *)dev_alloc((size_t)steps * batch * sizeof(int32_t));
    float *d_cur_loss = (float *)dev_alloc((size_t)steps * sizeof(float));
    float *d_step_loss = (float *)dev_alloc((size_t)epochs * steps * sizeof(float));
    float *d_test_loss = (float *)dev_alloc((size_t)epochs * sizeof(float));
    float *d_test_acc = (float *)dev_alloc((size_t)epochs * sizeof(float));
    net.params = d_params;
    net.train_pixels = d_train_pixels;
    net.train_labels = d_train_labels;
    net.test_pixels = d_test_pixels;
    net.test_labels = d_test_labels;
    for (int l = 1; l <= n_layers; l++) {
        net.dact[l] = (float *)dev_alloc((size_t)batch * cfg->sizes[l] * sizeof(float));
        if (l < n_layers) {
            net.act[l] = (float *)dev_alloc((size_t)batch * cfg->sizes[l] * sizeof(float));
            net.test_act[l] = (float *)dev_alloc((size_t)n_test * cfg->sizes[l] * sizeof(float));
        }
    }
    cudaCheck(cudaStreamSynchronize(stream));

    // one graph per epoch's steps, captured once: 2 * n_layers - 1 kernels per step (3 with one hidden layer)
    cudaGraph_t graph = NULL;
    cudaGraphExec_t graph_exec = NULL;
    const int use_graph = !cfg->breakdown && steps > 0 && (int64_t)steps * 2 * n_layers <= GRAPH_MAX_KERNELS;
    if (use_graph) {
        cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        for (int step = 0; step < steps; step++)
            mlp_step(net, d_cur_order + (size_t)step * batch, d_cur_loss + step, stream);
        cudaCheck(cudaStreamEndCapture(stream, &graph));
        cudaCheck(cudaGraphInstantiateWithFlags(&graph_exec, graph, 0));
    }

    TrainClock clock;
    train_clock_init(&clock, epochs, cfg->breakdown);
    out->timing.setup_ms = host_ms() - setup_start_ms;

    train_clock_e2e_start(&clock, stream);
    TIMED_PHASE(&clock, PHASE_H2D, stream) {
        for (int epoch = 0; epoch < epochs; epoch++) {
            const int32_t *order = data->batch_order + (int64_t)epoch * n_train;
            for (int i = 0; i < steps * batch; i++) {
                if (order[i] < 0 || order[i] >= n_train) {
                    fprintf(stderr, "error: batch order entry %d of epoch %d is %d, outside 0..%d\n", i, epoch,
                            order[i], n_train - 1);
                    exit(EXIT_DATA);
                }
            }
        }
        cudaCheck(cudaMemcpyAsync(d_params, data->init_params, n_params * sizeof(float), cudaMemcpyHostToDevice,
                                  stream));
        cudaCheck(cudaMemcpyAsync(d_train_pixels, data->train_pixels, (size_t)n_train * pixels,
                                  cudaMemcpyHostToDevice, stream));
        cudaCheck(cudaMemcpyAsync(d_train_labels, data->train_labels, (size_t)n_train, cudaMemcpyHostToDevice,
                                  stream));
        cudaCheck(cudaMemcpyAsync(d_order, data->batch_order, (size_t)epochs * n_train * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream));
        cudaCheck(cudaMemcpyAsync(d_test_pixels, data->test_pixels, (size_t)n_test * pixels, cudaMemcpyHostToDevice,
                                  stream));
        cudaCheck(cudaMemcpyAsync(d_test_labels, data->test_labels, (size_t)n_test, cudaMemcpyHostToDevice,
                                  stream));
    }
    train_clock_loop_start(&clock, stream);

    for (int epoch = 0; epoch < epochs; epoch++) {
        if (steps > 0) {
            TIMED_PHASE(&clock, PHASE_H2D, stream) {
                cudaCheck(cudaMemcpyAsync(d_cur_order, d_order + (size_t)epoch * n_train,
                                          (size_t)steps * batch * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                                          stream));
            }
            if (use_graph) {
                cudaCheck(cudaGraphLaunch(graph_exec, stream));
            } else if (cfg->breakdown) {
                for (int step = 0; step < steps; step++) {
                    const int32_t *rows = d_cur_order + (size_t)step * batch;
                    TIMED_PHASE(&clock, PHASE_FORWARD, stream) { step_forward(net, rows, stream); }
                    TIMED_PHASE(&clock, PHASE_LOSS, stream) { step_loss(net, rows, d_cur_loss + step, stream); }
                    TIMED_PHASE(&clock, PHASE_BACKWARD, stream) { step_backward(net, stream); }
                    TIMED_PHASE(&clock, PHASE_UPDATE, stream) { step_update(net, rows, stream); }
                }
            } else {
                for (int step = 0; step < steps; step++)
                    mlp_step(net, d_cur_order + (size_t)step * batch, d_cur_loss + step, stream);
            }
            TIMED_PHASE(&clock, PHASE_LOSS, stream) {
                cudaCheck(cudaMemcpyAsync(d_step_loss + (size_t)epoch * steps, d_cur_loss,
                                          (size_t)steps * sizeof(float), cudaMemcpyDeviceToDevice, stream));
            }
        }

        TIMED_PHASE(&clock, PHASE_EVAL, stream) { mlp_eval(net, d_test_loss + epoch, d_test_acc + epoch, stream); }

        train_clock_epoch_end(&clock, epoch, stream);
    }

    TIMED_PHASE(&clock, PHASE_D2H, stream) {
        cudaCheck(cudaMemcpyAsync(out->params, d_params, n_params * sizeof(float), cudaMemcpyDeviceToHost, stream));
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

    if (graph_exec) cudaCheck(cudaGraphExecDestroy(graph_exec));
    if (graph) cudaCheck(cudaGraphDestroy(graph));
    for (int l = 1; l <= n_layers; l++) {
        if (net.act[l]) cudaCheck(cudaFree(net.act[l]));
        if (net.dact[l]) cudaCheck(cudaFree(net.dact[l]));
        if (net.test_act[l]) cudaCheck(cudaFree(net.test_act[l]));
    }
    cudaCheck(cudaFree(d_params));
    cudaCheck(cudaFree(d_train_pixels));
    cudaCheck(cudaFree(d_train_labels));
    cudaCheck(cudaFree(d_order));
    cudaCheck(cudaFree(d_test_pixels));
    cudaCheck(cudaFree(d_test_labels));
    cudaCheck(cudaFree(d_cur_order));
    cudaCheck(cudaFree(d_cur_loss));
    cudaCheck(cudaFree(d_step_loss));
    cudaCheck(cudaFree(d_test_loss));
    cudaCheck(cudaFree(d_test_acc));
    cudaCheck(cudaFree(net.part_loss));
    cudaCheck(cudaFree(net.part_correct));
    cudaCheck(cudaFree(net.head_counter));
    cudaCheck(cudaFree(net.g.ws));
    cudaCheck(cudaFree(net.g.counters));
    cudaCheck(cudaStreamDestroy(stream));
    return 0;
}
