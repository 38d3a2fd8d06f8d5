// common/copy_pool.c: see copy_pool.h. Tested by tests/test_copy_pool.c. The threads are an OpenMP team:
// its threads persist between parallel regions and wait for the next one (spinning a while, then sleeping:
// OMP_WAIT_POLICY), which is what a copy handed out every ~100 µs needs.
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "copy_pool.h"
#include "host.h"

#define LINE_BYTES 64

struct CopyPool {
    int threads;
    int streaming;  // copies use streaming stores (copy_streaming) where the destination allows
};

size_t copy_pool_part_start(size_t bytes, int threads, int index) {
    size_t lines = (bytes + LINE_BYTES - 1) / LINE_BYTES;
    size_t per_thread = (lines + (size_t)threads - 1) / (size_t)threads;
    size_t start = per_thread * (size_t)index * LINE_BYTES;
    return start < bytes ? start : bytes;
}

// memcpy with stores that bypass the cache: the staging slot is read next by the copy engine, not by this
// core, so a cached store's read-for-ownership of each destination line is wasted memory traffic.
static void copy_streaming(char *dst, const char *src, size_t bytes) {
#ifdef __SSE2__
    if (((uintptr_t)dst & 15) == 0) {
        size_t whole = bytes & ~(size_t)63;
        for (size_t i = 0; i < whole; i += 16)
            _mm_stream_si128((__m128i *)(dst + i), _mm_loadu_si128((const __m128i *)(src + i)));
        _mm_sfence();  // streaming stores are weakly ordered: done before the part is reported done
        dst += whole, src += whole, bytes -= whole;
    }
#endif
    memcpy(dst, src, bytes);
}

static void copy_part(const CopyPool *pool, int index, char *dst, const char *src, size_t bytes) {
    size_t start = copy_pool_part_start(bytes, pool->threads, index);
    size_t end = copy_pool_part_start(bytes, pool->threads, index + 1);
    if (end <= start) return;
    if (pool->streaming) copy_streaming(dst + start, src + start, end - start);
    else memcpy(dst + start, src + start, end - start);
}

CopyPool *copy_pool_create(int threads) {
    if (threads <= 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        threads = online < 1 ? 1 : online < COPY_POOL_DEFAULT_THREADS ? (int)online : COPY_POOL_DEFAULT_THREADS;
    }
    if (threads > COPY_POOL_MAX_THREADS) threads = COPY_POOL_MAX_THREADS;
    CopyPool *pool = (CopyPool *)host_malloc(sizeof(CopyPool), "the copy threads");
    *pool = (CopyPool){threads, 0};
    return pool;
}

int copy_pool_threads(const CopyPool *pool) { return pool->threads; }

void copy_pool_set_streaming(CopyPool *pool, int streaming) { pool->streaming = streaming; }

// One part a thread. A team smaller than asked for (the runtime may give fewer threads) copies the missing
// parts too, so every byte is copied whatever omp_get_num_threads() turns out to be.
void copy_pool_memcpy(CopyPool *pool, void *dst, const void *src, size_t bytes) {
#pragma omp parallel num_threads(pool->threads) if (pool->threads > 1)
    for (int part = omp_get_thread_num(); part < pool->threads; part += omp_get_num_threads())
        copy_part(pool, part, (char *)dst, (const char *)src, bytes);
}

void copy_pool_destroy(CopyPool *pool) { free(pool); }
