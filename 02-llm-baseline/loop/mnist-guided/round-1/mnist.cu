// Stage 03 (loop round 1), MNIST: the stage-02 MLP (784 -> hidden... -> 10, ReLU, softmax cross-entropy,
// minibatch SGD) with its kernels fused. One tiled SGEMM template does every matrix product of a step, and what
// used to be separate kernels lives in its prologue (how it loads tiles) and its epilogue (how it stores):
//   forward   act[l+1] = relu(act[l] @ W_l + b_l)          bias and ReLU in the epilogue; layer 0 gathers the
//                                                          batch's rows straight from the uploaded pixel bytes
//   loss      one kernel: softmax, cross-entropy (the step's mean loss), accuracy and dlogits
//   backward  dact[l] = (dact[l+1] @ W_l^T) * (act[l] > 0)  ReLU backward in the epilogue
//             [W_l; b_l] -= lr * [act[l] | 1]^T @ dact[l+1] the bias gradient (a row of ones) and the SGD update
//                                                          in the same GEMM: no grads buffer, no memset, no atomics
// Small products split K across blocks; the last block of each tile sums the slices in a fixed order (so results
// are deterministic) and runs the epilogue. The data go up once (pixels as bytes, labels, batch order), an epoch's
// steps run as one CUDA graph captured at set-up, and the losses stay on the device until the end.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>

#include "check.h"
#include "host.h"
#include "timing.h"
#include "trainer.h"

const char *const MNIST_VARIANTS[] = {"fused", NULL};
const char *const MNIST_PRECISIONS[] = {"fp32", NULL};

