// common/device.c: which GPU (or CPU) a result row was measured on (see device.h). device_query is the
// drivers' first CUDA call, so a machine without a GPU or driver gets one clear line here instead of a
// failure deep inside a trainer.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "device.h"
#include "exit_codes.h"
#include "message.h"

// CUDA encodes versions as 1000 * major + 10 * minor: 13000 -> "13.0".
static void version_string(int version, char *out, size_t len) {
    snprintf(out, len, "%d.%d", version / 1000, (version % 1000) / 10);
}

// The runtime reports a missing driver as "CUDA driver version is insufficient", which sends a reader without an
// NVIDIA GPU to update a driver they do not have; the driver version it reports (0: none) tells the cases apart.
void device_absence(int status, char *out, size_t len) {
    int driver = 0, runtime = 0;
    char have[16], needs[16];
    if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
        snprintf(out, len, "no NVIDIA driver is installed here: libcuda.so.1 is missing");
    } else if (status == cudaErrorInsufficientDriver && cudaRuntimeGetVersion(&runtime) == cudaSuccess) {
        version_string(driver, have, sizeof(have));
        version_string(runtime, needs, sizeof(needs));
        snprintf(out, len, "the NVIDIA driver supports CUDA %s, older than this build's CUDA %s: update the driver",
                 have, needs);
    } else if (status == cudaSuccess || status == cudaErrorNoDevice) {
        snprintf(out, len, "the NVIDIA driver sees no GPU");
    } else {
        snprintf(out, len, "%s", cudaGetErrorString((cudaError_t)status));
    }
}

int device_query_or(DeviceInfo *out, const char *advice) {
    memset(out, 0, sizeof(*out));
    int count = 0;
    struct cudaDeviceProp prop;
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status == cudaSuccess && count > 0) status = cudaGetDeviceProperties(&prop, 0);
    if (status != cudaSuccess || count == 0) {
        char reason[160];
        device_absence(status, reason, sizeof(reason));
        fprintf(stderr, "error: no CUDA device found (%s)%s\n", reason, advice);
        return -1;
    }
    snprintf(out->name, sizeof(out->name), "%.*s", (int)sizeof(out->name) - 1, prop.name);
    snprintf(out->cc, sizeof(out->cc), "%d.%d", prop.major, prop.minor);

    int runtime = 0, driver = 0;
    if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) version_string(runtime, out->cuda, sizeof(out->cuda));
    if (cudaDriverGetVersion(&driver) == cudaSuccess) version_string(driver, out->driver, sizeof(out->driver));
    return 0;
}

int device_query(DeviceInfo *out) { return device_query_or(out, "; train on the CPU with --reference"); }

void host_describe(DeviceInfo *out) {
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *value = strchr(line, ':');
        if (!value) continue;
        value += strspn(value + 1, " \t") + 1;
        size_t len = strcspn(value, "\r\n");
        if (len > 0) snprintf(out->name, sizeof(out->name), "%.*s", (int)len, value);
        break;
    }
    fclose(f);
}

// The free device memory, or less when CUDA_STAGES_MAX_DEVICE_MB is set (to rehearse a smaller GPU).
// The variable is checked first, so that a bad value is one line even where no GPU answers.
void device_check_memory(double needed, const char *what, const char *advice) {
    char message[512];
    double cap = -1.0;
    const char *limit = getenv("CUDA_STAGES_MAX_DEVICE_MB");
    if (limit && limit[0]) {
        char *end = NULL;
        errno = 0;
        long long mb = strtoll(limit, &end, 10);
        if (*end != '\0' || errno == ERANGE || mb < 1) {
            // quoted through error_message: a newline or escape in the value stays one line
            error_message(message, sizeof(message), "CUDA_STAGES_MAX_DEVICE_MB='%.32s' is not a whole number of MB >= 1",
                          limit);
            fprintf(stderr, "error: %s\n", message);
            exit(EXIT_USAGE);
        }
        cap = (double)mb * (1 << 20);
    }
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return;  // the stage's own checks report it
    double available = (double)free_bytes;
    if (cap >= 0.0 && cap < available) available = cap;
    if (needed > available) {
        error_message(message, sizeof(message), "%s needs about %.1f GB of device memory, but the GPU has %.1f GB free%s: %s",
                      what, needed / 1e9, available / 1e9,
                      available < (double)free_bytes ? " (CUDA_STAGES_MAX_DEVICE_MB)" : "", advice);
        fprintf(stderr, "error: %s\n", message);
        exit(EXIT_CUDA);
    }
}
