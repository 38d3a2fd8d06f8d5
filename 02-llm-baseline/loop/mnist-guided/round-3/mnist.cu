// mnist.cu: the MNIST MLP trainer, round 3: stage 05's idea (asynchrony) on top of round 2's on-chip tiles.
//
// The data: the pixel bytes (1/4 of the floats) go up once through a ring of pinned staging buffers on an
// upload stream (the host copy of one chunk overlaps the DMA of the previous one; events guard the reuse
// of a chunk), are scaled to floats on the device, and every minibatch is gathered on the device by its
// batch-order rows. The test set goes up on the same stream while epoch 0 trains; only epoch 0's
// evaluation waits for it, on an event. No host synchronization inside the training loop.
//
// The step: every GEMM is a 32x32 output tile per block whose operands are staged in padded shared memory
// a k-slab at a time. Every operand load is unconditional (indices clamped, then a select), so all of a
// thread's slab loads are in flight together. Small-M GEMMs split K; the last block of a tile adds the
// partials in a fixed order. The head (last layer, softmax cross-entropy, loss, dlogits, the last layer's
// data gradient through the ReLU) runs inside the last hidden GEMM: the last block to finish a 32-row tile
// computes that tile's head, and the last tile adds the losses in order, in double. The weight gradients
// and SGD updates of all layers are one launch. One hidden layer: two kernels per step, replayed per
// epoch from a CUDA graph.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>

#include "check.h"
#include "host.h"
#include "timing.h"
#include "trainer.h"

const char *const MNIST_VARIANTS[] = {"async", NULL};
const char *const MNIST_PRECISIONS[] = {"fp32", NULL};

namespace {

constexpr int TILE = 32;                        // output tile TILE x TILE per block
constexpr int KC = 128;                         // k-slab staged in shared memory per pass
constexpr int LDS = TILE + 4;                   // padded slab row: conflict-free stores, float4 reads
constexpr int GEMM_THREADS = 128;               // 16 x 8 threads, 2 x 4 outputs each
constexpr int SLAB = TILE * KC / GEMM_THREADS;  // slab elements each thread loads
constexpr int GEMM_SMEM = 2 * KC * LDS;         // floats: the A and B slabs
constexpr int SPLIT_MIN_K = 64;                 // no split below 64 k per block
constexpr int COUNTERS = 1024;                  // split-K tile counters
constexpr int64_t GRAPH_MAX_KERNELS = 60000;

constexpr int NCLS = MNIST_CLASSES;                              // the head is built for the 10 classes
constexpr int HK = 128;                                          // k-chunk of the head's inputs
constexpr int HXS = HK + 4;                                      // padded input row: banks 4 r + q differ
constexpr int HEAD_SMEM = TILE * HXS + HK * NCLS + TILE * NCLS;  // inputs, weights, dlogits (floats)

constexpr size_t STAGE_BYTES = (size_t)4 << 20;  // one pinned staging chunk
constexpr int NSTAGE = 4;                        // chunks in the ring
constexpr int SCALE_THREADS = 256;

static_assert(SLAB == 32, "the slab mappings below assume 32 elements per thread");
static_assert(GEMM_THREADS == 128, "the slab mappings below assume 128 threads");
static_assert(HK == GEMM_THREADS, "the head stages one input column per thread");
static_assert(HK * NCLS % GEMM_THREADS == 0, "the head stages whole weight chunks");
static_assert(HEAD_SMEM <= GEMM_SMEM, "the head reuses the GEMM's slabs");

static inline int cdiv(int a, int b) { return (a + b - 1) / b; }

// ----------------------------------------------------------------------------------------------------
// Operand loaders: value(mn, k) of a GEMM operand; mn is the row of A (m) or the column of B (n).
// kMn: consecutive mn are consecutive in memory (else consecutive k are); it picks the slab mapping.
// fetch_slab clamps (mn, k) into the operand, so a loader never sees an index outside it and never
// needs a branch.

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
        const float v = p[(size_t)k * in + min(mn, in - 1)];  // loaded either way: no branch
        return mn < in ? v : 1.0f;
    }
};

struct LoadRows {  // layer 0's input: row rows[m] of the scaled images, gathered on the fly
    static constexpr bool kMn = false;
    const float *img;
    const int32_t *rows;
    int ld;
    __device__ __forceinline__ float operator()(int m, int k) const { return img[(size_t)rows[m] * ld + k]; }
};

