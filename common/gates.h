// common/gates.h: the features past compute capability 7.5 that a stage uses, checked at run time
// (docs/DESIGN.md, "Capability gates"): a feature is there when the GPU has it *and* the kernel that uses it
// was compiled for it. A missing feature means, for a flag that asks for it by name, one `error:` line and
// EXIT_CUDA, and for a ladder version, the version skipped with the reason. CUDA_STAGES_CC=8.0 (say) makes
// the GPU report that compute capability instead of its own (lower only), so an H100 rehearses an A100.
#ifndef GATES_H
#define GATES_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    FEATURE_TF32,      // tf32 tensor-core math (cuBLAS's CUBLAS_COMPUTE_32F_FAST_TF32): 8.0
    FEATURE_BF16,      // bf16 tensor-core math: 8.0
    FEATURE_CLUSTERS,  // thread-block clusters and distributed shared memory (stage 08's ladder): 9.0
    FEATURE_COUNT
} Feature;

// "thread-block clusters (compute capability 9.0)": what a feature is and the capability it needs
const char *feature_description(Feature feature);
// The compute capability of device 0 as 10 * major + minor (90 for 9.0), CUDA_STAGES_CC applied; a bad
// CUDA_STAGES_CC (not "M.m", or above the GPU's own) is one error line and EXIT_USAGE.
int device_capability(void);
// 1 when device 0 has the feature and, where kernel is not NULL, that kernel's code was compiled for an
// architecture that has it; else 0, with why the feature is missing in why ("this GPU is 8.0", "the
// kernel was compiled for compute_80 (make CUDA_ARCH=80)").
int feature_available(Feature feature, const void *kernel, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif
