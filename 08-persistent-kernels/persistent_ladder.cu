/*
Kernel ladder, stage 08: S steps of plain SGD for the MNIST MLP 784 -> [hidden] -> 10 (hidden 0: softmax
regression), fp32, ReLU, softmax cross-entropy averaged over the batch, as common/reference.c trains it.
Every version splits the work the same way: the last layer's inputs ("features": the 784 pixels at hidden
0, the hidden units otherwise) are cut into slices, block g owns one slice and every weight that touches
it (its rows of W_last; with a hidden layer its columns of W0 and entries of b0), and every block keeps its
own copy of b_last, updated identically. A step has three phases:
    A  each block: its features for the batch, and its partial logits (batch, 10) = features @ W_last rows
    B  the partials summed in a fixed order, + b_last, softmax, loss, dlogits = (p - onehot) / batch
    C  each block: b_last, its W_last rows, b0 and W0 columns -= lr * gradients (from pre-update weights)
The versions differ only in where the phases meet and where the weights live:

    0 step-graph      the ceiling line: A, B, C as three kernels per step, all S steps captured once into
                      one CUDA graph (stage 07's launch pattern); weights in global memory
    1 cooperative     one cooperative launch for all S steps, phases separated by grid.sync()
    2 shared-weights  1, with each block's weights loaded into shared memory once per launch
    3 clusters        2 in thread-block clusters (cc 9.0): partial logits summed across the cluster through
                      distributed shared memory; only the clusters' sums meet in global memory at a grid
                      barrier (one cluster: no grid barrier at all)
    4 async-copy      3, with the next step's batch pixels copied into shared memory (cp.async,
                      double-buffered) while the cluster meets

    make stage 8 ladder                                   (hidden 0 and 128, batch 128, 128 steps)
    build/08/persistent_ladder --hidden 100 --batch 100 --steps 64 --version clusters --repeat 50 --csv l.csv

Time per step: one run (S steps from the same initial weights, restored untimed before each run) between
CUDA events, divided by S; median of --repeat runs after 3 warm-ups, min-max as the spread. The data is
synthetic and reproducible (random pixel bytes, about 80% zeros as in MNIST; random labels; one
permutation of the rows per epoch). Every version's final parameters and per-step losses are checked
against reference_train_mnist (double precision) on the same steps; versions a GPU lacks are skipped with
the reason.

Exit codes: 0 ok; 1 a wrong result; 2 an invalid flag or an unwritable --csv file; 3 out of host memory;
4 no GPU or any CUDA error.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cuda_pipeline_primitives.h>

#include "check.h"
#include "device.h"
#include "gates.h"
#include "host.h"
#include "ladder.h"
#include "ladder_gpu.h"
#include "reference.h"
#include "trainer.h"

namespace cg = cooperative_groups;

#define THREADS 256  // 8 warps: phase B gives each warp one row at a time
#define WARP_SIZE 32
#define WARPS (THREADS / WARP_SIZE)
#define PIXELS MNIST_PIXELS
#define CLASSES MNIST_CLASSES
#define MIN_SLICE 8       // features per block at least: fewer blocks meet at each barrier
#define MAX_HIDDEN 1024
#define MAX_BATCH 256
#define MAX_CLUSTER 16    // non-portable; 8 is the portable size
#define LR 0.1f           // the trainers' learning rate
#define STAGED_BYTES (96 * 1024)  // version 4's two pixel buffers together, at most

// ----------------------------------------------------------------------------
// the problem, as the kernels see it (passed by value)

typedef struct {
    const float *images;    // (n_rows, 784) pixel values, mnist_pixel_value of each byte
    const uint8_t *labels;  // (n_rows,)
    const int32_t *rows;    // (steps, batch): the training rows of each step
    float *params;          // packed as trainer.h: W0 (784, hidden), b0 (hidden), W1 (hidden, 10), b1 (10)
    float *bias_copies;     // (blocks - 1, 10): b_last of blocks 1..; block 0's is params' (versions 0-1)
    float *partials;        // (blocks, batch, 10); versions 3-4: (2, clusters, batch, 10), by step parity
    float *dlogits;         // (batch, 10)
    float *row_loss;        // (batch,)
    float *scratch;         // (blocks, 2, batch, slice): each block's features and their gradients (0-1)
    float *loss;            // (steps,): mean loss of each step, before its update
    int hidden, features;   // features: 784 at hidden 0, else hidden
    int slice, blocks, cluster, batch, steps;
    int staged_pixels;      // version 4: pixels of each row staged in shared memory (from the slice's first)
} Net;

static __host__ __device__ int64_t w1_offset(int hidden) { return hidden ? (int64_t)PIXELS * hidden + hidden : 0; }
static __host__ __device__ int64_t b1_offset(int hidden) {
    return w1_offset(hidden) + (int64_t)(hidden ? hidden : PIXELS) * CLASSES;
}

// One block's share: features [f0, f0 + n) and the weights that touch them, wherever they live.
typedef struct {
    float *w0;          // (784, n) columns f0.. of W0, leading dimension w0_ld (hidden only)
    int w0_ld;
    float *b0;          // (n,)
    float *w1;          // (n, 10): rows f0.. of W_last
    float *b1;          // (10,): this block's copy of b_last
    float *values;      // (batch, n): the features for the batch
    float *dvalue;      // (batch, n): their gradient (hidden only)
    int f0, n;
} Slice;

// The step's batch: pixel k of row b, from shared memory where staged ([b][k - p0], k in [p0, p0 + kp)),
// else from global memory.
typedef struct {
    const float *images;
    const int32_t *rows;  // (batch,): this step's
    const float *staged;
    int p0, kp;
} Batch;

static __device__ Batch batch_of(const Net *net, int step, const float *staged, int p0, int kp) {
    Batch x = {net->images, net->rows + (int64_t)step * net->batch, staged, p0, kp};
    return x;
}

static __device__ __forceinline__ float pixel_at(const Batch *x, int b, int k) {
    unsigned int d = (unsigned int)(k - x->p0);
    return d < (unsigned int)x->kp ? x->staged[b * x->kp + d] : x->images[(int64_t)x->rows[b] * PIXELS + k];
}

// sum_k x[b][k] w[k * ld]: the staged pixels first, the rest from global memory (no branch per k).
static __device__ float dot_pixels(const Batch *x, int b, const float *w, int ld) {
    const float *row = x->images + (int64_t)x->rows[b] * PIXELS;
    float acc = 0.0f;
    int k = 0;
    for (; k < x->p0; k++) acc += row[k] * w[k * ld];
    for (int d = 0; d < x->kp; d++, k++) acc += x->staged[b * x->kp + d] * w[k * ld];
    for (; k < PIXELS; k++) acc += row[k] * w[k * ld];
    return acc;
}

static __device__ int slice_count(const Net *net, int g) {
    int f0 = g * net->slice, left = net->features - f0;
    return left <= 0 ? 0 : (left < net->slice ? left : net->slice);
}

// Block g's share with its weights in global memory (versions 0-1).
static __device__ Slice global_slice(const Net *net, int g) {
    Slice s;
    s.f0 = g * net->slice;
    s.n = slice_count(net, g);
    s.w0 = net->params + s.f0;
    s.w0_ld = net->hidden;
    s.b0 = net->params + (int64_t)PIXELS * net->hidden + s.f0;
    s.w1 = net->params + w1_offset(net->hidden) + (int64_t)s.f0 * CLASSES;
    s.b1 = g == 0 ? net->params + b1_offset(net->hidden) : net->bias_copies + (g - 1) * CLASSES;
    s.values = net->scratch + (int64_t)g * 2 * net->batch * net->slice;
    s.dvalue = s.values + net->batch * net->slice;
    return s;
}

// ----------------------------------------------------------------------------
// the three phases, shared by every version

// A: s.values (batch, n) and partial (batch, 10) = values @ W_last rows. Ends with __syncthreads.
static __device__ void phase_a(const Net *net, const Slice *s, const Batch *x, float *partial) {
    int n = s->n;
    for (int o = threadIdx.x; o < net->batch * n; o += THREADS) {
        int b = o / n, j = o % n;
        s->values[o] = net->hidden == 0 ? pixel_at(x, b, s->f0 + j)
                                      : fmaxf(s->b0[j] + dot_pixels(x, b, s->w0 + j, s->w0_ld), 0.0f);
    }
    __syncthreads();
    for (int o = threadIdx.x; o < net->batch * CLASSES; o += THREADS) {
        int b = o / CLASSES, c = o % CLASSES;
        float acc = 0.0f;
        for (int j = 0; j < n; j++) acc += s->values[b * n + j] * s->w1[j * CLASSES + c];
        partial[o] = acc;
    }
    __syncthreads();
}

// B for one row, in one warp: lane c < 10 holds logit z of class c (the other lanes are ignored). Returns
// lane c's dlogit = (p_c - [c == label]) / batch; *loss (every lane): -log p_label.
static __device__ float softmax_row(float z, int label, int batch, float *loss) {
    int c = threadIdx.x % WARP_SIZE;
    float v = c < CLASSES ? z : -INFINITY, m = v;
    for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    float e = c < CLASSES ? expf(v - m) : 0.0f, sum = e;
    for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    float z_label = __shfl_sync(0xffffffffu, v, label);
    *loss = m + logf(sum) - z_label;
    return (e / sum - (c == label ? 1.0f : 0.0f)) / (float)batch;
}

// B through global memory (versions 0-2): row b on global warp `warp` of `warps`; partials of blocks 0..
// in order, then the bias.
static __device__ void phase_b_global(const Net *net, int step, const float *b1, int warp, int warps) {
    int c = threadIdx.x % WARP_SIZE;
    for (int b = warp; b < net->batch; b += warps) {
        float z = 0.0f;
        if (c < CLASSES) {
            for (int g = 0; g < net->blocks; g++) z += net->partials[((int64_t)g * net->batch + b) * CLASSES + c];
            z += b1[c];
        }
        int label = net->labels[net->rows[(int64_t)step * net->batch + b]];
        float loss, d = softmax_row(z, label, net->batch, &loss);
        if (c < CLASSES) net->dlogits[b * CLASSES + c] = d;
        if (c == 0) net->row_loss[b] = loss;
    }
}

// The step's mean loss from the row losses, in row order (one thread).
static __device__ void record_loss(const Net *net, int step, const float *row_loss) {
    float sum = 0.0f;
    for (int b = 0; b < net->batch; b++) sum += row_loss[b];
    net->loss[step] = sum / (float)net->batch;
}

// C: every update of block s from dl (batch, 10). dvalue uses W_last before its update. Ends with
// __syncthreads.
static __device__ void phase_c(const Net *net, const Slice *s, const Batch *x, const float *dl) {
    int n = s->n, t = threadIdx.x;
    if (t < CLASSES) {  // every block the same sum in the same order: the copies stay identical
        float acc = 0.0f;
        for (int b = 0; b < net->batch; b++) acc += dl[b * CLASSES + t];
        s->b1[t] -= LR * acc;
    }
    if (net->hidden) {
        for (int o = t; o < net->batch * n; o += THREADS) {
            int b = o / n, j = o % n;
            float acc = 0.0f;
            for (int c = 0; c < CLASSES; c++) acc += dl[b * CLASSES + c] * s->w1[j * CLASSES + c];
            s->dvalue[o] = s->values[o] > 0.0f ? acc : 0.0f;
        }
        __syncthreads();
    }
    for (int o = t; o < n * CLASSES; o += THREADS) {
        int j = o / CLASSES, c = o % CLASSES;
        float acc = 0.0f;
        for (int b = 0; b < net->batch; b++) acc += s->values[b * n + j] * dl[b * CLASSES + c];
        s->w1[o] -= LR * acc;
    }
    if (net->hidden) {
        for (int j = t; j < n; j += THREADS) {
            float acc = 0.0f;
            for (int b = 0; b < net->batch; b++) acc += s->dvalue[b * n + j];
            s->b0[j] -= LR * acc;
        }
        for (int o = t; o < PIXELS * n; o += THREADS) {
            int k = o / n, j = o % n;
            float acc = 0.0f;
            for (int b = 0; b < net->batch; b++) acc += pixel_at(x, b, k) * s->dvalue[b * n + j];
            s->w0[k * s->w0_ld + j] -= LR * acc;
        }
    }
    __syncthreads();
}

// ----------------------------------------------------------------------------
// version 0: three kernels per step, captured into one graph

__global__ void step_a_kernel(Net net, int step) {
    Slice s = global_slice(&net, blockIdx.x);
    Batch x = batch_of(&net, step, NULL, 0, 0);
    phase_a(&net, &s, &x, net.partials + (int64_t)blockIdx.x * net.batch * CLASSES);
}

__global__ void step_b_kernel(Net net, int step) {
    phase_b_global(&net, step, net.params + b1_offset(net.hidden), blockIdx.x * WARPS + threadIdx.x / WARP_SIZE,
                   gridDim.x * WARPS);
}

__global__ void step_c_kernel(Net net, int step) {
    Slice s = global_slice(&net, blockIdx.x);
    Batch x = batch_of(&net, step, NULL, 0, 0);
    phase_c(&net, &s, &x, net.dlogits);
    if (blockIdx.x == 0 && threadIdx.x == 0) record_loss(&net, step, net.row_loss);
}

// The b_last copies of blocks 1.. from the packed params' (block 0's), before a run.
__global__ void copy_bias_kernel(Net net) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (net.blocks - 1) * CLASSES) net.bias_copies[i] = net.params[b1_offset(net.hidden) + i % CLASSES];
}

// ----------------------------------------------------------------------------
// versions 1-2: one cooperative launch, grid.sync() between the phases

// The S steps, given each block's share s (global or shared memory).
static __device__ void cooperative_steps(const Net *net, const Slice *s) {
    cg::grid_group grid = cg::this_grid();
    int warp = blockIdx.x * WARPS + threadIdx.x / WARP_SIZE;
    for (int step = 0; step < net->steps; step++) {
        Batch x = batch_of(net, step, NULL, 0, 0);
        phase_a(net, s, &x, net->partials + (int64_t)blockIdx.x * net->batch * CLASSES);
        grid.sync();
        phase_b_global(net, step, s->b1, warp, net->blocks * WARPS);
        grid.sync();
        phase_c(net, s, &x, net->dlogits);
        if (blockIdx.x == 0 && threadIdx.x == 0) record_loss(net, step, net->row_loss);
    }
}

__global__ void cooperative_kernel(Net net) {
    Slice s = global_slice(&net, blockIdx.x);
    cooperative_steps(&net, &s);
}

// Version 2-4's dynamic shared memory, in floats from its start; every array starts 16-byte aligned.
typedef struct {
    int w0, b0, w1, b1, values, dvalue;      // the share (versions 2-4)
    int partial, own_dl, own_loss, dl;       // the cluster's meeting point (versions 3-4)
    int staged;                              // two pixel buffers (version 4)
    int total;
} Layout;

static __host__ __device__ int align4(int n) { return (n + 3) / 4 * 4; }

static __host__ __device__ Layout layout_of(const Net *net, int version) {
    Layout l;
    int n = net->slice, at = 0, batch = net->batch;
    l.w0 = at; at += align4(net->hidden ? PIXELS * n : 0);
    l.b0 = at; at += align4(net->hidden ? n : 0);
    l.w1 = at; at += align4(n * CLASSES);
    l.b1 = at; at += align4(CLASSES);
    l.values = at; at += align4(batch * n);
    l.dvalue = at; at += align4(net->hidden ? batch * n : 0);
    int cluster = version >= 3;
    l.partial = at; at += cluster ? align4(batch * CLASSES) : 0;
    l.own_dl = at; at += cluster ? align4(batch * CLASSES) : 0;
    l.own_loss = at; at += cluster ? align4(batch) : 0;
    l.dl = at; at += cluster ? align4(batch * CLASSES) : 0;
    l.staged = at; at += version >= 4 ? 2 * align4(batch * net->staged_pixels) : 0;
    l.total = at;
    return l;
}

// Block g's share in shared memory, loaded from global; write_back stores it again at the end.
static __device__ Slice shared_slice(const Net *net, float *smem, const Layout *l) {
    Slice g = global_slice(net, blockIdx.x), s = g;
    s.w0 = smem + l->w0;
    s.w0_ld = g.n;
    s.b0 = smem + l->b0;
    s.w1 = smem + l->w1;
    s.b1 = smem + l->b1;
    s.values = smem + l->values;
    s.dvalue = smem + l->dvalue;
    int n = g.n;
    for (int o = threadIdx.x; net->hidden && o < PIXELS * n; o += THREADS) s.w0[o] = g.w0[(o / n) * g.w0_ld + o % n];
    for (int j = threadIdx.x; net->hidden && j < n; j += THREADS) s.b0[j] = g.b0[j];
    for (int o = threadIdx.x; o < n * CLASSES; o += THREADS) s.w1[o] = g.w1[o];
    if (threadIdx.x < CLASSES) s.b1[threadIdx.x] = net->params[b1_offset(net->hidden) + threadIdx.x];
    __syncthreads();
    return s;
}

static __device__ void write_back(const Net *net, const Slice *s) {
    Slice g = global_slice(net, blockIdx.x);
    int n = s->n;
    for (int o = threadIdx.x; net->hidden && o < PIXELS * n; o += THREADS) g.w0[(o / n) * g.w0_ld + o % n] = s->w0[o];
    for (int j = threadIdx.x; net->hidden && j < n; j += THREADS) g.b0[j] = s->b0[j];
    for (int o = threadIdx.x; o < n * CLASSES; o += THREADS) g.w1[o] = s->w1[o];
    if (blockIdx.x == 0 && threadIdx.x < CLASSES) g.b1[threadIdx.x] = s->b1[threadIdx.x];
}

__global__ void shared_weights_kernel(Net net) {
    extern __shared__ float4 smem4[];  // float4: 16-byte aligned
    float *smem = (float *)smem4;
    Layout l = layout_of(&net, 2);
    Slice s = shared_slice(&net, smem, &l);
    cooperative_steps(&net, &s);
    write_back(&net, &s);
}

// ----------------------------------------------------------------------------
// versions 3-4: clusters meet through distributed shared memory (compute capability 9.0)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Version 4: the pixels [p0, p0 + kp) of every row of step's batch into buf (batch, kp), 16 bytes a copy
// (kp, p0 and 784 are multiples of 4 floats), without waiting: __pipeline_wait_prior(0) waits.
static __device__ void stage_pixels(const Net *net, int step, float *buf, int p0, int kp) {
    const int32_t *rows = net->rows + (int64_t)step * net->batch;
    int quads = kp / 4;
    for (int o = threadIdx.x; o < net->batch * quads; o += THREADS) {
        int b = o / quads, q = o % quads;
        __pipeline_memcpy_async(buf + b * kp + 4 * q, net->images + (int64_t)rows[b] * PIXELS + p0 + 4 * q, 16);
    }
    __pipeline_commit();
}

// The logits of row b on lane c: this cluster's partials (ranks in order), then with several clusters the
// clusters' sums (in order) through csum, then the bias; B on them into own_dl, own_loss. Row b belongs to
// rank b % size; warp w of it takes every WARPS-th of its rows.
static __device__ void cluster_meet(const Net *net, int step, const Slice *s, float *partial, float *own_dl,
                                    float *own_loss) {
    cg::cluster_group cluster = cg::this_cluster();
    int size = (int)cluster.num_blocks(), rank = (int)cluster.block_rank(), clusters = net->blocks / size;
    int lane = threadIdx.x % WARP_SIZE, first = rank + (threadIdx.x / WARP_SIZE) * size;
    float *csum = net->partials + (int64_t)(step % 2) * clusters * net->batch * CLASSES;  // (clusters, batch, 10)
    for (int b = first; b < net->batch; b += WARPS * size) {
        float z = 0.0f;
        for (int q = 0; q < size && lane < CLASSES; q++) z += cluster.map_shared_rank(partial, q)[b * CLASSES + lane];
        if (clusters > 1 && lane < CLASSES) csum[((int64_t)(blockIdx.x / size) * net->batch + b) * CLASSES + lane] = z;
        if (lane < CLASSES) own_dl[b * CLASSES + lane] = z;  // held here until the logits are whole
    }
    if (clusters > 1) cg::this_grid().sync();  // only the clusters' sums meet in global memory
    for (int b = first; b < net->batch; b += WARPS * size) {
        float z = 0.0f;
        if (lane < CLASSES && clusters > 1) {
            for (int k = 0; k < clusters; k++) z += csum[((int64_t)k * net->batch + b) * CLASSES + lane];
        } else if (lane < CLASSES) {
            z = own_dl[b * CLASSES + lane];
        }
        if (lane < CLASSES) z += s->b1[lane];
        __syncwarp();
        int label = net->labels[net->rows[(int64_t)step * net->batch + b]];
        float loss, d = softmax_row(z, label, net->batch, &loss);
        if (lane < CLASSES) own_dl[b * CLASSES + lane] = d;
        if (lane == 0) own_loss[b] = loss;
    }
}

// Every row's dlogits from the rank that owns it into dl; the step's loss (cluster 0, rank 0).
static __device__ void cluster_gather(const Net *net, int step, float *own_dl, float *own_loss, float *dl) {
    cg::cluster_group cluster = cg::this_cluster();
    int size = (int)cluster.num_blocks();
    for (int o = threadIdx.x; o < net->batch * CLASSES; o += THREADS)
        dl[o] = cluster.map_shared_rank(own_dl, (o / CLASSES) % size)[o];
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        float sum = 0.0f;
        for (int b = 0; b < net->batch; b++) sum += cluster.map_shared_rank(own_loss, b % size)[b];
        net->loss[step] = sum / (float)net->batch;
    }
    __syncthreads();
}

// The S steps of versions 3 (staged false) and 4.
static __device__ void cluster_steps(const Net *net, float *smem, int staged) {
    cg::cluster_group cluster = cg::this_cluster();
    Layout l = layout_of(net, staged ? 4 : 3);
    Slice s = shared_slice(net, smem, &l);
    float *partial = smem + l.partial, *own_dl = smem + l.own_dl, *own_loss = smem + l.own_loss, *dl = smem + l.dl;
    int p0 = net->hidden ? 0 : s.f0, kp = !staged ? 0 : net->hidden ? net->staged_pixels : s.n;
    int buffer = align4(net->batch * net->staged_pixels);
    if (staged) stage_pixels(net, 0, smem + l.staged, p0, kp);
    for (int step = 0; step < net->steps; step++) {
        float *pixels = smem + l.staged + (step % 2) * buffer;
        if (staged) {
            __pipeline_wait_prior(0);
            __syncthreads();
        }
        Batch x = batch_of(net, step, pixels, p0, kp);
        phase_a(net, &s, &x, partial);
        if (staged && step + 1 < net->steps)  // into the other buffer, last read by the step before
            stage_pixels(net, step + 1, smem + l.staged + ((step + 1) % 2) * buffer, p0, kp);
        cluster.sync();  // every partial written
        cluster_meet(net, step, &s, partial, own_dl, own_loss);
        cluster.sync();  // every row's dlogits written
        cluster_gather(net, step, own_dl, own_loss, dl);
        phase_c(net, &s, &x, dl);
    }
    cluster.sync();  // no block leaves while another may still read its shared memory
    write_back(net, &s);
}
#endif

__global__ void clusters_kernel(Net net) {
#if __CUDA_ARCH__ >= 900
    extern __shared__ float4 smem4[];
    cluster_steps(&net, (float *)smem4, 0);
#else
    __trap();  // a build without compute_90 code: the host checks feature_available and never launches this
#endif
}

__global__ void async_copy_kernel(Net net) {
#if __CUDA_ARCH__ >= 900
    extern __shared__ float4 smem4[];
    cluster_steps(&net, (float *)smem4, 1);
#else
    __trap();
#endif
}

// ----------------------------------------------------------------------------
// the host side: plan a version's grid, upload, run, read back

typedef enum { STEP_GRAPH, COOPERATIVE, SHARED_WEIGHTS, CLUSTERS, ASYNC_COPY, VERSION_COUNT } VersionId;
static const char *const VERSION_NAMES[VERSION_COUNT] = {"step-graph", "cooperative", "shared-weights", "clusters",
                                                         "async-copy"};
static const void *const VERSION_KERNELS[VERSION_COUNT] = {
    (const void *)step_a_kernel, (const void *)cooperative_kernel, (const void *)shared_weights_kernel,
    (const void *)clusters_kernel, (const void *)async_copy_kernel};

typedef struct {
    Net net;
    int version;
    float *init_params;  // (n_params,) device: what every run starts from
    int64_t n_params;
    size_t shared_bytes;
    cudaGraphExec_t graph;  // version 0: the S steps
    char why[192];          // the reason the version cannot run here ("" when it can)
} Run;

static int sm_count(void) {
    int device = 0, count = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
}

static int device_attribute(cudaDeviceAttr attribute) {
    int device = 0, value = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&value, attribute, device));
    return value;
}

// The work split, the trainer's: about one block per SM, each owning the fewest hidden units that cover the
// layer, or at least MIN_SLICE pixels (a multiple of 4: version 4 copies 16 bytes at a time). Cluster versions
// round the grid up to whole clusters of `cluster` blocks.
static int slice_for(const Net *net, int blocks) {
    int per_block = (net->features + blocks - 1) / blocks;
    return net->hidden ? per_block : align4(per_block > MIN_SLICE ? per_block : MIN_SLICE);
}

static void plan_split(Net *net, int cluster) {
    net->slice = slice_for(net, sm_count());
    net->blocks = (net->features + net->slice - 1) / net->slice;
    net->cluster = cluster < net->blocks ? cluster : net->blocks;
    if (cluster > 0) {
        net->blocks = (net->blocks + net->cluster - 1) / net->cluster * net->cluster;
        net->slice = slice_for(net, net->blocks);
    }
}

// Dynamic shared memory allowed for kernel up to bytes; "" or why it does not fit.
static int allow_shared(Run *r, const void *kernel) {
    size_t limit = (size_t)device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    if (r->shared_bytes > limit) {
        snprintf(r->why, sizeof(r->why), "it needs %.1f KB of shared memory per block, this GPU allows %.1f KB",
                 r->shared_bytes / 1024.0, limit / 1024.0);
        return 0;
    }
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)r->shared_bytes));
    return 1;
}

// Versions 1-2: a cooperative launch needs the device attribute and every block resident at once.
static int plan_cooperative(Run *r) {
    const void *kernel = VERSION_KERNELS[r->version];
    plan_split(&r->net, 0);
    r->shared_bytes = r->version == SHARED_WEIGHTS ? sizeof(float) * (size_t)layout_of(&r->net, 2).total : 0;
    if (!device_attribute(cudaDevAttrCooperativeLaunch)) {
        snprintf(r->why, sizeof(r->why), "this GPU has no cooperative launch");
        return 0;
    }
    if (!allow_shared(r, kernel)) return 0;
    int per_sm = 0;
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, THREADS, r->shared_bytes));
    if (per_sm * sm_count() >= r->net.blocks) return 1;
    snprintf(r->why, sizeof(r->why), "its %d blocks of %.1f KB shared memory are not all resident at once (%d fit)",
             r->net.blocks, r->shared_bytes / 1024.0, per_sm * sm_count());
    return 0;
}

// The launch of a cluster version: cluster dimension, and cooperative with several clusters (grid.sync).
static cudaLaunchConfig_t cluster_config(const Run *r, cudaLaunchAttribute attrs[2]) {
    cudaLaunchConfig_t config = {};  // every field not set below: 0
    config.gridDim = dim3((unsigned int)r->net.blocks);
    config.blockDim = dim3(THREADS);
    config.dynamicSmemBytes = r->shared_bytes;
    config.attrs = attrs;
    attrs[0].id = cudaLaunchAttributeClusterDimension;
    attrs[0].val.clusterDim.x = (unsigned int)r->net.cluster;
    attrs[0].val.clusterDim.y = 1;
    attrs[0].val.clusterDim.z = 1;
    attrs[1].id = cudaLaunchAttributeCooperative;
    attrs[1].val.cooperative = 1;
    config.numAttrs = r->net.blocks > r->net.cluster ? 2 : 1;
    return config;
}

// Versions 3-4 with clusters of `cluster` blocks: 1 if every cluster is resident at once.
static int clusters_fit(Run *r, int cluster) {
    const void *kernel = VERSION_KERNELS[r->version];
    plan_split(&r->net, cluster);
    Net *net = &r->net;
    int fit = (STAGED_BYTES / (2 * (int)sizeof(float) * net->batch)) / 4 * 4;
    net->staged_pixels = r->version < ASYNC_COPY ? 0 : !net->hidden ? net->slice : fit < PIXELS ? fit : PIXELS;
    r->shared_bytes = sizeof(float) * (size_t)layout_of(net, r->version).total;
    if (!allow_shared(r, kernel)) return 0;
    if (net->cluster > 8)
        cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaLaunchAttribute attrs[2];
    cudaLaunchConfig_t config = cluster_config(r, attrs);
    config.gridDim = dim3((unsigned int)net->cluster);  // one cluster's worth: how many fit at once
    config.numAttrs = 1;
    int active = 0;
    cudaError_t status = cudaOccupancyMaxActiveClusters(&active, kernel, &config);
    if (status != cudaSuccess) {
        (void)cudaGetLastError();  // a cluster size this GPU does not place: none fit
        active = 0;
    }
    if (active * net->cluster >= net->blocks) return 1;
    snprintf(r->why, sizeof(r->why), "its %d clusters of %d blocks are not all resident at once (%d fit)",
             net->blocks / net->cluster, net->cluster, active);
    return 0;
}

static int plan_clusters(Run *r) {
    if (!feature_available(FEATURE_CLUSTERS, VERSION_KERNELS[r->version], r->why, sizeof(r->why))) return 0;
    if (r->net.blocks > 1 && !device_attribute(cudaDevAttrCooperativeLaunch)) {
        snprintf(r->why, sizeof(r->why), "this GPU has no cooperative launch");
        return 0;
    }
    if (clusters_fit(r, MAX_CLUSTER)) return 1;
    r->why[0] = '\0';
    return clusters_fit(r, 8);  // the portable size, where 16 does not fit
}

// Version 0's graph: the S steps' three kernels, captured once.
static void capture_steps(Run *r) {
    const Net *net = &r->net;
    cudaStream_t stream;
    cudaGraph_t graph;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    unsigned int b_blocks = (unsigned int)((net->batch + WARPS - 1) / WARPS);
    for (int step = 0; step < net->steps; step++) {
        step_a_kernel<<<net->blocks, THREADS, 0, stream>>>(*net, step);
        launchCheck();
        step_b_kernel<<<b_blocks, THREADS, 0, stream>>>(*net, step);
        launchCheck();
        step_c_kernel<<<net->blocks, THREADS, 0, stream>>>(*net, step);
        launchCheck();
    }
    cudaCheck(cudaStreamEndCapture(stream, &graph));
    cudaCheck(cudaGraphInstantiate(&r->graph, graph, 0));
    cudaCheck(cudaGraphDestroy(graph));
    cudaCheck(cudaStreamDestroy(stream));
}

// The version's grid and buffers, the data uploaded; r->why says why not, when it cannot run here.
static int run_setup(Run *r, int version, int hidden, int batch, int steps, const float *images,
                     const uint8_t *labels, int n_rows, const int32_t *rows, const float *init_params) {
    memset(r, 0, sizeof(*r));
    Net *net = &r->net;
    r->version = version;
    net->hidden = hidden;
    net->features = hidden ? hidden : PIXELS;
    net->batch = batch;
    net->steps = steps;
    plan_split(net, 0);
    int ok = version == STEP_GRAPH ? 1 : version <= SHARED_WEIGHTS ? plan_cooperative(r) : plan_clusters(r);
    if (!ok) return 0;
    r->n_params = b1_offset(hidden) + CLASSES;
    int clusters = net->cluster ? net->blocks / net->cluster : 0;
    size_t partials = (size_t)(net->blocks > 2 * clusters ? net->blocks : 2 * clusters) * batch * CLASSES;
    net->images = (const float *)ladder_to_device(images, sizeof(float) * (size_t)n_rows * PIXELS);
    net->labels = (const uint8_t *)ladder_to_device(labels, (size_t)n_rows);
    net->rows = (const int32_t *)ladder_to_device(rows, sizeof(int32_t) * (size_t)steps * batch);
    r->init_params = (float *)ladder_to_device(init_params, sizeof(float) * (size_t)r->n_params);
    cudaCheck(cudaMalloc(&net->params, sizeof(float) * (size_t)r->n_params));
    cudaCheck(cudaMalloc(&net->bias_copies, sizeof(float) * (size_t)net->blocks * CLASSES));
    cudaCheck(cudaMalloc(&net->partials, sizeof(float) * partials));
    cudaCheck(cudaMalloc(&net->dlogits, sizeof(float) * (size_t)batch * CLASSES));
    cudaCheck(cudaMalloc(&net->row_loss, sizeof(float) * (size_t)batch));
    cudaCheck(cudaMalloc(&net->scratch, sizeof(float) * (size_t)net->blocks * 2 * batch * net->slice));
    cudaCheck(cudaMalloc(&net->loss, sizeof(float) * (size_t)steps));
    if (version == STEP_GRAPH) capture_steps(r);
    return 1;
}

static void run_free(Run *r) {
    Net *net = &r->net;
    void *buffers[] = {(void *)net->images, (void *)net->labels, (void *)net->rows, r->init_params, net->params,
                       net->bias_copies, net->partials, net->dlogits, net->row_loss, net->scratch, net->loss};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++) cudaCheck(cudaFree(buffers[i]));
    if (r->graph) cudaCheck(cudaGraphExecDestroy(r->graph));
}

// Before every run (untimed): the initial weights, and every block's copy of b_last.
static void run_restore(void *ctx) {
    Run *r = (Run *)ctx;
    cudaCheck(cudaMemcpyAsync(r->net.params, r->init_params, sizeof(float) * (size_t)r->n_params,
                              cudaMemcpyDeviceToDevice, 0));
    copy_bias_kernel<<<(r->net.blocks * CLASSES + THREADS - 1) / THREADS, THREADS>>>(r->net);
    launchCheck();
}

// One run: the S steps, on the default stream.
static void run_steps(void *ctx) {
    Run *r = (Run *)ctx;
    void *args[] = {&r->net};
    if (r->version == STEP_GRAPH) {
        cudaCheck(cudaGraphLaunch(r->graph, 0));
    } else if (r->version <= SHARED_WEIGHTS) {
        cudaCheck(cudaLaunchCooperativeKernel(VERSION_KERNELS[r->version], r->net.blocks, THREADS, args,
                                              r->shared_bytes, 0));
    } else {
        cudaLaunchAttribute attrs[2];
        cudaLaunchConfig_t config = cluster_config(r, attrs);
        cudaCheck(cudaLaunchKernelExC(&config, VERSION_KERNELS[r->version], args));
    }
}

// One checked run from the initial weights: the trained parameters and each step's loss into host memory.
static void run_once(Run *r, float *params, float *losses) {
    run_restore(r);
    run_steps(r);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(params, r->net.params, sizeof(float) * (size_t)r->n_params, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(losses, r->net.loss, sizeof(float) * (size_t)r->net.steps, cudaMemcpyDeviceToHost));
}

// ----------------------------------------------------------------------------
// the check: the same S steps in double precision (common/reference.c), and the tolerance

// The reference trainer reads batch_order over its own rows: the S steps' rows are gathered into a
// training set of S * batch rows in step order, trained as one epoch in the identity order.
extern "C" void persistent_ladder_reference(int hidden, int batch, int steps, const float *images,
                                            const uint8_t *labels, const int32_t *rows, const float *init_params,
                                            float *params, float *losses) {
    int64_t n = (int64_t)steps * batch;
    float *train = (float *)host_malloc(sizeof(float) * (size_t)n * PIXELS, "the reference's rows");
    uint8_t *train_labels = (uint8_t *)host_malloc((size_t)n, "the reference's labels");
    int32_t *order = (int32_t *)host_malloc(sizeof(int32_t) * (size_t)n, "the reference's order");
    for (int64_t i = 0; i < n; i++) {
        memcpy(train + i * PIXELS, images + (int64_t)rows[i] * PIXELS, sizeof(float) * PIXELS);
        train_labels[i] = labels[rows[i]];
        order[i] = (int32_t)i;
    }
    MnistConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.n_layers = hidden ? 2 : 1;
    cfg.sizes[0] = PIXELS;
    cfg.sizes[1] = hidden ? hidden : CLASSES;
    cfg.sizes[2] = CLASSES;
    cfg.batch = batch;
    cfg.epochs = 1;
    cfg.lr = LR;
    cfg.precision = PRECISION_FP32;
    MnistData data;
    memset(&data, 0, sizeof(data));
    data.train_images = train;
    data.train_labels = train_labels;
    data.n_train = (int)n;
    data.test_images = train;  // the epoch's test figures are not checked: a few rows suffice
    data.test_labels = train_labels;
    data.n_test = batch;
    data.batch_order = order;
    data.init_params = init_params;
    float test_loss, test_acc;
    double epoch_ms;
    MnistResult out;
    memset(&out, 0, sizeof(out));
    out.params = params;
    out.step_loss = losses;
    out.test_loss = &test_loss;
    out.test_acc = &test_acc;
    out.timing.epoch_ms = &epoch_ms;
    reference_train_mnist(&cfg, &data, &out, steps);
    free(train);
    free(train_labels);
    free(order);
}

// The tolerance, in units u = 2^-24 (fp32's rounding), from what the GPU and the reference do differently:
//   - a parameter: each step stores w - lr g rounded (u |w|) and g itself carries a rounding error of about
//     sqrt(batch) u of its size, times lr 0.1; with |w| < 1 and the errors of S steps adding at most
//     linearly (SGD at lr 0.1 does not amplify them here), |gpu - cpu| <= (4 S + 16) u (1 + |cpu|),
//     3.1e-5 at S = 128 (the trainers' GPU suite measured 6.5e-8 on its fp32 runs: this is the bound,
//     not the typical error). A ReLU that flips on a preactivation within ~1e-6 of 0 moves a W0
//     column by ~1e-5 for one step, still inside it at the default S.
//   - a loss: step 0's logits are sums of 784 (or hidden) products in another order, about sqrt(784) u
//     of their size, so 64 u; later steps add the parameters' drift: (4 S + 64) u relative.
// A dropped partial moves the first loss by ~0.1; a skipped step moves b_last by ~1e-2 and W_last by
// ~1e-3; a forgotten b0 or W0 update (~1e-4 a step) or b_last update: all far outside it.
static double param_tolerance(int steps, double expected) {
    return (4.0 * steps + 16.0) * ldexp(1.0, -24) * (1.0 + fabs(expected));
}

static double loss_tolerance(int steps, double expected) {
    return (4.0 * steps + 64.0) * ldexp(1.0, -24) * fabs(expected);
}

// 1 if params and losses match the reference's; else 0, and the first miss in why.
extern "C" int persistent_ladder_check(int hidden, int steps, const float *expected_params,
                                       const float *expected_losses, const float *params, const float *losses,
                                       char *why, size_t why_len) {
    for (int s = 0; s < steps; s++) {
        double tol = loss_tolerance(steps, expected_losses[s]);
        if (fabs((double)losses[s] - expected_losses[s]) <= tol) continue;  // NaN fails too
        snprintf(why, why_len, "the loss of step %d is %.9g, the CPU's %.9g (tolerance %.3g)", s, losses[s],
                 expected_losses[s], tol);
        return 0;
    }
    int64_t count = b1_offset(hidden) + CLASSES;
    for (int64_t i = 0; i < count; i++) {
        double tol = param_tolerance(steps, expected_params[i]);
        if (fabs((double)params[i] - expected_params[i]) <= tol) continue;
        snprintf(why, why_len, "parameter %lld (of %lld) is %.9g, the CPU's %.9g (tolerance %.3g)", (long long)i,
                 (long long)count, params[i], expected_params[i], tol);
        return 0;
    }
    return 1;
}

// For tests/gpu/test_persistent_ladder.c, which declares these itself. index counts from 0 (0: step-graph).
extern "C" int persistent_ladder_version_count(void) { return VERSION_COUNT; }

extern "C" const char *persistent_ladder_version_name(int index) { return VERSION_NAMES[index]; }

// One run of version index from init_params (packed as trainer.h) over `steps` steps of rows (steps, batch)
// into images (n_rows, 784) and labels: the trained params and each step's loss. Returns NULL, or why the
// version cannot run on this GPU (then nothing was written).
extern "C" const char *persistent_ladder_run(int index, int hidden, int batch, int steps, const float *images,
                                             const uint8_t *labels, int n_rows, const int32_t *rows,
                                             const float *init_params, float *params, float *losses) {
    static char why[192];
    Run r;
    if (!run_setup(&r, index, hidden, batch, steps, images, labels, n_rows, rows, init_params)) {
        snprintf(why, sizeof(why), "%s", r.why);
        return why;
    }
    run_once(&r, params, losses);
    run_free(&r);
    return NULL;
}

// The synthetic problem, reproducible from seed: pixel bytes ~80% zero (MNIST is about 81% zero), the rest
// uniform; labels uniform; one permutation of the rows per epoch, steps * batch rows in step order; the
// initial weights and biases uniform in +-1/sqrt(fan_in).
extern "C" void persistent_ladder_problem(int hidden, int batch, int steps, int n_rows, uint64_t seed, float *images,
                                          uint8_t *labels, int32_t *rows, float *init_params) {
    uint64_t state = seed * 2654435761u + 7;
    for (int64_t i = 0; i < (int64_t)n_rows * PIXELS; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(state >> 33);
        images[i] = mnist_pixel_value(r % 5 != 0 ? 0 : (uint8_t)(r >> 8));
    }
    for (int i = 0; i < n_rows; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        labels[i] = (uint8_t)((state >> 33) % CLASSES);
    }
    int per_epoch = n_rows / batch;
    int32_t *perm = (int32_t *)host_malloc(sizeof(int32_t) * (size_t)n_rows, "the batch order");
    for (int s = 0; s < steps; s++) {
        if (s % per_epoch == 0) {  // a new epoch: a new permutation (Fisher-Yates)
            for (int i = 0; i < n_rows; i++) perm[i] = i;
            for (int i = n_rows - 1; i > 0; i--) {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                int j = (int)((state >> 33) % (uint64_t)(i + 1)), t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
        }
        memcpy(rows + (int64_t)s * batch, perm + (int64_t)(s % per_epoch) * batch, sizeof(int32_t) * batch);
    }
    free(perm);
    int64_t w1 = w1_offset(hidden), b1 = b1_offset(hidden);
    int last_fan_in = hidden ? hidden : PIXELS;
    ladder_fill_uniform(init_params, w1, -1.0f / sqrtf((float)PIXELS), 1.0f / sqrtf((float)PIXELS), seed + 1);
    ladder_fill_uniform(init_params + w1, b1 + CLASSES - w1, -1.0f / sqrtf((float)last_fan_in),
                        1.0f / sqrtf((float)last_fan_in), seed + 2);
}

#ifndef LADDER_NO_MAIN
// ----------------------------------------------------------------------------
// the program: flags, the ceiling (version 0), the table, the check, the CSV rows

static const char *row_name(int index) { return VERSION_NAMES[index + 1]; }  // --version counts from 1

// FLOP of one step: phase A's GEMMs and phase C's gradients (the softmax and updates are noise).
static double step_flop(int hidden, int batch) {
    if (!hidden) return 4.0 * batch * PIXELS * CLASSES;
    return 4.0 * batch * PIXELS * hidden + 6.0 * batch * hidden * CLASSES;
}

// Version v set up, checked against the reference (exit 1 when wrong) and timed; its time per step.
// Returns 0 (and fills why) when it cannot run on this GPU.
typedef struct {
    int hidden, batch, steps, n_rows, repeats;
    const float *images, *init_params, *expected_params, *expected_losses;
    const uint8_t *labels;
    const int32_t *rows;
    float *params, *losses;  // host scratch for a version's results
} Shape;

static int check_and_time(const Shape *sh, int v, LadderStats *time, char *why, size_t why_len) {
    Run r;
    if (!run_setup(&r, v, sh->hidden, sh->batch, sh->steps, sh->images, sh->labels, sh->n_rows, sh->rows,
                   sh->init_params)) {
        snprintf(why, why_len, "%s", r.why);
        return 0;
    }
    run_once(&r, sh->params, sh->losses);
    char wrong[256];
    if (!persistent_ladder_check(sh->hidden, sh->steps, sh->expected_params, sh->expected_losses, sh->params,
                                 sh->losses, wrong, sizeof(wrong))) {
        fprintf(stderr, "error: version %d %s is wrong at hidden %d, batch %d, %d steps: %s\n", v,
                VERSION_NAMES[v], sh->hidden, sh->batch, sh->steps, wrong);
        exit(EXIT_FAILURE);
    }
    *time = ladder_time_runs(run_restore, run_steps, &r, 1, sh->repeats);
    time->median_ms /= sh->steps;
    time->min_ms /= sh->steps;
    time->max_ms /= sh->steps;
    run_free(&r);
    return 1;
}

static void print_grid(int v, const Shape *sh) {
    Run r;
    if (!run_setup(&r, v, sh->hidden, sh->batch, sh->steps, sh->images, sh->labels, sh->n_rows, sh->rows,
                   sh->init_params))
        return;
    printf("     %-18s %d blocks x %d threads, %d features each", VERSION_NAMES[v], r.net.blocks, THREADS,
           r.net.slice);
    if (r.net.cluster) printf(", clusters of %d", r.net.cluster);
    printf(", %.1f KB shared memory\n", r.shared_bytes / 1024.0);
    run_free(&r);
}

static void ladder_for_hidden(Shape *sh, const LadderOptions *options, const DeviceInfo *device) {
    int hidden = sh->hidden;
    int64_t count = b1_offset(hidden) + CLASSES;
    float *expected_params = (float *)host_malloc(sizeof(float) * (size_t)count, "the CPU's parameters");
    float *expected_losses = (float *)host_malloc(sizeof(float) * (size_t)sh->steps, "the CPU's losses");
    float *init = (float *)host_malloc(sizeof(float) * (size_t)count, "the initial parameters");
    sh->params = (float *)host_malloc(sizeof(float) * (size_t)count, "the parameters");
    sh->losses = (float *)host_malloc(sizeof(float) * (size_t)sh->steps, "the losses");
    float *images = (float *)host_malloc(sizeof(float) * (size_t)sh->n_rows * PIXELS, "the images");
    uint8_t *labels = (uint8_t *)host_malloc((size_t)sh->n_rows, "the labels");
    int32_t *rows = (int32_t *)host_malloc(sizeof(int32_t) * (size_t)sh->steps * sh->batch, "the batch order");
    persistent_ladder_problem(hidden, sh->batch, sh->steps, sh->n_rows, 42, images, labels, rows, init);
    persistent_ladder_reference(hidden, sh->batch, sh->steps, images, labels, rows, init, expected_params,
                                expected_losses);
    sh->images = images;
    sh->labels = labels;
    sh->rows = rows;
    sh->init_params = init;
    sh->expected_params = expected_params;
    sh->expected_losses = expected_losses;

    LadderTable table;
    memset(&table, 0, sizeof(table));
    table.stage = "08";
    table.ladder = "persistent";
    snprintf(table.shape, sizeof(table.shape), "hidden %d, batch %d, %d steps", hidden, sh->batch, sh->steps);
    table.unit = "GFLOP/s";
    table.work = step_flop(hidden, sh->batch);
    table.ceiling = VERSION_NAMES[STEP_GRAPH];
    table.repeats = options->repeats;
    table.device = device;
    table.csv_path = options->csv_path;
    char why[192];
    if (!check_and_time(sh, STEP_GRAPH, &table.ceiling_time, why, sizeof(why))) {
        fprintf(stderr, "error: the step-graph baseline cannot run: %s\n", why);
        exit(EXIT_CUDA);
    }
    printf("\nMNIST SGD, 784 -> %d -> 10, batch %d, %d steps from the same weights; ms per step = run / %d\n",
           hidden, sh->batch, sh->steps, sh->steps);
    for (int v = 0; v < VERSION_COUNT; v++) print_grid(v, sh);
    ladder_table_begin(&table);
    for (int v = options->first + 1; v < options->last + 1; v++) {
        LadderStats time;
        if (check_and_time(sh, v, &time, why, sizeof(why))) ladder_table_row(&table, v, VERSION_NAMES[v], time, NAN);
        else ladder_table_skip(&table, v, VERSION_NAMES[v], why);
    }
    void *owned[] = {expected_params, expected_losses, init, sh->params, sh->losses, images, labels, rows};
    for (size_t i = 0; i < sizeof(owned) / sizeof(owned[0]); i++) free(owned[i]);
}

int main(int argc, char **argv) {
    LadderSize sizes[] = {{"--hidden", 0, MAX_HIDDEN, 128, 0}, {"--batch", 1, MAX_BATCH, 128, 0},
                          {"--steps", 1, 512, 128, 0}, {"--rows", 1, 65536, 8192, 0}};
    LadderOptions options;
    ladder_parse_args(argc, argv,
                      "usage: %s [--hidden H] [--batch B] [--steps S] [--rows N] [--version V|NAME|all] [--repeat R]"
                      " [--csv FILE]\n"
                      "  S steps of SGD for the MNIST MLP 784 -> H -> 10 (H 0: 784 -> 10) on synthetic data, version"
                      " by version,\n"
                      "  each checked against the CPU; version 0, step-graph (three kernels a step in one CUDA"
                      " graph), is the ceiling line.\n"
                      "  --hidden H   hidden units, 0 .. 1024 (default: two tables, 0 and 128)\n"
                      "  --batch B    rows a step, 1 .. 256 (default 128)\n"
                      "  --steps S    steps a run, 1 .. 512 (default 128)\n"
                      "  --rows N     synthetic training rows, B .. 65536 (default 8192)\n",
                      sizes, 4, VERSION_COUNT - 1, row_name, 1, &options);
    if (sizes[3].value < sizes[1].value) ladder_usage_error(argv[0], "--rows must be at least --batch, got", "--rows");
    DeviceInfo device;
    ladder_require_gpu(argv[0], &device);
    printf("GPU: %s (cc %s, CUDA %s, driver %s); a run restores the initial weights first (untimed)\n", device.name,
           device.cc, device.cuda, device.driver);
    Shape sh;
    memset(&sh, 0, sizeof(sh));
    sh.batch = (int)sizes[1].value;
    sh.steps = (int)sizes[2].value;
    sh.n_rows = (int)sizes[3].value;
    sh.repeats = options.repeats;
    static const int default_hidden[] = {0, 128};
    for (int i = 0; i < (sizes[0].given ? 1 : 2); i++) {
        sh.hidden = sizes[0].given ? (int)sizes[0].value : default_hidden[i];
        ladder_for_hidden(&sh, &options, &device);
    }
    return EXIT_OK;
}
#endif
