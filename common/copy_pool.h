// common/copy_pool.h: host threads that memcpy one buffer together. A single core's memcpy moves about
// 10 GB/s; PCIe from pinned memory carries several times that, so an upload from pageable memory
// through pinned staging buffers is limited by the host's copy into them unless several cores share it
// (05-streams/upload_ladder.cu measures this; the trainers of stages 05-07 stage their uploads with it).
#ifndef COPY_POOL_H
#define COPY_POOL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COPY_POOL_MAX_THREADS 64
#define COPY_POOL_DEFAULT_THREADS 8  // at most: copy_pool_create(0) takes no more than the online CPUs

typedef struct CopyPool CopyPool;

// threads copying (the caller counts as one), 1 .. COPY_POOL_MAX_THREADS; 0: the default, the online
// CPUs capped at COPY_POOL_DEFAULT_THREADS. The threads are an OpenMP team, started at the first copy.
CopyPool *copy_pool_create(int threads);
int copy_pool_threads(const CopyPool *pool);
// memcpy(dst, src, bytes), split into one contiguous part per thread; returns when every part is done.
void copy_pool_memcpy(CopyPool *pool, void *dst, const void *src, size_t bytes);
// 1: copies into a destination aligned to 16 bytes use streaming stores, right for one that no core reads next,
// such as a staging slot; 0 (the default): memcpy's stores. 05-streams/upload_ladder.cu measures both.
void copy_pool_set_streaming(CopyPool *pool, int streaming);
void copy_pool_destroy(CopyPool *pool);

// Where thread `index` of `threads` starts its part of `bytes` (index = threads: bytes). Parts are whole
// multiples of 64 bytes, a cache line, but the last: two threads never write one line.
size_t copy_pool_part_start(size_t bytes, int threads, int index);

#ifdef __cplusplus
}
#endif

#endif