struct LoadRowsT1 {  // [X^T; 1] for layer 0's weight gradient, X the minibatch's image rows
    static constexpr bool kMn = true;
    const float *img;
    const int32_t *rows;
    int in;
    __device__ __forceinline__ float operator()(int mn, int k) const {
        const float v = img[(size_t)rows[k] * in + min(mn, in - 1)];
        return mn < in ? v : 1.0f;
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

// All SLAB loads of a thread are issued before any is used: the indices are clamped into the operand and
// the out-of-range elements are zeroed by a select afterwards, so there is no branch between the loads.
template <class L>
__device__ __forceinline__ void fetch_slab(float (&r)[SLAB], const L &ld, int mn0, int mn_end, int k0, int klen) {
#pragma unroll
    for (int i = 0; i < SLAB; i++) {
        int mn, k;
        slab_coords<L::kMn>((int)threadIdx.x, i, mn, k);
        const float v = ld(min(mn0 + mn, mn_end - 1), k0 + min(k, klen - 1));
        r[i] = (k < klen && mn0 + mn < mn_end) ? v : 0.0f;
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

// ----------------------------------------------------------------------------------------------------
// The head, for one tile of 32 rows with 128 threads: the last layer's forward, softmax cross-entropy,
// the tile's loss (and correct count), and for training dlogits = (softmax - onehot) / n and the last
// layer's data gradient through the ReLU. Inputs and weights are staged in shared memory HK inputs at a
// time; 4 threads per row split the inputs (k = q, q + 4, ...) and two shuffle levels add them. The tile
// sums of every tile are added in tile order, in double, by the last tile to finish (a counter).

struct HeadArgs {
    const float *x;         // inputs of the last layer: row rows[r] of x (gathered) or row r
    const int32_t *rows;    // the data row of each of the n rows: its label (and its input when gathered)
    const uint8_t *labels;
    const float *w;         // (K, NCLS)
    const float *bias;      // (NCLS)
    int n, K;
    float *dlogits;         // (n, NCLS), or NULL (evaluation)
    float *dact;            // (n, K) gradient of the inputs through the ReLU, or NULL
    int *row_counters;      // fused into a GEMM: per 32-row tile, zero between launches
    double *part_loss;      // per 32-row tile
    int *part_correct;
    int *counter;           // zero between launches
    float *loss_out;        // mean cross-entropy
    float *acc_out;         // accuracy, or NULL
};

// Stage inputs kb .. kb+kl of the tile's rows (thread t: column t of every row) and those weight rows.
// Rows past n and columns past kl are zeros. __ldcg: in the fused head the inputs were written by other
// blocks of the same launch.
template <bool kGather>
__device__ __forceinline__ void head_load_chunk(const HeadArgs &a, int m0, int kb, int kl, float *xs, float *wsm) {
    const int t = (int)threadIdx.x;
    const int K = a.K;
    const int kk = kb + min(t, kl - 1);
#pragma unroll
    for (int i = 0; i < TILE; i++) {
        const int r = min(m0 + i, a.n - 1);
        const int src = kGather ? a.rows[r] : r;
        const float v = __ldcg(a.x + (size_t)src * K + kk);
        xs[i * HXS + t] = (t < kl && m0 + i < a.n) ? v : 0.0f;
    }
    const float *w = a.w + (size_t)kb * NCLS;
    const int we = kl * NCLS;
#pragma unroll
    for (int j = 0; j < HK * NCLS / GEMM_THREADS; j++) {
        const int e = t + GEMM_THREADS * j;
        const float v = w[min(e, we - 1)];
        wsm[e] = e < we ? v : 0.0f;
    }
}

template <bool kGather>
__device__ __forceinline__ void head_tile(const HeadArgs &a, int m0, float *smem, int tile, int n_tiles) {
    __shared__ double s_loss[GEMM_THREADS];
    __shared__ int s_correct[GEMM_THREADS];
    __shared__ int s_done;
    float *xs = smem;                 // [TILE][HXS]
    float *wsm = smem + TILE * HXS;   // [HK][NCLS]
    float *gs = wsm + HK * NCLS;      // [TILE][NCLS] dlogits of the tile
    const int t = (int)threadIdx.x, rl = t >> 2, q = t & 3;
    const int r = m0 + rl;
    const bool valid = r < a.n;
    const int K = a.K;

    // issued now, used after the logits
    const int y = valid ? (int)a.labels[a.rows[r]] : 0;
    float b[NCLS];
#pragma unroll
    for (int j = 0; j < NCLS; j++) b[j] = a.bias[j];

    float z[NCLS];
#pragma unroll
    for (int j = 0; j < NCLS; j++) z[j] = 0.0f;
    for (int kb = 0; kb < K; kb += HK) {
        const int kl = min(HK, K - kb);
        __syncthreads();  // the shared memory (GEMM slabs, or the previous chunk) is free
        head_load_chunk<kGather>(a, m0, kb, kl, xs, wsm);
        __syncthreads();
        const float *xr = xs + rl * HXS;
#pragma unroll 4
        for (int kk = q; kk < kl; kk += 4) {
            const float xv = xr[kk];
            const float *wk = wsm + kk * NCLS;
#pragma unroll
            for (int j = 0; j < NCLS; j++) z[j] = fmaf(xv, wk[j], z[j]);
        }
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
#pragma unroll
        for (int j = 0; j < NCLS; j++) z[j] += __shfl_xor_sync(0xffffffffu, z[j], off);
    }
    // the 4 threads of a row now hold the same logits (float addition commutes)
    int pred = 0;
    z[0] += b[0];
    float mx = z[0];
#pragma unroll
    for (int j = 1; j < NCLS; j++) {
        z[j] += b[j];
        if (z[j] > mx) {
            mx = z[j];
            pred = j;
        }
    }
    float e[NCLS];
    float sum = 0.0f, zy = 0.0f;
#pragma unroll
    for (int j = 0; j < NCLS; j++) {
        e[j] = expf(z[j] - mx);
        sum += e[j];
        if (j == y) zy = z[j];
    }
    const double row_loss = (double)(logf(sum) - (zy - mx));
    const int row_correct = pred == y;

    if (a.dlogits) {
        const float n_f = (float)a.n;
        float g[NCLS];
#pragma unroll
        for (int j = 0; j < NCLS; j++) g[j] = (e[j] / sum - (j == y ? 1.0f : 0.0f)) / n_f;
        if (valid) {
#pragma unroll
            for (int j = 0; j < NCLS; j++)
                if ((j & 3) == q) a.dlogits[(size_t)r * NCLS + j] = g[j];
        }
        if (q == 0) {
#pragma unroll
            for (int j = 0; j < NCLS; j++) gs[rl * NCLS + j] = valid ? g[j] : 0.0f;
        }
    }
    if (q == 0) {
        s_loss[rl] = valid ? row_loss : 0.0;
        s_correct[rl] = valid ? row_correct : 0;
    }

    // dact[r][k] = (dlogits[r] . W[k]) where the input is positive: thread t owns column k = kb + t
    if (a.dlogits && a.dact) {
        const int rows_here = min(TILE, a.n - m0);
        for (int kb = 0; kb < K; kb += HK) {
            const int kl = min(HK, K - kb);
            if (K > HK) {  // one chunk: it is still staged
                __syncthreads();
                head_load_chunk<kGather>(a, m0, kb, kl, xs, wsm);
            }
            __syncthreads();  // gs and the chunk are visible
            if (t < kl) {
                float wk[NCLS];
#pragma unroll
                for (int j = 0; j < NCLS; j++) wk[j] = wsm[t * NCLS + j];
                float *dst = a.dact + (size_t)m0 * K + kb + t;
                for (int i = 0; i < rows_here; i++) {
                    const float *gi = gs + i * NCLS;
                    float v = 0.0f;
#pragma unroll
                    for (int j = 0; j < NCLS; j++) v = fmaf(gi[j], wk[j], v);
                    dst[(size_t)i * K] = xs[i * HXS + t] > 0.0f ? v : 0.0f;
                }
            }
        }
    }

    __syncthreads();
    if (t == 0) {
        double l = 0.0;
        int c = 0;
        for (int i = 0; i < TILE; i++) {
            l += s_loss[i];
            c += s_correct[i];
        }
        a.part_loss[tile] = l;
        a.part_correct[tile] = c;
        __threadfence();
        s_done = atomicAdd(a.counter, 1) == n_tiles - 1;
    }
    __syncthreads();
    if (!s_done) return;
    __threadfence();
    double l = 0.0;
    int c = 0;
    for (int i = t; i < n_tiles; i += GEMM_THREADS) {
        l += __ldcg(a.part_loss + i);
        c += __ldcg(a.part_correct + i);
    }
    s_loss[t] = l;
    s_correct[t] = c;
    __syncthreads();
    for (int h = GEMM_THREADS / 2; h > 0; h >>= 1) {
        if (t < h) {
            s_loss[t] += s_loss[t + h];
            s_correct[t] += s_correct[t + h];
        }
        __syncthreads();
    }
    if (t == 0) {
        *a.loss_out = (float)(s_loss[0] / (double)a.n);
        if (a.acc_out) *a.acc_out = (float)((double)s_correct[0] / (double)a.n);
        *a.counter = 0;
    }
}

// The head on its own: with --breakdown (the loss phase is timed apart) and without hidden layers (the
// inputs are then the gathered image rows). One block per 32-row tile.
template <bool kGather>
__global__ void __launch_bounds__(GEMM_THREADS) head_kernel(const HeadArgs a) {
    __shared__ __align__(16) float smem[HEAD_SMEM];
    head_tile<kGather>(a, (int)blockIdx.x * TILE, smem, (int)blockIdx.x, (int)gridDim.x);
}

// ----------------------------------------------------------------------------------------------------
// C = A @ B with an epilogue; grid (tiles_n, tiles_m, splits). With splits > 1 each block covers kchunk
// of K, writes its partial tile to ws, and the last block of the tile (a counter) adds the partials in
// split order, applies the epilogue and resets the counter for the next launch. kHead: the last block to
// finish a row of tiles (32 rows, all N) runs the head for those rows (the epilogue wrote its inputs).
template <class LA, class LB, class Epi, bool kHead>
__global__ void __launch_bounds__(GEMM_THREADS)
    tiled_gemm_kernel(LA la, LB lb, Epi ep, int M, int N, int K, int kchunk, float *ws, int *counters, HeadArgs h) {
    __shared__ __align__(16) float smem[GEMM_SMEM];
    __shared__ int s_last;
    float(*As)[LDS] = reinterpret_cast<float(*)[LDS]>(smem);
    float(*Bs)[LDS] = reinterpret_cast<float(*)[LDS]>(smem + KC * LDS);
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

    if constexpr (kHead) {
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) s_last = atomicAdd(h.row_counters + blockIdx.y, 1) == (int)gridDim.x - 1;
        __syncthreads();
        if (!s_last) return;
        __threadfence();
        if (threadIdx.x == 0) h.row_counters[blockIdx.y] = 0;
        head_tile<false>(h, m0, smem, (int)blockIdx.y, (int)gridDim.y);
    }
}

// ----------------------------------------------------------------------------------------------------
// Weight gradient and SGD of every layer in one launch: [W_l; b_l] -= lr * [act_l; 1]^T @ dout_l. W_l and
// b_l are packed back to back, so the bias is row `in` of an (in + 1, out) matrix. K is the batch.

struct WgradLayer {
    const float *act;   // (batch, in); NULL for layer 0, whose input is the image rows `rows`
    const float *dout;  // (batch, out): gradient of the layer's output
    float *w;           // (in + 1, out): W_l then b_l
    int in, out, tiles_n, first_tile;
};

struct WgradArgs {
    WgradLayer layer[MNIST_MAX_LAYERS];
    int n_layers;
    const float *img;
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
    const int tm = (int)threadIdx.x >> 3, tn = (int)threadIdx.x & 7;
    // the parameters this thread updates, loaded now so that their latency hides behind the product
    float wold[2][4];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int m = min(m0 + tm * 2 + i, M - 1);
#pragma unroll
        for (int j = 0; j < 4; j++) wold[i][j] = p.w[(size_t)m * N + min(n0 + tn * 4 + j, N - 1)];
    }
    const LoadKMn lb{p.dout, p.out};
    float acc[2][4];
    if (p.act)
        tile_product(acc, LoadKMn1{p.act, p.in}, lb, m0, M, n0, N, 0, a.batch, As, Bs);
    else
        tile_product(acc, LoadRowsT1{a.img, a.rows, p.in}, lb, m0, M, n0, N, 0, a.batch, As, Bs);
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int m = m0 + tm * 2 + i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int n = n0 + tn * 4 + j;
            if (n < N) p.w[(size_t)m * N + n] = wold[i][j] - a.lr * acc[i][j];
        }
    }
}

