// common/staging.h: uploads from pageable host memory through a ring of pinned slots, stage 05's upload.
// The copy engine reads only pinned memory, so the host copies a chunk into a pinned slot and the copy engine
// drains it while the host fills the next; one core copies slower than PCIe moves, so a pool of host threads
// fills each slot (05-streams/upload_ladder.cu measures every step of this). Used by the trainers of 05-08.
#ifndef STAGING_H
#define STAGING_H

#include <stddef.h>
#include <cuda_runtime_api.h>

#include "copy_pool.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STAGING_SLOTS 4                        // 16 MiB of pinned memory in all
#define STAGING_SLOT_BYTES ((size_t)4 << 20)  // large enough to pay for waking the threads

typedef struct StagingRing StagingRing;

// slots pinned buffers of slot_bytes each, and a copy pool of threads (0: copy_pool_create's default). Setup:
// pinning memory and starting threads cost milliseconds.
StagingRing *staging_create(int slots, size_t slot_bytes, int threads);
// dst (device) <- src (pageable host, bytes), enqueued on stream slot by slot. The host waits only when the slot
// it is about to refill has not been drained yet: a wait for the copy engine, never for a kernel. src may be
// reused on return; dst is complete once stream reaches this point.
void staging_upload(StagingRing *ring, void *dst, const void *src, size_t bytes, cudaStream_t stream);
void staging_destroy(StagingRing *ring);
// The threads that fill the slots (05-streams/upload_ladder.cu sets how they store).
CopyPool *staging_pool(StagingRing *ring);

#ifdef __cplusplus
}
#endif

#endif
