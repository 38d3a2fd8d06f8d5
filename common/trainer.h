// common/trainer.h: the interface between the drivers in common/ and a stage's GPU trainers.
//
// The drivers (common/regression_main.c, common/mnist_main.c) own everything that is not the lesson:
// flags, data in host memory, initial parameters, batch order, reporting. A stage owns only the GPU
// training and exports, with C linkage, one function per trainer:
//
//     int train_regression(const RegressionConfig *cfg, const RegressionData *data, RegressionResult *out);
//     int train_mnist(const MnistConfig *cfg, const MnistData *data, MnistResult *out);
//
// Inputs arrive in host memory; outputs (parameters, losses, timings) go back to host memory, into
// arrays the caller allocated. Both return 0 on success; CUDA errors end the process (common/check.h).
#ifndef TRAINER_H
#define TRAINER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ----------------------------------------------------------------------------
// timing, shared by both trainers (definitions in docs/DESIGN.md, "Timing")

typedef enum {
    PHASE_H2D,       // host-to-device copies
    PHASE_FORWARD,   // forward pass
    PHASE_LOSS,      // loss (and, where fused, the loss gradient)
    PHASE_BACKWARD,  // gradients
    PHASE_UPDATE,    // parameter update
    PHASE_EVAL,      // test-set evaluation
    PHASE_D2H,       // device-to-host copies
    PHASE_COUNT
} Phase;

extern const char *const PHASE_NAMES[PHASE_COUNT];  // "h2d", "forward", ... (common/timing.c)

typedef struct {
    double e2e_ms;              // events: training data in host memory -> trained parameters in host memory
    double loop_ms;             // events: the training loop alone, data already on the device
    double h2d_ms;              // events: upload of the training data before the loop (0 when none)
    double setup_ms;            // host clock: untimed set-up done before e2e starts (handles, graphs)
    double *epoch_ms;           // [epochs] events, one per epoch; the caller allocates it
    double phase_ms[PHASE_COUNT];  // only with cfg->breakdown; each phase synchronizes, so e2e grows
} TrainTiming;

// ----------------------------------------------------------------------------
// regression: y = w x + b, MSE loss, full-batch gradient descent

typedef struct {
    int epochs;      // 200
    float lr;        // 0.01
    int log_every;   // 10: losses are recorded at the epochs where regression_epoch_logged() is true
    int breakdown;   // 1: fill timing.phase_ms
    int variant;     // index into the stage's REGRESSION_VARIANTS (0 = the stage's own version)
    int variant_given;  // 1: --variant named it, so a variant this GPU cannot run is an error
                        // (0: the stage runs the previous stage's path, with a note)
} RegressionConfig;

typedef struct {
    const float *x_train, *y_train;  // (n_train,)
    const float *x_test, *y_test;    // (n_test,)
    int64_t n_train, n_test;
    float w_init, b_init;
} RegressionData;

typedef struct {
    float w, b;             // trained parameters
    float *train_loss;      // [regression_logged_count()] train MSE with the parameters at the start of the logged epoch
    float *test_loss;       // [regression_logged_count()] test MSE with the same parameters
    float final_test_loss;  // test MSE with the trained parameters
    TrainTiming timing;
} RegressionResult;

// Epoch e (0-based) records its losses when e % log_every == 0 or it is the last epoch.
static inline int regression_epoch_logged(int e, int epochs, int log_every) {
    return e % log_every == 0 || e == epochs - 1;
}
static inline int regression_logged_count(int epochs, int log_every) {
    return (epochs - 1) / log_every + 1 + ((epochs - 1) % log_every != 0);
}

int train_regression(const RegressionConfig *cfg, const RegressionData *data, RegressionResult *out);

// NULL-terminated names of the variants a stage's regression offers; the first is its default.
extern const char *const REGRESSION_VARIANTS[];

// ----------------------------------------------------------------------------
// MNIST: MLP 784 -> hidden... -> 10, ReLU, softmax cross-entropy, minibatch SGD

#define MNIST_PIXELS 784
#define MNIST_CLASSES 10
#define MNIST_MAX_LAYERS 9  // linear layers, so at most 8 hidden layers

