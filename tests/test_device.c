// tests/test_device.c: Criterion suite "device": the lines common/device.c prints, checked without a GPU.
//
//     make test          (part of build/tests/test_cpu), or alone: build/tests/test_cpu --filter 'device/*'
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device.h"
#include "exit_codes.h"

// Runs device_check_memory in a child with CUDA_STAGES_MAX_DEVICE_MB=value; returns its exit status
// and its stderr in out.
static int check_memory_with(const char *value, char *out, size_t out_len) {
    int pipe_fds[2];
    cr_assert_eq(pipe(pipe_fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(pipe_fds[1], 2);
        close(pipe_fds[0]);
        setenv("CUDA_STAGES_MAX_DEVICE_MB", value, 1);
        device_check_memory(1.0, "this run", "try less");
        _exit(0);
    }
    close(pipe_fds[1]);
    size_t used = 0;
    ssize_t got;
    while (used + 1 < out_len && (got = read(pipe_fds[0], out + used, out_len - 1 - used)) > 0) used += (size_t)got;
    out[used] = '\0';
    close(pipe_fds[0]);
    // lines of a sanitizer's runtime ("==PID==...", under make test SANITIZE=1) are not the program's
    char *line = out, *kept = out;
    while (*line) {
        char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) + 1 : strlen(line);
        if (strncmp(line, "==", 2) != 0) {
            memmove(kept, line, len);
            kept += len;
        }
        line += len;
    }
    *kept = '\0';
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "the child did not exit");
    return WEXITSTATUS(status);
}

Test(device, bad_memory_cap_is_one_line_even_with_a_newline) {
    char out[1024];
    const char *bad[] = {"lots", "12\nerror: forged second line", "\x1b[2J", "-5", "0"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int code = check_memory_with(bad[i], out, sizeof(out));
        cr_assert_eq(code, EXIT_USAGE, "CUDA_STAGES_MAX_DEVICE_MB case %zu: exit %d (%s)", i, code, out);
        cr_assert_eq(strncmp(out, "error: CUDA_STAGES_MAX_DEVICE_MB=", 33), 0, "%s", out);
        char *newline = strchr(out, '\n');
        cr_assert(newline && newline[1] == '\0', "not exactly one line: %s", out);
        for (const char *c = out; c < newline; c++) cr_assert_geq((unsigned char)*c, 0x20, "control character in: %s", out);
    }
}
