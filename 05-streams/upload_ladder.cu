/*
Upload ladder, stage 05: the regression's training set from pageable host memory (where the driver's
malloc put it) to the device, one idea per version. The copy engine reads only pinned (page-locked)
memory, so pageable bytes must be copied into pinned memory first, or the pages pinned where they lie.

    1 pageable        cudaMemcpy straight from the pageable array: the driver copies it through pinned
                      buffers of its own, one piece at a time, and returns when the last is on the device
    2 staged          the simplest ring: a ring of 4 pinned 1 MiB slots; one host thread
                      memcpys a chunk into a slot while the copy engine drains the one before it
                      (cudaMemcpyAsync), waiting only for a slot still being read
    3 staged-threads  the same ring with --chunk-kib slots, each filled by --threads host threads together
                      (common/copy_pool.h): one core's memcpy is slower than PCIe
    4 streaming       the same, the slots written with streaming stores: a cached store first reads the
                      line it writes (read-for-ownership), traffic for a line no core reads again; the
                      trainers' upload (common/staging.c) now
    5 host-register   cudaHostRegister the caller's array (pins its pages in place), one cudaMemcpyAsync,
                      cudaHostUnregister: no host copy at all, but pinning costs time per page, paid again
                      for every new array; the registration is its setup, and inside its time

    make stage 5 ladder                                   (n = 4,000,000 points: 32 MB)
    build/05/upload_ladder --n 100000000 --threads 16 --chunk-kib 8192 --repeat 10 --csv ladders.csv

Timing: the host clock, from the call until the bytes are on the device (cudaStreamSynchronize): what the
user waits for, host memcpys included (events alone would start when the GPU first sees work). Median of
--repeat runs after 3 warm-ups, min-max as the spread. The ceiling is cudaMemcpy of the same bytes from a
pinned buffer (cudaMallocHost), timed the same way in the same run. Setup column: host time before the
version's first call, once (pinned slots, threads), as the trainers count it in setup_ms; for
host-register the median registration, which its time includes. Every version's copy is read back and
compared byte for byte with the source.

Exit codes: 0 ok; 1 a wrong copy; 2 an invalid flag or an unwritable --csv file; 3 out of host memory;
4 no GPU or any CUDA error.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>

#include "check.h"
#include "copy_pool.h"
#include "data.h"
#include "device.h"
#include "host.h"
#include "ladder.h"
#include "staging.h"

#define STAGED_CHUNK ((size_t)1 << 20)  // version 2's slot: 1 MiB, a quarter of the trainer's

// ----------------------------------------------------------------------------
// the versions. An Upload holds one version's state; call() moves src to dst and returns before the copy
// engine may be done (the caller synchronizes stream).

typedef struct {
    char *dst;         // (bytes,) device
    const char *src;   // (bytes,) pageable host
    size_t bytes;
    cudaStream_t stream;
    StagingRing *ring;    // versions 2-4: STAGING_SLOTS pinned slots and the threads that fill them
    double register_ms;   // version 5: the last call's cudaHostRegister
} Upload;

typedef struct {
    const char *name;
    int threads;    // versions 2-4: copy threads (0: the ladder's --threads)
    int streaming;  // versions 2-4: slots written with streaming stores
    void (*call)(Upload *u);
} Version;

static void pageable_copy(Upload *u) { cudaCheck(cudaMemcpy(u->dst, u->src, u->bytes, cudaMemcpyHostToDevice)); }

static void staged_copy(Upload *u) { staging_upload(u->ring, u->dst, u->src, u->bytes, u->stream); }

// The caller's pages are pinned for this call only: they belong to the caller, who may free them next.
static void registered_copy(Upload *u) {
    double start_ms = host_ms();
    cudaCheck(cudaHostRegister((void *)u->src, u->bytes, cudaHostRegisterDefault));
    u->register_ms = host_ms() - start_ms;
    cudaCheck(cudaMemcpyAsync(u->dst, u->src, u->bytes, cudaMemcpyHostToDevice, u->stream));
    cudaCheck(cudaStreamSynchronize(u->stream));  // unregistering pages a copy still reads is undefined
    cudaCheck(cudaHostUnregister((void *)u->src));
}

static const Version VERSIONS[] = {
    {"pageable", 0, 0, pageable_copy},
    {"staged", 1, 0, staged_copy},
    {"staged-threads", 0, 0, staged_copy},
    {"streaming", 0, 1, staged_copy},
    {"host-register", 0, 0, registered_copy},
};
#define VERSION_COUNT ((int)(sizeof(VERSIONS) / sizeof(VERSIONS[0])))

extern "C" int upload_ladder_version_count(void) { return VERSION_COUNT; }
extern "C" const char *upload_ladder_version_name(int index) { return VERSIONS[index].name; }

// One version's state for src (bytes,) -> dst; threads and chunk are versions 3 and 4's (version 2 has its own).
// Returns the host time it took: the setup a trainer would count once.
static double upload_open(Upload *u, const Version *v, char *dst, const char *src, size_t bytes, int threads,
                          size_t chunk) {
    double start_ms = host_ms();
    memset(u, 0, sizeof(*u));
    u->dst = dst;
    u->src = src;
    u->bytes = bytes;
    cudaCheck(cudaStreamCreateWithFlags(&u->stream, cudaStreamNonBlocking));
    if (v->call == staged_copy) {
        int staged = v->threads == 1;
        u->ring = staging_create(STAGING_SLOTS, staged ? STAGED_CHUNK : chunk, staged ? 1 : threads);
        copy_pool_set_streaming(staging_pool(u->ring), v->streaming);
    }
    return host_ms() - start_ms;
}

static void upload_close(Upload *u) {
    if (u->ring) staging_destroy(u->ring);
    cudaCheck(cudaStreamDestroy(u->stream));
}

// One call, timed on the host clock until the bytes are on the device (a pageable cudaMemcpy may return
// before its last piece has landed: the device, not only the stream, is waited for).
static double timed_call(const Version *v, Upload *u) {
    double start_ms = host_ms();
    v->call(u);
    cudaCheck(cudaDeviceSynchronize());
    return host_ms() - start_ms;
}

// One call of version index: src (bytes,) to a fresh device buffer, then back into back (bytes,). threads and
// chunk_bytes: versions 3 and 4's settings (threads 0: the default).
// dst's bytes all 0xff, which no float of the data is, so that a byte a copy missed shows; done before returning,
// since the memset runs on the default stream, which the versions' non-blocking stream does not wait for (without
// the wait it landed after a copy once in 6 runs of the suite on an H200)
static void poison_device(char *dst, size_t bytes) {
    cudaCheck(cudaMemset(dst, 0xff, bytes));
    cudaCheck(cudaDeviceSynchronize());
}

extern "C" void upload_ladder_run(int index, const void *src, void *back, size_t bytes, int threads,
                                  size_t chunk_bytes) {
    char *dst = NULL;
    cudaCheck(cudaMalloc(&dst, bytes));
    poison_device(dst, bytes);
    Upload u;
    upload_open(&u, &VERSIONS[index], dst, (const char *)src, bytes, threads, chunk_bytes);
    timed_call(&VERSIONS[index], &u);
    upload_close(&u);
    cudaCheck(cudaMemcpy(back, dst, bytes, cudaMemcpyDeviceToHost));
    cudaCheck(cudaFree(dst));
}

#ifndef LADDER_NO_MAIN
// ----------------------------------------------------------------------------
// the program: flags, the ceiling, the table, the check, the CSV rows

// The trainer's data (common/data.c): x evenly spaced in [0, 10), then y = 0.7 x + 0.3 + N(0, 0.1^2).
static void fill_points(float *xy, int64_t n) {
    Rng rng;
    rng_seed(&rng, 42);
    for (int64_t i = 0; i < n; i++) {
        xy[i] = (float)(10.0 * (double)i / (double)n);
        xy[n + i] = (float)(REGRESSION_TRUE_W * xy[i] + REGRESSION_TRUE_B + REGRESSION_NOISE * rng_normal(&rng));
    }
}

// The device's bytes against the source: the first wrong byte is one "error:" line and exit 1.
static void check_copy(const char *dst, const char *src, char *back, size_t bytes, int number, const char *name) {
    cudaCheck(cudaMemcpy(back, dst, bytes, cudaMemcpyDeviceToHost));
    if (memcmp(back, src, bytes) == 0) return;
    size_t at = 0;
    while (back[at] == src[at]) at++;
    fprintf(stderr, "error: version %d %s is wrong: device byte %zu of %zu is 0x%02x, the host's 0x%02x\n", number,
            name, at, bytes, (unsigned char)back[at], (unsigned char)src[at]);
    exit(EXIT_FAILURE);
}

int main(int argc, char **argv) {
    LadderSize sizes[] = LADDER_UPLOAD_SIZES;
    LadderOptions options;
    ladder_parse_args(argc, argv, LADDER_UPLOAD_USAGE, sizes, 3, VERSION_COUNT, upload_ladder_version_name, 1,
                      &options);
    DeviceInfo device;
    ladder_require_gpu(argv[0], &device);
    int64_t n = sizes[0].value;
    size_t bytes = 8 * (size_t)n, chunk = (size_t)sizes[2].value << 10;
    device_check_memory((double)bytes, "the points", "use a smaller --n");

    char *src = (char *)host_malloc(bytes, "x and y");          // (2n,) floats: x, then y
    char *back = (char *)host_malloc(bytes, "the copy back");   // (bytes,)
    fill_points((float *)src, n);
    char *pinned = (char *)host_pinned(bytes, "the ceiling's pinned copy");  // (bytes,)
    memcpy(pinned, src, bytes);
    char *dst = NULL;
    cudaCheck(cudaMalloc(&dst, bytes));
    int threads = (int)sizes[1].value;
    if (threads == 0) {  // the pool's default, named in the shape
        CopyPool *probe = copy_pool_create(0);
        threads = copy_pool_threads(probe);
        copy_pool_destroy(probe);
    }

    // the ceiling: cudaMemcpy from pinned memory, timed as the versions are
    double *ms = (double *)host_malloc(sizeof(double) * (size_t)options.repeats, "the run times");
    double *register_ms = (double *)host_malloc(sizeof(double) * (size_t)options.repeats, "the setup times");
    for (int run = -LADDER_WARMUP_RUNS; run < options.repeats; run++) {
        double start_ms = host_ms();
        cudaCheck(cudaMemcpy(dst, pinned, bytes, cudaMemcpyHostToDevice));
        cudaCheck(cudaDeviceSynchronize());
        if (run >= 0) ms[run] = host_ms() - start_ms;
    }

    LadderTable table;
    memset(&table, 0, sizeof(table));
    table.stage = "05";
    table.ladder = "upload";
    ladder_upload_shape(table.shape, sizeof(table.shape), n, threads, sizes[2].value);
    table.unit = "GB/s";
    table.work = (double)bytes;
    table.ceiling = "pinned cudaMemcpy";
    table.ceiling_time = ladder_stats(ms, options.repeats);
    table.repeats = options.repeats;
    table.show_setup = 1;
    table.device = &device;
    table.csv_path = options.csv_path;
    printf("upload of %lld points (x and y): %.1f MB from pageable host memory; versions 3, 4: %d threads, %lld KiB "
           "slots\n", (long long)n, table.work / 1e6, threads, (long long)sizes[2].value);
    printf("GPU: %s (cc %s, CUDA %s, driver %s); host clock from the call until the bytes are on the device\n",
           device.name, device.cc, device.cuda, device.driver);
    ladder_table_begin(&table);
    for (int v = options.first; v < options.last; v++) {
        const Version *version = &VERSIONS[v];
        Upload u;
        double setup_ms = upload_open(&u, version, dst, src, bytes, threads, chunk);
        poison_device(dst, bytes);
        timed_call(version, &u);
        check_copy(dst, src, back, bytes, v + 1, version->name);
        for (int run = -LADDER_WARMUP_RUNS; run < options.repeats; run++) {
            double elapsed = timed_call(version, &u);
            if (run >= 0) {
                ms[run] = elapsed;
                register_ms[run] = u.register_ms;
            }
        }
        upload_close(&u);
        if (version->call == registered_copy) setup_ms = ladder_stats(register_ms, options.repeats).median_ms;
        else if (version->call != staged_copy) setup_ms = NAN;
        ladder_table_row(&table, v + 1, version->name, ladder_stats(ms, options.repeats), setup_ms);
    }
    free(ms);
    free(register_ms);
    cudaCheck(cudaFree(dst));
    cudaCheck(cudaFreeHost(pinned));
    free(src);
    free(back);
    return EXIT_OK;
}
#endif