// ----------------------------------------------------------------------------------------------------
// Data on the device: the bytes scaled once, mnist_pixel_value of each (bit for bit the host's floats).

__global__ void scale_pixels_kernel(const uint8_t *__restrict__ in, float *__restrict__ out, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t n4 = n / 4;
    const uchar4 *in4 = reinterpret_cast<const uchar4 *>(in);
    float4 *out4 = reinterpret_cast<float4 *>(out);
    for (size_t i = first; i < n4; i += stride) {
        const uchar4 p = in4[i];
        out4[i] = make_float4(mnist_pixel_value(p.x), mnist_pixel_value(p.y), mnist_pixel_value(p.z),
                              mnist_pixel_value(p.w));
    }
    for (size_t i = n4 * 4 + first; i < n; i += stride) out[i] = mnist_pixel_value(in[i]);
}

__global__ void iota_kernel(int32_t *p, int n) {
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) p[i] = i;
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
template <bool kHead, class LA, class LB, class Epi>
static void gemm(const Gemm &g, int M, int N, int K, const LA &la, const LB &lb, const Epi &ep, const HeadArgs &h,
                 cudaStream_t stream) {
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
    tiled_gemm_kernel<LA, LB, Epi, kHead><<<grid, GEMM_THREADS, 0, stream>>>(la, lb, ep, M, N, K, kchunk, g.ws,
                                                                             g.counters, h);
    cudaCheck(cudaGetLastError());
}

