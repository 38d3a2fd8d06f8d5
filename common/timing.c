// common/timing.c: TrainClock, the CUDA-event timer every stage uses (see timing.h).
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "timing.h"

const char *const PHASE_NAMES[PHASE_COUNT] = {"h2d", "forward", "loss", "backward", "update", "eval", "d2h"};
const char *const PRECISION_NAMES[PRECISION_COUNT] = {"fp32", "tf32", "bf16"};

void train_clock_init(TrainClock *clock, int epochs, int breakdown) {
    memset(clock, 0, sizeof(*clock));
    clock->epochs = epochs;
    clock->breakdown = breakdown;
    cudaEvent_t *events[] = {&clock->e2e_start, &clock->e2e_stop, &clock->loop_start, &clock->phase_start,
                             &clock->phase_stop};
    for (int i = 0; i < 5; i++) cudaCheck(cudaEventCreate(events[i]));
    clock->epoch_end = malloc(sizeof(cudaEvent_t) * (size_t)epochs);
    if (!clock->epoch_end) {
        fprintf(stderr, "error: out of host memory for %d epoch events\n", epochs);
        exit(EXIT_HOST_MEMORY);
    }
    for (int e = 0; e < epochs; e++) cudaCheck(cudaEventCreate(&clock->epoch_end[e]));
}

void train_clock_e2e_start(TrainClock *clock, cudaStream_t stream) { cudaCheck(cudaEventRecord(clock->e2e_start, stream)); }
void train_clock_loop_start(TrainClock *clock, cudaStream_t stream) { cudaCheck(cudaEventRecord(clock->loop_start, stream)); }
void train_clock_e2e_stop(TrainClock *clock, cudaStream_t stream) { cudaCheck(cudaEventRecord(clock->e2e_stop, stream)); }

void train_clock_epoch_end(TrainClock *clock, int epoch, cudaStream_t stream) {
    cudaCheck(cudaEventRecord(clock->epoch_end[epoch], stream));
}

void train_clock_phase_begin(TrainClock *clock, cudaStream_t stream) {
    if (!clock->breakdown) return;
    cudaCheck(cudaEventRecord(clock->phase_start, stream));
}

void train_clock_phase_end(TrainClock *clock, Phase phase, cudaStream_t stream) {
    if (!clock->breakdown) return;
    float ms = 0.0f;
    cudaCheck(cudaEventRecord(clock->phase_stop, stream));
    cudaCheck(cudaEventSynchronize(clock->phase_stop));
    cudaCheck(cudaEventElapsedTime(&ms, clock->phase_start, clock->phase_stop));
    clock->phase_ms[phase] += ms;
}

static double elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, from, to));
    return ms;
}

void train_clock_finish(TrainClock *clock, TrainTiming *timing) {
    cudaCheck(cudaEventSynchronize(clock->e2e_stop));
    timing->e2e_ms = elapsed_ms(clock->e2e_start, clock->e2e_stop);
    timing->h2d_ms = elapsed_ms(clock->e2e_start, clock->loop_start);
    timing->loop_ms = elapsed_ms(clock->loop_start, clock->epoch_end[clock->epochs - 1]);
    for (int e = 0; e < clock->epochs; e++)
        timing->epoch_ms[e] = elapsed_ms(e == 0 ? clock->loop_start : clock->epoch_end[e - 1], clock->epoch_end[e]);
    for (int p = 0; p < PHASE_COUNT; p++) timing->phase_ms[p] = clock->phase_ms[p];

    cudaEvent_t events[] = {clock->e2e_start, clock->e2e_stop, clock->loop_start, clock->phase_start,
                            clock->phase_stop};
    for (int i = 0; i < 5; i++) cudaCheck(cudaEventDestroy(events[i]));
    for (int e = 0; e < clock->epochs; e++) cudaCheck(cudaEventDestroy(clock->epoch_end[e]));
    free(clock->epoch_end);
}
