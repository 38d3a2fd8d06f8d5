// common/gates.c: run-time checks of the features past compute capability 7.5 (see gates.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "exit_codes.h"
#include "gates.h"
#include "message.h"

static const struct {
    const char *description;
    int capability;  // 10 * major + minor
} FEATURES[FEATURE_COUNT] = {
    [FEATURE_TF32] = {"tf32 tensor-core math (compute capability 8.0)", 80},
    [FEATURE_BF16] = {"bf16 tensor-core math (compute capability 8.0)", 80},
    [FEATURE_CLUSTERS] = {"thread-block clusters (compute capability 9.0)", 90},
};

const char *feature_description(Feature feature) { return FEATURES[feature].description; }

// CUDA_STAGES_CC as 10 * major + minor, or -1 when unset; a value that is not "M.m" exits
static int capability_override(void) {
    const char *value = getenv("CUDA_STAGES_CC");
    if (!value || !value[0]) return -1;
    int major = -1, minor = -1, used = 0;
    if (sscanf(value, "%2d.%1d%n", &major, &minor, &used) != 2 || value[used] != '\0' || major < 1 || minor < 0) {
        char message[160];
        error_message(message, sizeof(message), "CUDA_STAGES_CC='%.16s' is not a compute capability such as 8.0",
                      value);
        fprintf(stderr, "error: %s\n", message);
        exit(EXIT_USAGE);
    }
    return 10 * major + minor;
}

int device_capability(void) {
    int asked = capability_override();  // first: a bad value is one line even where no GPU answers
    int device = 0, major = 0, minor = 0;
    cudaError_t status = cudaGetDevice(&device);
    if (status == cudaSuccess) status = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (status == cudaSuccess) status = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    if (status != cudaSuccess) {
        fprintf(stderr, "error: cannot read the GPU's compute capability: %s\n", cudaGetErrorString(status));
        exit(EXIT_CUDA);
    }
    int own = 10 * major + minor;
    if (asked > own) {
        fprintf(stderr, "error: CUDA_STAGES_CC=%d.%d is above this GPU's own %d.%d: it can only lower it\n",
                asked / 10, asked % 10, major, minor);
        exit(EXIT_USAGE);
    }
    return asked >= 0 ? asked : own;
}

int feature_available(Feature feature, const void *kernel, char *why, size_t why_len) {
    int needed = FEATURES[feature].capability, capability = device_capability();
    if (capability < needed) {
        snprintf(why, why_len, "this GPU is %d.%d%s", capability / 10, capability % 10,
                 getenv("CUDA_STAGES_CC") && getenv("CUDA_STAGES_CC")[0] ? " (CUDA_STAGES_CC)" : "");
        return 0;
    }
    if (kernel) {
        // ptxVersion: the virtual architecture the kernel was compiled from, the __CUDA_ARCH__ its code saw
        struct cudaFuncAttributes attributes;
        cudaError_t status = cudaFuncGetAttributes(&attributes, kernel);
        if (status != cudaSuccess) {
            fprintf(stderr, "error: cannot read a kernel's attributes: %s\n", cudaGetErrorString(status));
            exit(EXIT_CUDA);
        }
        if (attributes.ptxVersion < needed) {
            snprintf(why, why_len, "this build's kernel was compiled for compute_%d (make CUDA_ARCH=%d builds it)",
                     attributes.ptxVersion, needed);
            return 0;
        }
    }
    return 1;
}