struct Net {
    const MnistConfig *cfg;
    Gemm g;
    float *params;
    int batch;
    bool fuse;                              // training: the head runs in the last hidden GEMM
    float *act[MNIST_MAX_LAYERS + 1];       // hidden activations of the minibatch, 1 .. L-1
    float *dact[MNIST_MAX_LAYERS + 1];      // gradients, 1 .. L (dact[L]: dlogits)
    float *test_act[MNIST_MAX_LAYERS + 1];  // hidden activations of the test set, 1 .. L-1
    const float *train_img;                 // (n_train, 784) scaled on the device
    const uint8_t *train_labels;
    const float *test_img;
    const uint8_t *test_labels;
    const int32_t *test_rows;               // 0 .. n_test-1
    int n_test;
    double *part_loss;                      // head: per 32-row tile
    int *part_correct;
    int *head_counter;
    int *row_counters;
};

static float *layer_w(const Net &net, int l) { return net.params + mnist_weight_offset(net.cfg, l); }
static float *layer_b(const Net &net, int l) { return net.params + mnist_bias_offset(net.cfg, l); }

static HeadArgs head_args(const Net &net, const float *img, const int32_t *rows, const uint8_t *labels,
                          float *const *act, int n, float *dlogits, float *dact_in, float *loss_out,
                          float *acc_out) {
    const MnistConfig *cfg = net.cfg;
    const int L = cfg->n_layers;
    HeadArgs h;
    memset(&h, 0, sizeof h);
    h.x = L > 1 ? act[L - 1] : img;
    h.rows = rows;
    h.labels = labels;
    h.w = layer_w(net, L - 1);
    h.bias = layer_b(net, L - 1);
    h.n = n;
    h.K = cfg->sizes[L - 1];
    h.dlogits = dlogits;
    h.dact = L > 1 ? dact_in : NULL;
    h.row_counters = net.row_counters;
    h.part_loss = net.part_loss;
    h.part_correct = net.part_correct;
    h.counter = net.head_counter;
    h.loss_out = loss_out;
    h.acc_out = acc_out;
    return h;
}

