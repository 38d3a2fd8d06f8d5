/*
Kernel ladder, stage 06: the MNIST forward GEMM out = relu(in @ W + bias) from our own kernel to cuBLASLt,
one idea per version, at the trainer's first layer for --hidden 0, 128 and 1024 (in (128, 784), out with
10, 128 or 1024 columns). It answers what autotuning buys and what it costs: the stage-06 trainer plans
each GEMM with the heuristic's first answer (version 3).

    1 tiled           stage 04's kernel, bias and ReLU fused (04-shared-memory/gemm_ladder.cu, version 4)
    2 sgemm           cublasSgemm for the product, then a kernel that adds the bias and applies ReLU:
                      two launches, and out written, read and written again
    3 lt-epilogue     one cublasLtMatmul with the RELU_BIAS epilogue, the heuristic's first algorithm
    4 lt-autotuned    the same, after timing the heuristic's top 8 algorithms and keeping the fastest
    5 tf32            4 on tensor cores: inputs rounded to tf32 (10 mantissa bits), fp32 accumulation
    6 bf16            4 on bf16 copies of in and W, made in every call (as a training step must)

    make stage 6 ladder
    build/06/gemm_ladder --m 128 --k 784 --n 128 --version lt-autotuned --repeat 50 --csv ladders.csv

A timed run is 10 calls back to back (ms per call), median of --repeat runs after 3 warm-ups, min-max as
the spread; GFLOP/s = 2 m n k / time. The ceiling is cublasSgemm in fp32 on the same shapes in the same
run, the product alone (tf32 and bf16 may pass it: they use tensor cores). setup ms: host time to plan a
version before its first call (descriptors and the heuristic; for 4 to 6 also the timing of every
candidate), the price of autotuning. Every out is poisoned first and checked against the CPU in double
precision (common/ladder.h, ladder_gemm_tolerance: tf32 and bf16 add the rounding of their inputs).

Exit codes: 0 ok; 1 a wrong result; 2 an invalid flag or an unwritable --csv file; 3 out of host memory;
4 no GPU or any CUDA, cuBLAS or cuBLASLt error.
*/
#define GEMM_LADDER_KERNELS_ONLY  // version 1's kernel, sgemm_row_major and bias_relu, not the stage-04 program
#include "../04-shared-memory/gemm_ladder.cu"

#include <cuda_bf16.h>
#include <cublasLt.h>

#include "gates.h"

#define CALLS_PER_RUN 10
#define WORKSPACE_BYTES ((size_t)32 << 20)  // cuBLASLt's scratch (split-K and the like)
#define TUNE_CANDIDATES 8                   // heuristic answers timed by the autotuned versions
#define TUNE_RUNS 1                         // timed runs of CALLS_PER_RUN calls per candidate, after the warm-ups
#define TF32_ROUNDING 9.765625e-4           // 2^-10: tf32 keeps 10 mantissa bits (rounded or truncated)
#define BF16_ROUNDING 3.90625e-3            // 2^-8: bf16 keeps 7, rounded to nearest

// ----------------------------------------------------------------------------
// kernels

// Version 6: for i < count: out[i] = in[i] rounded to the nearest bf16 (ties to even), grid-stride.
__global__ void to_bf16_kernel(__nv_bfloat16 *out, const float *in, int64_t count) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16_rn(in[i]);
}

static unsigned int blocks_for(int64_t threads) { return (unsigned int)((threads + 255) / 256); }

// ----------------------------------------------------------------------------
// the versions

enum { KIND_TILED, KIND_SGEMM, KIND_LT };

typedef struct {
    const char *name;
    int kind;
    int autotune;                 // KIND_LT: time the heuristic's candidates and keep the fastest
    cublasComputeType_t compute;  // KIND_LT
    cudaDataType_t input_type;    // KIND_LT: CUDA_R_32F, or CUDA_R_16BF for bf16 copies of in and W
    double input_rounding;        // relative rounding of each input before the products (the check's bound)
} Version;

