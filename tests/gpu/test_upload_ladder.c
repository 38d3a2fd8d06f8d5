// tests/gpu/test_upload_ladder.c: every version of 05-streams/upload_ladder.cu copies every byte, on sizes
// that are no multiple of a cache line or a slot (1, 3, 1000, 2^16 + 1) and on one that goes round the ring
// of pinned slots several times in both staged versions (5 MiB + 7: version 2's slots are 1 MiB, version
// 3 runs here with 3 threads and 64 KiB slots).
//
//     make test        (or: make build/05/test_upload_ladder && build/05/test_upload_ladder --verbose)
//
// The device buffer starts as 0xff bytes and no source byte is 0xff: a byte left uncopied, or copied to
// the wrong place, shows. Without a GPU every test reports itself skipped.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <cuda_runtime_api.h>

#define GPU_SUITE_NAME "upload_ladder"
#include "gpu/skip_report.h"

// From 05-streams/upload_ladder.cu, compiled with -DLADDER_NO_MAIN. index counts from 0.
int upload_ladder_version_count(void);
const char *upload_ladder_version_name(int index);
void upload_ladder_run(int index, const void *src, void *back, size_t bytes, int threads, size_t chunk_bytes);

static const size_t SIZES[] = {1, 3, 1000, (1 << 16) + 1, (5 << 20) + 7};
#define SIZE_COUNT ((int)(sizeof(SIZES) / sizeof(SIZES[0])))
#define THREADS 3
#define CHUNK_BYTES ((size_t)64 << 10)

typedef struct {
    int version;
    size_t bytes;
} Case;

static void free_cases(struct criterion_test_params *params) { cr_free(params->params); }

ParameterizedTestParameters(upload_ladder, copies_every_byte) {
    size_t count = (size_t)upload_ladder_version_count() * SIZE_COUNT;
    Case *cases = cr_malloc(sizeof(Case) * count);
    if (!cases) return cr_make_param_array(Case, NULL, 0, NULL);
    for (size_t i = 0; i < count; i++) {
        cases[i].version = (int)(i / SIZE_COUNT);
        cases[i].bytes = SIZES[i % SIZE_COUNT];
    }
    return cr_make_param_array(Case, cases, count, free_cases);
}

ParameterizedTest(Case *tc, upload_ladder, copies_every_byte) {
    // No check macro here: without a GPU this call fails, and the test must skip, not exit.
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) cr_skip_test("no CUDA device: GPU suite skipped");

    size_t bytes = tc->bytes;
    unsigned char *src = malloc(bytes), *back = malloc(bytes);
    cr_assert(src && back, "out of host memory for %zu bytes", bytes);
    uint64_t state = 5;
    for (size_t i = 0; i < bytes; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        src[i] = (unsigned char)((state >> 33) % 255);  // never 0xff
    }
    upload_ladder_run(tc->version, src, back, bytes, THREADS, CHUNK_BYTES);
    size_t at = 0;
    while (at < bytes && back[at] == src[at]) at++;
    cr_expect(at == bytes, "version %s, %zu bytes: device byte %zu is 0x%02x, the host's 0x%02x",
              upload_ladder_version_name(tc->version), bytes, at, at < bytes ? back[at] : 0, at < bytes ? src[at] : 0);
    free(src);
    free(back);
}
