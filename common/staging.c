// common/staging.c: see staging.h
#include <stdlib.h>

#include "check.h"
#include "copy_pool.h"
#include "host.h"
#include "staging.h"

struct StagingRing {
    CopyPool *pool;         // the host threads that fill a slot
    int slots;              // how many slots
    size_t slot_bytes;      // the size of each
    char **slot;            // (slots,) pinned, (slot_bytes,) each
    cudaEvent_t *drained;   // (slots,) recorded after the copy that reads the slot
    int next;               // the slot to fill next
};

StagingRing *staging_create(int slots, size_t slot_bytes, int threads) {
    StagingRing *ring = (StagingRing *)host_malloc(sizeof(StagingRing), "the staging ring");
    ring->pool = copy_pool_create(threads);
    copy_pool_set_streaming(ring->pool, 1);  // a slot is read next by the GPU's copy engine, not by a core
    ring->slots = slots;
    ring->slot_bytes = slot_bytes;
    ring->slot = (char **)host_malloc(slots * sizeof(char *), "the staging ring");
    ring->drained = (cudaEvent_t *)host_malloc(slots * sizeof(cudaEvent_t), "the staging ring");
    ring->next = 0;
    for (int s = 0; s < slots; s++) {
        ring->slot[s] = (char *)host_pinned(slot_bytes, "a staging buffer");
        cudaCheck(cudaEventCreateWithFlags(&ring->drained[s], cudaEventDisableTiming));
    }
    return ring;
}

void staging_upload(StagingRing *ring, void *dst, const void *src, size_t bytes, cudaStream_t stream) {
    // EXERCISE(staging-ring) begin: chunk by chunk (slot_bytes, the last one shorter): take the ring's next slot,
    //: wait until the copy that last read it has drained it (its event), fill it from src with the copy pool,
    //: enqueue its copy to dst on stream, and record the slot's event after that copy
    for (size_t start = 0; start < bytes; start += ring->slot_bytes) {
        int s = ring->next;
        ring->next = (s + 1) % ring->slots;
        size_t chunk = bytes - start < ring->slot_bytes ? bytes - start : ring->slot_bytes;
        cudaCheck(cudaEventSynchronize(ring->drained[s]));  // never recorded counts as done
        copy_pool_memcpy(ring->pool, ring->slot[s], (const char *)src + start, chunk);
        cudaCheck(cudaMemcpyAsync((char *)dst + start, ring->slot[s], chunk, cudaMemcpyHostToDevice, stream));
        cudaCheck(cudaEventRecord(ring->drained[s], stream));
    }
    // EXERCISE end
}

void staging_destroy(StagingRing *ring) {
    for (int s = 0; s < ring->slots; s++) {
        cudaCheck(cudaFreeHost(ring->slot[s]));
        cudaCheck(cudaEventDestroy(ring->drained[s]));
    }
    copy_pool_destroy(ring->pool);
    free(ring->slot);
    free(ring->drained);
    free(ring);
}

CopyPool *staging_pool(StagingRing *ring) { return ring->pool; }