static const Version VERSIONS[] = {
    {"tiled", KIND_TILED, 0, CUBLAS_COMPUTE_32F, CUDA_R_32F, 0.0},
    {"sgemm", KIND_SGEMM, 0, CUBLAS_COMPUTE_32F, CUDA_R_32F, 0.0},
    {"lt-epilogue", KIND_LT, 0, CUBLAS_COMPUTE_32F, CUDA_R_32F, 0.0},
    {"lt-autotuned", KIND_LT, 1, CUBLAS_COMPUTE_32F, CUDA_R_32F, 0.0},
    {"tf32", KIND_LT, 1, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F, TF32_ROUNDING},
    {"bf16", KIND_LT, 1, CUBLAS_COMPUTE_32F, CUDA_R_16BF, BF16_ROUNDING},
};
#define VERSION_COUNT ((int)(sizeof(VERSIONS) / sizeof(VERSIONS[0])))

// Device buffers and handles of one shape.
typedef struct {
    float *in, *weight, *bias, *out;  // (m, k), (k, n), (n,), (m, n)
    __nv_bfloat16 *in16, *weight16;   // (m, k), (k, n): version 6's copies
    void *workspace;                  // (WORKSPACE_BYTES,)
    int m, k, n;
    cublasHandle_t cublas;
    cublasLtHandle_t lt;
} Problem;

// One cublasLtMatmul, planned before the first call. cuBLAS is column-major (sgemm_row_major, stage 04's
// ladder, says why), so it computes D = out^T (n, m) = W^T (n, k) @ in^T (k, m); the bias runs along D's
// n rows, which is what the BIAS epilogues broadcast.
typedef struct {
    cublasLtMatmulDesc_t desc;                              // compute type and the RELU_BIAS epilogue
    cublasLtMatrixLayout_t w_layout, in_layout, out_layout;  // (n, k) ld n, (k, m) ld k, (n, m) ld n
    cublasLtMatmulAlgo_t algo;
    int picked, found;  // the heuristic's answer that runs (0 = its first) and how many it gave
} LtPlan;

// What ladder_time_runs calls: a version (plan NULL unless it is a cuBLASLt one), cuBLAS alone for the
// ceiling (version NULL), or a candidate's matmul alone while autotuning (matmul_only).
typedef struct {
    const Problem *problem;
    const Version *version;
    const LtPlan *plan;
    int matmul_only;
} Timed;

static void lt_matmul(const Problem *p, const Version *v, const LtPlan *plan) {
    const float one = 1.0f, zero = 0.0f;
    int bf16 = v->input_type == CUDA_R_16BF;
    const void *w = bf16 ? (const void *)p->weight16 : (const void *)p->weight;
    const void *in = bf16 ? (const void *)p->in16 : (const void *)p->in;
    cublasCheck(cublasLtMatmul(p->lt, plan->desc, &one, w, plan->w_layout, in, plan->in_layout, &zero, p->out,
                               plan->out_layout, p->out, plan->out_layout, &plan->algo, p->workspace,
                               WORKSPACE_BYTES, 0));
}

static void cast_inputs(const Problem *p) {
    to_bf16_kernel<<<blocks_for((int64_t)p->m * p->k), 256>>>(p->in16, p->in, (int64_t)p->m * p->k);
    launchCheck();
    to_bf16_kernel<<<blocks_for((int64_t)p->k * p->n), 256>>>(p->weight16, p->weight, (int64_t)p->k * p->n);
    launchCheck();
}

// One call of a version.
static void call_version(const Problem *p, const Version *v, const LtPlan *plan) {
    if (v->kind == KIND_TILED) {
        launch_prefetch<16, 1>(p->out, p->in, p->weight, p->bias, p->m, p->k, p->n);
    } else if (v->kind == KIND_SGEMM) {
        sgemm_row_major(p->cublas, p->out, p->in, p->weight, p->m, p->k, p->n);
        launch_bias_relu(p->out, p->bias, p->m, p->n);
    } else {
        if (v->input_type == CUDA_R_16BF) cast_inputs(p);
        lt_matmul(p, v, plan);
    }
}