namespace {  // everything below but train_mnist has internal linkage

constexpr int GEMM_THREADS = 256;          // a 16 x 16 grid of threads; each owns a (BM/16) x (BN/16) block of C
constexpr int GEMM_MAX_SPLITS = 16;        // split-K: at most this many slices of K per output tile
constexpr int GEMM_MIN_K_PER_SPLIT = 64;   // and at least this much K per slice
constexpr int GEMM_COUNTERS = 1024;        // arrival counters, one per output tile of a split GEMM
constexpr int XENT_MAX_THREADS = 1024;
constexpr int64_t GRAPH_MAX_KERNELS = 60000;  // beyond this an epoch is launched kernel by kernel

// ----------------------------------------------------------------------------
// GEMM operands: C[m][n] = sum_k A(m, k) * B(k, n). A loader says which index is contiguous in memory, so the
// tile loads are coalesced; it is only called in range (m < M, k < K).

struct LoadARows {  // A = act, (M, K) row-major
    static constexpr bool kContig = true;
    const float *p;
    int ld;
    __device__ __forceinline__ float operator()(int m, int k) const { return p[(size_t)m * ld + k]; }
};

struct LoadAPixels {  // A(m, k) = pixel k of image rows[m] (of image m when rows is NULL), as trainer.h scales it
    static constexpr bool kContig = true;
    const uint8_t *pixels;
    const int32_t *rows;
    int ld;
    __device__ __forceinline__ float operator()(int m, int k) const {
        const int r = rows ? rows[m] : m;
        return mnist_pixel_value(pixels[(size_t)r * ld + k]);
    }
};

struct LoadAActT1 {  // A = [act | 1]^T, (in + 1, rows): row m < in is column m of act, row in is all ones
    static constexpr bool kContig = false;
    const float *act;
    int in;
    __device__ __forceinline__ float operator()(int m, int k) const {
        return m < in ? act[(size_t)k * in + m] : 1.0f;
    }
};

struct LoadAPixelsT1 {  // A = [images | 1]^T with the batch's images gathered from the pixel bytes
    static constexpr bool kContig = false;
    const uint8_t *pixels;
    const int32_t *rows;
    int in;
    __device__ __forceinline__ float operator()(int m, int k) const {
        return m < in ? mnist_pixel_value(pixels[(size_t)rows[k] * in + m]) : 1.0f;
    }
};

struct LoadBRows {  // B = (K, N) row-major: a weight matrix, or dout
    static constexpr bool nContig = true;
    const float *p;
    int ld;
    __device__ __forceinline__ float operator()(int k, int n) const { return p[(size_t)k * ld + n]; }
};

struct LoadBTrans {  // B = W^T with W (N, K) row-major, read as stored
    static constexpr bool nContig = false;
    const float *p;
    int ld;
    __device__ __forceinline__ float operator()(int k, int n) const { return p[(size_t)n * ld + k]; }
};

// Epilogues: what happens to C[m][n] (m < M, n < N), once, when it is complete.

struct EpiBiasRelu {  // forward: out = C + b, then ReLU unless it is the last layer
    float *out;
    const float *bias;
    int ld;
    int relu;
    __device__ __forceinline__ void operator()(int m, int n, float v) const {
        v += bias[n];
        if (relu) v = v > 0.0f ? v : 0.0f;
        out[(size_t)m * ld + n] = v;
    }
};

struct EpiReluGrad {  // backward input: din = C where the ReLU's output was positive, else 0
    float *din;
    const float *act;
    int ld;
    __device__ __forceinline__ void operator()(int m, int n, float v) const {
        const size_t i = (size_t)m * ld + n;
        din[i] = act[i] > 0.0f ? v : 0.0f;
    }
};

struct EpiSgd {  // backward weight: C is the gradient of [W; b]; apply the SGD step in place
    float *w;
    int ld;
    float lr;
    __device__ __forceinline__ void operator()(int m, int n, float v) const {
        const size_t i = (size_t)m * ld + n;
        w[i] -= lr * v;
    }
};

// ----------------------------------------------------------------------------
// the tiled GEMM

template <int T>
static __device__ __forceinline__ void lds_vec(float (&r)[T], const float *p) {
    if constexpr (T == 4) {
        const float4 v = *reinterpret_cast<const float4 *>(p);
        r[0] = v.x;
        r[1] = v.y;
        r[2] = v.z;
        r[3] = v.w;
    } else if constexpr (T == 2) {
        const float2 v = *reinterpret_cast<const float2 *>(p);
        r[0] = v.x;
        r[1] = v.y;
    } else {
#pragma unroll
        for (int i = 0; i < T; i++) r[i] = p[i];
    }
}

// which (m, k) of the A tile element idx of a thread's loads is: consecutive threads along the contiguous index
template <class LA, int BM, int BK>
static __device__ __forceinline__ void a_coords(int idx, int &mm, int &kk) {
    if constexpr (LA::kContig) {
        kk = idx % BK;
        mm = idx / BK;
    } else {
        mm = idx % BM;
        kk = idx / BM;
    }
}

template <class LB, int BN, int BK>
static __device__ __forceinline__ void b_coords(int idx, int &nn, int &kk) {
    if constexpr (LB::nContig) {
        nn = idx % BN;
        kk = idx / BN;
    } else {
        kk = idx % BK;
        nn = idx / BK;
    }
}

// load the k-tile starting at k0 into registers (zeros outside M, N and this block's slice of K)
template <int BM, int BN, int BK, class LA, class LB>
static __device__ __forceinline__ void gemm_fetch(float (&ra)[BM * BK / GEMM_THREADS],
                                                  float (&rb)[BK * BN / GEMM_THREADS], const LA &la, const LB &lb,
                                                  int M, int N, int ke, int m0, int n0, int k0, int tid) {
#pragma unroll
    for (int r = 0; r < BM * BK / GEMM_THREADS; r++) {
        int mm, kk;
        a_coords<LA, BM, BK>(tid + r * GEMM_THREADS, mm, kk);
        const int m = m0 + mm, k = k0 + kk;
        ra[r] = (m < M && k < ke) ? la(m, k) : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < BK * BN / GEMM_THREADS; r++) {
        int nn, kk;
        b_coords<LB, BN, BK>(tid + r * GEMM_THREADS, nn, kk);
        const int n = n0 + nn, k = k0 + kk;
        rb[r] = (n < N && k < ke) ? lb(k, n) : 0.0f;
    }
}

// Block (x, y, z) computes the BM x BN tile (y, x) of C over K slice z: [z * k_per, min(K, (z + 1) * k_per)).
// With one slice it runs the epilogue itself; with several, each writes its partial tile to ws, and the last
// to arrive (counters[tile]) sums the partials in slice order, runs the epilogue and resets the counter.
template <int BM, int BN, int BK, class LA, class LB, class EP>
static __global__ void __launch_bounds__(GEMM_THREADS)
    gemm_kernel(int M, int N, int K, int k_per, LA la, LB lb, EP ep, float *__restrict__ ws,
                int *__restrict__ counters) {
    constexpr int TM = BM / 16, TN = BN / 16;
    constexpr int PAD_A = TM % 4 == 0 ? 4 : (TM % 2 == 0 ? 2 : 1);  // keeps float4 / float2 reads aligned
    constexpr int PAD_B = TN % 4 == 0 ? 4 : (TN % 2 == 0 ? 2 : 1);
    constexpr int RA = BM * BK / GEMM_THREADS, RB = BK * BN / GEMM_THREADS;
    static_assert(BM % 16 == 0 && BN % 16 == 0, "tiles are multiples of the 16 x 16 thread grid");
    static_assert(RA * GEMM_THREADS == BM * BK && RB * GEMM_THREADS == BK * BN, "whole elements per thread");

    __shared__ __align__(16) float As[BK][BM + PAD_A];  // As[k][m]
    __shared__ __align__(16) float Bs[BK][BN + PAD_B];  // Bs[k][n]
    __shared__ int s_last;

    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int kb = blockIdx.z * k_per;
    const int ke = min(K, kb + k_per);

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;

    float ra[RA], rb[RB];
    if (kb < ke) gemm_fetch<BM, BN, BK>(ra, rb, la, lb, M, N, ke, m0, n0, kb, tid);
    for (int k0 = kb; k0 < ke; k0 += BK) {
#pragma unroll
        for (int r = 0; r < RA; r++) {
            int mm, kk;
            a_coords<LA, BM, BK>(tid + r * GEMM_THREADS, mm, kk);
            As[kk][mm] = ra[r];
        }
#pragma unroll
        for (int r = 0; r < RB; r++) {
            int nn, kk;
            b_coords<LB, BN, BK>(tid + r * GEMM_THREADS, nn, kk);
            Bs[kk][nn] = rb[r];
        }
        __syncthreads();
        // the next k-tile's loads are in flight while this one is multiplied
        if (k0 + BK < ke) gemm_fetch<BM, BN, BK>(ra, rb, la, lb, M, N, ke, m0, n0, k0 + BK, tid);
#pragma unroll
        for (int kk = 0; kk < BK; kk++) {
            float a[TM], b[TN];
            lds_vec<TM>(a, &As[kk][ty * TM]);
            lds_vec<TN>(b, &Bs[kk][tx * TN]);
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }

    if (gridDim.z > 1) {  // split K: hand the partial tile over; the last block of the tile finishes it
        const int tile = blockIdx.y * gridDim.x + blockIdx.x;
        float *part = ws + ((size_t)tile * gridDim.z + blockIdx.z) * (BM * BN);
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int j = 0; j < TN; j++) part[(ty * TM + i) * BN + tx * TN + j] = acc[i][j];
        __threadfence();
        __syncthreads();
        if (tid == 0) s_last = atomicAdd(&counters[tile], 1) == (int)gridDim.z - 1;
        __syncthreads();
        if (!s_last) return;
        __threadfence();
        const float *base = ws + (size_t)tile * gridDim.z * (BM * BN);
        const int splits = (int)gridDim.z;
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int j = 0; j < TN; j++) {
                const float *p = base + (ty * TM + i) * BN + tx * TN + j;
                float v = 0.0f;
#pragma unroll 4
                for (int s = 0; s < splits; s++) v += __ldcg(p + (size_t)s * (BM * BN));
                acc[i][j] = v;
            }
        if (tid == 0) counters[tile] = 0;  // ready for the next split GEMM on the stream
    }

#pragma unroll
    for (int i = 0; i < TM; i++) {
        const int m = m0 + ty * TM + i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; j++) {
            const int n = n0 + tx * TN + j;
            if (n < N) ep(m, n, acc[i][j]);
        }
    }
}