// Hidden layers: act[l + 1] = relu(act[l] @ W_l + b_l), act[0] being the image rows `rows`. With `head`,
// the last hidden GEMM also runs the head.
static void mlp_hidden(const Net &net, const float *img, const int32_t *rows, float *const *act, int n,
                       const HeadArgs *head, cudaStream_t stream) {
    const MnistConfig *cfg = net.cfg;
    const int L = cfg->n_layers;
    HeadArgs none;
    memset(&none, 0, sizeof none);
    for (int l = 0; l + 1 < L; l++) {
        const int in = cfg->sizes[l], out = cfg->sizes[l + 1];
        const LoadKMn w{layer_w(net, l), out};
        const EpiBiasRelu ep{act[l + 1], layer_b(net, l), out};
        const bool fused = head != NULL && l + 2 == L;
        if (l == 0) {
            const LoadRows x{img, rows, in};
            if (fused)
                gemm<true>(net.g, n, out, in, x, w, ep, *head, stream);
            else
                gemm<false>(net.g, n, out, in, x, w, ep, none, stream);
        } else {
            const LoadMnK x{act[l], in};
            if (fused)
                gemm<true>(net.g, n, out, in, x, w, ep, *head, stream);
            else
                gemm<false>(net.g, n, out, in, x, w, ep, none, stream);
        }
    }
}

static void mlp_head(const Net &net, const HeadArgs &h, cudaStream_t stream) {
    const int blocks = cdiv(h.n, TILE);
    if (net.cfg->n_layers > 1)
        head_kernel<false><<<blocks, GEMM_THREADS, 0, stream>>>(h);
    else
        head_kernel<true><<<blocks, GEMM_THREADS, 0, stream>>>(h);
    cudaCheck(cudaGetLastError());
}

static bool head_fused(const Net &net) { return net.fuse && net.cfg->n_layers > 1; }

