// The helper threads of GEMMs (cpu/blas/blas_threads.h): a pool made on first use, one job at a time.
#include "cpu/blas/blas_threads.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "cpu/runtime/settings.h"
#include "cpu/runtime/streams.h"

namespace cpu {
namespace {

struct Job {
  int count;
  const char* operation;
  int device;
  const std::function<void(int)>* task;
  std::atomic<int> next{0};
};

class Pool {
 public:
  explicit Pool(int helpers) {
    for (int i = 0; i < helpers; ++i) std::thread([this] { serve(); }).detach();
  }

  void run(Job& job) {
    std::lock_guard<std::mutex> one_job_at_a_time(run_mutex_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      ++generation_;
    }
    wake_.notify_all();
    take_tasks(job);
    // Helpers that joined may still be running a task or about to look at `next`: the job
    // lives on the caller's stack, so it ends only after every helper has left it.
    std::unique_lock<std::mutex> lock(mutex_);
    job_ = nullptr;
    left_.wait(lock, [&] { return helpers_in_job_ == 0; });
  }

 private:
  static void take_tasks(Job& job) {
    for (int i; (i = job.next.fetch_add(1)) < job.count;) (*job.task)(i);
  }

  void serve() {
    unsigned long long seen = 0;
    for (;;) {
      Job* job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen && job_ != nullptr; });
        seen = generation_;
        job = job_;
        ++helpers_in_job_;
      }
      {
        RunningOperation as_the_caller(job->operation, job->device);
        take_tasks(*job);
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (--helpers_in_job_ == 0) left_.notify_all();
    }
  }

  std::mutex run_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_, left_;
  Job* job_ = nullptr;
  unsigned long long generation_ = 0;
  int helpers_in_job_ = 0;
};

}  // namespace

void run_blas_tasks(int count, const std::function<void(int)>& task) {
  if (count == 1 || settings().blas_threads <= 1) {
    for (int i = 0; i < count; ++i) task(i);
    return;
  }
  if (count <= 0) return;
  Job job{count, current_operation(), current_operation_device(), &task};
  // Never destroyed: its helpers wait on its condition variables until the process ends.
  static Pool& pool = *new Pool(settings().blas_threads - 1);
  pool.run(job);
}

}  // namespace cpu