struct GemmCtx {
    int sms;            // streaming multiprocessors
    float *ws;          // split-K partial tiles
    size_t ws_floats;
    int *counters;      // (GEMM_COUNTERS,) zero between kernels
};

template <int BM, int BN, int BK, class LA, class LB, class EP>
static void gemm_launch(const GemmCtx &g, int M, int N, int K, const LA &la, const LB &lb, const EP &ep,
                        cudaStream_t stream) {
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int64_t tiles = (int64_t)tiles_m * tiles_n;
    int splits = 1, k_per = K;
    if (tiles < g.sms && tiles <= GEMM_COUNTERS) {  // too few tiles to fill the GPU: split K, about one wave
        int want = g.sms / (int)tiles;
        if (want > K / GEMM_MIN_K_PER_SPLIT) want = K / GEMM_MIN_K_PER_SPLIT;
        if (want > GEMM_MAX_SPLITS) want = GEMM_MAX_SPLITS;
        if (want > 1) {
            int per = (K + want - 1) / want;
            per = (per + BK - 1) / BK * BK;
            const int s = (K + per - 1) / per;  // every slice non-empty
            if (s > 1 && (size_t)tiles * s * BM * BN <= g.ws_floats) {
                splits = s;
                k_per = per;
            }
        }
    }
    const dim3 grid((unsigned)tiles_n, (unsigned)tiles_m, (unsigned)splits);
    gemm_kernel<BM, BN, BK, LA, LB, EP><<<grid, GEMM_THREADS, 0, stream>>>(M, N, K, k_per, la, lb, ep, g.ws,
                                                                            g.counters);
    cudaCheck(cudaGetLastError());
}