static HeadArgs train_head(const Net &net, const int32_t *rows, float *loss_out) {
    const int L = net.cfg->n_layers;
    return head_args(net, net.train_img, rows, net.train_labels, net.act, net.batch, net.dact[L], net.dact[L - 1],
                     loss_out, NULL);
}

// forward; fused: also the loss of the parameters before this step's update, dlogits and the last
// layer's data gradient
static void step_forward(const Net &net, const int32_t *rows, float *loss_out, cudaStream_t stream) {
    const HeadArgs h = train_head(net, rows, loss_out);
    mlp_hidden(net, net.train_img, rows, net.act, net.batch, head_fused(net) ? &h : NULL, stream);
}

static void step_loss(const Net &net, const int32_t *rows, float *loss_out, cudaStream_t stream) {
    if (!head_fused(net)) mlp_head(net, train_head(net, rows, loss_out), stream);
}

// data gradients of the remaining hidden layers: dact[l] = (dact[l + 1] @ W_l^T) * (act[l] > 0)
static void step_backward(const Net &net, cudaStream_t stream) {
    const MnistConfig *cfg = net.cfg;
    HeadArgs none;
    memset(&none, 0, sizeof none);
    for (int l = cfg->n_layers - 2; l >= 1; l--) {
        const int in = cfg->sizes[l], out = cfg->sizes[l + 1];
        gemm<false>(net.g, net.batch, in, out, LoadMnK{net.dact[l + 1], out}, LoadMnK{layer_w(net, l), out},
                    EpiReluGrad{net.dact[l], net.act[l], in}, none, stream);
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
    a.img = net.train_img;
    a.rows = rows;
    a.batch = net.batch;
    a.lr = cfg->lr;
    wgrad_sgd_kernel<<<tiles, GEMM_THREADS, 0, stream>>>(a);
    cudaCheck(cudaGetLastError());
}

static void mlp_step(const Net &net, const int32_t *rows, float *loss_out, cudaStream_t stream) {
    step_forward(net, rows, loss_out, stream);
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
    const HeadArgs h = head_args(net, net.test_img, net.test_rows, net.test_labels, net.test_act, net.n_test, NULL,
                                 NULL, loss_out, acc_out);
    const bool fused = net.cfg->n_layers > 1;
    mlp_hidden(net, net.test_img, net.test_rows, net.test_act, net.n_test, fused ? &h : NULL, stream);
    if (!fused) mlp_head(net, h, stream);
}

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    cudaCheck(cudaMalloc(&p, bytes > 0 ? bytes : 16));
    return p;
}

// A ring of pinned staging chunks on the upload stream: the host copies chunk i + 1 while the DMA engine
// moves chunk i; a chunk is refilled only once its event says the DMA that read it is done.
struct Stager {
    cudaStream_t stream;
    unsigned char *base;  // NSTAGE * STAGE_BYTES pinned
    cudaEvent_t done[NSTAGE];
    int next;
};

static void stage_upload(Stager &st, void *dst, const void *src, size_t bytes) {
    for (size_t off = 0; off < bytes; off += STAGE_BYTES) {
        const size_t n = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
        const int b = st.next;
        st.next = (b + 1) % NSTAGE;
        unsigned char *buf = st.base + (size_t)b * STAGE_BYTES;
        cudaCheck(cudaEventSynchronize(st.done[b]));  // returns at once for a chunk never used
        memcpy(buf, (const unsigned char *)src + off, n);
        cudaCheck(cudaMemcpyAsync((unsigned char *)dst + off, buf, n, cudaMemcpyHostToDevice, st.stream));
        cudaCheck(cudaEventRecord(st.done[b], st.stream));
    }
}

static void scale_pixels(const uint8_t *in, float *out, size_t n, int sms, cudaStream_t stream) {
    if (n == 0) return;
    const size_t want = (n / 4 + SCALE_THREADS - 1) / SCALE_THREADS;
    const size_t cap = (size_t)8 * sms;
    int blocks = (int)(want < cap ? want : cap);
    if (blocks < 1) blocks = 1;
    scale_pixels_kernel<<<blocks, SCALE_THREADS, 0, stream>>>(in, out, n);
    cudaCheck(cudaGetLastError());
}

static void check_order(const MnistData *data, int epochs, int n_train, int used) {
    for (int epoch = 0; epoch < epochs; epoch++) {
        const int32_t *order = data->batch_order + (int64_t)epoch * n_train;
        for (int i = 0; i < used; i++) {
            if (order[i] < 0 || order[i] >= n_train) {
                fprintf(stderr, "error: batch order entry %d of epoch %d is %d, outside 0..%d\n", i, epoch, order[i],
                        n_train - 1);
                exit(EXIT_DATA);
            }
        }
    }
}

}  // namespace