static void call_timed(void *ctx) {
    const Timed *t = (const Timed *)ctx;
    const Problem *p = t->problem;
    if (!t->version) sgemm_row_major(p->cublas, p->out, p->in, p->weight, p->m, p->k, p->n);
    else if (t->matmul_only) lt_matmul(p, t->version, t->plan);
    else call_version(p, t->version, t->plan);
}

static void plan_destroy(LtPlan *plan) {
    cublasCheck(cublasLtMatmulDescDestroy(plan->desc));
    cublasCheck(cublasLtMatrixLayoutDestroy(plan->w_layout));
    cublasCheck(cublasLtMatrixLayoutDestroy(plan->in_layout));
    cublasCheck(cublasLtMatrixLayoutDestroy(plan->out_layout));
}

// Autotuning: each candidate runs like a version (warm-ups, then TUNE_RUNS timed runs), the fastest
// stays. The heuristic ranks by a model of the GPU; at these small shapes its first answer is often a
// split-K algorithm whose second kernel (adding the parts) costs as much as its launch.
static void pick_fastest(LtPlan *plan, const Problem *p, const Version *v,
                         const cublasLtMatmulHeuristicResult_t *candidates) {
    double fastest_ms = INFINITY;
    int fastest = 0;
    for (int i = 0; i < plan->found; i++) {
        if (candidates[i].state != CUBLAS_STATUS_SUCCESS) continue;
        plan->algo = candidates[i].algo;
        Timed timed = {p, v, plan, 1};
        double ms = ladder_time_runs(NULL, call_timed, &timed, CALLS_PER_RUN, TUNE_RUNS).median_ms;
        if (ms < fastest_ms) {
            fastest_ms = ms;
            fastest = i;
        }
    }
    plan->algo = candidates[fastest].algo;
    plan->picked = fastest;
}

// Builds version v's plan for p (with autotuning when v asks for it); returns why there is none, or NULL.
static const char *plan_create(LtPlan *plan, const Problem *p, const Version *v) {
    static char why[160];
    // tensor-core math is asked for by name: a GPU without it skips the version (cuBLAS would run fp32)
    Feature feature = v->input_type == CUDA_R_16BF ? FEATURE_BF16 : FEATURE_TF32;
    if ((v->input_type == CUDA_R_16BF || v->compute == CUBLAS_COMPUTE_32F_FAST_TF32) &&
        !feature_available(feature, NULL, why, sizeof(why))) {
        char gate[80];
        snprintf(gate, sizeof(gate), "%.79s", why);
        snprintf(why, sizeof(why), "needs %.60s: %s", feature_description(feature), gate);
        return why;
    }
    uint32_t epilogue = CUBLASLT_EPILOGUE_RELU_BIAS;
    const float *bias = p->bias;
    cublasCheck(cublasLtMatmulDescCreate(&plan->desc, v->compute, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    cublasCheck(cublasLtMatrixLayoutCreate(&plan->w_layout, v->input_type, p->n, p->k, p->n));
    cublasCheck(cublasLtMatrixLayoutCreate(&plan->in_layout, v->input_type, p->k, p->m, p->k));
    cublasCheck(cublasLtMatrixLayoutCreate(&plan->out_layout, CUDA_R_32F, p->n, p->m, p->n));

    cublasLtMatmulPreference_t preference;
    size_t workspace_bytes = WORKSPACE_BYTES;
    cublasCheck(cublasLtMatmulPreferenceCreate(&preference));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &workspace_bytes, sizeof(workspace_bytes)));
    cublasLtMatmulHeuristicResult_t candidates[TUNE_CANDIDATES];
    int found = 0;
    cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(p->lt, plan->desc, plan->w_layout, plan->in_layout, plan->out_layout,
                                       plan->out_layout, preference, v->autotune ? TUNE_CANDIDATES : 1, candidates, &found);
    cublasCheck(cublasLtMatmulPreferenceDestroy(preference));
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
        plan_destroy(plan);
        snprintf(why, sizeof(why), "cuBLASLt has no algorithm for it on this GPU (%s)",
                 status != CUBLAS_STATUS_SUCCESS ? cublasGetStatusString(status) : "none found");
        return why;
    }
    plan->algo = candidates[0].algo;
    plan->picked = 0;
    plan->found = found;
    if (v->autotune) {
        if (v->input_type == CUDA_R_16BF) cast_inputs(p);  // the candidates read the copies
        pick_fastest(plan, p, v, candidates);
    }
    return NULL;
}

