// tests/fuzz/fuzz_idx.c: libFuzzer harness for the IDX reader (common/idx.c).
//
//     make fuzz FUZZ_SECONDS=60        (builds with clang -fsanitize=fuzzer,address,undefined and runs)
//
// The first input byte picks the reader (even: idx_read_images, odd: idx_read_labels); the rest is the
// file. It goes into one memfd, which the reader opens by its /proc/self/fd path, so the fuzzer drives
// exactly the code a user's file goes through (path handling, zlib for plain and gzip input, header,
// size checks, the growing body buffer, trailing bytes) with no disk I/O per input.
//
// Besides the sanitizers' findings, the harness traps when the reader breaks its contract (idx.h):
// success returns a fully readable buffer of the declared size within the documented limits; failure
// returns -1, leaves nothing allocated and writes exactly one non-empty line into err. A success is
// also checked against an independent reading of the input: a plain file exactly as long as its header
// says; a gzip file one complete stream (zlib verified its CRC-32 and length) with nothing after it,
// whose content is exactly what the reader returned. The corpus holds a seed of each kind the reader
// once accepted wrongly: trailers cut off, a bad CRC, trailing junk, two gzip members.
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include "idx.h"

static int fd = -1;
static char path[64];

static void check_failure(int status, const char *err) {
    if (status != -1 || err[0] == '\0' || strchr(err, '\n') || strlen(err) >= 512) __builtin_trap();
    for (const char *c = err; *c; c++)
        if ((unsigned char)*c < 0x20) __builtin_trap();
}

// An accepted input, read again without the reader: header then body, and nothing else.
static void check_success(const uint8_t *data, size_t size, const uint8_t *body, size_t body_len, size_t header_len) {
    size_t total = header_len + body_len;
    if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
        uint8_t *content = malloc(total + 1);
        if (!content) abort();
        z_stream z;
        memset(&z, 0, sizeof(z));
        if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) abort();
        z.next_in = (uint8_t *)data;
        z.avail_in = (uInt)size;
        z.next_out = content;
        z.avail_out = (uInt)(total + 1);
        int status = inflate(&z, Z_FINISH);
        size_t got = z.total_out;
        inflateEnd(&z);
        if (status != Z_STREAM_END || z.avail_in != 0 || got != total) __builtin_trap();
        if (memcmp(content + header_len, body, body_len) != 0) __builtin_trap();
        free(content);
    } else {
        if (size != total || memcmp(data + header_len, body, body_len) != 0) __builtin_trap();
    }
}

// Reads every byte, so that ASan sees any buffer shorter than the reader claims.
static unsigned touch(const uint8_t *bytes, size_t len) {
    unsigned sum = 0;
    for (size_t i = 0; i < len; i++) sum += bytes[i];
    return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int labels = data[0] & 1;
    data++;
    size--;

    if (fd < 0) {
        fd = memfd_create("fuzz_idx", 0);
        if (fd < 0) abort();
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size > 0 && pwrite(fd, data, size, 0) != (ssize_t)size)) abort();

    char err[512] = "";
    volatile unsigned sink = 0;
    if (labels) {
        IdxLabels out;
        int status = idx_read_labels(path, &out, err, sizeof(err));
        if (status == 0) {
            if (!out.labels || out.count < 1 || out.count > 10000000) __builtin_trap();
            sink += touch(out.labels, (size_t)out.count);
            check_success(data, size, out.labels, (size_t)out.count, 8);
            idx_free_labels(&out);
            if (out.labels || out.count) __builtin_trap();
        } else {
            check_failure(status, err);
            if (out.labels || out.count) __builtin_trap();
        }
    } else {
        IdxImages out;
        int status = idx_read_images(path, &out, err, sizeof(err));
        if (status == 0) {
            if (!out.pixels || out.count < 1 || out.count > 10000000 || out.rows < 1 || out.rows > 4096 ||
                out.cols < 1 || out.cols > 4096)
                __builtin_trap();
            sink += touch(out.pixels, (size_t)out.count * (size_t)out.rows * (size_t)out.cols);
            check_success(data, size, out.pixels, (size_t)out.count * (size_t)out.rows * (size_t)out.cols, 16);
            idx_free_images(&out);
            if (out.pixels || out.count) __builtin_trap();
        } else {
            check_failure(status, err);
            if (out.pixels || out.count) __builtin_trap();
        }
    }
    (void)sink;
    return 0;
}
