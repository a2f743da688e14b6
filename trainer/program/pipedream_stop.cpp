// A stop signal under --schedule pipedream (trainer/program/pipedream_stop.h).
#include "trainer/program/pipedream_stop.h"

#include "pipeline/pipedream.h"
#include "pipeline/pipedream_walk.h"
#include "trainer/safety/preemption.h"

template <typename Element>
int pipedream_stop_signal(PipeDreamStop& stop, const RunSetup& setup, Trainer<Element>& trainer, int step, int signal,
                          std::FILE* out) {
  if (!setup.layout.pipedream || setup.options.save.empty()) return signal;
  if (stop.signal == 0 && signal != 0) {
    const PipeDreamLayout& run = *setup.layout.pipedream;
    const int first = setup.start.resumed ? setup.start.position.step : 0;  // the steps before this run's lists
    stop = {signal, first + pipedream_stop_drain(run.rule, setup.mesh.pp, setup.layout.microbatches, run.steps,
                                                 run.drains, step - first)};
    if (stop.step > step) {
      drain_pipedream_after(trainer.executor, stop.step - first);
      if (out)
        std::fprintf(out, "pipedream: %s after step %d: the pipeline drains at the end of step %d, then the run "
                     "saves and stops\n", stop_signal_name(signal), step, stop.step);
    }
  }
  return stop.signal != 0 && step == stop.step ? stop.signal : 0;
}

template int pipedream_stop_signal<float>(PipeDreamStop&, const RunSetup&, Trainer<float>&, int, int, std::FILE*);
template int pipedream_stop_signal<__nv_bfloat16>(PipeDreamStop&, const RunSetup&, Trainer<__nv_bfloat16>&, int, int,
                                                  std::FILE*);
