// tests/test_gates.c: Criterion suite "gates": what common/gates.c says without a GPU, and how it reads
// CUDA_STAGES_CC (the GPU side, the fallbacks it picks, is run by the GPU suites under CUDA_STAGES_CC).
//
//     make test          (part of build/tests/test_cpu), or alone: build/tests/test_cpu --filter 'gates/*'
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "child_output.h"
#include "exit_codes.h"
#include "gates.h"

static void read_capability(void *value) {
    setenv("CUDA_STAGES_CC", (const char *)value, 1);
    printf("%d\n", device_capability());
    exit(EXIT_OK);
}

// device_capability with CUDA_STAGES_CC=value in a child: its exit status, and its one stderr line in err
static int capability_with(const char *value, char *err, size_t err_len) {
    char out[64];
    return child_output(read_capability, (void *)value, err, err_len, out, sizeof(out));
}

Test(gates, a_value_that_is_not_a_capability_is_one_usage_line) {
    const char *bad[] = {"abc", "8", "8.", "8.0x", ".5", "0.5", "8.10", "-7.5"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[512];
        cr_expect_eq(capability_with(bad[i], err, sizeof(err)), EXIT_USAGE, "CUDA_STAGES_CC=%s", bad[i]);
        cr_expect(strncmp(err, "error: CUDA_STAGES_CC=", 22) == 0 && strchr(err, '\n') == strrchr(err, '\n'),
                  "CUDA_STAGES_CC=%s: one error line, got: %s", bad[i], err);
    }
}

// a well-formed value gets past the check: here, without a GPU, the next line is the device's
Test(gates, a_capability_is_read_and_then_the_device_asked) {
    const char *good[] = {"7.5", "8.0", "8.6", "10.0"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        char err[512];
        int status = capability_with(good[i], err, sizeof(err));
        cr_expect(strstr(err, "is not a compute capability") == NULL, "CUDA_STAGES_CC=%s: %s", good[i], err);
        cr_expect(status == EXIT_OK || status == EXIT_CUDA || status == EXIT_USAGE, "CUDA_STAGES_CC=%s: exit %d",
                  good[i], status);
    }
}

Test(gates, each_feature_names_its_capability) {
    cr_expect(strstr(feature_description(FEATURE_TF32), "compute capability 8.0") != NULL);
    cr_expect(strstr(feature_description(FEATURE_BF16), "compute capability 8.0") != NULL);
    cr_expect(strstr(feature_description(FEATURE_CLUSTERS), "thread-block clusters (compute capability 9.0)") != NULL);
}
