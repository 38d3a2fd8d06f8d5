/*
Vector add, the warm-up: c = a + b on n floats, in nine versions that each change one thing. The
first four are about the kernel (how fast can the GPU add what it already holds?), the other five
about memory (what does it cost to get a and b to the GPU and c back?).

Build and run:
    make stage 1 run                               # = build/01/vector_add: every version, n = 2^26
    build/01/vector_add --n 1000003 --version float4
    build/01/vector_add --version 5 --csv results.csv
    make stage 1 test                              # every version, odd sizes, against the CPU

Versions (README.md says what each changes and what to expect):
    1 cpu                 a plain loop on the CPU
    2 thread-per-element  one GPU thread per element; pageable cudaMemcpy in and out
    3 grid-stride         a grid that fills the GPU once, each thread striding over the array
    4 float4              grid-stride with 16-byte loads and stores
    5 pinned              float4, host buffers page-locked so copies go straight to PCIe
    6 streams             pinned, in 8 chunks on 4 streams: copies overlap each other and the kernel
    7 managed             unified memory, no copies in the code: pages migrate when first touched
    8 managed-prefetch    unified memory moved in bulk with cudaMemPrefetchAsync
    9 curand              a and b generated on the GPU with cuRAND: nothing to copy in

Two times per version, medians of --repeat runs after 3 warm-ups, from CUDA events (the CPU loop:
wall clock): "kernel only" with the data already where it is computed, and "with transfers" from a
and b in host memory to c in host memory. Bandwidth counts the bytes the add must move: a and b
read, c written, 3 x 4 x n bytes. The ceiling is this GPU's cudaMemcpy from one device buffer to
another, measured in the same run (bytes read + written). Every c is poisoned (NaN) before each run
and checked bit-exactly against the CPU: fp32 addition is exact to compare, one rounding either way.

Exit codes: 0 ok; 1 a wrong result (or out of host memory); 2 an invalid flag or value, or an
unwritable --csv file; 4 no GPU, not enough GPU memory, or any CUDA error.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <curand.h>
#include "check.h"
#include "device.h"
#include "flags.h"
#include "host.h"
#include "ladder.h"
#include "report.h"

static const int THREADS_PER_BLOCK = 256;
static const int WARMUP_RUNS = 3;
static const int STREAM_COUNT = 4;
static const int CHUNK_COUNT = 8;
static const int64_t HOST_PAGE_BYTES = 4096;

// ----------------------------------------------------------------------------
// kernels

// Version 2: thread i adds element i; the grid has as many threads as there are elements.
__global__ void add_thread_per_element(const float *a, const float *b, float *c, int64_t n) {
    // EXERCISE(thread-per-element) begin: this thread's global index i from blockIdx.x, blockDim.x and
    //: threadIdx.x (as an int64_t: n may pass 2^31); the last block sticks out past n, so only i < n
    //: adds c[i] = a[i] + b[i].
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
    // EXERCISE end
}

// Version 3: a fixed grid sized to fill the GPU; each thread strides over the array by the
// grid's width, so neighbouring threads still touch neighbouring elements (coalesced).
__global__ void add_grid_stride(const float *a, const float *b, float *c, int64_t n) {
    // EXERCISE(grid-stride) begin: start at the same global index as version 2, then step by the whole
    //: grid's width (gridDim.x * blockDim.x threads) until past n: the grid no longer depends on n.
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        c[i] = a[i] + b[i];
    // EXERCISE end
}

// Version 4: grid-stride over groups of 4 elements, one 16-byte load per input and one 16-byte
// store per group: a quarter of the memory instructions. The buffers start 16-byte aligned; the
// last n % 4 elements (the tail) are added one by one by the first threads.
__global__ void add_float4(const float *a, const float *b, float *c, int64_t n) {
    // EXERCISE(float4) begin: the grid-stride loop of version 3 over the n / 4 groups, each one float4
    //: load of a and of b ((const float4 *)a)[i], and one float4 store to c; then the n % 4 elements past
    //: the last group, one each for the first n % 4 threads (the launcher makes enough of them).
    int64_t groups = n / 4;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (int64_t i = first; i < groups; i += stride) {
        float4 x = ((const float4 *)a)[i];
        float4 y = ((const float4 *)b)[i];
        ((float4 *)c)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    int64_t tail = 4 * groups + first;
    if (tail < n) c[tail] = a[tail] + b[tail];
    // EXERCISE end
}

// ----------------------------------------------------------------------------
// launchers: one per kernel, the same signature so that a version can take any of them

typedef void (*LaunchFn)(const float *a, const float *b, float *c, int64_t n, cudaStream_t stream);

static unsigned int blocks_for(int64_t threads) {
    return (unsigned int)((threads + THREADS_PER_BLOCK - 1) / THREADS_PER_BLOCK);
}

// Enough blocks to fill every SM to its thread limit once, and no more than the work needs.
static unsigned int blocks_filling_gpu(int64_t threads) {
    int device = 0, sm_count = 0, threads_per_sm = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
    cudaCheck(cudaDeviceGetAttribute(&threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device));
    unsigned int filling = (unsigned int)(sm_count * (threads_per_sm / THREADS_PER_BLOCK));
    unsigned int needed = blocks_for(threads);
    return needed < filling ? needed : filling;
}

static void launch_thread_per_element(const float *a, const float *b, float *c, int64_t n, cudaStream_t stream) {
    add_thread_per_element<<<blocks_for(n), THREADS_PER_BLOCK, 0, stream>>>(a, b, c, n);
    launchCheck();
}

static void launch_grid_stride(const float *a, const float *b, float *c, int64_t n, cudaStream_t stream) {
    add_grid_stride<<<blocks_filling_gpu(n), THREADS_PER_BLOCK, 0, stream>>>(a, b, c, n);
    launchCheck();
}

static void launch_float4(const float *a, const float *b, float *c, int64_t n, cudaStream_t stream) {
    add_float4<<<blocks_filling_gpu(n / 4 + n % 4), THREADS_PER_BLOCK, 0, stream>>>(a, b, c, n);
    launchCheck();
}

// ----------------------------------------------------------------------------
// what every version shares: the problem, its timing, poisoning

// One add to time. Inputs and output live in ordinary (pageable) host memory.
typedef struct {
    float *a, *b;  // [n] inputs; version 9 overwrites them with the values it generated and added
    float *c;      // [n] output
    int64_t n;
    int repeats;   // timed runs, after WARMUP_RUNS untimed ones
} Problem;

// Medians in ms; NaN where a figure does not apply to the version.
typedef struct {
    double kernel_ms;     // the add alone, the data already where it is computed
    double total_ms;      // from a and b in host memory to c in host memory
    const char *skipped;  // why the version cannot run on this machine, else NULL
} VersionTiming;

typedef VersionTiming (*VersionFn)(const Problem *p);

// The moments of one run, all recorded on one stream.
typedef struct {
    cudaEvent_t start, kernel_start, kernel_stop, stop;
} RunEvents;

static void run_events_create(RunEvents *ev) {
    cudaCheck(cudaEventCreate(&ev->start));
    cudaCheck(cudaEventCreate(&ev->kernel_start));
    cudaCheck(cudaEventCreate(&ev->kernel_stop));
    cudaCheck(cudaEventCreate(&ev->stop));
}

static void run_events_destroy(RunEvents *ev) {
    cudaCheck(cudaEventDestroy(ev->start));
    cudaCheck(cudaEventDestroy(ev->kernel_start));
    cudaCheck(cudaEventDestroy(ev->kernel_stop));
    cudaCheck(cudaEventDestroy(ev->stop));
}

static double elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, from, to));
    return ms;
}

// Waits for the run to end and keeps its times, unless it was a warm-up (run < 0).
// kernel_ms may be NULL for a version without a separate kernel time.
static void keep_times(const RunEvents *ev, int run, double *kernel_ms, double *total_ms) {
    cudaCheck(cudaEventSynchronize(ev->stop));
    if (run < 0) return;
    if (kernel_ms) kernel_ms[run] = elapsed_ms(ev->kernel_start, ev->kernel_stop);
    total_ms[run] = elapsed_ms(ev->start, ev->stop);
}

static double *alloc_times(int repeats) {
    double *times = (double *)malloc(sizeof(double) * (size_t)repeats);
    if (!times) {
        fprintf(stderr, "error: out of host memory for %d run times\n", repeats);
        exit(EXIT_FAILURE);
    }
    return times;
}

static VersionTiming medians(const Problem *p, double *kernel_ms, double *total_ms) {
    VersionTiming t = {kernel_ms ? median(kernel_ms, p->repeats) : NAN, median(total_ms, p->repeats), NULL};
    free(kernel_ms);
    free(total_ms);
    return t;
}

// All bits set is a NaN, so an element a version forgot to write cannot pass the check.
static void poison_host(float *c, int64_t n) { memset(c, 0xff, sizeof(float) * (size_t)n); }

static void poison_device(float *c, int64_t n, cudaStream_t stream) {
    cudaCheck(cudaMemsetAsync(c, 0xff, sizeof(float) * (size_t)n, stream));
}

static void add_on_cpu(const float *a, const float *b, float *c, int64_t n) {
    for (int64_t i = 0; i < n; i++) c[i] = a[i] + b[i];
}

// Refuses (one line, exit 4) rather than let unified memory oversubscribe the GPU, which would
// run, but would measure the driver's eviction instead of the add.
static void require_free_device_memory(size_t bytes, const char *what) {
    size_t free_bytes = 0, total_bytes = 0;
    cudaCheck(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (bytes <= free_bytes) return;
    fprintf(stderr, "error: %s needs %.0f MB of GPU memory but %.0f MB are free: use a smaller --n\n", what,
            bytes / 1e6, free_bytes / 1e6);
    exit(EXIT_CUDA);
}

// ----------------------------------------------------------------------------
// version 1: the CPU loop (wall clock; there is nothing to transfer, so both times are the loop)

static VersionTiming version_cpu(const Problem *p) {
    double *loop_ms = alloc_times(p->repeats);
    for (int run = -WARMUP_RUNS; run < p->repeats; run++) {
        poison_host(p->c, p->n);
        double start = host_ms();
        add_on_cpu(p->a, p->b, p->c, p->n);
        if (run >= 0) loop_ms[run] = host_ms() - start;
    }
    double ms = median(loop_ms, p->repeats);
    free(loop_ms);
    VersionTiming t = {ms, ms, NULL};
    return t;
}

// ----------------------------------------------------------------------------
// versions 2-5: copy a and b in, run the kernel, copy c out

// The host buffers decide how the copies go: from pageable memory the driver stages every copy
// through a pinned buffer of its own (an extra host memcpy); from pinned memory the GPU's copy
// engines read and write host memory directly (DMA). The copies are queued asynchronously: with
// pinned buffers the host queues the whole run at once and the GPU runs it back to back, so no
// launch latency lands between kernel_start and the kernel; with pageable buffers the driver makes
// the host wait for its staging copies anyway.
static VersionTiming time_copy_add_copy(const Problem *p, const float *host_a, const float *host_b,
                                        float *host_c, LaunchFn launch) {
    size_t bytes = sizeof(float) * (size_t)p->n;
    float *a, *b, *c;  // [n] each, device
    cudaCheck(cudaMalloc(&a, bytes));
    cudaCheck(cudaMalloc(&b, bytes));
    cudaCheck(cudaMalloc(&c, bytes));
    RunEvents ev;
    run_events_create(&ev);
    double *kernel_ms = alloc_times(p->repeats), *total_ms = alloc_times(p->repeats);
    for (int run = -WARMUP_RUNS; run < p->repeats; run++) {
        poison_host(host_c, p->n);
        poison_device(c, p->n, 0);
        cudaCheck(cudaEventRecord(ev.start, 0));
        cudaCheck(cudaMemcpyAsync(a, host_a, bytes, cudaMemcpyHostToDevice, 0));
        cudaCheck(cudaMemcpyAsync(b, host_b, bytes, cudaMemcpyHostToDevice, 0));
        cudaCheck(cudaEventRecord(ev.kernel_start, 0));
        launch(a, b, c, p->n, 0);
        cudaCheck(cudaEventRecord(ev.kernel_stop, 0));
        cudaCheck(cudaMemcpyAsync(host_c, c, bytes, cudaMemcpyDeviceToHost, 0));
        cudaCheck(cudaEventRecord(ev.stop, 0));
        keep_times(&ev, run, kernel_ms, total_ms);
    }
    run_events_destroy(&ev);
    cudaCheck(cudaFree(a));
    cudaCheck(cudaFree(b));
    cudaCheck(cudaFree(c));
    return medians(p, kernel_ms, total_ms);
}

static VersionTiming version_thread_per_element(const Problem *p) {
    return time_copy_add_copy(p, p->a, p->b, p->c, launch_thread_per_element);
}

static VersionTiming version_grid_stride(const Problem *p) {
    return time_copy_add_copy(p, p->a, p->b, p->c, launch_grid_stride);
}

static VersionTiming version_float4(const Problem *p) {
    return time_copy_add_copy(p, p->a, p->b, p->c, launch_float4);
}

// Pinned buffers hold page-locked copies of a and b made before the clock starts: a program that
// means to copy its data to the GPU allocates it pinned in the first place.
static VersionTiming version_pinned(const Problem *p) {
    size_t bytes = sizeof(float) * (size_t)p->n;
    float *a, *b, *c;  // [n] each, pinned host
    cudaCheck(cudaMallocHost(&a, bytes));
    cudaCheck(cudaMallocHost(&b, bytes));
    cudaCheck(cudaMallocHost(&c, bytes));
    memcpy(a, p->a, bytes);
    memcpy(b, p->b, bytes);
    VersionTiming t = time_copy_add_copy(p, a, b, c, launch_float4);
    memcpy(p->c, c, bytes);
    cudaCheck(cudaFreeHost(a));
    cudaCheck(cudaFreeHost(b));
    cudaCheck(cudaFreeHost(c));
    return t;
}

// ----------------------------------------------------------------------------
// version 6: chunks on streams. While chunk k is being added, chunk k+1's inputs are on their way
// in and chunk k-1's result on its way out (a GPU has separate copy engines for each direction),
// so the total approaches the slower of the two directions instead of the sum of everything.
// There is no kernel-only time: the kernels are spread among the copies.

static VersionTiming version_streams(const Problem *p) {
    size_t bytes = sizeof(float) * (size_t)p->n;
    float *host_a, *host_b, *host_c;  // [n] each, pinned host (copies from pageable memory would not overlap)
    float *a, *b, *c;                 // [n] each, device
    cudaCheck(cudaMallocHost(&host_a, bytes));
    cudaCheck(cudaMallocHost(&host_b, bytes));
    cudaCheck(cudaMallocHost(&host_c, bytes));
    cudaCheck(cudaMalloc(&a, bytes));
    cudaCheck(cudaMalloc(&b, bytes));
    cudaCheck(cudaMalloc(&c, bytes));
    memcpy(host_a, p->a, bytes);
    memcpy(host_b, p->b, bytes);

    cudaStream_t streams[STREAM_COUNT];
    cudaEvent_t stream_done[STREAM_COUNT];
    for (int s = 0; s < STREAM_COUNT; s++) {
        cudaCheck(cudaStreamCreate(&streams[s]));
        cudaCheck(cudaEventCreate(&stream_done[s]));
    }
    RunEvents ev;  // start and stop on streams[0]; the kernel events stay unused
    run_events_create(&ev);

    // A multiple of 4 elements, so that every chunk starts 16-byte aligned for the float4 kernel.
    int64_t chunk = ((p->n + CHUNK_COUNT - 1) / CHUNK_COUNT + 3) / 4 * 4;
    double *total_ms = alloc_times(p->repeats);
    for (int run = -WARMUP_RUNS; run < p->repeats; run++) {
        poison_host(host_c, p->n);
        poison_device(c, p->n, streams[0]);
        cudaCheck(cudaEventRecord(ev.start, streams[0]));
        for (int s = 1; s < STREAM_COUNT; s++) cudaCheck(cudaStreamWaitEvent(streams[s], ev.start, 0));
        for (int64_t first = 0, k = 0; first < p->n; first += chunk, k++) {
            cudaStream_t stream = streams[k % STREAM_COUNT];
            int64_t count = p->n - first < chunk ? p->n - first : chunk;
            size_t count_bytes = sizeof(float) * (size_t)count;
            cudaCheck(cudaMemcpyAsync(a + first, host_a + first, count_bytes, cudaMemcpyHostToDevice, stream));
            cudaCheck(cudaMemcpyAsync(b + first, host_b + first, count_bytes, cudaMemcpyHostToDevice, stream));
            launch_float4(a + first, b + first, c + first, count, stream);
            cudaCheck(cudaMemcpyAsync(host_c + first, c + first, count_bytes, cudaMemcpyDeviceToHost, stream));
        }
        // The run ends when every stream is done: streams[0] waits for them all, then records stop.
        for (int s = 0; s < STREAM_COUNT; s++) {
            cudaCheck(cudaEventRecord(stream_done[s], streams[s]));
            cudaCheck(cudaStreamWaitEvent(streams[0], stream_done[s], 0));
        }
        cudaCheck(cudaEventRecord(ev.stop, streams[0]));
        keep_times(&ev, run, NULL, total_ms);
    }
    memcpy(p->c, host_c, bytes);

    run_events_destroy(&ev);
    for (int s = 0; s < STREAM_COUNT; s++) {
        cudaCheck(cudaStreamDestroy(streams[s]));
        cudaCheck(cudaEventDestroy(stream_done[s]));
    }
    cudaCheck(cudaFree(a));
    cudaCheck(cudaFree(b));
    cudaCheck(cudaFree(c));
    cudaCheck(cudaFreeHost(host_a));
    cudaCheck(cudaFreeHost(host_b));
    cudaCheck(cudaFreeHost(host_c));
    return medians(p, NULL, total_ms);
}

// ----------------------------------------------------------------------------
// versions 7-8: unified memory. One pointer valid on host and device; the driver moves pages to
// whichever processor touches them. Every run starts like the first: the host writes a and b and
// poisons c, so all three live in host memory, and the run ends when the host has touched c.

// One read per host page, the way a program first uses its result: any page of c still on the GPU
// migrates back now. volatile keeps the compiler from dropping reads whose values go unused.
static void touch_on_host(const float *c, int64_t n) {
    const volatile float *pages = c;
    for (int64_t i = 0; i < n; i += HOST_PAGE_BYTES / (int64_t)sizeof(float)) (void)pages[i];
}

static VersionTiming time_managed(const Problem *p, int prefetch) {
    size_t bytes = sizeof(float) * (size_t)p->n;
    require_free_device_memory(3 * bytes, "unified memory for a, b and c");
    int device = 0;
    cudaCheck(cudaGetDevice(&device));
    struct cudaMemLocation on_device = {cudaMemLocationTypeDevice, device};
    struct cudaMemLocation on_host = {cudaMemLocationTypeHost, 0};

    float *a, *b, *c;  // [n] each, managed
    cudaCheck(cudaMallocManaged(&a, bytes, cudaMemAttachGlobal));
    cudaCheck(cudaMallocManaged(&b, bytes, cudaMemAttachGlobal));
    cudaCheck(cudaMallocManaged(&c, bytes, cudaMemAttachGlobal));
    RunEvents ev;
    run_events_create(&ev);
    double *kernel_ms = alloc_times(p->repeats), *total_ms = alloc_times(p->repeats);
    for (int run = -WARMUP_RUNS; run < p->repeats; run++) {
        memcpy(a, p->a, bytes);
        memcpy(b, p->b, bytes);
        poison_host(c, p->n);
        cudaCheck(cudaEventRecord(ev.start, 0));
        if (prefetch) {
            cudaCheck(cudaMemPrefetchAsync(a, bytes, on_device, 0, 0));
            cudaCheck(cudaMemPrefetchAsync(b, bytes, on_device, 0, 0));
            // c too: its pages hold the poison in host memory, and a write migrates a page as a read does.
            cudaCheck(cudaMemPrefetchAsync(c, bytes, on_device, 0, 0));
        }
        cudaCheck(cudaEventRecord(ev.kernel_start, 0));
        launch_float4(a, b, c, p->n, 0);
        cudaCheck(cudaEventRecord(ev.kernel_stop, 0));
        if (prefetch) cudaCheck(cudaMemPrefetchAsync(c, bytes, on_host, 0, 0));
        cudaCheck(cudaStreamSynchronize(0));
        touch_on_host(c, p->n);
        // The GPU is idle by now, so this event is stamped when the host records it: after the touch.
        cudaCheck(cudaEventRecord(ev.stop, 0));
        keep_times(&ev, run, kernel_ms, total_ms);
    }
    memcpy(p->c, c, bytes);
    run_events_destroy(&ev);
    cudaCheck(cudaFree(a));
    cudaCheck(cudaFree(b));
    cudaCheck(cudaFree(c));
    return medians(p, kernel_ms, total_ms);
}

// Without prefetching, the kernel itself pays for the migration: each first touch of a page on
// the GPU is a page fault that stalls the warps waiting for it while the driver copies the page.
static VersionTiming version_managed(const Problem *p) { return time_managed(p, 0); }

static VersionTiming version_managed_prefetch(const Problem *p) {
    int device = 0, concurrent = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, device));
    if (!concurrent) {
        VersionTiming t = {NAN, NAN, "this GPU and OS cannot prefetch unified memory (no concurrent managed access)"};
        return t;
    }
    return time_managed(p, 1);
}

// ----------------------------------------------------------------------------
// version 9: a and b made on the GPU by cuRAND (uniform in (0, 1]): the fastest copy is the one
// not made. Only c goes back, into pinned memory as in version 5, the row to compare with.

static VersionTiming version_curand(const Problem *p) {
    size_t bytes = sizeof(float) * (size_t)p->n;
    float *a, *b, *c;  // [n] each, device
    float *host_c;     // [n] pinned host
    cudaCheck(cudaMalloc(&a, bytes));
    cudaCheck(cudaMalloc(&b, bytes));
    cudaCheck(cudaMalloc(&c, bytes));
    cudaCheck(cudaMallocHost(&host_c, bytes));
    curandGenerator_t generator;
    curandCheck(curandCreateGenerator(&generator, CURAND_RNG_PSEUDO_PHILOX4_32_10));
    curandCheck(curandSetPseudoRandomGeneratorSeed(generator, 42));
    curandCheck(curandSetStream(generator, 0));
    RunEvents ev;
    run_events_create(&ev);
    double *kernel_ms = alloc_times(p->repeats), *total_ms = alloc_times(p->repeats);
    for (int run = -WARMUP_RUNS; run < p->repeats; run++) {
        poison_host(host_c, p->n);
        poison_device(c, p->n, 0);
        cudaCheck(cudaEventRecord(ev.start, 0));
        curandCheck(curandGenerateUniform(generator, a, (size_t)p->n));
        curandCheck(curandGenerateUniform(generator, b, (size_t)p->n));
        cudaCheck(cudaEventRecord(ev.kernel_start, 0));
        launch_float4(a, b, c, p->n, 0);
        cudaCheck(cudaEventRecord(ev.kernel_stop, 0));
        cudaCheck(cudaMemcpyAsync(host_c, c, bytes, cudaMemcpyDeviceToHost, 0));
        cudaCheck(cudaEventRecord(ev.stop, 0));
        keep_times(&ev, run, kernel_ms, total_ms);
    }
    // The check adds on the CPU the values the last run added on the GPU.
    cudaCheck(cudaMemcpy(p->a, a, bytes, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(p->b, b, bytes, cudaMemcpyDeviceToHost));
    memcpy(p->c, host_c, bytes);

    run_events_destroy(&ev);
    curandCheck(curandDestroyGenerator(generator));
    cudaCheck(cudaFree(a));
    cudaCheck(cudaFree(b));
    cudaCheck(cudaFree(c));
    cudaCheck(cudaFreeHost(host_c));
    return medians(p, kernel_ms, total_ms);
}

// ----------------------------------------------------------------------------
// the versions, in the order the README reads them

typedef struct {
    int number;
    const char *name;
    VersionFn run;
} Version;

static const Version VERSIONS[] = {
    {1, "cpu", version_cpu},
    {2, "thread-per-element", version_thread_per_element},
    {3, "grid-stride", version_grid_stride},
    {4, "float4", version_float4},
    {5, "pinned", version_pinned},
    {6, "streams", version_streams},
    {7, "managed", version_managed},
    {8, "managed-prefetch", version_managed_prefetch},
    {9, "curand", version_curand},
};
static const int VERSION_COUNT = (int)(sizeof(VERSIONS) / sizeof(VERSIONS[0]));

// For tests/gpu/test_vector_add.c, which declares these three itself. index counts from 0.
extern "C" int vector_add_version_count(void) { return VERSION_COUNT; }

extern "C" const char *vector_add_version_name(int index) { return VERSIONS[index].name; }

// Runs one version on host buffers a, b, c of n floats; returns why it was skipped, or NULL.
extern "C" const char *vector_add_run(int index, float *a, float *b, float *c, int64_t n, int repeats) {
    Problem p = {a, b, c, n, repeats};
    return VERSIONS[index].run(&p).skipped;
}

#ifndef VECTOR_ADD_NO_MAIN
// ----------------------------------------------------------------------------
// the program: flags, the ceiling, the table, the check, the CSV rows

static const int64_t DEFAULT_N = (int64_t)1 << 26;
static const int64_t MAX_N = INT32_MAX;
static const int DEFAULT_REPEATS = 20;
static const int MAX_REPEATS = 1000;

static void print_usage(const char *program, FILE *out) {
    fprintf(out,
            "usage: %s [--n N] [--version K|NAME|all] [--repeat R] [--csv FILE]\n"
            "  c = a + b on N floats (default 2^26 = %lld), every version or one, each checked against the CPU.\n"
            "  --n N        elements, 1 .. %lld\n"
            "  --version    1..%d, a name, or all (default):",
            program, (long long)DEFAULT_N, (long long)MAX_N, VERSION_COUNT);
    for (int v = 0; v < VERSION_COUNT; v++)
        fprintf(out, " %d %s%s", VERSIONS[v].number, VERSIONS[v].name, v + 1 < VERSION_COUNT ? "," : "\n");
    fprintf(out,
            "  --repeat R   timed runs per version, after 3 warm-ups; medians are reported (default %d)\n"
            "  --csv FILE   append one result row per version (header written when the file is new)\n",
            DEFAULT_REPEATS);
}

// The inputs: reproducible, of mixed signs and magnitudes, so that most sums have to round.
static void fill_inputs(float *a, float *b, int64_t n) {
    uint64_t state = 42;
    for (int64_t i = 0; i < n; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = (float)((int32_t)(state >> 32)) / 2147483648.0f;           // [-1, 1)
        b[i] = (float)((int32_t)(state & 0xffffffffu)) / 2097152.0f;      // [-1024, 1024)
    }
}

// The ceiling: cudaMemcpy from one device buffer to another, with as many elements as the add.
static double copy_ms(int64_t n, int repeats) {
    size_t bytes = sizeof(float) * (size_t)n;
    float *src, *dst;  // [n] each, device
    cudaCheck(cudaMalloc(&src, bytes));
    cudaCheck(cudaMalloc(&dst, bytes));
    cudaCheck(cudaMemset(src, 0, bytes));
    RunEvents ev;
    run_events_create(&ev);
    double *total_ms = alloc_times(repeats);
    for (int run = -WARMUP_RUNS; run < repeats; run++) {
        cudaCheck(cudaEventRecord(ev.start, 0));
        cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
        cudaCheck(cudaEventRecord(ev.stop, 0));
        keep_times(&ev, run, NULL, total_ms);
    }
    double ms = median(total_ms, repeats);
    free(total_ms);
    run_events_destroy(&ev);
    cudaCheck(cudaFree(src));
    cudaCheck(cudaFree(dst));
    return ms;
}

// Bit-exact: one IEEE fp32 addition rounds the same on both processors. A mismatch names the first
// wrong element and exits 1.
static void check_against_cpu(const Version *v, const Problem *p, float *expected) {
    add_on_cpu(p->a, p->b, expected, p->n);
    if (memcmp(expected, p->c, sizeof(float) * (size_t)p->n) == 0) return;
    int64_t i = 0;
    while (memcmp(&expected[i], &p->c[i], sizeof(float)) == 0) i++;
    fprintf(stderr, "error: version %d %s is wrong: c[%lld] = %.9g but a + b = %.9g (%.9g + %.9g)\n", v->number,
            v->name, (long long)i, p->c[i], expected[i], p->a[i], p->b[i]);
    exit(EXIT_FAILURE);
}

// Four columns: ms, GB/s, % of the copy ceiling, speedup over the row above.
static void print_figure_titles(void) { printf(" %10s %9s %7s %8s", "ms", "GB/s", "% copy", "speedup"); }

// The four columns for one time; dashes where it is missing.
static void print_figures(double ms, double previous_ms, double bytes, double ceiling_gbps) {
    if (isnan(ms)) {
        printf(" %10s %9s %7s %8s", "-", "-", "-", "-");
        return;
    }
    double gbps = bytes / ms / 1e6;
    if (isnan(ceiling_gbps)) printf(" %10.4f %9.1f %7s", ms, gbps, "-");
    else printf(" %10.4f %9.1f %6.1f%%", ms, gbps, 100.0 * gbps / ceiling_gbps);
    if (isnan(previous_ms)) printf(" %8s", "-");
    else printf(" %7.2fx", previous_ms / ms);
}

static void append_csv(const char *path, const Version *v, const Problem *p, VersionTiming t, const DeviceInfo *dev) {
    ResultRow row;
    result_row_init(&row);
    snprintf(row.stage, sizeof(row.stage), "01");
    snprintf(row.trainer, sizeof(row.trainer), "vector-add");
    snprintf(row.variant, sizeof(row.variant), "%s", v->name);
    row.points = p->n;
    snprintf(row.precision, sizeof(row.precision), "fp32");
    snprintf(row.device, sizeof(row.device), "%s", dev->name);
    snprintf(row.cc, sizeof(row.cc), "%s", dev->cc);
    snprintf(row.cuda, sizeof(row.cuda), "%s", dev->cuda);
    snprintf(row.driver, sizeof(row.driver), "%s", dev->driver);
    row.e2e_ms = t.total_ms;
    row.loop_ms = t.kernel_ms;
    char err[256];
    if (report_append_csv(&row, path, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        exit(EXIT_USAGE);
    }
}

int main(int argc, char **argv) {
    const char *program = argv[0];
    int64_t n = DEFAULT_N;
    int repeats = DEFAULT_REPEATS, first = 0, last = VERSION_COUNT;
    const char *csv_path = NULL;
    // the ladders' scanner and parsers (common/flags.c, common/ladder.c): the same flags read the same way
    enum { F_N, F_VERSION, F_REPEAT, F_CSV, F_HELP };
    const struct option flags[] = {[F_N] = {"n", required_argument, NULL, 0},
                                   [F_VERSION] = {"version", required_argument, NULL, 0},
                                   [F_REPEAT] = {"repeat", required_argument, NULL, 0},
                                   [F_CSV] = {"csv", required_argument, NULL, 0},
                                   [F_HELP] = {"help", no_argument, NULL, 0}, {NULL, 0, NULL, 0}};
    FlagScan scan = {argc, argv, flags, NULL, 0, NULL};
    for (int found; (found = flags_next(&scan)) != FLAG_END;) {
        if (found == FLAG_MISSING) ladder_usage_error(program, "missing value after", scan.word);
        if (found != FLAG_OK) ladder_usage_error(program, "unknown flag", scan.word);
        if (scan.flag == F_N) {
            n = ladder_parse_count(program, "--n", scan.value, 1, MAX_N);
        } else if (scan.flag == F_REPEAT) {
            repeats = (int)ladder_parse_count(program, "--repeat", scan.value, 1, MAX_REPEATS);
        } else if (scan.flag == F_VERSION) {
            ladder_parse_version(program, scan.value, VERSION_COUNT, vector_add_version_name, &first, &last);
        } else if (scan.flag == F_CSV) {
            csv_path = scan.value;
        } else {
            print_usage(program, stdout);
            return EXIT_OK;
        }
    }

    int device_count = 0;
    // without a GPU, version 1 (the CPU loop) alone still runs: --version cpu
    cudaError_t status = cudaGetDeviceCount(&device_count);
    int gpu = status == cudaSuccess && device_count > 0;
    if (!gpu && (first != 0 || last != 1)) {
        char reason[160];
        device_absence(status, reason, sizeof(reason));
        fprintf(stderr, "error: no CUDA device found (%s): vector_add needs an NVIDIA GPU and its driver "
                        "(--version cpu runs without one)\n", reason);
        return EXIT_CUDA;
    }
    DeviceInfo dev;
    size_t bytes = sizeof(float) * (size_t)n;
    if (gpu) {
        if (device_query(&dev) != 0) return EXIT_CUDA;
        require_free_device_memory(3 * bytes, "a, b and c");
    } else {
        host_describe(&dev);
    }

    float *a = (float *)malloc(bytes), *b = (float *)malloc(bytes), *c = (float *)malloc(bytes);
    float *expected = (float *)malloc(bytes);  // [n] each, host
    if (!a || !b || !c || !expected) {
        fprintf(stderr, "error: out of host memory for 4 buffers of %.0f MB: use a smaller --n\n", bytes / 1e6);
        return EXIT_FAILURE;
    }
    fill_inputs(a, b, n);
    Problem p = {a, b, c, n, repeats};

    double add_bytes = 3.0 * (double)bytes;  // a and b read, c written
    double ceiling_ms = gpu ? copy_ms(n, repeats) : NAN;
    double ceiling_gbps = 2.0 * (double)bytes / ceiling_ms / 1e6;  // read + written (NaN: no GPU, no ceiling)
    printf("vector add c = a + b, n = %lld floats: %.1f MB moved per add (a and b read, c written)\n", (long long)n,
           add_bytes / 1e6);
    if (gpu) {
        printf("GPU: %s (cc %s, CUDA %s, driver %s)\n", dev.name, dev.cc, dev.cuda, dev.driver);
        printf("ceiling: cudaMemcpy device to device of %.1f MB in %.4f ms = %.1f GB/s (read + written)\n",
               bytes / 1e6, ceiling_ms, ceiling_gbps);
    } else {
        printf("CPU: %s (no CUDA device: the CPU version alone, without a ceiling)\n", dev.name);
    }
    printf("medians of %d runs after %d warm-ups; every c poisoned first and checked bit-exactly against the CPU\n\n",
           repeats, WARMUP_RUNS);
    printf("%-22s | %-37s | %s\n", "", "kernel only (data already in place)", "with transfers (host to host)");
    printf("%-22s |", "  # version");
    print_figure_titles();
    printf(" |");
    print_figure_titles();
    printf("\n");

    double previous_kernel_ms = NAN, previous_total_ms = NAN, best_gbps = 0.0;
    const char *best_name = NULL;
    for (int v = first; v < last; v++) {
        const Version *version = &VERSIONS[v];
        poison_host(c, n);
        VersionTiming t = version->run(&p);
        printf("%3d %-18s |", version->number, version->name);
        if (t.skipped) {
            printf(" skipped: %s\n", t.skipped);
            previous_kernel_ms = previous_total_ms = NAN;
            continue;
        }
        check_against_cpu(version, &p, expected);
        print_figures(t.kernel_ms, previous_kernel_ms, add_bytes, ceiling_gbps);
        printf(" |");
        print_figures(t.total_ms, previous_total_ms, add_bytes, ceiling_gbps);
        printf("\n");
        fflush(stdout);
        if (csv_path) append_csv(csv_path, version, &p, t, &dev);
        double kernel_gbps = add_bytes / t.kernel_ms / 1e6;
        if (v > 0 && kernel_gbps > best_gbps) {  // VERSIONS[0] is the CPU; NaN compares false
            best_gbps = kernel_gbps;
            best_name = version->name;
        }
        previous_kernel_ms = t.kernel_ms;
        previous_total_ms = t.total_ms;
    }
    if (best_name)
        printf("\nbest GPU kernel: %s, %.1f GB/s = %.1f%% of the device-to-device copy\n", best_name, best_gbps,
               100.0 * best_gbps / ceiling_gbps);

    free(a);
    free(b);
    free(c);
    free(expected);
    return EXIT_OK;
}
#endif
