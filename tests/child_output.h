// tests/child_output.h: runs a call that may print and exit (a usage error: one line on stderr, exit 2) in a
// forked child and hands back its exit status and what it printed, so that a Criterion suite can check the
// line and the run's own output stays clean. Include it in a suite; its functions are static.
#ifndef CHILD_OUTPUT_H
#define CHILD_OUTPUT_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

// the exit status of a child whose body returned: no program of this repository exits with it (exit_codes.h),
// so a test can tell a call that returned from one that exited 0
enum { CHILD_RETURNED = 99 };

// Reads what the child wrote to file into text (len bytes with the '\0', the rest cut) and closes file.
static void child_read_back(FILE *file, char *text, size_t len) {
    rewind(file);
    size_t used = fread(text, 1, len - 1, file);
    text[used] = '\0';
    fclose(file);
}

// Lines of a sanitizer's runtime ("==PID==...", under make test SANITIZE=1) are not the program's: dropped.
static void child_drop_sanitizer_lines(char *text) {
    char *line = text, *kept = text;
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
}

// Runs body(ctx) in a child; returns its exit status (CHILD_RETURNED if body returned) and its stderr in err,
// less sanitizer lines. Its stdout goes to out when out is not NULL, else to this process's stdout.
// The streams go to temporary files, not pipes: the child never blocks on a full pipe while this process
// waits for it, whatever it prints on either stream.
static int child_output(void (*body)(void *ctx), void *ctx, char *err, size_t err_len, char *out, size_t out_len) {
    FILE *err_file = tmpfile(), *out_file = out ? tmpfile() : NULL;
    cr_assert(err_file && (!out || out_file), "no temporary file for the child's output");
    fflush(NULL);  // what this process has buffered must not be written a second time by the child
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(fileno(err_file), 2);
        if (out_file) dup2(fileno(out_file), 1);
        body(ctx);
        fflush(NULL);
        _exit(CHILD_RETURNED);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "the child did not exit");
    child_read_back(err_file, err, err_len);
    child_drop_sanitizer_lines(err);
    if (out_file) child_read_back(out_file, out, out_len);
    return WEXITSTATUS(status);
}

#endif