template <class LA, class LB, class EP>
static void gemm(const GemmCtx &g, int M, int N, int K, const LA &la, const LB &lb, const EP &ep,
                 cudaStream_t stream) {
    if (M <= 0 || N <= 0) return;
    if (N <= 16)
        gemm_launch<32, 16, 32>(g, M, N, K, la, lb, ep, stream);  // the 10 logits: narrow tiles
    else
        gemm_launch<64, 64, 16>(g, M, N, K, la, lb, ep, stream);
}

// ----------------------------------------------------------------------------
// softmax, cross-entropy, accuracy and dlogits in one kernel (one block; blockDim a power of two)
//
// Row r's label is labels[rows[r]] (labels[r] when rows is NULL). Writes *loss_out = mean cross-entropy,
// *acc_out = fraction of rows whose first largest logit is the label (if acc_out), and
// dlogits = (softmax - onehot) / n_rows (if dlogits).
static __global__ void xent_kernel(const float *__restrict__ logits, const uint8_t *__restrict__ labels,
                                   const int32_t *__restrict__ rows, int n_rows, int classes,
                                   float *__restrict__ dlogits, float *__restrict__ loss_out,
                                   float *__restrict__ acc_out) {
    __shared__ double s_loss[XENT_MAX_THREADS];
    __shared__ int s_correct[XENT_MAX_THREADS];
    const int tid = threadIdx.x;
    double loss = 0.0;
    int correct = 0;
    for (int r = tid; r < n_rows; r += blockDim.x) {
        const float *x = logits + (size_t)r * classes;
        const int label = labels[rows ? rows[r] : r];
        float mx = x[0];
        int arg = 0;
        for (int c = 1; c < classes; c++) {
            const float v = x[c];
            if (v > mx) {
                mx = v;
                arg = c;
            }
        }
        float sum = 0.0f;
        for (int c = 0; c < classes; c++) sum += expf(x[c] - mx);
        loss += (double)logf(sum) - ((double)x[label] - (double)mx);
        correct += arg == label;
        if (dlogits) {
            float *d = dlogits + (size_t)r * classes;
            for (int c = 0; c < classes; c++) {
                const float p = expf(x[c] - mx) / sum;
                d[c] = (p - (c == label ? 1.0f : 0.0f)) / (float)n_rows;
            }
        }
    }
    s_loss[tid] = loss;
    s_correct[tid] = correct;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) {
            s_loss[tid] += s_loss[tid + s];
            s_correct[tid] += s_correct[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) {
        *loss_out = n_rows > 0 ? (float)(s_loss[0] / n_rows) : 0.0f;
        if (acc_out) *acc_out = n_rows > 0 ? (float)s_correct[0] / (float)n_rows : 0.0f;
    }
}

static int xent_threads(int rows) {
    int t = 32;
    while (t < rows && t < XENT_MAX_THREADS) t *= 2;
    return t;
}

// ----------------------------------------------------------------------------
// the MLP

struct Net {
    const MnistConfig *cfg;
    GemmCtx g;
    float *params;                             // (n_params,) packed as trainer.h
    int batch;
    float *act[MNIST_MAX_LAYERS + 1];          // [l], l >= 1: (batch, sizes[l]); [n_layers] the logits
    float *dact[MNIST_MAX_LAYERS + 1];         // [l], l >= 1: (batch, sizes[l]); [n_layers] dlogits
    float *test_act[MNIST_MAX_LAYERS + 1];     // [l], l >= 1: (n_test, sizes[l])
    const uint8_t *train_pixels;               // (n_train, 784) bytes on the device
    const uint8_t *train_labels;               // (n_train,)
    const uint8_t *test_pixels;                // (n_test, 784)
    const uint8_t *test_labels;                // (n_test,)
    int n_test;
};