int train_mnist(const MnistConfig *cfg, const MnistData *data, MnistResult *out) {
    const int n_layers = cfg->n_layers, batch = cfg->batch, epochs = cfg->epochs;
    const int pixels = cfg->sizes[0];
    const int n_train = data->n_train, n_test = data->n_test;
    const int steps = mnist_steps_per_epoch(cfg, n_train);
    const int64_t n_params = mnist_param_count(cfg);
    const size_t train_px = (size_t)n_train * pixels, test_px = (size_t)n_test * pixels;

    if (cfg->sizes[n_layers] != NCLS) {
        fprintf(stderr, "error: %d classes, this trainer's head is built for %d\n", cfg->sizes[n_layers], NCLS);
        return 1;
    }

    double setup_start_ms = host_ms();
    cudaStream_t stream, up;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&up, cudaStreamNonBlocking));
    cudaEvent_t ev_start, ev_train, ev_test;
    cudaCheck(cudaEventCreateWithFlags(&ev_start, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&ev_train, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&ev_test, cudaEventDisableTiming));
    Stager st;
    st.stream = up;
    st.next = 0;
    st.base = NULL;
    cudaCheck(cudaHostAlloc((void **)&st.base, (size_t)NSTAGE * STAGE_BYTES, cudaHostAllocDefault));
    for (int b = 0; b < NSTAGE; b++) cudaCheck(cudaEventCreateWithFlags(&st.done[b], cudaEventDisableTiming));

    Net net;
    memset(&net, 0, sizeof net);
    net.cfg = cfg;
    net.batch = batch;
    net.n_test = n_test;
    net.fuse = !cfg->breakdown;  // --breakdown times the loss phase apart
    int device = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&net.g.sms, cudaDevAttrMultiProcessorCount, device));
    if (net.g.sms < 1) net.g.sms = 1;
    net.g.ws_floats = (size_t)net.g.sms * TILE * TILE;
    net.g.ws = (float *)dev_alloc(net.g.ws_floats * sizeof(float));
    net.g.counters = (int *)dev_alloc(COUNTERS * sizeof(int));
    cudaCheck(cudaMemsetAsync(net.g.counters, 0, COUNTERS * sizeof(int), stream));
    const int head_tiles = cdiv(batch > n_test ? batch : n_test, TILE);
    net.part_loss = (double *)dev_alloc((size_t)head_tiles * sizeof(double));
    net.part_correct = (int *)dev_alloc((size_t)head_tiles * sizeof(int));
    net.head_counter = (int *)dev_alloc(sizeof(int));
    cudaCheck(cudaMemsetAsync(net.head_counter, 0, sizeof(int), stream));
    net.row_counters = (int *)dev_alloc((size_t)head_tiles * sizeof(int));
    cudaCheck(cudaMemsetAsync(net.row_counters, 0, (size_t)head_tiles * sizeof(int), stream));

    float *d_params = (float *)dev_alloc(n_params * sizeof(float));
    uint8_t *d_train_bytes = (uint8_t *)dev_alloc(train_px);
    float *d_train_img = (float *)dev_alloc(train_px * sizeof(float));
    uint8_t *d_train_labels = (uint8_t *)dev_alloc((size_t)n_train);
    int32_t *d_order = (int32_t *)dev_alloc((size_t)epochs * n_train * sizeof(int32_t));
    uint8_t *d_test_bytes = (uint8_t *)dev_alloc(test_px);
    float *d_test_img = (float *)dev_alloc(test_px * sizeof(float));
    uint8_t *d_test_labels = (uint8_t *)dev_alloc((size_t)n_test);
    int32_t *d_test_rows = (int32_t *)dev_alloc((size_t)n_test * sizeof(int32_t));
    int32_t *d_cur_order = (int32_t *)dev_alloc((size_t)steps * batch * sizeof(int32_t));
    float *d_cur_loss = (float *)dev_alloc((size_t)steps * sizeof(float));
    float *d_step_loss = (float *)dev_alloc((size_t)epochs * steps * sizeof(float));
    float *d_test_loss = (float *)dev_alloc((size_t)epochs * sizeof(float));
    float *d_test_acc = (float *)dev_alloc((size_t)epochs * sizeof(float));
    if (n_test > 0) {
        iota_kernel<<<cdiv(n_test, 256), 256, 0, stream>>>(d_test_rows, n_test);
        cudaCheck(cudaGetLastError());
    }
    net.params = d_params;
    net.train_img = d_train_img;
    net.train_labels = d_train_labels;
    net.test_img = d_test_img;
    net.test_labels = d_test_labels;
    net.test_rows = d_test_rows;
    for (int l = 1; l <= n_layers; l++) {
        net.dact[l] = (float *)dev_alloc((size_t)batch * cfg->sizes[l] * sizeof(float));
        if (l < n_layers) {
            net.act[l] = (float *)dev_alloc((size_t)batch * cfg->sizes[l] * sizeof(float));
            net.test_act[l] = (float *)dev_alloc((size_t)n_test * cfg->sizes[l] * sizeof(float));
        }
    }
    cudaCheck(cudaStreamSynchronize(stream));

    // one graph per epoch's steps, captured once: 2 * n_layers - 2 kernels per step (2 with one hidden layer)
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
        // the upload stream starts after e2e does; the compute stream waits for the training data on an event
        cudaCheck(cudaEventRecord(ev_start, stream));
        cudaCheck(cudaStreamWaitEvent(up, ev_start, 0));
        stage_upload(st, d_train_bytes, data->train_pixels, train_px);
        scale_pixels(d_train_bytes, d_train_img, train_px, net.g.sms, up);
        stage_upload(st, d_params, data->init_params, n_params * sizeof(float));
        stage_upload(st, d_train_labels, data->train_labels, (size_t)n_train);
        check_order(data, epochs, n_train, steps * batch);  // while the last chunks are in flight
        stage_upload(st, d_order, data->batch_order, (size_t)epochs * n_train * sizeof(int32_t));
        cudaCheck(cudaEventRecord(ev_train, up));
        cudaCheck(cudaStreamWaitEvent(stream, ev_train, 0));
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
                    float *loss = d_cur_loss + step;
                    TIMED_PHASE(&clock, PHASE_FORWARD, stream) { step_forward(net, rows, loss, stream); }
                    TIMED_PHASE(&clock, PHASE_LOSS, stream) { step_loss(net, rows, loss, stream); }
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

        if (epoch == 0 && n_test > 0) {
            // the test set goes up while epoch 0 trains; only the evaluation waits for it
            TIMED_PHASE(&clock, PHASE_H2D, stream) {
                stage_upload(st, d_test_bytes, data->test_pixels, test_px);
                scale_pixels(d_test_bytes, d_test_img, test_px, net.g.sms, up);
                stage_upload(st, d_test_labels, data->test_labels, (size_t)n_test);
                cudaCheck(cudaEventRecord(ev_test, up));
                cudaCheck(cudaStreamWaitEvent(stream, ev_test, 0));
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
    cudaCheck(cudaStreamSynchronize(up));

    if (graph_exec) cudaCheck(cudaGraphExecDestroy(graph_exec));
    if (graph) cudaCheck(cudaGraphDestroy(graph));
    for (int l = 1; l <= n_layers; l++) {
        if (net.act[l]) cudaCheck(cudaFree(net.act[l]));
        if (net.dact[l]) cudaCheck(cudaFree(net.dact[l]));
        if (net.test_act[l]) cudaCheck(cudaFree(net.test_act[l]));
    }
    cudaCheck(cudaFree(d_params));
    cudaCheck(cudaFree(d_train_bytes));
    cudaCheck(cudaFree(d_train_img));
    cudaCheck(cudaFree(d_train_labels));
    cudaCheck(cudaFree(d_order));
    cudaCheck(cudaFree(d_test_bytes));
    cudaCheck(cudaFree(d_test_img));
    cudaCheck(cudaFree(d_test_labels));
    cudaCheck(cudaFree(d_test_rows));
    cudaCheck(cudaFree(d_cur_order));
    cudaCheck(cudaFree(d_cur_loss));
    cudaCheck(cudaFree(d_step_loss));
    cudaCheck(cudaFree(d_test_loss));
    cudaCheck(cudaFree(d_test_acc));
    cudaCheck(cudaFree(net.part_loss));
    cudaCheck(cudaFree(net.part_correct));
    cudaCheck(cudaFree(net.head_counter));
    cudaCheck(cudaFree(net.row_counters));
    cudaCheck(cudaFree(net.g.ws));
    cudaCheck(cudaFree(net.g.counters));
    for (int b = 0; b < NSTAGE; b++) cudaCheck(cudaEventDestroy(st.done[b]));
    cudaCheck(cudaFreeHost(st.base));
    cudaCheck(cudaEventDestroy(ev_start));
    cudaCheck(cudaEventDestroy(ev_train));
    cudaCheck(cudaEventDestroy(ev_test));
    cudaCheck(cudaStreamDestroy(up));
    cudaCheck(cudaStreamDestroy(stream));
    return 0;
}
