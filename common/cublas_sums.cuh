// common/cublas_sums.cuh: the state and the two small kernels of stage 06's "cublas" regression variant, which
// asks cublasSdot for the sums r.r, r.x and r.1 (the trainer makes those calls). Each is its own pass over
// memory: the residual kernel reads x and y and writes r, then each cublasSdot reads r and one more vector:
// four passes where the fused kernel makes one. Include after cublas_v2.h and check.h.
#ifndef CUBLAS_SUMS_CUH
#define CUBLAS_SUMS_CUH

#define CUBLAS_SUMS_BLOCK 256

// A handle bound to the training stream, in device pointer mode (cublasSdot then writes its result to device
// memory and returns at once, instead of copying it to the host and waiting).
typedef struct {
    cublasHandle_t handle;
    float *residual;  // (n,) r = w x + b - y
    float *ones;      // (n,) 1.0f, for r.1
    float *dots;      // (3,) r.r, r.x, r.1
} CublasSums;

// for (i = 0; i < n; i++) r[i] = w * x[i] + b - y[i];
__global__ void residual_kernel(float *residual, const float *x, const float *y, const float *params, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    residual[i] = params[0] * x[i] + params[1] - y[i];
}

// cuBLAS leaves each dot product, a float, in device memory; this adds them to the double sums, where the
// fused kernel's atomics go: loss_sum += r.r; grad_sum += (r.x, r.1)
__global__ void add_dots_kernel(double *loss_sum, double *grad_sum, const float *dots) {
    *loss_sum += dots[0];
    grad_sum[0] += dots[1];
    grad_sum[1] += dots[2];
}

// for (i = 0; i < n; i++) v[i] = value;
__global__ void fill_kernel(float *v, float value, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    v[i] = value;
}

static unsigned int cublas_sums_blocks(int64_t n) {
    return (unsigned int)((n + CUBLAS_SUMS_BLOCK - 1) / CUBLAS_SUMS_BLOCK);
}

static CublasSums *cublas_sums_create(int64_t n, cudaStream_t stream) {
    CublasSums *c = (CublasSums *)host_malloc(sizeof(CublasSums), "the cuBLAS state");
    cublasCheck(cublasCreate(&c->handle));
    cublasCheck(cublasSetStream(c->handle, stream));
    cublasCheck(cublasSetPointerMode(c->handle, CUBLAS_POINTER_MODE_DEVICE));
    cudaCheck(cudaMalloc(&c->residual, n * sizeof(float)));
    cudaCheck(cudaMalloc(&c->ones, n * sizeof(float)));
    cudaCheck(cudaMalloc(&c->dots, 3 * sizeof(float)));
    fill_kernel<<<cublas_sums_blocks(n), CUBLAS_SUMS_BLOCK, 0, stream>>>(c->ones, 1.0f, n);
    launchCheck();
    return c;
}

static void cublas_sums_destroy(CublasSums *c) {
    cublasCheck(cublasDestroy(c->handle));
    cudaCheck(cudaFree(c->residual));
    cudaCheck(cudaFree(c->ones));
    cudaCheck(cudaFree(c->dots));
    free(c);
}

// before the dots: c->residual = w x + b - y
static void cublas_residual(const CublasSums *c, const float *x, const float *y, const float *params, int64_t n,
                            cudaStream_t stream) {
    residual_kernel<<<cublas_sums_blocks(n), CUBLAS_SUMS_BLOCK, 0, stream>>>(c->residual, x, y, params, n);
    launchCheck();
}

// after them: the three dots into the double sums
static void cublas_add_dots(const CublasSums *c, double *loss_sum, double *grad_sum, cudaStream_t stream) {
    add_dots_kernel<<<1, 1, 0, stream>>>(loss_sum, grad_sum, c->dots);
    launchCheck();
}

#endif
