/*
Stage 07, MNIST: stage 06's trainer with the training launches captured once into a CUDA graph and
replayed. A step no longer takes its position from the host: a device counter holds the global step
index (epoch * steps + step), the gather kernel derives its rows of the batch order from it, the loss
kernel its slot in the loss array, and the step's last kernel (layer 0's bias update) advances it. So
the launches of one step are the same for every step, and stream capture records them once: the variant
epoch-graph (default) captures all the steps of an epoch and launches one graph per epoch; step-graph
captures one step and launches it once per step. Capture, instantiation and upload happen before the
timed region (the driver prints them as setup), after one uncaptured run of the step's library calls.
With --breakdown the steps run uncaptured, since a graph cannot be split into timed phases. Everything
else is stage 06's.

Build and run from the repository root (make data fetches MNIST once):
    make stage 7 run TRAINER=mnist                 (or: make build/07/mnist && build/07/mnist --hidden 128)
    build/07/mnist --hidden 0 --variant step-graph
    make stage 7 diff                              (what this stage changed, against stage 06)
    make stage 7 test                              (agreement with common/reference.c, every variant)
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include "check.h"  // after the library headers: it defines cublasCheck and cudnnCheck only for those included
#include "timing.h"
#include "trainer.h"

const char *const MNIST_VARIANTS[] = {"epoch-graph", "step-graph", NULL};
#define VARIANT_EPOCH_GRAPH 0  // index of "epoch-graph" above
const char *const MNIST_PRECISIONS[] = {"fp32", "tf32", "bf16", NULL};

#define BLOCK_SIZE 256
#define WARP_SIZE 32
#define WARPS_PER_BLOCK (BLOCK_SIZE / WARP_SIZE)  // loss kernel: rows per block; bias kernel: partial sums per column
#define UPLOAD_CHUNK ((size_t)8 << 20)  // bytes per pinned staging buffer (two of them)
#define WORKSPACE_BYTES ((size_t)32 << 20)  // cuBLASLt scratch per stream (split-K and the like)
#define TUNE_CANDIDATES 8                   // heuristic answers timed per GEMM in setup (autotuning)
#define TUNE_RUNS 10                        // timed runs of each
#define TUNE_SPIN_CYCLES 1000000            // about 0.5 ms of GPU clock: longer than enqueueing TUNE_RUNS GEMMs

// ----------------------------------------------------------------------------
// batch gather: the training set lives on the device; each step copies its batch's rows out of it.
// The step comes from a device counter, *step = epoch * steps + s (step s of the epoch), so that the
// same captured launches replay as every step.

// for i < batch, p < pixels: batch_images[i][p] = images[rows[i]][p], and batch_labels[i] = labels[rows[i]],
// rows = order + epoch * n_train + s * batch: step s's slice of epoch's batch order (checked on the host
// before the upload)
__global__ void gather_batch_kernel(float *batch_images, uint8_t *batch_labels, const float *images,
                                    const uint8_t *labels, const int32_t *order, const int *step, int n_train,
                                    int steps, int batch, int pixels) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)batch * pixels) return;
    int i = (int)(idx / pixels), p = (int)(idx % pixels);
    int g = *step;
    const int32_t *rows = order + (int64_t)(g / steps) * n_train + (int64_t)(g % steps) * batch;
    int64_t row = rows[i];
    batch_images[idx] = images[row * pixels + p];
    if (p == 0) batch_labels[i] = labels[row];
}

// ----------------------------------------------------------------------------
// GEMMs through cuBLASLt
//
// cuBLAS is column-major: element (r, c) of an (R, C) matrix with leading dimension ld lives at
// [r + c * ld]. Our matrices are row-major: element (r, c) of an (R, C) matrix lives at [r * C + c].
// Read column-major, the same bytes are the transpose: our row-major (R, C) matrix is cuBLAS's
// column-major (C, R) matrix with ld = C, without moving a byte. So for our C = A @ B we ask cuBLAS for
// C^T = B^T @ A^T: its first operand is our B, its second our A, its output (N, M) is our C. Our W
// (in, out) is to cuBLAS an (out, in) matrix with ld = out; a batch of activations (rows, dim) is a
// (dim, rows) matrix with ld = dim. The three products of a layer, as cuBLAS computes them:
//
//     forward  out = in @ W + b          out^T (out, rows) = W^T (out, in) @ in^T (in, rows) + b
//     din      din = dout @ W^T          din^T (in, rows)  = op_T(W^T) (in, out) @ dout^T (out, rows)
//     dW + SGD W -= lr * in^T @ dout     W^T (out, in)     = -lr * dout^T (out, rows) @ op_T(in^T) (rows, in) + W^T
//
// In cuBLAS's view the bias runs down the rows of out^T, which is what the BIAS epilogues broadcast
// ("bias length = rows of D"). The SGD update stays fused as in stage 03: alpha = -lr, beta = 1 and
// C = D = W, so dW is never stored.

// Everything one cublasLtMatmul call needs, built once before the timed region: descriptors, the
// algorithm (the fastest of the heuristic's answers), and the buffers it is bound to (they never move).
typedef struct {
    cublasLtMatmulDesc_t desc;                          // compute type, transposes, epilogue and its pointers
    cublasLtMatrixLayout_t a_layout, b_layout, c_layout;  // as stored, before op; D = C
    cublasLtMatmulAlgo_t algo;
    const void *a, *b;  // cuBLAS's operands: fp32 buffers, or their bf16 copies
    float *c;           // output (and input, with beta = 1)
    float alpha, beta;
    void *workspace;  // one per stream: two GEMMs running at once must not share one
    size_t workspace_bytes;
} MatmulPlan;

// The largest power of two (up to 256) that divides the address: the heuristic assumes 256-byte aligned
// operands unless told otherwise, and W_l inside the packed parameters may sit at any float.
static uint32_t alignment_of(const void *p) {
    uint32_t align = 256;
    while (align > 1 && (uintptr_t)p % align != 0) align /= 2;
    return align;
}

// Leading dimension, in bits, of the ReLU bit mask of a layer of dim units (one column of the mask per
// batch row): cuBLASLt wants a multiple of 128.
static int64_t relu_mask_ld(int dim) { return ((int64_t)dim + 127) / 128 * 128; }

static void run_matmul(cublasLtHandle_t lt, const MatmulPlan *plan, cudaStream_t stream) {
    cublasCheck(cublasLtMatmul(lt, plan->desc, &plan->alpha, plan->a, plan->a_layout, plan->b, plan->b_layout,
                               &plan->beta, plan->c, plan->c_layout, plan->c, plan->c_layout, &plan->algo,
                               plan->workspace, plan->workspace_bytes, stream));
}

// Autotuning: the heuristic's first answer is not the fastest for tiny GEMMs. For the first layer at
// batch 128 (m 128, n 128, k 784) it picks a split-K algorithm: its blocks each sum a part of K, and a
// second kernel adds the parts (measured with ncu on an H200: 9.7 + 4.3 us). The ranking is an estimate,
// and at this size the second kernel's launch costs about as much as its work. So the plan
// asks for up to TUNE_CANDIDATES answers, runs each one TUNE_RUNS times on the plan's own buffers and
// keeps the fastest. The runs write the plan's output (the weight GEMM, with beta = 1, updates W in
// place): harmless, since plans are made in setup, before the parameters are uploaded and before any
// step writes the activations and gradients.

// Keeps the GPU busy for about `cycles` clock cycles. Launched ahead of a timed batch of GEMMs, it lets
// the host enqueue the whole batch before the first GEMM starts, so the events time the GPU, not the
// host's launch calls (each costs about as much as one of these small GEMMs).
__global__ void spin_kernel(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

// plan->algo = the fastest of the found candidates, timed on stream
static void pick_fastest_algo(cublasLtHandle_t lt, MatmulPlan *plan, const cublasLtMatmulHeuristicResult_t *candidates,
                              int found, cudaStream_t stream) {
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    cublasLtMatmulAlgo_t fastest = candidates[0].algo;
    float fastest_ms = INFINITY;
    for (int i = 0; i < found; i++) {
        if (candidates[i].state != CUBLAS_STATUS_SUCCESS) continue;
        plan->algo = candidates[i].algo;
        run_matmul(lt, plan, stream);  // untimed: a kernel's first run may load it
        spin_kernel<<<1, 1, 0, stream>>>(TUNE_SPIN_CYCLES);
        launchCheck();
        cudaCheck(cudaEventRecord(start, stream));
        for (int run = 0; run < TUNE_RUNS; run++) run_matmul(lt, plan, stream);
        cudaCheck(cudaEventRecord(stop, stream));
        cudaCheck(cudaEventSynchronize(stop));
        float ms = 0.0f;
        cudaCheck(cudaEventElapsedTime(&ms, start, stop));
        if (ms < fastest_ms) {
            fastest_ms = ms;
            fastest = candidates[i].algo;
        }
    }
    plan->algo = fastest;
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
}

// D (m, n) = alpha * op_a(A) @ op_b(B) + beta * C, column-major, D = C, with an epilogue; A and B are
// stored as (m, k) / (k, n) for op N and (k, m) / (n, k) for op T. bias and aux are NULL unless the
// epilogue uses them (aux: the ReLU bit mask, aux_ld bits per column). The algorithm is timed on stream.
static void plan_matmul(MatmulPlan *plan, cublasLtHandle_t lt, Precision precision, const char *name,
                        cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, const void *a, int lda,
                        const void *b, int ldb, float *c, int ldc, float alpha, float beta,
                        cublasLtEpilogue_t epilogue, const float *bias, void *aux, int64_t aux_ld, void *workspace,
                        size_t workspace_bytes, cudaStream_t stream) {
    cudaDataType_t ab_type = precision == PRECISION_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasComputeType_t compute = precision == PRECISION_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    int32_t trans_a = op_a, trans_b = op_b;
    uint32_t epilogue_id = epilogue;
    cublasCheck(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    cublasCheck(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue_id, sizeof(epilogue_id)));
    if (bias)
        cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (aux) {
        cublasCheck(
            cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        cublasCheck(
            cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    }
    int a_rows = op_a == CUBLAS_OP_N ? m : k, a_cols = op_a == CUBLAS_OP_N ? k : m;
    int b_rows = op_b == CUBLAS_OP_N ? k : n, b_cols = op_b == CUBLAS_OP_N ? n : k;
    cublasCheck(cublasLtMatrixLayoutCreate(&plan->a_layout, ab_type, a_rows, a_cols, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&plan->b_layout, ab_type, b_rows, b_cols, ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&plan->c_layout, CUDA_R_32F, m, n, ldc));

    cublasLtMatmulPreference_t preference;
    uint32_t align_a = alignment_of(a), align_b = alignment_of(b), align_c = alignment_of(c);
    cublasCheck(cublasLtMatmulPreferenceCreate(&preference));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &workspace_bytes, sizeof(workspace_bytes)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                     sizeof(align_a)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                     sizeof(align_b)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                     sizeof(align_c)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                     sizeof(align_c)));
    cublasLtMatmulHeuristicResult_t candidates[TUNE_CANDIDATES];
    int found = 0;
    cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(lt, plan->desc, plan->a_layout, plan->b_layout, plan->c_layout, plan->c_layout,
                                       preference, TUNE_CANDIDATES, candidates, &found);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
        fprintf(stderr, "error: cuBLASLt has no algorithm for the %s GEMM (m %d, n %d, k %d, %s, epilogue %u): %s\n",
                name, m, n, k, PRECISION_NAMES[precision], epilogue_id, cublasGetStatusString(status));
        exit(EXIT_CUDA);
    }
    cublasCheck(cublasLtMatmulPreferenceDestroy(preference));
    plan->a = a;
    plan->b = b;
    plan->c = c;
    plan->alpha = alpha;
    plan->beta = beta;
    plan->workspace = workspace;
    plan->workspace_bytes = workspace_bytes;
    pick_fastest_algo(lt, plan, candidates, found, stream);
}

// cudaMalloc, then zero: the GEMM plans time their candidate algorithms in setup, on the buffers they
// are bound to, before any upload or step has written them. Zeros make those reads defined
// (compute-sanitizer's initcheck reports every read of unwritten memory).
static void *device_zeros(size_t bytes) {
    void *buffer;
    cudaCheck(cudaMalloc(&buffer, bytes));
    cudaCheck(cudaMemset(buffer, 0, bytes));
    return buffer;
}

static void destroy_matmul(MatmulPlan *plan) {
    cublasCheck(cublasLtMatmulDescDestroy(plan->desc));
    cublasCheck(cublasLtMatrixLayoutDestroy(plan->a_layout));
    cublasCheck(cublasLtMatrixLayoutDestroy(plan->b_layout));
    cublasCheck(cublasLtMatrixLayoutDestroy(plan->c_layout));
}

// ----------------------------------------------------------------------------
// bf16 operands (--precision bf16): the GEMMs read bf16 copies of their inputs, made just before, and
// accumulate and write fp32; the master parameters, the SGD update, the loss and the bias gradients
// stay fp32.

// for i < n: out[i] = in[i] rounded to the nearest bf16 (ties to even)
__global__ void cast_bf16_kernel(__nv_bfloat16 *out, const float *in, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = __float2bfloat16_rn(in[i]);
}

// ----------------------------------------------------------------------------
// loss: the softmax comes from cuDNN (cudnnSoftmaxForward, launched in train_step); cross-entropy,
// accuracy and the gradient of the loss stay one kernel, one warp per row, since cuDNN has neither a
// cross-entropy nor an accuracy. dlogits = (p - onehot) / rows is one subtraction from cuDNN's p, where
// cudnnSoftmaxBackward would need dloss/dp = -onehot / (rows * p) as its input: a division by
// probabilities that can underflow to 0, and one more launch.
//
// A row is 10 logits. One thread per row would walk its row three times in series, and a batch of 128
// rows would be 128 threads of one block: one SM running a chain of dependent loads. Instead lane j of
// the row's warp holds logits j, j + 32, ..., the max, argmax and sum of exp take 5 shuffle steps each,
// and a batch of 128 rows is 16 blocks of 8 warps. The losses and hits of a block's rows meet in shared
// memory: one atomic per block, not per row.

// The sum over the warp's 32 lanes, in every lane. Each step adds the value of the lane `offset` away
// (xor: a butterfly), so every lane ends with the same total.
__device__ __forceinline__ float warp_sum(float value) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffff, value, offset);
    return value;
}

// The largest value over the warp and the lowest index that holds it, in every lane.
__device__ __forceinline__ void warp_argmax(float *value, int *index) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        float other = __shfl_xor_sync(0xffffffff, *value, offset);
        int other_index = __shfl_xor_sync(0xffffffff, *index, offset);
        if (other > *value || (other == *value && other_index < *index)) {
            *value = other;
            *index = other_index;
        }
    }
}

// for each row i, with slot = *step (or 0 without a step counter):
//     loss_sums[slot] += log(sum_j exp(logits[i][j])) - logits[i][label[i]]
//     correct  += (argmax_j logits[i][j] == label[i]), ties going to the lowest index      (if correct)
//     dlogits[i][j] = (probs[i][j] - (j == label[i])) / rows                               (if dlogits)
// Training asks for dlogits (and passes cuDNN's probs and the step counter), evaluation for the count.
// Launch BLOCK_SIZE threads a block, one warp per row.
__global__ void softmax_cross_entropy_kernel(float *dlogits, float *loss_sums, const int *step, int *correct,
                                             const float *logits, const float *probs, const uint8_t *labels, int rows,
                                             int classes) {
    __shared__ float block_loss[WARPS_PER_BLOCK];  // [w]: the loss of warp w's row (0 past the last row)
    __shared__ int block_hits[WARPS_PER_BLOCK];    // [w]: 1 if warp w's row was predicted right
    int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    int i = blockIdx.x * WARPS_PER_BLOCK + warp;
    float loss = 0.0f;
    int hit = 0;
    if (i < rows) {  // the same for the whole warp, so every shuffle sees all 32 lanes
        const float *row = logits + (size_t)i * classes;
        int label = labels[i];
        float max = -INFINITY;
        int argmax = classes;  // a lane with no logit loses every comparison
        for (int j = lane; j < classes; j += WARP_SIZE) {
            if (row[j] > max) {
                max = row[j];
                argmax = j;
            }
        }
        warp_argmax(&max, &argmax);
        float sum = 0.0f;
        for (int j = lane; j < classes; j += WARP_SIZE) sum += expf(row[j] - max);
        sum = warp_sum(sum);
        // from the logits, not from p: log of a probability that underflowed to 0 would be -inf
        loss = logf(sum) - (row[label] - max);
        hit = argmax == label;
        if (dlogits) {
            const float *prob_row = probs + (size_t)i * classes;
            float *dlogits_row = dlogits + (size_t)i * classes;
            for (int j = lane; j < classes; j += WARP_SIZE) {
                float onehot = j == label ? 1.0f : 0.0f;
                dlogits_row[j] = (prob_row[j] - onehot) / (float)rows;
            }
        }
    }
    if (lane == 0) {
        block_loss[warp] = loss;
        block_hits[warp] = hit;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    float *loss_sum = loss_sums + (step ? *step : 0);
    float block_sum = 0.0f;
    int block_correct = 0;
    for (int w = 0; w < WARPS_PER_BLOCK; w++) {
        block_sum += block_loss[w];
        block_correct += block_hits[w];
    }
    atomicAdd(loss_sum, block_sum);
    if (correct) atomicAdd(correct, block_correct);
}

// ----------------------------------------------------------------------------
// backward and update: din (through the ReLU: the DRELU epilogue) and W -= lr * dW are the cuBLASLt
// GEMMs above; the bias gradient and its update stay one kernel.
//
// The BGRADA / BGRADB epilogues (here BGRADA: dout is cuBLAS's A in the weight GEMM) would sum the bias
// gradient inside that GEMM, but into a buffer, which then needs an update launch of its own: the same
// single launch this kernel is, summing and updating at once. So they do not fit a fused update.

// for j < dim: bias[j] -= lr * sum_i dout[i][j]; then, if step is not NULL, *step += 1
// The thread that completes a column's sum holds the whole gradient and can apply it: with stage 02's
// atomicAdd per element no thread knows when the sum is done (and the sum needed a zeroed buffer and a
// second kernel). A block of 32 x 8 threads owns 32 columns: thread (x, y) sums rows y, y + 8, ... of
// column x (a warp reads 32 neighbouring floats of a row), and thread (x, 0) adds the 8 partial sums
// from shared memory in a fixed order, so every run sums alike. (One thread per column would add a batch
// of 128 rows in series, all in one block.)
// Layer 0's bias update is the last kernel of a training step, so it also advances the step counter: the
// next replay trains on the next batch, without a one-thread kernel (a graph node) of its own for that.
// Every kernel of the step that reads the counter runs before it, the next step's after it: stream order.
__global__ void bias_backward_sgd_kernel(float *bias, const float *dout, float lr, int rows, int dim, int *step) {
    if (step && blockIdx.x == 0 && threadIdx.x == 0 && threadIdx.y == 0) *step += 1;
    __shared__ float partial[WARPS_PER_BLOCK][WARP_SIZE];  // [y][x]: thread (x, y)'s share of its column
    int j = blockIdx.x * WARP_SIZE + threadIdx.x;
    float sum = 0.0f;
    if (j < dim) {
        for (int i = threadIdx.y; i < rows; i += WARPS_PER_BLOCK) sum += dout[(size_t)i * dim + j];
    }
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y != 0 || j >= dim) return;
    for (int y = 1; y < WARPS_PER_BLOCK; y++) sum += partial[y][threadIdx.x];
    bias[j] -= lr * sum;
}

// ----------------------------------------------------------------------------
// launchers

static unsigned int blocks_for(int64_t n) { return (unsigned int)((n + BLOCK_SIZE - 1) / BLOCK_SIZE); }

// bias_backward_sgd_kernel: a block of WARP_SIZE x WARPS_PER_BLOCK threads per WARP_SIZE columns
static unsigned int column_blocks(int dim) { return (unsigned int)((dim + WARP_SIZE - 1) / WARP_SIZE); }

// With --precision bf16, the bf16 copy of in that a GEMM will read; otherwise the GEMMs read in itself.
static void cast_for_gemm(const MnistConfig *cfg, __nv_bfloat16 *out, const float *in, int64_t n, cudaStream_t stream) {
    if (cfg->precision != PRECISION_BF16) return;
    cast_bf16_kernel<<<blocks_for(n), BLOCK_SIZE, 0, stream>>>(out, in, n);
    launchCheck();
}

// act[l]: (rows, sizes[l]); act[0] is the input, act[n_layers] receives the logits. plans[l] is layer l's
// forward GEMM (bias, and ReLU on hidden layers, in its epilogue), bound to params and act or, with bf16,
// to their copies params16 and act16 (NULL otherwise).
static void mlp_forward(const MnistConfig *cfg, cublasLtHandle_t lt, const MatmulPlan *plans, const float *params,
                        __nv_bfloat16 *params16, float *const *act, __nv_bfloat16 *const *act16, int rows,
                        cudaStream_t stream) {
    cast_for_gemm(cfg, params16, params, mnist_param_count(cfg), stream);
    for (int l = 0; l < cfg->n_layers; l++) {
        cast_for_gemm(cfg, act16[l], act[l], (int64_t)rows * cfg->sizes[l], stream);
        run_matmul(lt, &plans[l], stream);
    }
}

// dact[l]: (rows, sizes[l]) for l >= 1, dact[n_layers] holds dlogits. Updates params in place.
// input_plans[l], l >= 1: dact[l] = (dact[l+1] @ W_l^T) * ReLU' (DRELU, from the forward pass's bit mask);
// weight_plans[l]: W_l -= lr * act[l]^T @ dact[l+1]. With bf16 both read dact16[l+1], made here.
// Every gradient must come from the pre-update params, as in the reference. Layer l's din needs W_l,
// so it runs before W_l's update; layer l's updates touch only W_l and b_l, and every later launch of the
// step works on the layers below l, which read their own W, never W_l. Launches on one stream run in
// order, so this launch order is the whole guarantee. The last launch, layer 0's bias update, also
// advances the device step counter (unless step is NULL).
static void mlp_backward_sgd(const MnistConfig *cfg, cublasLtHandle_t lt, const MatmulPlan *input_plans,
                             const MatmulPlan *weight_plans, float *params, float *const *dact,
                             __nv_bfloat16 *const *dact16, int *step, int rows, cudaStream_t stream) {
    for (int l = cfg->n_layers - 1; l >= 0; l--) {
        int out_dim = cfg->sizes[l + 1];
        cast_for_gemm(cfg, dact16[l + 1], dact[l + 1], (int64_t)rows * out_dim, stream);
        if (l > 0) run_matmul(lt, &input_plans[l], stream);  // the images need no gradient
        run_matmul(lt, &weight_plans[l], stream);
        bias_backward_sgd_kernel<<<column_blocks(out_dim), dim3(WARP_SIZE, WARPS_PER_BLOCK), 0, stream>>>(
            params + mnist_bias_offset(cfg, l), dact[l + 1], cfg->lr, rows, out_dim, l == 0 ? step : NULL);
        launchCheck();
    }
}

// Everything a training step launches on. Fixed for the whole run, so that the step's launches can be
// captured once: a graph replays its kernels with the very arguments they were captured with.
typedef struct {
    const MnistConfig *cfg;
    cublasLtHandle_t lt;
    cudnnHandle_t cudnn;
    cudnnTensorDescriptor_t logits_desc;
    const MatmulPlan *forward_plans, *input_plans, *weight_plans;
    float *params;
    __nv_bfloat16 *params16;
    float *const *act;
    __nv_bfloat16 *const *act16;
    float *const *dact;
    __nv_bfloat16 *const *dact16;
    float *probs;
    uint8_t *labels;
    const float *train_images;
    const uint8_t *train_labels;
    const int32_t *order;
    float *step_loss_sum;  // (epochs, steps)
    int *step;             // (1,) the device step counter
    int n_train, steps;
} TrainStep;

// One training step on stream: gather, forward, loss, backward and update, whose last kernel advances the
// step counter. No launch takes the step's position from the host, so the same launches are every step.
// Called in the capture, or directly with --breakdown, whose phase timers synchronize (not allowed while
// capturing).
static void train_step(const TrainStep *t, TrainClock *clock, cudaStream_t stream) {
    const MnistConfig *cfg = t->cfg;
    int n_layers = cfg->n_layers, batch = cfg->batch, pixels = cfg->sizes[0], classes = cfg->sizes[n_layers];
    const float one = 1.0f, zero = 0.0f;  // cuDNN's alpha and beta, read when the launch is made

    // gather the batch's rows on the device (reported as h2d: it replaces the per-batch copy)
    train_clock_phase_begin(clock, stream);
    gather_batch_kernel<<<blocks_for((int64_t)batch * pixels), BLOCK_SIZE, 0, stream>>>(
        t->act[0], t->labels, t->train_images, t->train_labels, t->order, t->step, t->n_train, t->steps, batch, pixels);
    launchCheck();
    train_clock_phase_end(clock, PHASE_H2D, stream);

    train_clock_phase_begin(clock, stream);
    mlp_forward(cfg, t->lt, t->forward_plans, t->params, t->params16, t->act, t->act16, batch, stream);
    train_clock_phase_end(clock, PHASE_FORWARD, stream);

    train_clock_phase_begin(clock, stream);
    cudnnCheck(cudnnSoftmaxForward(t->cudnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &one, t->logits_desc,
                                   t->act[n_layers], &zero, t->logits_desc, t->probs));
    softmax_cross_entropy_kernel<<<blocks_for((int64_t)batch * WARP_SIZE), BLOCK_SIZE, 0, stream>>>(
        t->dact[n_layers], t->step_loss_sum, t->step, NULL, t->act[n_layers], t->probs, t->labels, batch, classes);
    launchCheck();
    train_clock_phase_end(clock, PHASE_LOSS, stream);

    // the update is fused into the backward pass: its time is reported as backward
    train_clock_phase_begin(clock, stream);
    mlp_backward_sgd(cfg, t->lt, t->input_plans, t->weight_plans, t->params, t->dact, t->dact16, t->step, batch,
                     stream);
    train_clock_phase_end(clock, PHASE_BACKWARD, stream);
}

static double host_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static void *host_malloc(size_t bytes) {
    void *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "error: out of host memory for the MNIST results (%zu bytes): try fewer --epochs\n", bytes);
        exit(EXIT_USAGE);
    }
    return p;
}

// Uploads from pageable memory through two pinned buffers. The copy engine reads only pinned (page-
// locked) memory: from pageable memory the driver stages through a buffer of its own and the call
// returns when the copy is done. Here the host fills one buffer while the copy engine drains the other,
// and the copies are asynchronous, on their own stream.
typedef struct {
    char *buffer[2];         // (UPLOAD_CHUNK,) each, pinned
    cudaEvent_t drained[2];  // the last copy out of buffer[b] has finished
    int next;                // the buffer to fill next
} Staging;

// dst (device) <- src (host, pageable), chunk by chunk, asynchronously on copy_stream. The host waits
// only for a buffer's previous copy before refilling it.
static void upload_chunked(void *dst, const void *src, size_t bytes, Staging *staging, cudaStream_t copy_stream) {
    for (size_t offset = 0; offset < bytes; offset += UPLOAD_CHUNK) {
        size_t chunk = bytes - offset < UPLOAD_CHUNK ? bytes - offset : UPLOAD_CHUNK;
        int b = staging->next;
        staging->next = 1 - b;
        cudaCheck(cudaEventSynchronize(staging->drained[b]));
        memcpy(staging->buffer[b], (const char *)src + offset, chunk);
        cudaCheck(cudaMemcpyAsync((char *)dst + offset, staging->buffer[b], chunk, cudaMemcpyHostToDevice, copy_stream));
        cudaCheck(cudaEventRecord(staging->drained[b], copy_stream));
    }
}

// ----------------------------------------------------------------------------
// training

int train_mnist(const MnistConfig *cfg, const MnistData *data, MnistResult *out) {
    int n_layers = cfg->n_layers, batch = cfg->batch, classes = cfg->sizes[n_layers];
    int pixels = cfg->sizes[0], n_train = data->n_train, n_test = data->n_test;
    int steps = mnist_steps_per_epoch(cfg, n_train);
    int64_t n_params = mnist_param_count(cfg), n_steps = (int64_t)cfg->epochs * steps;

    // every row a batch will gather must exist: checked once here, so that the gather kernel can trust it
    for (int epoch = 0; epoch < cfg->epochs; epoch++) {
        for (int s = 0; s < steps * batch; s++) {
            int32_t row = data->batch_order[(int64_t)epoch * n_train + s];
            if (row < 0 || row >= n_train) {
                fprintf(stderr, "error: batch order entry %d of epoch %d is %d, outside 0..%d\n", s, epoch, row,
                        n_train - 1);
                exit(EXIT_DATA);
            }
        }
    }

    // setup (not timed): device buffers, streams, events, the pinned staging buffers, the cuBLASLt and
    // cuDNN handles, descriptors, workspaces and GEMM plans
    double setup_start_ms = host_ms();
    int bf16 = cfg->precision == PRECISION_BF16;
    float *d_params;                          // (n_params,) packed as trainer.h
    float *d_snapshot;                        // (n_params,) the parameters an evaluation reads while training goes on
    float *d_train_images;                    // (n_train, pixels) the whole training set, uploaded once
    uint8_t *d_train_labels;                  // (n_train,)
    int32_t *d_order;                         // (epochs, n_train) data->batch_order
    float *d_act[MNIST_MAX_LAYERS + 1];       // [l]: (batch, sizes[l]); [0] the gathered batch, [n_layers] the logits
    float *d_dact[MNIST_MAX_LAYERS + 1];      // [l], l >= 1: (batch, sizes[l]) dloss/dact[l]; [n_layers] dlogits
    float *d_probs;                           // (batch, classes) cuDNN's softmax of the logits
    uint8_t *d_relu_mask[MNIST_MAX_LAYERS];   // [l], 1 <= l < n_layers: (batch, relu_mask_ld(sizes[l]) / 8) bytes,
                                              // bit i of column b: act[l][b][i] > 0 (RELU_AUX_BIAS -> DRELU)
    uint8_t *d_labels;                        // (batch,) the gathered labels
    float *d_test_act[MNIST_MAX_LAYERS + 1];  // [l]: (n_test, sizes[l]); [0] the test images
    uint8_t *d_test_labels;                   // (n_test,)
    float *d_step_loss_sum;                   // (epochs, steps) summed cross-entropy of every batch
    float *d_test_loss_sum;                   // (epochs,) summed test cross-entropy after each epoch
    int *d_test_correct;                      // (epochs,) correct test predictions after each epoch
    int *d_step;                              // (1,) the next training step, epoch * steps + step: see train_step
    // bf16 copies of the GEMM inputs, only with --precision bf16 (NULL otherwise)
    __nv_bfloat16 *d_params16 = NULL, *d_snapshot16 = NULL;  // (n_params,) each
    __nv_bfloat16 *d_act16[MNIST_MAX_LAYERS + 1] = {NULL};       // [l], l < n_layers: (batch, sizes[l])
    __nv_bfloat16 *d_dact16[MNIST_MAX_LAYERS + 1] = {NULL};      // [l], l >= 1: (batch, sizes[l])
    __nv_bfloat16 *d_test_act16[MNIST_MAX_LAYERS + 1] = {NULL};  // [l], l < n_layers: (n_test, sizes[l])
    void *d_workspace, *d_eval_workspace;  // (WORKSPACE_BYTES,) each: cuBLASLt scratch, one per stream
    d_params = (float *)device_zeros(n_params * sizeof(float));
    d_snapshot = (float *)device_zeros(n_params * sizeof(float));
    cudaCheck(cudaMalloc(&d_train_images, (size_t)n_train * pixels * sizeof(float)));
    cudaCheck(cudaMalloc(&d_train_labels, n_train));
    cudaCheck(cudaMalloc(&d_order, (size_t)cfg->epochs * n_train * sizeof(int32_t)));
    d_dact[0] = NULL;
    for (int l = 0; l <= n_layers; l++) {
        d_act[l] = (float *)device_zeros((size_t)batch * cfg->sizes[l] * sizeof(float));
        if (l > 0) d_dact[l] = (float *)device_zeros((size_t)batch * cfg->sizes[l] * sizeof(float));
        d_test_act[l] = (float *)device_zeros((size_t)n_test * cfg->sizes[l] * sizeof(float));
        if (l > 0 && l < n_layers) d_relu_mask[l] = (uint8_t *)device_zeros(relu_mask_ld(cfg->sizes[l]) / 8 * batch);
        if (!bf16) continue;
        if (l < n_layers)
            d_act16[l] = (__nv_bfloat16 *)device_zeros((size_t)batch * cfg->sizes[l] * sizeof(__nv_bfloat16));
        if (l > 0) d_dact16[l] = (__nv_bfloat16 *)device_zeros((size_t)batch * cfg->sizes[l] * sizeof(__nv_bfloat16));
        if (l < n_layers)
            d_test_act16[l] = (__nv_bfloat16 *)device_zeros((size_t)n_test * cfg->sizes[l] * sizeof(__nv_bfloat16));
    }
    if (bf16) {
        d_params16 = (__nv_bfloat16 *)device_zeros(n_params * sizeof(__nv_bfloat16));
        d_snapshot16 = (__nv_bfloat16 *)device_zeros(n_params * sizeof(__nv_bfloat16));
    }
    cudaCheck(cudaMalloc(&d_probs, (size_t)batch * classes * sizeof(float)));
    cudaCheck(cudaMalloc(&d_workspace, WORKSPACE_BYTES));
    cudaCheck(cudaMalloc(&d_eval_workspace, WORKSPACE_BYTES));
    cudaCheck(cudaMalloc(&d_labels, batch));
    cudaCheck(cudaMalloc(&d_test_labels, n_test));
    cudaCheck(cudaMalloc(&d_step_loss_sum, n_steps * sizeof(float)));
    cudaCheck(cudaMalloc(&d_test_loss_sum, cfg->epochs * sizeof(float)));
    cudaCheck(cudaMalloc(&d_test_correct, cfg->epochs * sizeof(int)));
    cudaCheck(cudaMalloc(&d_step, sizeof(int)));
    int *test_correct = (int *)host_malloc(cfg->epochs * sizeof(int));  // (epochs,)
    // Non-blocking streams: the legacy default stream would serialize with all three.
    cudaStream_t stream, copy_stream, eval_stream;  // training; uploads; evaluation
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&eval_stream, cudaStreamNonBlocking));
    cudaEvent_t upload_done, snapshot_ready, eval_done;  // ordering only: no timing
    cudaCheck(cudaEventCreateWithFlags(&upload_done, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&snapshot_ready, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&eval_done, cudaEventDisableTiming));
    Staging staging = {{NULL, NULL}, {NULL, NULL}, 0};
    for (int b = 0; b < 2; b++) {
        cudaCheck(cudaMallocHost(&staging.buffer[b], UPLOAD_CHUNK));
        cudaCheck(cudaEventCreateWithFlags(&staging.drained[b], cudaEventDisableTiming));
    }
    cudnnHandle_t cudnn;                  // the softmax, on the training stream
    cudnnTensorDescriptor_t logits_desc;  // (batch, classes, 1, 1): softmax over each row (INSTANCE mode)
    cudnnCheck(cudnnCreate(&cudnn));
    cudnnCheck(cudnnSetStream(cudnn, stream));
    cudnnCheck(cudnnCreateTensorDescriptor(&logits_desc));
    cudnnCheck(cudnnSetTensor4dDescriptor(logits_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch, classes, 1, 1));
    cublasLtHandle_t lt;  // stream-free: each matmul names its stream
    cublasCheck(cublasLtCreate(&lt));
    // One plan per GEMM of a step and of an evaluation, bound to its buffers (arguments in the order of
    // plan_matmul: ops, m, n, k, A, lda, B, ldb, C, ldc, alpha, beta, epilogue, bias, mask, mask ld,
    // workspace, and the stream its candidate algorithms are timed on).
    MatmulPlan forward_plans[MNIST_MAX_LAYERS];  // [l]: act[l+1] = act[l] @ W_l + b_l (+ ReLU, mask out)
    MatmulPlan eval_plans[MNIST_MAX_LAYERS];     // [l]: the same on the test set, from the snapshot, no mask
    MatmulPlan input_plans[MNIST_MAX_LAYERS];    // [l], l >= 1: dact[l] = (dact[l+1] @ W_l^T) * ReLU' (mask in)
    MatmulPlan weight_plans[MNIST_MAX_LAYERS];   // [l]: W_l -= lr * act[l]^T @ dact[l+1]
    for (int l = 0; l < n_layers; l++) {
        int in_dim = cfg->sizes[l], out_dim = cfg->sizes[l + 1], hidden = l < n_layers - 1;
        int64_t w = mnist_weight_offset(cfg, l), b = mnist_bias_offset(cfg, l);
        const void *weight = bf16 ? (const void *)(d_params16 + w) : (const void *)(d_params + w);
        const void *snapshot_weight = bf16 ? (const void *)(d_snapshot16 + w) : (const void *)(d_snapshot + w);
        const void *in = bf16 ? (const void *)d_act16[l] : (const void *)d_act[l];
        const void *test_in = bf16 ? (const void *)d_test_act16[l] : (const void *)d_test_act[l];
        const void *dout = bf16 ? (const void *)d_dact16[l + 1] : (const void *)d_dact[l + 1];
        plan_matmul(&forward_plans[l], lt, cfg->precision, "forward", CUBLAS_OP_N, CUBLAS_OP_N, out_dim, batch, in_dim,
                    weight, out_dim, in, in_dim, d_act[l + 1], out_dim, 1.0f, 0.0f,
                    hidden ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_BIAS, d_params + b,
                    hidden ? d_relu_mask[l + 1] : NULL, relu_mask_ld(out_dim), d_workspace, WORKSPACE_BYTES, stream);
        plan_matmul(&eval_plans[l], lt, cfg->precision, "evaluation forward", CUBLAS_OP_N, CUBLAS_OP_N, out_dim,
                    n_test, in_dim, snapshot_weight, out_dim, test_in, in_dim, d_test_act[l + 1], out_dim, 1.0f, 0.0f,
                    hidden ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS, d_snapshot + b, NULL, 0,
                    d_eval_workspace, WORKSPACE_BYTES, stream);
        if (l > 0)
            plan_matmul(&input_plans[l], lt, cfg->precision, "input gradient", CUBLAS_OP_T, CUBLAS_OP_N, in_dim, batch,
                        out_dim, weight, out_dim, dout, out_dim, d_dact[l], in_dim, 1.0f, 0.0f, CUBLASLT_EPILOGUE_DRELU,
                        NULL, d_relu_mask[l], relu_mask_ld(in_dim), d_workspace, WORKSPACE_BYTES, stream);
        plan_matmul(&weight_plans[l], lt, cfg->precision, "weight update", CUBLAS_OP_N, CUBLAS_OP_T, out_dim, in_dim,
                    batch, dout, out_dim, in, in_dim, d_params + w, out_dim, -cfg->lr, 1.0f, CUBLASLT_EPILOGUE_DEFAULT,
                    NULL, NULL, 0, d_workspace, WORKSPACE_BYTES, stream);
    }
    TrainClock clock;
    train_clock_init(&clock, cfg->epochs, cfg->breakdown);
    TrainStep step_args = {.cfg = cfg,
                           .lt = lt,
                           .cudnn = cudnn,
                           .logits_desc = logits_desc,
                           .forward_plans = forward_plans,
                           .input_plans = input_plans,
                           .weight_plans = weight_plans,
                           .params = d_params,
                           .params16 = d_params16,
                           .act = d_act,
                           .act16 = d_act16,
                           .dact = d_dact,
                           .dact16 = d_dact16,
                           .probs = d_probs,
                           .labels = d_labels,
                           .train_images = d_train_images,
                           .train_labels = d_train_labels,
                           .order = d_order,
                           .step_loss_sum = d_step_loss_sum,
                           .step = d_step,
                           .n_train = n_train,
                           .steps = steps};
    // The graph: a whole epoch of steps, or one step, captured (recorded, not run) and instantiated here,
    // untimed, and uploaded so that its first launch costs no more than the others.
    int use_graph = !cfg->breakdown, epoch_graph = cfg->variant == VARIANT_EPOCH_GRAPH;
    cudaGraphExec_t graph_exec = NULL;
    if (use_graph) {
        // A library may set itself up on its first call (cuDNN loads its ops library, cuBLASLt its kernels),
        // which a capture would refuse: the step's library calls run once first, eagerly. They compute on
        // buffers that the upload (the parameters) or every step (the rest) overwrites before use.
        const float one = 1.0f, zero = 0.0f;
        mlp_forward(cfg, lt, forward_plans, d_params, d_params16, d_act, d_act16, batch, stream);
        cudnnCheck(cudnnSoftmaxForward(cudnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &one, logits_desc,
                                       d_act[n_layers], &zero, logits_desc, d_probs));
        mlp_backward_sgd(cfg, lt, input_plans, weight_plans, d_params, d_dact, d_dact16, NULL, batch, stream);
        cudaCheck(cudaStreamSynchronize(stream));

        cudaGraph_t graph;
        cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        for (int s = 0; s < (epoch_graph ? steps : 1); s++) train_step(&step_args, &clock, stream);
        cudaCheck(cudaStreamEndCapture(stream, &graph));
        cudaCheck(cudaGraphInstantiate(&graph_exec, graph, 0));
        cudaCheck(cudaGraphDestroy(graph));
        cudaCheck(cudaGraphUpload(graph_exec, stream));
        cudaCheck(cudaStreamSynchronize(stream));
    }
    out->timing.setup_ms = host_ms() - setup_start_ms;

    // e2e starts with the data in host memory: everything goes up once, on the copy stream, and the
    // training stream waits for it by event
    train_clock_e2e_start(&clock, stream);
    train_clock_phase_begin(&clock, stream);
    cudaCheck(cudaStreamWaitEvent(copy_stream, clock.e2e_start, 0));  // the upload is inside e2e
    upload_chunked(d_params, data->init_params, n_params * sizeof(float), &staging, copy_stream);
    upload_chunked(d_train_images, data->train_images, (size_t)n_train * pixels * sizeof(float), &staging, copy_stream);
    upload_chunked(d_train_labels, data->train_labels, n_train, &staging, copy_stream);
    upload_chunked(d_order, data->batch_order, (size_t)cfg->epochs * n_train * sizeof(int32_t), &staging, copy_stream);
    upload_chunked(d_test_act[0], data->test_images, (size_t)n_test * pixels * sizeof(float), &staging, copy_stream);
    upload_chunked(d_test_labels, data->test_labels, n_test, &staging, copy_stream);
    cudaCheck(cudaEventRecord(upload_done, copy_stream));
    cudaCheck(cudaMemsetAsync(d_step_loss_sum, 0, n_steps * sizeof(float), stream));  // the losses are summed
    cudaCheck(cudaMemsetAsync(d_test_loss_sum, 0, cfg->epochs * sizeof(float), stream));
    cudaCheck(cudaMemsetAsync(d_test_correct, 0, cfg->epochs * sizeof(int), stream));
    cudaCheck(cudaMemsetAsync(d_step, 0, sizeof(int), stream));
    cudaCheck(cudaStreamWaitEvent(stream, upload_done, 0));
    train_clock_phase_end(&clock, PHASE_H2D, stream);
    train_clock_loop_start(&clock, stream);

    // Only enqueueing from here to the end of the loop: the host runs ahead of the GPU, never waits for it.
    for (int epoch = 0; epoch < cfg->epochs; epoch++) {
        if (!use_graph) {
            for (int step = 0; step < steps; step++) train_step(&step_args, &clock, stream);
        } else {
            // one launch for the epoch, or one per step; either way the steps read their batch from d_step
            for (int replay = 0; replay < (epoch_graph ? 1 : steps); replay++)
                cudaCheck(cudaGraphLaunch(graph_exec, stream));
        }

        // test loss and accuracy of this epoch's parameters, on the eval stream while the next epoch
        // trains. The evaluation reads a snapshot, since training updates d_params in place; the snapshot
        // is taken once the previous evaluation is done reading it (eval_done: a no-op the first time).
        cudaCheck(cudaStreamWaitEvent(stream, eval_done, 0));
        cudaCheck(cudaMemcpyAsync(d_snapshot, d_params, n_params * sizeof(float), cudaMemcpyDeviceToDevice, stream));
        cudaCheck(cudaEventRecord(snapshot_ready, stream));
        cudaCheck(cudaStreamWaitEvent(eval_stream, snapshot_ready, 0));
        train_clock_phase_begin(&clock, eval_stream);
        mlp_forward(cfg, lt, eval_plans, d_snapshot, d_snapshot16, d_test_act, d_test_act16, n_test, eval_stream);
        softmax_cross_entropy_kernel<<<blocks_for((int64_t)n_test * WARP_SIZE), BLOCK_SIZE, 0, eval_stream>>>(
            NULL, d_test_loss_sum + epoch, NULL, d_test_correct + epoch, d_test_act[n_layers], NULL, d_test_labels,
            n_test, classes);
        launchCheck();
        train_clock_phase_end(&clock, PHASE_EVAL, eval_stream);
        cudaCheck(cudaEventRecord(eval_done, eval_stream));

        // the loop (and its last epoch) ends when the last evaluation has, so loop_ms covers all the work
        if (epoch == cfg->epochs - 1) cudaCheck(cudaStreamWaitEvent(stream, eval_done, 0));
        train_clock_epoch_end(&clock, epoch, stream);
    }

    // one copy back of everything the loop produced (D2H into pageable memory: each returns when done)
    train_clock_phase_begin(&clock, stream);
    cudaCheck(cudaMemcpyAsync(out->params, d_params, n_params * sizeof(float), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaMemcpyAsync(out->step_loss, d_step_loss_sum, n_steps * sizeof(float), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaMemcpyAsync(out->test_loss, d_test_loss_sum, cfg->epochs * sizeof(float), cudaMemcpyDeviceToHost,
                              stream));
    cudaCheck(cudaMemcpyAsync(test_correct, d_test_correct, cfg->epochs * sizeof(int), cudaMemcpyDeviceToHost, stream));
    train_clock_phase_end(&clock, PHASE_D2H, stream);
    train_clock_e2e_stop(&clock, stream);
    train_clock_finish(&clock, &out->timing);

    // sums to means, as stage 04 did after every copy
    for (int64_t s = 0; s < n_steps; s++) out->step_loss[s] /= (float)batch;
    for (int epoch = 0; epoch < cfg->epochs; epoch++) {
        out->test_loss[epoch] /= (float)n_test;
        out->test_acc[epoch] = (float)test_correct[epoch] / (float)n_test;
    }

    cudaCheck(cudaFree(d_params));
    cudaCheck(cudaFree(d_snapshot));
    cudaCheck(cudaFree(d_train_images));
    cudaCheck(cudaFree(d_train_labels));
    cudaCheck(cudaFree(d_order));
    for (int l = 0; l <= n_layers; l++) {
        cudaCheck(cudaFree(d_act[l]));
        if (l > 0) cudaCheck(cudaFree(d_dact[l]));
        cudaCheck(cudaFree(d_test_act[l]));
        if (l > 0 && l < n_layers) cudaCheck(cudaFree(d_relu_mask[l]));
        cudaCheck(cudaFree(d_act16[l]));  // cudaFree(NULL) is a no-op
        cudaCheck(cudaFree(d_dact16[l]));
        cudaCheck(cudaFree(d_test_act16[l]));
    }
    cudaCheck(cudaFree(d_params16));
    cudaCheck(cudaFree(d_snapshot16));
    cudaCheck(cudaFree(d_probs));
    cudaCheck(cudaFree(d_workspace));
    cudaCheck(cudaFree(d_eval_workspace));
    for (int l = 0; l < n_layers; l++) {
        destroy_matmul(&forward_plans[l]);
        destroy_matmul(&eval_plans[l]);
        if (l > 0) destroy_matmul(&input_plans[l]);
        destroy_matmul(&weight_plans[l]);
    }
    cublasCheck(cublasLtDestroy(lt));
    cudnnCheck(cudnnDestroyTensorDescriptor(logits_desc));
    cudnnCheck(cudnnDestroy(cudnn));
    cudaCheck(cudaFree(d_labels));
    cudaCheck(cudaFree(d_test_labels));
    cudaCheck(cudaFree(d_step_loss_sum));
    cudaCheck(cudaFree(d_test_loss_sum));
    cudaCheck(cudaFree(d_test_correct));
    cudaCheck(cudaFree(d_step));
    if (graph_exec) cudaCheck(cudaGraphExecDestroy(graph_exec));
    free(test_correct);
    cudaCheck(cudaStreamDestroy(stream));
    cudaCheck(cudaStreamDestroy(copy_stream));
    cudaCheck(cudaStreamDestroy(eval_stream));
    cudaCheck(cudaEventDestroy(upload_done));
    cudaCheck(cudaEventDestroy(snapshot_ready));
    cudaCheck(cudaEventDestroy(eval_done));
    for (int b = 0; b < 2; b++) {
        cudaCheck(cudaFreeHost(staging.buffer[b]));
        cudaCheck(cudaEventDestroy(staging.drained[b]));
    }
    return 0;
}