static Problem problem_upload(const float *in, const float *weight, const float *bias, int m, int k, int n) {
    Problem p;
    memset(&p, 0, sizeof(p));
    p.m = m;
    p.k = k;
    p.n = n;
    p.in = (float *)ladder_to_device(in, sizeof(float) * (size_t)m * k);
    p.weight = (float *)ladder_to_device(weight, sizeof(float) * (size_t)k * n);
    p.bias = (float *)ladder_to_device(bias, sizeof(float) * (size_t)n);
    cudaCheck(cudaMalloc(&p.out, sizeof(float) * (size_t)m * n));
    cudaCheck(cudaMalloc(&p.in16, sizeof(__nv_bfloat16) * (size_t)m * k));
    cudaCheck(cudaMalloc(&p.weight16, sizeof(__nv_bfloat16) * (size_t)k * n));
    cudaCheck(cudaMalloc(&p.workspace, WORKSPACE_BYTES));
    cublasCheck(cublasCreate(&p.cublas));
    cublasCheck(cublasLtCreate(&p.lt));
    return p;
}

static void problem_free(Problem *p) {
    cublasCheck(cublasDestroy(p->cublas));
    cublasCheck(cublasLtDestroy(p->lt));
    cudaCheck(cudaFree(p->in));
    cudaCheck(cudaFree(p->weight));
    cudaCheck(cudaFree(p->bias));
    cudaCheck(cudaFree(p->out));
    cudaCheck(cudaFree(p->in16));
    cudaCheck(cudaFree(p->weight16));
    cudaCheck(cudaFree(p->workspace));
}

// out poisoned with NaN (all bits set), one call, out back in host memory.
static void run_once(const Problem *p, const Version *v, const LtPlan *plan, float *out) {
    cudaCheck(cudaMemset(p->out, 0xff, sizeof(float) * (size_t)p->m * p->n));
    call_version(p, v, plan);
    cudaCheck(cudaMemcpy(out, p->out, sizeof(float) * (size_t)p->m * p->n, cudaMemcpyDeviceToHost));
}

// For tests/gpu/test_gemm_ladder.c (the same four as stage 04's ladder exports). index counts from 0.
extern "C" int gemm_ladder_version_count(void) { return VERSION_COUNT; }

extern "C" const char *gemm_ladder_version_name(int index) { return VERSIONS[index].name; }

extern "C" double gemm_ladder_input_rounding(int index) { return VERSIONS[index].input_rounding; }

// out (m, n) = relu(in (m, k) @ weight (k, n) + bias (n)) by version index, on host buffers; returns why
// the version cannot run on this GPU, or NULL.
extern "C" const char *gemm_ladder_run(int index, const float *in, const float *weight, const float *bias, float *out,
                                       int m, int k, int n) {
    const Version *v = &VERSIONS[index];
    Problem p = problem_upload(in, weight, bias, m, k, n);
    LtPlan plan;
    const char *skipped = v->kind == KIND_LT ? plan_create(&plan, &p, v) : NULL;
    if (!skipped) {
        run_once(&p, v, v->kind == KIND_LT ? &plan : NULL, out);
        if (v->kind == KIND_LT) plan_destroy(&plan);
    }
    problem_free(&p);
    return skipped;
}

#ifndef LADDER_NO_MAIN
// ----------------------------------------------------------------------------
// the program: flags, the ceiling, one table per shape, the check, the CSV rows