typedef enum { PRECISION_FP32, PRECISION_TF32, PRECISION_BF16, PRECISION_COUNT } Precision;
extern const char *const PRECISION_NAMES[PRECISION_COUNT];  // "fp32", "tf32", "bf16" (common/timing.c)

typedef struct {
    int n_layers;                     // linear layers = hidden layers + 1
    int sizes[MNIST_MAX_LAYERS + 1];  // sizes[0] = 784, sizes[n_layers] = 10
    int batch;                        // 128
    int epochs;                       // 10
    float lr;                         // 0.1
    Precision precision;              // of the GEMMs; fp32 unless the stage lists others in MNIST_PRECISIONS
    int breakdown;                    // 1: fill timing.phase_ms
    int variant;                      // index into the stage's MNIST_VARIANTS
    int variant_given;                // 1: --variant named it, so a variant this GPU cannot run is an error
                                      // (0: the stage runs the previous stage's path, with a note)
} MnistConfig;

// A pixel byte as the trainers read it, in [0, 1]: images[i] == mnist_pixel_value(pixels[i]) bit for bit.
// One expression for the host (common/idx.c) and the device (stages 05-07 upload the bytes, 1/4 of the
// floats, and scale them on the GPU): a float division, correctly rounded on both sides (nvcc divides
// to IEEE unless told --use_fast_math or -prec-div=false, which this repository never does).
#ifdef __CUDACC__
#define MNIST_HOST_DEVICE __host__ __device__
#else
#define MNIST_HOST_DEVICE
#endif
static inline MNIST_HOST_DEVICE float mnist_pixel_value(uint8_t pixel) { return (float)pixel / 255.0f; }

// Parameters are packed layer by layer: W_l (sizes[l], sizes[l+1]) row-major, then b_l (sizes[l+1]).
// A layer computes out = in @ W_l + b_l with in (batch, sizes[l]); ReLU after every layer but the last.
typedef struct {
    const uint8_t *train_pixels;  // (n_train, 784) row-major, the raw bytes
    const float *train_images;    // (n_train, 784): mnist_pixel_value of each byte, in [0, 1]
    const uint8_t *train_labels;  // (n_train,) in 0..9
    int n_train;
    const uint8_t *test_pixels;   // (n_test, 784)
    const float *test_images;     // (n_test, 784)
    const uint8_t *test_labels;   // (n_test,)
    int n_test;
    const int32_t *batch_order;   // (epochs, n_train): step s of epoch e trains on rows
                                  // batch_order[e * n_train + s * batch + i], i < batch
    const float *init_params;     // (mnist_param_count(cfg),) packed as above
} MnistData;

typedef struct {
    float *params;     // [mnist_param_count()] trained parameters, packed as init_params
    float *step_loss;  // [epochs * steps_per_epoch] mean cross-entropy of each minibatch, before its update
    float *test_loss;  // [epochs] mean test cross-entropy after each epoch
    float *test_acc;   // [epochs] test accuracy (0..1) after each epoch
    TrainTiming timing;
} MnistResult;

// Each epoch trains on n_train / batch full batches; the remainder of the permutation is skipped.
static inline int mnist_steps_per_epoch(const MnistConfig *cfg, int n_train) { return n_train / cfg->batch; }
static inline int64_t mnist_weight_offset(const MnistConfig *cfg, int layer) {
    int64_t offset = 0;
    for (int l = 0; l < layer; l++) offset += (int64_t)cfg->sizes[l] * cfg->sizes[l + 1] + cfg->sizes[l + 1];
    return offset;
}
static inline int64_t mnist_bias_offset(const MnistConfig *cfg, int layer) {
    return mnist_weight_offset(cfg, layer) + (int64_t)cfg->sizes[layer] * cfg->sizes[layer + 1];
}
static inline int64_t mnist_param_count(const MnistConfig *cfg) { return mnist_weight_offset(cfg, cfg->n_layers); }

int train_mnist(const MnistConfig *cfg, const MnistData *data, MnistResult *out);

extern const char *const MNIST_VARIANTS[];    // NULL-terminated, first = default
extern const char *const MNIST_PRECISIONS[];  // NULL-terminated names from PRECISION_NAMES the stage supports

#ifdef __cplusplus
}
#endif

#endif
