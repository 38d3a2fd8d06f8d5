// common/persistent.cuh: the launch and barrier plumbing of stage 08's persistent kernel, which is not its lesson
// (the kernel's phases are): thread-block clusters launched with the cooperative attribute, the barriers that
// replace kernel boundaries, and two small device helpers. Include after cuda_runtime.h and check.h.
#ifndef PERSISTENT_CUH
#define PERSISTENT_CUH

#include <stdint.h>

static __host__ __device__ int round_up(int n, int to) { return (n + to - 1) / to * to; }

// Every block of the grid arrives; none leaves before all have. *arrived counts arrivals since the launch
// (zeroed before it), so the n-th barrier of the launch waits for n * gridDim.x. The cooperative launch puts every
// block on the GPU at once: without it, a block spinning here could wait for one that never gets an SM. The wait
// reads the counter (volatile: from L2, never a stale L1 copy) rather than polling with atomics, which would
// queue behind the arrivals at the one address.
static __device__ void grid_barrier(unsigned int *arrived, unsigned int target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();  // this block's writes are visible to every block before it counts as arrived
        atomicAdd(arrived, 1u);
        while (*(volatile unsigned int *)arrived < target) {
        }
        __threadfence();
    }
    __syncthreads();
}

// Every thread of the cluster arrives; the wait returns once all have, and what they wrote to shared memory
// before arriving is visible to all (arrive releases, wait acquires). Clusters need compute capability 9.0: built
// for every architecture, run on 9.0 and up only.
static __device__ __forceinline__ void cluster_barrier() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
#endif
}

// The sum over each group of `width` neighbouring lanes (a power of 2 up to 32), in every lane of the group.
static __device__ __forceinline__ float group_sum(float value, int width) {
    for (int offset = width / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffff, value, offset);
    return value;
}

// Byte b of word as a float, exactly: the byte becomes the low mantissa bits of 2^23 (0x4B000000), and taking
// 2^23 away leaves its value. Two instructions instead of a conversion.
static __device__ __forceinline__ float byte_value(uint32_t word, int b) {
    return __int_as_float((int)__byte_perm(word, 0x4B000000u, 0x7440 | b)) - 8388608.0f;
}

// A launch of blocks x threads in clusters of cluster_size, with shared_bytes of dynamic shared memory; with
// several clusters also cooperative, which puts every block on the GPU at once (grid_barrier needs that) or fails.
// attrs: room for 2, alive until the launch.
static cudaLaunchConfig_t cluster_launch_config(int blocks, int threads, int cluster_size, size_t shared_bytes,
                                                cudaStream_t stream, cudaLaunchAttribute *attrs) {
    cudaLaunchConfig_t config = {};  // every field not set below: 0
    config.gridDim = dim3((unsigned int)blocks);
    config.blockDim = dim3((unsigned int)threads);
    config.dynamicSmemBytes = shared_bytes;
    config.stream = stream;
    config.attrs = attrs;
    attrs[0].id = cudaLaunchAttributeClusterDimension;
    attrs[0].val.clusterDim.x = (unsigned int)cluster_size;
    attrs[0].val.clusterDim.y = 1;
    attrs[0].val.clusterDim.z = 1;
    attrs[1].id = cudaLaunchAttributeCooperative;
    attrs[1].val.cooperative = 1;
    config.numAttrs = blocks > cluster_size ? 2 : 1;
    return config;
}

// How many clusters of cluster_size blocks of kernel the GPU runs at once (0: none, or a size it does not place).
static int max_active_clusters(const void *kernel, int threads, int cluster_size, size_t shared_bytes) {
    cudaLaunchAttribute attrs[2];
    cudaLaunchConfig_t config = cluster_launch_config(cluster_size, threads, cluster_size, shared_bytes, 0, attrs);
    int clusters = 0;
    cudaError_t status = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
    if (status == cudaErrorInvalidClusterSize) {
        (void)cudaGetLastError();  // a size this GPU does not place: not an error, the answer is none
        return 0;
    }
    cudaCheck(status);
    return clusters;
}

#endif
