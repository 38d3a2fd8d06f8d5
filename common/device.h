// common/device.h: which GPU we run on, for the report (and a clear line when there is none).
#ifndef DEVICE_H
#define DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char name[128];    // "NVIDIA H100 80GB HBM3", or the CPU's model name for --reference
    char cc[8];        // "9.0"
    char cuda[16];     // runtime version, "13.0"
    char driver[16];   // highest CUDA version the driver supports, "13.0"
} DeviceInfo;

// Device 0. Without one, prints "error: no CUDA device found ..." on stderr and returns -1.
int device_query(DeviceInfo *out);
// The same, with advice after the reason on the error line ("error: no CUDA device found (REASON)ADVICE").
int device_query_or(DeviceInfo *out, const char *advice);
// Why no GPU answers, for that line: no NVIDIA driver at all, a driver older than the runtime, a driver that sees no
// GPU, or the runtime's own words. status: what cudaGetDeviceCount returned (a cudaError_t).
void device_absence(int status, char *out, size_t len);
// Exits with one line (EXIT_CUDA) when `needed` bytes exceed the free device memory, or the cap that
// CUDA_STAGES_MAX_DEVICE_MB sets to rehearse a smaller GPU: "<what> needs about X GB ...: <advice>".
void device_check_memory(double needed, const char *what, const char *advice);
// The host CPU's model name (from /proc/cpuinfo), for rows of the CPU reference.
void host_describe(DeviceInfo *out);

#ifdef __cplusplus
}
#endif

#endif
