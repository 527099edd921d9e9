// The streams acts run on (Note [Event-gated acts] in act_stream.h): a CPU worker thread, and a
// CUDA device's compute stream with its event poller.

#include "actor/act_stream.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "oneflowlike/common/error.h"
#include "oneflowlike/cuda/device.h"

namespace ofl::actor {

void ActStream::enqueue(std::function<void()> /*work*/, Origin /*origin*/) {
  OFL_ASSERT(false) << "stream '" << name() << "' cannot enqueue work without a callback";
}

void ActStream::report(const Origin& origin, std::exception_ptr error) const {
  OFL_ASSERT(failed_) << "stream '" << name() << "' has no failure handler for enqueued work";
  failed_(origin, error);
}

namespace {

class CpuWorkerStream final : public ActStream {
 public:
  CpuWorkerStream(std::string name, int kernel_threads)
      : name_(std::move(name)), kernel_threads_(kernel_threads), thread_([this] { loop(); }) {}

  // Work still queued is dropped: the runtime ends streams after its actors have retired, or
  // after a failure, when nothing waits for it.
  ~CpuWorkerStream() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

  const std::string& name() const override { return name_; }

  void launch(std::function<void()> work, Done done) override {
    push(Item{std::move(work), std::move(done), Origin()});
  }

  bool enqueues() const override { return true; }
  void enqueue(std::function<void()> work, Origin origin) override {
    push(Item{std::move(work), nullptr, origin});
  }

  void synchronize() override {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [&] { return in_flight_.load(std::memory_order_acquire) == 0; });
  }

  bool busy() const override { return in_flight_.load(std::memory_order_relaxed) > 0; }

  void drop_pending() override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto dropped = static_cast<int64_t>(queue_.size());
    queue_.clear();
    if (dropped > 0 && in_flight_.fetch_sub(dropped, std::memory_order_acq_rel) == dropped) {
      idle_cv_.notify_all();
    }
  }

  // The work under way may end one day; nothing after it runs (stop_) and it calls nothing.
  void abandon() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      abandoned_.store(true, std::memory_order_release);
      stop_ = true;
    }
    cv_.notify_one();
  }

 private:
  struct Item {
    std::function<void()> work;
    Done done;      // null: enqueued (Note [Acts without events])
    Origin origin;  // enqueued work's act
  };

  void push(Item item) {
    in_flight_.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(item));
    }
    cv_.notify_one();
  }

  void loop() {
    if (kernel_threads_ > 0) omp_set_num_threads(kernel_threads_);
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr error;
      try {
        if (item.work) item.work();
      } catch (...) {
        error = std::current_exception();
      }
      if (abandoned_.load(std::memory_order_acquire)) return;  // Note [Hung streams]
      if (!item.done && error) report(item.origin, error);     // before synchronize() returns
      item.work = nullptr;                                     // and the pieces it held let go
      if (in_flight_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mu_);
        idle_cv_.notify_all();
      }
      if (item.done) item.done(error);
    }
  }

  std::string name_;
  int kernel_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;  // in_flight_ reached 0
  std::deque<Item> queue_;           // GUARDED_BY(mu_)
  bool stop_ = false;                // GUARDED_BY(mu_)
  std::atomic<bool> abandoned_{false};
  std::atomic<int64_t> in_flight_{0};
  std::thread thread_;
};

class CudaActStream final : public ActStream {
 public:
  CudaActStream(std::string name, int device)
      : name_(std::move(name)),
        device_(device),
        stream_(cuda::stream(device, cuda::StreamKind::kCompute)) {}

  // The poller's callbacks point here: wait for them (the device finishes what it was given),
  // and for the enqueued work, which no callback tracks (Note [Acts without events]): the
  // registers it writes are freed after the streams. An error here was reported, or the run is
  // already over.
  ~CudaActStream() override {
    while (in_flight_.load(std::memory_order_acquire) > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    try {
      stream_.synchronize();
    } catch (const std::exception& e) {
      LOG(WARNING) << "[runtime] stream '" << name_ << "' at its end: " << e.what();
    }
  }

  const std::string& name() const override { return name_; }

  // The work enqueues its kernels on the device's compute stream and returns; what it throws
  // (a launch failure) still reaches `done` through the poller, so dones stay in launch order.
  void launch(std::function<void()> work, Done done) override {
    std::exception_ptr error;
    try {
      choose_device();
      if (work) work();
    } catch (...) {
      error = std::current_exception();
    }
    in_flight_.fetch_add(1, std::memory_order_relaxed);
    try {
      // Counted down after `done` returns, which the destructor waits for.
      cuda::call_when_done(stream_, [this, error, done](std::exception_ptr e) {
        if (!abandoned_.load(std::memory_order_acquire)) done(error ? error : e);
        in_flight_.fetch_sub(1, std::memory_order_release);
      });
    } catch (...) {
      // No event to wait for (after a sticky device error recording one fails too): the act
      // ends with the first error rather than leave the count up and the run waiting, but
      // after the earlier acts' callbacks (the actor pairs each done with its oldest act in
      // flight), which the poller delivers without this thread.
      std::exception_ptr recording = std::current_exception();
      while (in_flight_.load(std::memory_order_acquire) > 1) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      in_flight_.fetch_sub(1, std::memory_order_release);
      done(error ? error : recording);
    }
  }

  // Enqueued work has no event: the stream itself says whether it still runs (the watchdog
  // takes a long kernel for progress, as it did when every act had an event).
  bool busy() const override {
    return in_flight_.load(std::memory_order_relaxed) > 0 || !stream_.idle();
  }

  // The kernels go on the stream with no event after them: what launching them throws is
  // reported at once; what the device reports later comes with synchronize() or a later event.
  bool enqueues() const override { return true; }
  void enqueue(std::function<void()> work, Origin origin) override {
    try {
      choose_device();
      if (work) work();
    } catch (...) {
      report(origin, std::current_exception());
    }
  }

  void synchronize() override { stream_.synchronize(); }

  void abandon() override { abandoned_.store(true, std::memory_order_release); }

 private:
  // Note [Current devices] in oneflowlike/cuda/device.h: the rank's compute thread chooses its
  // GPU at its first act here, before anything (a pinned allocation, say) could make it adopt
  // another; the guards of its kernels are then no-ops.
  void choose_device() {
    thread_local int chosen = -1;
    if (chosen == device_) return;
    cuda::set_device(device_);
    chosen = device_;
  }

  std::string name_;
  int device_;
  cuda::Stream& stream_;
  std::atomic<bool> abandoned_{false};
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace

std::unique_ptr<ActStream> make_cpu_worker_stream(std::string name, int kernel_threads) {
  return std::make_unique<CpuWorkerStream>(std::move(name), kernel_threads);
}

std::unique_ptr<ActStream> make_cuda_stream(std::string name, int device) {
  return std::make_unique<CudaActStream>(std::move(name), device);
}

}  // namespace ofl::actor