// act[l] for l >= 1 receives layer l's output; the input is image rows[i] (image i when rows is NULL)
static void mlp_forward(const Net &net, const uint8_t *pixels, const int32_t *rows, float *const *act, int n,
                        cudaStream_t stream) {
    const MnistConfig *cfg = net.cfg;
    for (int l = 0; l < cfg->n_layers; l++) {
        const int in = cfg->sizes[l], out = cfg->sizes[l + 1];
        const LoadBRows w{net.params + mnist_weight_offset(cfg, l), out};
        const EpiBiasRelu ep{act[l + 1], net.params + mnist_bias_offset(cfg, l), out, l < cfg->n_layers - 1};
        if (l == 0)
            gemm(net.g, n, out, in, LoadAPixels{pixels, rows, in}, w, ep, stream);
        else
            gemm(net.g, n, out, in, LoadARows{act[l], in}, w, ep, stream);
    }
}

static void mlp_loss(const Net &net, const int32_t *rows, float *loss_out, cudaStream_t stream) {
    const int L = net.cfg->n_layers;
    xent_kernel<<<1, xent_threads(net.batch), 0, stream>>>(net.act[L], net.train_labels, rows, net.batch,
                                                           net.cfg->sizes[L], net.dact[L], loss_out, NULL);
    cudaCheck(cudaGetLastError());
}

// From the last layer down: dact[l] from the pre-update W_l, then [W_l; b_l] updated in place.
static void mlp_backward_update(const Net &net, const int32_t *rows, cudaStream_t stream) {
    const MnistConfig *cfg = net.cfg;
    for (int l = cfg->n_layers - 1; l >= 0; l--) {
        const int in = cfg->sizes[l], out = cfg->sizes[l + 1];
        float *w = net.params + mnist_weight_offset(cfg, l);  // [W_l; b_l]: (in + 1, out) row-major
        if (l > 0)  // the images need no gradient
            gemm(net.g, net.batch, in, out, LoadARows{net.dact[l + 1], out}, LoadBTrans{w, out},
                 EpiReluGrad{net.dact[l], net.act[l], in}, stream);
        const LoadBRows dout{net.dact[l + 1], out};
        const EpiSgd sgd{w, out, cfg->lr};
        if (l > 0)
            gemm(net.g, in + 1, out, net.batch, LoadAActT1{net.act[l], in}, dout, sgd, stream);
        else
            gemm(net.g, in + 1, out, net.batch, LoadAPixelsT1{net.train_pixels, rows, in}, dout, sgd, stream);
    }
}

static void mlp_step(const Net &net, const int32_t *rows, float *loss_out, cudaStream_t stream) {
    mlp_forward(net, net.train_pixels, rows, net.act, net.batch, stream);
    mlp_loss(net, rows, loss_out, stream);
    mlp_backward_update(net, rows, stream);
}

static void mlp_eval(const Net &net, float *loss_out, float *acc_out, cudaStream_t stream) {
    const int L = net.cfg->n_layers;
    mlp_forward(net, net.test_pixels, NULL, net.test_act, net.n_test, stream);
    xent_kernel<<<1, xent_threads(net.n_test), 0, stream>>>(net.test_act[L], net.test_labels, NULL, net.n_test,
                                                            net.cfg->sizes[L], NULL, loss_out, acc_out);
    cudaCheck(cudaGetLastError());
}

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    cudaCheck(cudaMalloc(&p, bytes > 0 ? bytes : 16));
    return p;
}

}  // namespace

// ----------------------------------------------------------------------------
// training