// The trainer's first layer at batch 128 for --hidden 0, 128 and 1024 (m, k, n).
static const int SHAPES[][3] = {{128, 784, 10}, {128, 784, 128}, {128, 784, 1024}};
#define SHAPE_COUNT ((int)(sizeof(SHAPES) / sizeof(SHAPES[0])))

// Every chosen version on one shape: a table, and its rows in the CSV. Exits 1 on a wrong result.
static void run_shape(int m, int k, int n, const LadderOptions *options, const DeviceInfo *device) {
    LadderGemm g;
    ladder_gemm_init(&g, m, k, n);
    Problem p = problem_upload(g.in, g.weight, g.bias, m, k, n);

    LadderTable table;
    memset(&table, 0, sizeof(table));
    table.stage = "06";
    table.ladder = "gemm";
    snprintf(table.shape, sizeof(table.shape), "%dx%dx%d", m, k, n);
    table.unit = "GFLOP/s";
    table.work = 2.0 * m * n * k;
    table.ceiling = "cublasSgemm";
    Timed ceiling = {&p, NULL, NULL, 0};
    table.ceiling_time = ladder_time_runs(NULL, call_timed, &ceiling, CALLS_PER_RUN, options->repeats);
    table.repeats = options->repeats;
    table.show_setup = 1;
    table.device = device;
    table.csv_path = options->csv_path;
    ladder_table_begin(&table);
    for (int v = options->first; v < options->last; v++) {
        const Version *version = &VERSIONS[v];
        LtPlan plan;
        const LtPlan *lt = version->kind == KIND_LT ? &plan : NULL;
        double setup_ms = NAN, start = host_ms();
        if (lt) {
            const char *skipped = plan_create(&plan, &p, version);
            if (skipped) {
                ladder_table_skip(&table, v + 1, version->name, skipped);
                continue;
            }
            setup_ms = host_ms() - start;
        }
        run_once(&p, version, lt, g.out);
        ladder_gemm_check(&g, v + 1, version->name, version->input_rounding);
        Timed timed = {&p, version, lt, 0};
        LadderStats time = ladder_time_runs(NULL, call_timed, &timed, CALLS_PER_RUN, options->repeats);
        ladder_table_row(&table, v + 1, version->name, time, setup_ms);
        if (lt && version->autotune)
            printf("     %-18s runs the heuristic's answer %d of the %d it gave (1 = what version 3 runs)\n", "",
                   lt->picked + 1, lt->found);
        if (lt) plan_destroy(&plan);
    }
    problem_free(&p);
    ladder_gemm_free(&g);
}

int main(int argc, char **argv) {
    LadderSize sizes[3] = LADDER_GEMM_SIZES;
    LadderOptions options;
    ladder_parse_args(argc, argv,
                      LADDER_GEMM_USAGE "               Without any of them: the first layer for --hidden 0, 128 and "
                                        "1024, n = 10, 128, 1024\n",
                      sizes, 3, VERSION_COUNT, gemm_ladder_version_name, CALLS_PER_RUN, &options);
    DeviceInfo device;
    ladder_require_gpu(argv[0], &device);
    printf("forward GEMM out (m, n) = relu(in (m, k) @ W (k, n) + bias), shapes as m x k x n\n");
    printf("GPU: %s (cc %s, CUDA %s, driver %s); a timed run is %d calls back to back\n", device.name, device.cc,
           device.cuda, device.driver, CALLS_PER_RUN);
    if (sizes[0].given || sizes[1].given || sizes[2].given) {
        run_shape((int)sizes[0].value, (int)sizes[1].value, (int)sizes[2].value, &options, &device);
        return EXIT_OK;
    }
    for (int s = 0; s < SHAPE_COUNT; s++) run_shape(SHAPES[s][0], SHAPES[s][1], SHAPES[s][2], &options, &device);
    return EXIT_OK;
}
#endif  // LADDER_NO_MAIN
