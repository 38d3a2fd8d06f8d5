// tests/test_copy_pool.c: Criterion suite "copy_pool" for common/copy_pool.c, the host threads that fill
// the trainers' pinned staging buffers: every byte copied exactly once, whatever the size and thread
// count (sizes of 0, 1 byte, under a cache line per thread, and odd), the parts never sharing a cache
// line, and many jobs in a row on one pool (each thread must take every job, and only once).
//
//     make test          (part of build/tests/test_cpu)
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "copy_pool.h"

static void fill(uint8_t *bytes, size_t n, uint32_t seed) {
    uint32_t state = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        state = state * 1664525u + 1013904223u;
        bytes[i] = (uint8_t)(state >> 24);
    }
}

// Copies n bytes from a source at an odd offset to a destination at dst_offset (16: aligned, where a pool set to
// stream streams its stores; 1: not), and checks the copy and the guard bytes around it.
static void check_copy_at(CopyPool *pool, size_t n, uint32_t seed, size_t dst_offset) {
    uint8_t *src = malloc(n + 3), *dst = aligned_alloc(64, (n + dst_offset + 1 + 63) / 64 * 64);
    cr_assert(src && dst);
    fill(src, n + 3, seed);
    memset(dst, 0xA5, n + dst_offset + 1);
    copy_pool_memcpy(pool, dst + dst_offset, src + 3, n);
    cr_assert_eq(dst[dst_offset - 1], 0xA5, "byte before the copy written (n = %zu)", n);
    cr_assert_eq(dst[dst_offset + n], 0xA5, "byte after the copy written (n = %zu)", n);
    cr_assert_eq(memcmp(dst + dst_offset, src + 3, n), 0, "n = %zu, %d threads, destination offset %zu: copy differs",
                 n, copy_pool_threads(pool), dst_offset);
    free(src);
    free(dst);
}

static void check_copy(CopyPool *pool, size_t n, uint32_t seed) {
    check_copy_at(pool, n, seed, 1);
    check_copy_at(pool, n, seed, 16);
}

static const size_t SIZES[] = {0, 1, 63, 64, 65, 1000, 4096 + 7, (1 << 20) + 13};
#define SIZE_COUNT (sizeof(SIZES) / sizeof(SIZES[0]))

Test(copy_pool, every_size_and_thread_count) {
    static const int threads[] = {1, 2, 3, 8, 13};
    for (size_t t = 0; t < sizeof(threads) / sizeof(threads[0]); t++) {
        CopyPool *pool = copy_pool_create(threads[t]);
        cr_assert_eq(copy_pool_threads(pool), threads[t]);
        for (int streaming = 1; streaming >= 0; streaming--) {
            copy_pool_set_streaming(pool, streaming);
            for (size_t s = 0; s < SIZE_COUNT; s++) check_copy(pool, SIZES[s], (uint32_t)(t * 31 + s));
        }
        copy_pool_destroy(pool);
    }
}

Test(copy_pool, many_jobs_in_a_row) {
    CopyPool *pool = copy_pool_create(4);
    copy_pool_set_streaming(pool, 1);  // as the staging ring sets it
    for (uint32_t job = 0; job < 2000; job++) check_copy(pool, 100 + job % 700, job);
    copy_pool_destroy(pool);
}

Test(copy_pool, default_and_limits) {
    CopyPool *pool = copy_pool_create(0);  // the online CPUs, capped
    cr_assert(copy_pool_threads(pool) >= 1 && copy_pool_threads(pool) <= COPY_POOL_DEFAULT_THREADS);
    check_copy(pool, 12345, 1);
    copy_pool_destroy(pool);
    pool = copy_pool_create(COPY_POOL_MAX_THREADS + 5);
    cr_assert_eq(copy_pool_threads(pool), COPY_POOL_MAX_THREADS);
    check_copy(pool, 64 * COPY_POOL_MAX_THREADS + 1, 2);
    copy_pool_destroy(pool);
}

Test(copy_pool, parts_tile_the_buffer_in_whole_cache_lines) {
    static const int threads[] = {1, 3, 8, 64};
    for (size_t t = 0; t < sizeof(threads) / sizeof(threads[0]); t++) {
        for (size_t s = 0; s < SIZE_COUNT; s++) {
            size_t n = SIZES[s];
            cr_assert_eq(copy_pool_part_start(n, threads[t], 0), 0);
            cr_assert_eq(copy_pool_part_start(n, threads[t], threads[t]), n, "n = %zu, %d threads", n, threads[t]);
            for (int i = 1; i <= threads[t]; i++) {
                size_t start = copy_pool_part_start(n, threads[t], i), before = copy_pool_part_start(n, threads[t], i - 1);
                cr_assert(start >= before, "parts out of order: n = %zu, %d threads, part %d", n, threads[t], i);
                cr_assert(start == n || start % 64 == 0, "part %d of %zu bytes starts mid-line at %zu", i, n, start);
            }
        }
    }
}
