// tests/test_device.c: Criterion suite "device": the lines common/device.c prints, checked without a GPU.
//
//     make test          (part of build/tests/test_cpu), or alone: build/tests/test_cpu --filter 'device/*'
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "child_output.h"
#include "device.h"
#include "exit_codes.h"

// The child's body: device_check_memory with CUDA_STAGES_MAX_DEVICE_MB=value (it exits 2 on a bad value).
static void check_memory_with(void *value) {
    setenv("CUDA_STAGES_MAX_DEVICE_MB", value, 1);
    device_check_memory(1.0, "this run", "try less");
}

Test(device, bad_memory_cap_is_one_line_even_with_a_newline) {
    char err[1024];
    const char *bad[] = {"lots", "12\nerror: forged second line", "\x1b[2J", "-5", "0"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int code = child_output(check_memory_with, (void *)bad[i], err, sizeof(err), NULL, 0);
        cr_assert_eq(code, EXIT_USAGE, "CUDA_STAGES_MAX_DEVICE_MB case %zu: exit %d (%s)", i, code, err);
        cr_assert_eq(strncmp(err, "error: CUDA_STAGES_MAX_DEVICE_MB=", 33), 0, "%s", err);
        char *newline = strchr(err, '\n');
        cr_assert(newline && newline[1] == '\0', "not exactly one line: %s", err);
        for (const char *c = err; c < newline; c++) cr_assert_geq((unsigned char)*c, 0x20, "control character in: %s", err);
    }
}
