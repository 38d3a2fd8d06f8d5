// common/copy_pool.c: see copy_pool.h. Tested by tests/test_copy_pool.c.
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "copy_pool.h"
#include "exit_codes.h"
#include "host.h"

#define LINE_BYTES 64
// How long a thread polls for the next job, or the caller for the end of this one, before sleeping on a
// condition variable. An upload hands out a job every ~100 µs; waking a sleeping thread costs tens of µs,
// as much as its part of a chunk takes to copy. Between uploads the threads sleep.
#define SPIN_NS 2000000L

typedef struct {
    CopyPool *pool;
    int index;  // 1 .. threads - 1: the caller copies part 0
} Worker;

struct CopyPool {
    int threads;
    int streaming;  // copies use streaming stores (copy_streaming) where the destination allows
    pthread_t ids[COPY_POOL_MAX_THREADS];
    Worker workers[COPY_POOL_MAX_THREADS];
    pthread_mutex_t lock;
    pthread_cond_t work;  // a new job (generation advanced) or stop, for a sleeping worker
    pthread_cond_t done;  // pending reached 0, for a sleeping caller
    // the job: written before generation advances, read after a worker sees it advance
    _Atomic unsigned long generation;  // advanced once per job, under lock: a worker copies each generation once
    char *dst;
    const char *src;
    size_t bytes;
    _Atomic int pending;  // workers still copying this job
    _Atomic int stop;
};

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

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
        for (size_t i = 0; i < whole; i += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
            __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
            __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
            _mm_stream_si128((__m128i *)(dst + i), a);
            _mm_stream_si128((__m128i *)(dst + i + 16), b);
            _mm_stream_si128((__m128i *)(dst + i + 32), c);
            _mm_stream_si128((__m128i *)(dst + i + 48), d);
        }
        _mm_sfence();  // streaming stores are weakly ordered: done before the part is reported done
        dst += whole, src += whole, bytes -= whole;
    }
#endif
    memcpy(dst, src, bytes);
}

static void copy_part(CopyPool *pool, int index, char *dst, const char *src, size_t bytes) {
    size_t start = copy_pool_part_start(bytes, pool->threads, index);
    size_t end = copy_pool_part_start(bytes, pool->threads, index + 1);
    if (end <= start) return;
    if (pool->streaming) copy_streaming(dst + start, src + start, end - start);
    else memcpy(dst + start, src + start, end - start);
}

static void *worker_main(void *arg) {
    Worker *self = (Worker *)arg;
    CopyPool *pool = self->pool;
    unsigned long seen = 0;
    for (;;) {
        for (long start = now_ns(); atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop) &&
                                    now_ns() - start < SPIN_NS;) {
            sched_yield();  // where threads outnumber cores, let the copying ones run
        }
        pthread_mutex_lock(&pool->lock);
        while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop))
            pthread_cond_wait(&pool->work, &pool->lock);
        pthread_mutex_unlock(&pool->lock);
        if (atomic_load(&pool->stop)) return NULL;
        seen = atomic_load(&pool->generation);
        copy_part(pool, self->index, pool->dst, pool->src, pool->bytes);
        if (atomic_fetch_sub(&pool->pending, 1) == 1) {
            pthread_mutex_lock(&pool->lock);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->lock);
        }
    }
}

CopyPool *copy_pool_create(int threads) {
    if (threads <= 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        threads = online < 1 ? 1 : online < COPY_POOL_DEFAULT_THREADS ? (int)online : COPY_POOL_DEFAULT_THREADS;
    }
    if (threads > COPY_POOL_MAX_THREADS) threads = COPY_POOL_MAX_THREADS;
    CopyPool *pool = (CopyPool *)host_malloc(sizeof(CopyPool), "the copy threads");
    memset(pool, 0, sizeof(*pool));
    pool->threads = threads;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->work, NULL);
    pthread_cond_init(&pool->done, NULL);
    for (int t = 1; t < threads; t++) {
        pool->workers[t] = (Worker){pool, t};
        int status = pthread_create(&pool->ids[t], NULL, worker_main, &pool->workers[t]);
        if (status != 0) {
            fprintf(stderr, "error: cannot start copy thread %d of %d: %s\n", t, threads, strerror(status));
            exit(EXIT_HOST_MEMORY);
        }
    }
    return pool;
}

int copy_pool_threads(const CopyPool *pool) { return pool->threads; }

void copy_pool_set_streaming(CopyPool *pool, int streaming) { pool->streaming = streaming; }

void copy_pool_memcpy(CopyPool *pool, void *dst, const void *src, size_t bytes) {
    if (pool->threads == 1) {  // no hand-off: the caller's copy is the whole job
        copy_part(pool, 0, (char *)dst, (const char *)src, bytes);
        return;
    }
    pool->dst = (char *)dst;
    pool->src = (const char *)src;
    pool->bytes = bytes;
    atomic_store(&pool->pending, pool->threads - 1);
    pthread_mutex_lock(&pool->lock);  // a worker checks generation under lock before it sleeps: no lost wake-up
    atomic_fetch_add(&pool->generation, 1);
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->lock);
    copy_part(pool, 0, (char *)dst, (const char *)src, bytes);
    for (long start = now_ns(); atomic_load(&pool->pending) > 0 && now_ns() - start < SPIN_NS;) {
        sched_yield();
    }
    pthread_mutex_lock(&pool->lock);
    while (atomic_load(&pool->pending) > 0) pthread_cond_wait(&pool->done, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
}

void copy_pool_destroy(CopyPool *pool) {
    pthread_mutex_lock(&pool->lock);
    atomic_store(&pool->stop, 1);
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->lock);
    for (int t = 1; t < pool->threads; t++) pthread_join(pool->ids[t], NULL);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->work);
    pthread_cond_destroy(&pool->done);
    free(pool);
}
