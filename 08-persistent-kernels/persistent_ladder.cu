/*
Kernel ladder, stage 08: S steps of plain SGD for the MNIST MLP 784 -> [hidden] -> 10 (hidden 0: softmax
regression), fp32, ReLU, softmax cross-entropy averaged over the batch, as common/reference.c trains it.
Every version runs one kernel body, the stage trainer's (mlp_epoch_kernel in mnist.cu), written once here:
1024 threads a block and the trainer's work split: block g owns `slice` features (the last layer's inputs: one
hidden unit, or PIXEL_SLICE pixels without a hidden layer, doubled until every block is resident at once) and
every weight that touches them (its W_last rows, b0 entries, W0 columns stored as rows, a copy of b_last).
A step has three phases:
    A  each block: its features' values for the batch (pixel bytes), and its share of every logit
    B  each row's logits, the shares summed, + b_last; softmax, loss, dlogits = (p - onehot) / batch
    C  each block: the batch's dlogits, the gradients of its weights (from pre-update weights), applied
Each version differs from the one before it in one idea:

    0 kernel-graph    the baseline: A, B, C as three kernels a step, all S steps in one CUDA graph (stage 07's
                      epoch-graph launch pattern); nothing outlives a kernel in shared memory, so the weight slices
                      and values live in global memory, and A and C each stage the batch
    1 cooperative     one cooperative launch for all S steps, the phases met at grid.sync(); each block's
                      weight slice in a scratch buffer in global memory
    2 shared-weights  1 with the weight slice in shared memory: the trainer's kernel
    3 clusters        2 in thread-block clusters (cc 9.0): a logit's shares summed over the cluster through
                      distributed shared memory, only the clusters' sums meet in global memory at a grid barrier
                      (one cluster: no grid barrier at all)
    4 async-copy      3 with the next step's rows, labels and pixel bytes copied into a second shared buffer
                      (cp.async, double-buffered) while this step computes

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

#define THREADS 1024  // the trainer's block: phase B's logits in one round of warps
#define WARP_SIZE 32
#define WARPS (THREADS / WARP_SIZE)
#define PIXELS MNIST_PIXELS
#define CLASSES MNIST_CLASSES
#define WORDS (PIXELS / 4)  // a row's pixel bytes as 4-byte words
#define ROW_THREADS 4       // phase A with a hidden layer: the threads that share a row, a quarter of its words each
#define PIXEL_SLICE 8       // pixels a block owns without a hidden layer (98 blocks); 8 bytes, one cp.async
#define MAX_HIDDEN 1024
#define MAX_BATCH 256
#define MAX_CLUSTER 16  // non-portable; 8 is the portable size
#define LR 0.1f         // the trainers' learning rate

// ----------------------------------------------------------------------------
// the problem, as the kernels see it (passed by value), and where each block keeps what

typedef struct {
    float *params;          // packed as trainer.h: read at the start of a run, written back at its end
    float *scratch;         // versions 0-1: (blocks, Layout.scratch) each block's weight slice (0: and values)
    float *partial;         // (batch, CLASSES, shares) every block's (3-4: every cluster's) share of every logit
    float *dlogits;         // (batch, CLASSES) this step's
    float *loss_sum;        // (steps,) each step's summed cross-entropy, zeroed before a run
    const uint8_t *pixels;  // (n_rows, PIXELS) the bytes
    const uint8_t *labels;  // (n_rows,)
    const int32_t *rows;    // (steps, batch): the training rows of each step
    int hidden, slice, batch, steps, blocks;
    int weights_global;  // versions 0-1: the weight slices in scratch, not shared memory
    int values_global;   // version 0: the features' values too (phase C's kernel reads phase A's)
    int cluster;         // versions 3-4: blocks a cluster (0: no clusters)
    int async;           // version 4: two batch buffers, filled by cp.async
} Net;

static __host__ __device__ int64_t w1_offset(int hidden) { return hidden ? (int64_t)PIXELS * hidden + hidden : 0; }
static __host__ __device__ int64_t b1_offset(int hidden) {
    return w1_offset(hidden) + (int64_t)(hidden ? hidden : PIXELS) * CLASSES;
}
static __host__ __device__ int round_up(int n, int to) { return (n + to - 1) / to * to; }
static __host__ __device__ int align4(int floats) { return round_up(floats, 4); }  // every array 16-byte aligned

// A weight slice in floats: W_last rows, b_last, then (hidden) b0 and the W0 columns.
static __host__ __device__ int weight_floats(const Net *a) {
    return align4(a->slice * CLASSES) + align4(CLASSES) + (a->hidden ? align4(a->slice) + a->slice * PIXELS : 0);
}

// Dynamic shared memory, in floats from its (16-byte aligned) start, and a block's global scratch.
typedef struct {
    int x, x_size;        // the batch's pixel bytes, one buffer (version 4: two)
    int rows, rows_size;  // the batch's rows, then their labels, one buffer (version 4: two)
    int value, dlogit, dvalue, partial, weights;
    int total, scratch;  // floats of shared memory; of global scratch a block (versions 0-1)
} Layout;

static __host__ __device__ Layout layout_of(const Net *a) {
    Layout l;
    int buffers = a->async ? 2 : 1, values = align4(a->batch * a->slice), at = 0;
    // hidden: whole rows (A and C read each slice times); version 4 without: its own pixels of each row
    l.x_size = a->hidden ? a->batch * WORDS : a->async ? align4((a->batch * a->slice + 3) / 4) : 0;
    l.x = at, at += buffers * l.x_size;
    l.rows_size = align4(2 * a->batch);
    l.rows = at, at += buffers * l.rows_size;
    l.value = at, at += a->values_global ? 0 : values;
    l.dlogit = at, at += align4(a->batch * CLASSES);
    l.dvalue = at, at += a->hidden ? values : 0;
    l.partial = at, at += a->cluster ? align4(a->batch * CLASSES) : 0;
    l.weights = at, at += a->weights_global ? 0 : weight_floats(a);
    l.total = at;
    l.scratch = (a->weights_global ? weight_floats(a) : 0) + (a->values_global ? values : 0);
    return l;
}

// One block's arrays, in shared memory or its part of the global scratch, with batch buffer `buffer`.
typedef struct {
    uint8_t *x;            // hidden: (batch, PIXELS) the rows' bytes; version 4 without: (batch, slice) my pixels
    int32_t *row, *label;  // (batch,) each
    float *value, *dvalue;  // (batch, slice) my features' values; hidden: their gradient
    float *dlogit;          // (batch, CLASSES): phase B's row logits, then the step's dlogits
    float *partial;         // versions 3-4: (batch, CLASSES) my share of every logit
    float *w_last, *b_last;  // (slice, CLASSES) my rows of W_last; (CLASSES,) my copy of b_last
    float *b0, *w0;          // hidden: (slice,) my entries of b0; (slice, PIXELS) my columns of W0, one a row
    int first, owned;        // my features [first, first + owned); zeros up to slice
} Block;

static __device__ Block block_of(const Net *a, float *shared, int buffer) {
    Layout l = layout_of(a);
    float *own = a->scratch + (int64_t)blockIdx.x * l.scratch;
    float *w = a->weights_global ? own : shared + l.weights;  // the one difference between versions 1 and 2
    Block m;
    m.x = (uint8_t *)(shared + l.x + buffer * l.x_size);
    m.row = (int32_t *)(shared + l.rows + buffer * l.rows_size);
    m.label = m.row + a->batch;
    m.value = a->values_global ? own + weight_floats(a) : shared + l.value;
    m.dvalue = shared + l.dvalue;
    m.dlogit = shared + l.dlogit;
    m.partial = shared + l.partial;
    m.w_last = w;
    m.b_last = w + align4(a->slice * CLASSES);
    m.b0 = m.b_last + align4(CLASSES);
    m.w0 = m.b0 + align4(a->slice);
    m.first = blockIdx.x * a->slice;
    m.owned = max(0, min(a->slice, (a->hidden ? a->hidden : PIXELS) - m.first));
    return m;
}

// ----------------------------------------------------------------------------
// warp sums and the dot products of the phases

// The sum over each group of `width` neighbouring lanes (a power of 2), in each of them.
static __device__ __forceinline__ float group_sum(float value, int width) {
    for (int offset = width / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

static __device__ __forceinline__ float warp_sum(float value) { return group_sum(value, WARP_SIZE); }

static __device__ __forceinline__ float warp_max(float value) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2)
        value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
    return value;
}

// sum over i < n of a[i * a_step] * b[i * b_step]: four chains, so that four loads are in flight at once.
static __device__ float strided_dot(const float *a, int a_step, const float *b, int b_step, int n) {
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int i = 0;
    for (; i + 4 <= n; i += 4)
        for (int c = 0; c < 4; c++) sum[c] = fmaf(a[(i + c) * a_step], b[(i + c) * b_step], sum[c]);
    for (; i < n; i++) sum[0] = fmaf(a[i * a_step], b[i * b_step], sum[0]);
    return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

// Byte b of a word as a float in [0, 255], exactly: or-ed into the mantissa of 2^23, which is then taken away
// (cheaper than an integer-to-float conversion).
static __device__ __forceinline__ float pixel_byte(uint32_t word, int b) {
    return __uint_as_float(0x4B000000u | ((word >> 8 * b) & 255u)) - 8388608.0f;
}

// ----------------------------------------------------------------------------
// the weight slices in and out, and the batch

// One weight of my slice from its place in params (in; zero past my features), or back there.
static __device__ __forceinline__ void move_one(float *mine, float *param, int owned, int in) {
    if (in) *mine = owned ? *param : 0.0f;
    else *param = *mine;
}

// My weight slice from the packed params (in), or back into them, b_last from block 0's copy (every copy is
// updated alike). Loading needs no barrier: a step's first __syncthreads comes before any read.
static __device__ void move_weights(const Net *a, const Block *m, int in) {
    float *w_last = a->params + w1_offset(a->hidden) + (int64_t)m->first * CLASSES;
    float *b0 = a->params + (int64_t)PIXELS * a->hidden + m->first, *w0 = a->params + m->first;
    int t = threadIdx.x, n = in ? a->slice : m->owned;  // loading fills the whole slice
    for (int e = t; e < n * CLASSES; e += THREADS) move_one(m->w_last + e, w_last + e, e / CLASSES < m->owned, in);
    if (t < CLASSES && (in || blockIdx.x == 0)) move_one(m->b_last + t, a->params + b1_offset(a->hidden) + t, 1, in);
    if (!a->hidden) return;
    for (int f = t; f < n; f += THREADS) move_one(m->b0 + f, b0 + f, f < m->owned, in);
    for (int e = t; e < n * PIXELS; e += THREADS) {
        int f = e / PIXELS, k = e % PIXELS;
        move_one(m->w0 + e, w0 + (int64_t)k * a->hidden + f, f < m->owned, in);
    }
}

// The step's rows and labels; then (with_pixels, hidden) its rows' bytes, 16 a copy, several copies in flight:
// A and C read them slice times. Ends with __syncthreads.
static __device__ void stage_batch(const Net *a, const Block *m, int step, int with_pixels) {
    for (int i = threadIdx.x; i < a->batch; i += THREADS) {
        m->row[i] = a->rows[(int64_t)step * a->batch + i];
        m->label[i] = a->labels[m->row[i]];  // read now, used in phase B
    }
    __syncthreads();
    if (with_pixels && a->hidden)
#pragma unroll 8
        for (int e = threadIdx.x; e < a->batch * (PIXELS / 16); e += THREADS) {
            int i = e / (PIXELS / 16), c = e % (PIXELS / 16);
            ((uint4 *)(m->x + i * PIXELS))[c] = ((const uint4 *)(a->pixels + (int64_t)m->row[i] * PIXELS))[c];
        }
    __syncthreads();
}

// Version 4: the step's rows and labels (plain stores) and, by cp.async, its bytes into m's buffers: whole rows
// with a hidden layer (16 bytes a copy: a row is 49 x 16 bytes), else my pixels of each row (8 bytes a copy:
// first and owned are multiples of PIXEL_SLICE). One commit, which __pipeline_wait_prior(0) waits for.
static __device__ void stage_async(const Net *a, const Block *m, int step) {
    const int32_t *rows = a->rows + (int64_t)step * a->batch;  // from global: m's rows are not visible yet
    for (int i = threadIdx.x; i < a->batch; i += THREADS) {
        m->row[i] = rows[i];
        m->label[i] = a->labels[rows[i]];
    }
    int chunks = a->hidden ? PIXELS / 16 : m->owned / 8, width = a->hidden ? PIXELS : a->slice;
    for (int e = threadIdx.x; e < a->batch * chunks; e += THREADS) {
        int i = e / chunks, c = e % chunks;
        uint8_t *to = m->x + i * width;
        const uint8_t *from = a->pixels + (int64_t)rows[i] * PIXELS + (a->hidden ? 0 : m->first);
        if (a->hidden) __pipeline_memcpy_async(to + 16 * c, from + 16 * c, 16);
        else __pipeline_memcpy_async(to + 8 * c, from + 8 * c, 8);
    }
    __pipeline_commit();
}

// ----------------------------------------------------------------------------
// the clusters' side (versions 3-4): device code for compute capability 9.0 only

// The sum of partial[e] over the cluster's ranks first, first + stride, ..., each read from that rank's shared
// memory (distributed shared memory).
static __device__ float rank_sum(float *partial, int e, int first, int stride) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::cluster_group cluster = cg::this_cluster();
    float sum = 0.0f;
    for (int q = first; q < (int)cluster.num_blocks(); q += stride) sum += cluster.map_shared_rank(partial, q)[e];
    return sum;
#else
    __trap();
    return 0.0f;
#endif
}

static __device__ void cluster_barrier(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::this_cluster().sync();
#else
    __trap();
#endif
}

// ----------------------------------------------------------------------------
// the three phases, the trainer's loops

// A with a hidden layer: ROW_THREADS threads a row, a quarter of its words each, then their sum (whole warps:
// every lane of a warp shuffles; those past the batch redo its last row and write nothing).
static __device__ void hidden_values(const Net *a, const Block *m) {
    int batch = a->batch, slice = a->slice;
    for (int t = threadIdx.x; t < round_up(batch * ROW_THREADS, WARP_SIZE); t += THREADS) {
        int i = min(t / ROW_THREADS, batch - 1), q = t % ROW_THREADS, first_word = q * (WORDS / ROW_THREADS);
        const uint32_t *words = (const uint32_t *)(m->x + i * PIXELS);
        for (int f = 0; f < slice; f++) {
            float z = 0.0f;
            for (int w = first_word; w < first_word + WORDS / ROW_THREADS; w++)
                for (int b = 0; b < 4; b++) z = fmaf(pixel_byte(words[w], b), m->w0[f * PIXELS + 4 * w + b], z);
            z = group_sum(z, ROW_THREADS) / 255.0f + m->b0[f];  // x = byte / 255, the 255 taken out of the sum
            if (q == 0 && t / ROW_THREADS < batch) m->value[i * slice + f] = f < m->owned ? fmaxf(z, 0.0f) : 0.0f;
        }
    }
}

// A: my features' values (without a hidden layer my pixels, from the staged bytes in version 4), then my share of
// every logit: into my shared memory (3-4: the cluster sums it) or the global partial (the grid does).
static __device__ void phase_a(const Net *a, const Block *m, int staged, int clustered) {
    int batch = a->batch, slice = a->slice;
    if (a->hidden) {
        hidden_values(a, m);
    } else {
        for (int p = threadIdx.x; p < batch * slice; p += THREADS) {
            int i = p / slice, f = p % slice;
            const uint8_t *px = staged ? m->x + i * slice : a->pixels + (int64_t)m->row[i] * PIXELS + m->first;
            m->value[p] = f < m->owned ? mnist_pixel_value(px[f]) : 0.0f;
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < batch * CLASSES; e += THREADS) {
        int i = e / CLASSES, j = e % CLASSES;
        float sum = strided_dot(m->value + i * slice, 1, m->w_last + j, CLASSES, slice);
        if (clustered) m->partial[e] = sum;
        else __stcg(a->partial + (int64_t)e * a->blocks + blockIdx.x, sum);  // to L2: other blocks read it
    }
}

// Between A and B. Versions 1-2: the grid barrier. 3-4: the cluster's; then with several clusters each rank sums
// some of the cluster's shares into the global partial, and only those sums meet at the grid barrier.
static __device__ void meet_after_a(const Net *a, const Block *m, int clustered) {
    if (!clustered) {
        cg::this_grid().sync();
        return;
    }
    cluster_barrier();  // every rank's shares written
    int size = a->cluster, clusters = a->blocks / size;
    if (clusters == 1) return;  // phase B reads the ranks' shares where they are
    int rank = blockIdx.x % size, id = blockIdx.x / size;  // a cluster is `size` consecutive blocks
    for (int e = rank + size * threadIdx.x; e < a->batch * CLASSES; e += size * THREADS)
        __stcg(a->partial + (int64_t)e * clusters + id, rank_sum(m->partial, e, 0, 1));
    cg::this_grid().sync();  // also: no rank rewrites its shares before every rank has read them
}

// A lane's part of logit e's shares: the blocks' (versions 0-2) or the clusters' (3-4) from global memory, or
// with a single cluster its ranks' straight from their shared memory.
static __device__ float share_sum(const Net *a, const Block *m, int e, int lane, int clustered) {
    if (clustered && a->cluster == a->blocks) return rank_sum(m->partial, e, lane, WARP_SIZE);
    int shares = clustered ? a->blocks / a->cluster : a->blocks;
    const float *share = a->partial + (int64_t)e * shares;
    float sum = 0.0f;
#pragma unroll 4
    for (int g = lane; g < shares; g += WARP_SIZE) sum += __ldcg(share + g);  // other blocks wrote them: from L2
    return sum;
}

// B: block g takes rows g, g + blocks, ... A warp a logit: its lanes add the shares, then the warp's sum; then a
// warp a row: softmax, loss and dlogits. The row logits sit in dlogit's room until phase C.
static __device__ void phase_b(const Net *a, const Block *m, int step, int clustered) {
    int batch = a->batch, blocks = a->blocks, warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    int my_rows = (batch - (int)blockIdx.x + blocks - 1) / blocks;
    for (int q = warp; q < my_rows * CLASSES; q += WARPS) {
        int i = blockIdx.x + q / CLASSES * blocks, j = q % CLASSES;
        float sum = warp_sum(share_sum(a, m, i * CLASSES + j, lane, clustered));
        if (lane == 0) m->dlogit[q] = sum + m->b_last[j];
    }
    __syncthreads();
    for (int r = warp; r < my_rows; r += WARPS) {
        int i = blockIdx.x + r * blocks, label = m->label[i];
        float z = lane < CLASSES ? m->dlogit[r * CLASSES + lane] : -INFINITY, max = warp_max(z);
        float e = lane < CLASSES ? expf(z - max) : 0.0f, sum = warp_sum(e);
        float label_logit = __shfl_sync(0xffffffffu, z, label);
        if (lane < CLASSES) __stcg(a->dlogits + i * CLASSES + lane, (e / sum - (lane == label)) / (float)batch);
        // from the logits, not from p: log of a probability that underflowed to 0 would be -inf
        if (lane == 0) atomicAdd(a->loss_sum + step, logf(sum) - (label_logit - max));
    }
}

// Between B and C: every row's dlogits written. One cluster: the cluster barrier (it orders global memory too).
static __device__ void meet_after_b(const Net *a, int clustered) {
    if (clustered && a->cluster == a->blocks) cluster_barrier();
    else cg::this_grid().sync();
}

// C with a hidden layer, after dvalue: b0, then W0 from the staged bytes.
static __device__ void hidden_updates(const Net *a, const Block *m) {
    int batch = a->batch, slice = a->slice, warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    for (int f = warp; f < slice; f += WARPS) {  // b0: warp f sums unit f's dvalues
        float sum = 0.0f;
        for (int i = lane; i < batch; i += WARP_SIZE) sum += m->dvalue[i * slice + f];
        sum = warp_sum(sum);
        if (lane == 0) m->b0[f] -= LR * sum;
    }
    // W0: two neighbouring lanes a word (4 weights), over alternate rows, then their sums added (whole warps:
    // every lane shuffles; those past the last word read word 0 and write nothing)
    for (int e = threadIdx.x; e < round_up(slice * WORDS * 2, WARP_SIZE); e += THREADS) {
        int f = min(e / (2 * WORDS), slice - 1), w = e < slice * WORDS * 2 ? e / 2 % WORDS : 0, half = e % 2;
        float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 4
        for (int i = half; i < batch; i += 2) {
            uint32_t word = ((const uint32_t *)(m->x + i * PIXELS))[w];
            for (int b = 0; b < 4; b++) sum[b] = fmaf(pixel_byte(word, b), m->dvalue[i * slice + f], sum[b]);
        }
        for (int b = 0; b < 4; b++) sum[b] += __shfl_xor_sync(0xffffffffu, sum[b], 1);
        if (half == 0 && e < slice * WORDS * 2)
            for (int b = 0; b < 4; b++) m->w0[f * PIXELS + 4 * w + b] -= LR * (sum[b] / 255.0f);
    }
}

// C: the batch's dlogits, then my gradients, every one from the weights before this step's update.
static __device__ void phase_c(const Net *a, const Block *m) {
    int batch = a->batch, slice = a->slice, warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    for (int e = threadIdx.x; e < batch * CLASSES; e += THREADS) m->dlogit[e] = __ldcg(a->dlogits + e);
    __syncthreads();
    if (a->hidden) {  // dvalue: back through W_last and the ReLU
        for (int p = threadIdx.x; p < batch * slice; p += THREADS) {
            int i = p / slice, f = p % slice;
            float sum = strided_dot(m->dlogit + i * CLASSES, 1, m->w_last + f * CLASSES, 1, CLASSES);
            m->dvalue[p] = m->value[p] > 0.0f ? sum : 0.0f;
        }
    }
    __syncthreads();  // dvalue has read W_last
    for (int e = threadIdx.x; e < slice * CLASSES; e += THREADS) {
        int f = e / CLASSES, j = e % CLASSES;
        m->w_last[e] -= LR * strided_dot(m->value + f, slice, m->dlogit + j, CLASSES, batch);
    }
    if (warp < CLASSES) {  // b_last: warp j sums column j, in the same order in every block: the copies stay equal
        float sum = 0.0f;
        for (int i = lane; i < batch; i += WARP_SIZE) sum += m->dlogit[i * CLASSES + warp];
        sum = warp_sum(sum);
        if (lane == 0) m->b_last[warp] -= LR * sum;
    }
    if (a->hidden) hidden_updates(a, m);
}

// ----------------------------------------------------------------------------
// the kernels

// Versions 1-4: all S steps in one launch. Each entry point passes its version's flags as constants, so that it
// compiles without the others' code, and its shared memory stays known as such: with a runtime choice between
// shared and global memory, every access to the slice would be a generic load, not a shared-memory load.
static __device__ __forceinline__ void all_steps(Net *a, float *shared, int weights_global, int clustered,
                                                 int staged) {
    a->weights_global = weights_global;  // as the host planned this version's layout
    a->values_global = 0, a->async = staged;
    Block m = block_of(a, shared, 0);
    move_weights(a, &m, 1);
    if (staged) stage_async(a, &m, 0);
    for (int step = 0; step < a->steps; step++) {
        m = block_of(a, shared, staged ? step % 2 : 0);
        if (staged) {
            __pipeline_wait_prior(0);  // my copies of this step's batch have landed,
            __syncthreads();           // and everyone's
            if (step + 1 < a->steps) {  // into the other buffers, last read by the step before this one
                Block next = block_of(a, shared, (step + 1) % 2);
                stage_async(a, &next, step + 1);
            }
        } else {
            stage_batch(a, &m, step, 1);
        }
        phase_a(a, &m, staged, clustered);
        meet_after_a(a, &m, clustered);
        phase_b(a, &m, step, clustered);
        meet_after_b(a, clustered);  // after every read of another rank's shared memory: a block may leave after it
        phase_c(a, &m);
        __syncthreads();  // the next step overwrites the rows, values and dlogits
    }
    move_weights(a, &m, 0);
    // no block of a cluster leaves while another may still read its shared memory (the Programming Guide's
    // rule for distributed shared memory; the grid barriers order it too, but racecheck sees only this one)
    if (clustered) cluster_barrier();
}

// Versions 1 and 2: the same kernel, the weight slices in global scratch or in shared memory.
__global__ void __launch_bounds__(THREADS) cooperative_kernel(Net a) {
    extern __shared__ float4 shared4[];  // float4: 16-byte aligned
    all_steps(&a, (float *)shared4, 1, 0, 0);
}

__global__ void __launch_bounds__(THREADS) shared_weights_kernel(Net a) {
    extern __shared__ float4 shared4[];
    all_steps(&a, (float *)shared4, 0, 0, 0);
}

__global__ void __launch_bounds__(THREADS) clusters_kernel(Net a) {
#if __CUDA_ARCH__ >= 900
    extern __shared__ float4 shared4[];
    all_steps(&a, (float *)shared4, 0, 1, 0);
#else
    __trap();  // a build without compute_90 code: the host checks feature_available and never launches this
#endif
}

__global__ void __launch_bounds__(THREADS) async_copy_kernel(Net a) {
#if __CUDA_ARCH__ >= 900
    extern __shared__ float4 shared4[];
    all_steps(&a, (float *)shared4, 0, 1, 1);
#else
    __trap();
#endif
}

// Version 0: one phase of one step a launch, or the weight slices in (before the steps) or out (after them).
enum { STEP_LOAD, STEP_A, STEP_B, STEP_C, STEP_STORE };

__global__ void __launch_bounds__(THREADS) phase_kernel(Net a, int step, int phase) {
    extern __shared__ float4 shared4[];
    a.weights_global = a.values_global = 1, a.async = 0;  // nothing outlives a kernel in shared memory
    Block m = block_of(&a, (float *)shared4, 0);
    if (phase == STEP_LOAD || phase == STEP_STORE) move_weights(&a, &m, phase == STEP_LOAD);
    else stage_batch(&a, &m, step, phase != STEP_B);
    if (phase == STEP_A) phase_a(&a, &m, 0, 0);
    if (phase == STEP_B) phase_b(&a, &m, step, 0);
    if (phase == STEP_C) phase_c(&a, &m);
}

// ----------------------------------------------------------------------------
// the host side: plan a version's grid, upload, run, read back

typedef enum { KERNEL_GRAPH, COOPERATIVE, SHARED_WEIGHTS, CLUSTERS, ASYNC_COPY, VERSION_COUNT } VersionId;
static const char *const VERSION_NAMES[VERSION_COUNT] = {"kernel-graph", "cooperative", "shared-weights",
                                                         "clusters", "async-copy"};
static const void *const VERSION_KERNELS[VERSION_COUNT] = {
    (const void *)phase_kernel, (const void *)cooperative_kernel, (const void *)shared_weights_kernel,
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

static int device_attribute(cudaDeviceAttr attribute) {
    int device = 0, value = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&value, attribute, device));
    return value;
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
    attrs[0].val.clusterDim.y = attrs[0].val.clusterDim.z = 1;
    attrs[1].id = cudaLaunchAttributeCooperative;
    attrs[1].val.cooperative = 1;
    config.numAttrs = r->net.blocks > r->net.cluster ? 2 : 1;
    return config;
}

// Versions 3-4 at the planned slice: the largest cluster of 16, 8, 4, 2 blocks whose clusters are all resident
// at once, the grid rounded up to whole clusters (the blocks past the last feature own none). 0 if none.
static int clusters_fit(Run *r, const void *kernel) {
    Net *a = &r->net;
    int blocks = a->blocks;
    for (int size = MAX_CLUSTER; size >= 2; size /= 2) {
        a->cluster = size < blocks ? size : blocks;
        a->blocks = round_up(blocks, a->cluster);
        if (a->cluster > 8) cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        cudaLaunchAttribute attrs[2];
        cudaLaunchConfig_t config = cluster_config(r, attrs);
        config.gridDim = dim3((unsigned int)a->cluster);  // one cluster's worth: how many such fit at once
        config.numAttrs = 1;
        int active = 0;
        if (cudaOccupancyMaxActiveClusters(&active, kernel, &config) != cudaSuccess) {
            (void)cudaGetLastError();  // a cluster size this GPU does not place: none fit
            active = 0;
        }
        if (active * a->cluster >= a->blocks) return 1;
    }
    a->blocks = blocks;
    return 0;
}

// 1 if every block of the planned grid is resident at once, which a grid barrier needs.
static int resident(Run *r, const void *kernel) {
    if (r->version == KERNEL_GRAPH) return 1;  // no barrier inside a kernel
    if (r->version >= CLUSTERS) return clusters_fit(r, kernel);
    int per_sm = 0;
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, THREADS, r->shared_bytes));
    return r->net.blocks <= per_sm * device_attribute(cudaDevAttrMultiProcessorCount);
}

// The trainer's work split (persistent_layout in mnist.cu): one hidden unit a block, or PIXEL_SLICE pixels, the
// slice doubled until the grid is resident. 0, with r->why, where the version cannot run here.
static int plan(Run *r) {
    Net *a = &r->net;
    const void *kernel = VERSION_KERNELS[r->version];
    if (r->version >= CLUSTERS && !feature_available(FEATURE_CLUSTERS, kernel, r->why, sizeof(r->why))) return 0;
    if (r->version != KERNEL_GRAPH && !device_attribute(cudaDevAttrCooperativeLaunch)) {
        snprintf(r->why, sizeof(r->why), "this GPU has no cooperative launch");
        return 0;
    }
    int max_shared = device_shared_per_block();
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_shared));
    int features = a->hidden ? a->hidden : PIXELS;
    for (a->slice = a->hidden ? 1 : PIXEL_SLICE;; a->slice *= 2) {
        a->blocks = (features + a->slice - 1) / a->slice;
        a->cluster = r->version >= CLUSTERS ? MAX_CLUSTER : 0;  // the layout only asks whether
        r->shared_bytes = sizeof(float) * (size_t)layout_of(a).total;
        if (r->shared_bytes > (size_t)max_shared) {
            snprintf(r->why, sizeof(r->why), "a block of %d features needs %.1f KB of shared memory, this GPU allows "
                     "%.1f KB", a->slice, r->shared_bytes / 1024.0, max_shared / 1024.0);
            return 0;
        }
        if (resident(r, kernel)) return 1;
        if (a->blocks == 1) break;
    }
    snprintf(r->why, sizeof(r->why), "not even one block of %.1f KB shared memory is resident (in a cluster)",
             r->shared_bytes / 1024.0);
    return 0;
}

// The pixel bytes on the device (the kernels read bytes, as the trainer does), recovered from images, which hold
// mnist_pixel_value of each (as persistent_ladder_problem makes them): byte / 255 * 255 rounds back to the byte.
static const uint8_t *pixel_bytes(const float *images, int n_rows) {
    size_t n = (size_t)n_rows * PIXELS;
    uint8_t *bytes = (uint8_t *)host_malloc(n, "the pixel bytes");
    for (size_t i = 0; i < n; i++) bytes[i] = (uint8_t)lrintf(images[i] * 255.0f);
    const uint8_t *device = (const uint8_t *)ladder_to_device(bytes, n);
    free(bytes);
    return device;
}

// Version 0's graph: the slices in, the S steps' three kernels, the slices out, captured once.
static void capture_steps(Run *r) {
    cudaStream_t stream;
    cudaGraph_t graph;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int k = -1; k <= 3 * r->net.steps; k++) {  // k = 3 step + phase A, B or C; -1 the load, 3 S the store
        int part = k < 0 ? STEP_LOAD : k == 3 * r->net.steps ? STEP_STORE : STEP_A + k % 3;
        phase_kernel<<<r->net.blocks, THREADS, r->shared_bytes, stream>>>(r->net, k < 0 ? 0 : k / 3, part);
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
    Net *a = &r->net;
    r->version = version;
    a->hidden = hidden;
    a->batch = batch;
    a->steps = steps;
    a->weights_global = version <= COOPERATIVE;
    a->values_global = version == KERNEL_GRAPH;
    a->async = version == ASYNC_COPY;
    if (!plan(r)) return 0;
    r->n_params = b1_offset(hidden) + CLASSES;
    size_t scratch = (size_t)a->blocks * (size_t)(layout_of(a).scratch + 4);  // + 4: never 0 bytes
    a->pixels = pixel_bytes(images, n_rows);
    a->labels = (const uint8_t *)ladder_to_device(labels, (size_t)n_rows);
    a->rows = (const int32_t *)ladder_to_device(rows, sizeof(int32_t) * (size_t)steps * batch);
    r->init_params = (float *)ladder_to_device(init_params, sizeof(float) * (size_t)r->n_params);
    cudaCheck(cudaMalloc(&a->params, sizeof(float) * (size_t)r->n_params));
    cudaCheck(cudaMalloc(&a->scratch, sizeof(float) * scratch));
    cudaCheck(cudaMalloc(&a->partial, sizeof(float) * (size_t)a->blocks * batch * CLASSES));
    cudaCheck(cudaMalloc(&a->dlogits, sizeof(float) * (size_t)batch * CLASSES));
    cudaCheck(cudaMalloc(&a->loss_sum, sizeof(float) * (size_t)steps));
    if (version == KERNEL_GRAPH) capture_steps(r);
    return 1;
}

static void run_free(Run *r) {
    Net *a = &r->net;
    void *buffers[] = {(void *)a->pixels, (void *)a->labels, (void *)a->rows, r->init_params, a->params,
                       a->scratch,        a->partial,         a->dlogits,     a->loss_sum};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++) cudaCheck(cudaFree(buffers[i]));
    if (r->graph) cudaCheck(cudaGraphExecDestroy(r->graph));
}

// Before every run (untimed): the initial weights, and the loss sums zeroed.
static void run_restore(void *ctx) {
    Run *r = (Run *)ctx;
    cudaCheck(cudaMemcpyAsync(r->net.params, r->init_params, sizeof(float) * (size_t)r->n_params,
                              cudaMemcpyDeviceToDevice, 0));
    cudaCheck(cudaMemsetAsync(r->net.loss_sum, 0, sizeof(float) * (size_t)r->net.steps, 0));
}

// One run: the S steps, on the default stream.
static void run_steps(void *ctx) {
    Run *r = (Run *)ctx;
    void *args[] = {&r->net};
    if (r->version == KERNEL_GRAPH) {
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

// One checked run from the initial weights: the trained parameters and each step's mean loss into host memory.
static void run_once(Run *r, float *params, float *losses) {
    run_restore(r);
    run_steps(r);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(params, r->net.params, sizeof(float) * (size_t)r->n_params, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(losses, r->net.loss_sum, sizeof(float) * (size_t)r->net.steps, cudaMemcpyDeviceToHost));
    for (int s = 0; s < r->net.steps; s++) losses[s] /= (float)r->net.batch;
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
    MnistConfig cfg = {};
    cfg.n_layers = hidden ? 2 : 1;
    cfg.sizes[0] = PIXELS;
    cfg.sizes[1] = hidden ? hidden : CLASSES;
    cfg.sizes[2] = CLASSES;
    cfg.batch = batch;
    cfg.epochs = 1;
    cfg.lr = LR;
    cfg.precision = PRECISION_FP32;
    MnistData data = {};
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
    MnistResult out = {};
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

// For tests/gpu/test_persistent_ladder.c, which declares these itself. index counts from 0 (0: kernel-graph).
extern "C" int persistent_ladder_version_count(void) { return VERSION_COUNT; }
extern "C" const char *persistent_ladder_version_name(int index) { return VERSION_NAMES[index]; }

// One run of version index from init_params (packed as trainer.h) over `steps` steps of rows (steps, batch)
// into images (n_rows, 784: mnist_pixel_value of bytes, as persistent_ladder_problem makes them) and labels: the
// trained params and each step's loss. Returns NULL, or why the
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
// the program: flags, the baseline (version 0), the table, the check, the CSV rows

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
    printf(", %.1f KB shared memory%s\n", r.shared_bytes / 1024.0, r.net.weights_global ? ", weights in global" : "");
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

    LadderTable table = {};
    table.stage = "08";
    table.ladder = "persistent";
    snprintf(table.shape, sizeof(table.shape), "hidden %d, batch %d, %d steps", hidden, sh->batch, sh->steps);
    table.unit = "GFLOP/s";
    table.work = step_flop(hidden, sh->batch);
    table.ceiling = VERSION_NAMES[KERNEL_GRAPH];  // a baseline to beat, in the ceiling's place
    table.baseline = 1;
    table.repeats = options->repeats;
    table.device = device;
    table.csv_path = options->csv_path;
    char why[192];
    if (!check_and_time(sh, KERNEL_GRAPH, &table.ceiling_time, why, sizeof(why))) {
        fprintf(stderr, "error: the kernel-graph baseline cannot run: %s\n", why);
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
                      "  each checked against the CPU; version 0, kernel-graph (three kernels a step in one CUDA"
                      " graph), is the baseline.\n"
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
    Shape sh = {};
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
