// The per-device event poller behind call_when_done (device.h): a thread per device that polls
// recorded events in order and calls back when each is done, so no actor thread ever blocks on
// the GPU (Note [Event-gated acts] in actor/act_stream.h).

#include <glog/logging.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "oneflowlike/cuda/device.h"

namespace ofl::cuda {

namespace {

class Poller {
 public:
  explicit Poller(int device) : device_(device), thread_([this] { loop(); }) {}

  void add(const Stream& stream, std::function<void(std::exception_ptr)> callback) {
    std::unique_ptr<Event> event;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        event = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (event == nullptr) event = std::make_unique<Event>(device_);
    event->record(stream);
    {
      std::lock_guard<std::mutex> lock(mu_);
      waiting_.push_back(Entry{std::move(event), std::move(callback)});
    }
    cv_.notify_one();
  }

 private:
  struct Entry {
    std::unique_ptr<Event> event;
    std::function<void(std::exception_ptr)> callback;
  };

  // Polls the oldest event: spins briefly while one is pending (a kernel chain finishes within
  // microseconds), then sleeps in short steps; parks while nothing waits. Never exits: the
  // poller lives as long as the process (like the streams).
  void loop() {
    // Queries and records on this thread are for this device (Note [Current devices]).
    try {
      set_device(device_);
    } catch (const std::exception& e) {
      LOG(WARNING) << "[cuda] the event poller of cuda:" << device_ << ": " << e.what();
    }
    int idle_polls = 0;
    for (;;) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !waiting_.empty(); });
      Entry& front = waiting_.front();
      lock.unlock();
      std::exception_ptr error;
      bool done = false;
      try {
        done = front.event->done();
      } catch (...) {
        error = std::current_exception();
        done = true;
      }
      if (!done) {
        if (++idle_polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
        continue;
      }
      idle_polls = 0;
      lock.lock();
      Entry entry = std::move(waiting_.front());
      waiting_.pop_front();
      free_.push_back(std::move(entry.event));
      lock.unlock();
      entry.callback(error);
    }
  }

  int device_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> waiting_;                 // GUARDED_BY(mu_)
  std::vector<std::unique_ptr<Event>> free_;  // GUARDED_BY(mu_); recorded events done with
  std::thread thread_;
};

}  // namespace

void call_when_done(const Stream& stream, std::function<void(std::exception_ptr)> callback) {
  static std::mutex mu;
  // Never destroyed, like the streams whose events it polls.
  static auto* pollers = new std::map<int, Poller*>();
  Poller* poller;
  {
    std::lock_guard<std::mutex> lock(mu);
    Poller*& slot = (*pollers)[stream.device()];
    if (slot == nullptr) slot = new Poller(stream.device());
    poller = slot;
  }
  poller->add(stream, std::move(callback));
}

}  // namespace ofl::cuda