int train_mnist(const MnistConfig *cfg, const MnistData *data, MnistResult *out) {
    const int n_layers = cfg->n_layers, batch = cfg->batch, epochs = cfg->epochs;
    const int pixels = cfg->sizes[0];
    const int n_train = data->n_train, n_test = data->n_test;
    const int steps = mnist_steps_per_epoch(cfg, n_train);
    const int64_t n_params = mnist_param_count(cfg);

    // setup (not timed): stream, device buffers, split-K workspace, the epoch's graph
    double setup_start_ms = host_ms();
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    Net net{};
    net.cfg = cfg;
    net.batch = batch;
    net.n_test = n_test;
    int device = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&net.g.sms, cudaDevAttrMultiProcessorCount, device));
    if (net.g.sms < 1) net.g.sms = 1;
    net.g.ws_floats = (size_t)net.g.sms * 64 * 64;  // a split GEMM has at most sms tiles x slices
    net.g.ws = (float *)dev_alloc(net.g.ws_floats * sizeof(float));
    net.g.counters = (int *)dev_alloc(GEMM_COUNTERS * sizeof(int));
    cudaCheck(cudaMemsetAsync(net.g.counters, 0, GEMM_COUNTERS * sizeof(int), stream));

    float *d_params = (float *)dev_alloc(n_params * sizeof(float));
    uint8_t *d_train_pixels = (uint8_t *)dev_alloc((size_t)n_train * pixels);
    uint8_t *d_train_labels = (uint8_t *)dev_alloc((size_t)n_train);
    int32_t *d_order = (int32_t *)dev_alloc((size_t)epochs * n_train * sizeof(int32_t));
    uint8_t *d_test_pixels = (uint8_t *)dev_alloc((size_t)n_test * pixels);
    uint8_t *d_test_labels = (uint8_t *)dev_alloc((size_t)n_test);
    int32_t *d_cur_order = (int32_t *)dev_alloc((size_t)steps * batch * sizeof(int32_t));  // this epoch's rows
    float *d_cur_loss = (float *)dev_alloc((size_t)steps * sizeof(float));                 // this epoch's losses
    float *d_step_loss = (float *)dev_alloc((size_t)epochs * steps * sizeof(float));
    float *d_test_loss = (float *)dev_alloc((size_t)epochs * sizeof(float));
    float *d_test_acc = (float *)dev_alloc((size_t)epochs * sizeof(float));
    net.params = d_params;
    net.train_pixels = d_train_pixels;
    net.train_labels = d_train_labels;
    net.test_pixels = d_test_pixels;
    net.test_labels = d_test_labels;
    for (int l = 1; l <= n_layers; l++) {
        net.act[l] = (float *)dev_alloc((size_t)batch * cfg->sizes[l] * sizeof(float));
        net.dact[l] = (float *)dev_alloc((size_t)batch * cfg->sizes[l] * sizeof(float));
        net.test_act[l] = (float *)dev_alloc((size_t)n_test * cfg->sizes[l] * sizeof(float));
    }
    cudaCheck(cudaStreamSynchronize(stream));  // the counters are zero before anything is captured or runs

    // One epoch of steps as a graph: step s trains on d_cur_order[s * batch ...] and writes d_cur_loss[s].
    // Capturing only records the launches (nothing runs); the data arrive after e2e starts. With --breakdown
    // the same kernels are launched one phase at a time instead, so that each phase can be timed.
    cudaGraph_t graph = NULL;
    cudaGraphExec_t graph_exec = NULL;
    const int use_graph = !cfg->breakdown && steps > 0 && (int64_t)steps * 3 * n_layers <= GRAPH_MAX_KERNELS;
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

    // e2e starts with the data in host memory; everything the training reads goes up once
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
            TIMED_PHASE(&clock, PHASE_H2D, stream) {  // this epoch's batch order, already on the device
                cudaCheck(cudaMemcpyAsync(d_cur_order, d_order + (size_t)epoch * n_train,
                                          (size_t)steps * batch * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                                          stream));
            }
            if (use_graph) {
                cudaCheck(cudaGraphLaunch(graph_exec, stream));
            } else if (cfg->breakdown) {
                for (int step = 0; step < steps; step++) {
                    const int32_t *rows = d_cur_order + (size_t)step * batch;
                    TIMED_PHASE(&clock, PHASE_FORWARD, stream) {
                        mlp_forward(net, net.train_pixels, rows, net.act, batch, stream);
                    }
                    TIMED_PHASE(&clock, PHASE_LOSS, stream) { mlp_loss(net, rows, d_cur_loss + step, stream); }
                    TIMED_PHASE(&clock, PHASE_BACKWARD, stream) {  // the SGD update is fused in here
                        mlp_backward_update(net, rows, stream);
                    }
                }
            } else {
                for (int step = 0; step < steps; step++)
                    mlp_step(net, d_cur_order + (size_t)step * batch, d_cur_loss + step, stream);
            }
            TIMED_PHASE(&clock, PHASE_LOSS, stream) {  // the epoch's step losses join the rest, on the device
                cudaCheck(cudaMemcpyAsync(d_step_loss + (size_t)epoch * steps, d_cur_loss,
                                          (size_t)steps * sizeof(float), cudaMemcpyDeviceToDevice, stream));
            }
        }

        // test loss and accuracy after the epoch, the whole test set in one pass
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
        cudaCheck(cudaFree(net.act[l]));
        cudaCheck(cudaFree(net.dact[l]));
        cudaCheck(cudaFree(net.test_act[l]));
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
    cudaCheck(cudaFree(net.g.ws));
    cudaCheck(cudaFree(net.g.counters));
    cudaCheck(cudaStreamDestroy(stream));
    return 0;
}
