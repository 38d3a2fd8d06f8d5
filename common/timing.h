// common/timing.h: the one definition of every time this repository reports (docs/DESIGN.md, "Timing"). A
// stage's trainer calls, on the stream its work runs on: train_clock_init after its allocations and handles,
// train_clock_e2e_start with the training data still in host memory, train_clock_loop_start once it is on the
// device, train_clock_epoch_end after each epoch, train_clock_e2e_stop once the parameters are back, and
// train_clock_finish (which synchronizes and fills the figures); TIMED_PHASE times a phase with --breakdown.
#ifndef TIMING_H
#define TIMING_H

#include <cuda_runtime_api.h>
#include "trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int epochs;
    int breakdown;
    cudaEvent_t e2e_start, e2e_stop, loop_start;
    cudaEvent_t *epoch_end;  // [epochs]
    cudaEvent_t phase_start, phase_stop;
    double phase_ms[PHASE_COUNT];
} TrainClock;

void train_clock_init(TrainClock *clock, int epochs, int breakdown);
void train_clock_e2e_start(TrainClock *clock, cudaStream_t stream);
void train_clock_loop_start(TrainClock *clock, cudaStream_t stream);
void train_clock_epoch_end(TrainClock *clock, int epoch, cudaStream_t stream);
void train_clock_e2e_stop(TrainClock *clock, cudaStream_t stream);
// No-ops unless breakdown was asked for; phase_end waits for the phase to finish.
void train_clock_phase_begin(TrainClock *clock, cudaStream_t stream);
void train_clock_phase_end(TrainClock *clock, Phase phase, cudaStream_t stream);
// One timed phase in one line: the statement (or block) after it is timed as `phase` with --breakdown.
//     TIMED_PHASE(&clock, PHASE_FORWARD, stream) mlp_forward(...);
#define TIMED_PHASE(clock, phase, stream)                                                     \
    for (int timed_phase_once_ = (train_clock_phase_begin((clock), (stream)), 1); timed_phase_once_; \
         timed_phase_once_ = 0, train_clock_phase_end((clock), (phase), (stream)))
// Waits for e2e_stop, writes e2e, loop, h2d, per-epoch and phase figures, destroys the events.
// setup_ms is left as the trainer set it.
void train_clock_finish(TrainClock *clock, TrainTiming *timing);

#ifdef __cplusplus
}
#endif

#endif
