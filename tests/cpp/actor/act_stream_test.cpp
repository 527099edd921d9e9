// Note [Event-gated acts] in actor/act_stream.h, on the CPU: actors launch their work on a
// stream and go on; what leaves the stream (ready and ack messages to other threads and ranks,
// the act's count) waits until the stream has run the work. A stream the test holds back shows
// both halves: acts on one stream run ahead of their work, nothing crosses to another thread
// before it.

#include "actor/act_stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "actor/runtime.h"
#include "tests/cpp/actor/plan_builder.h"
#include "tests/cpp/ops/test_util.h"

namespace ofl::actor {
namespace {

using ofl::testing::expect_error;
using ofl::testing::make_tensor;
using ofl::testing::PlanBuilder;
using ofl::testing::values_of;

// A stream whose work waits until the test opens it; then it runs in launch order on the
// stream's own thread, as a device would.
class HeldStream final : public ActStream {
 public:
  // `enqueues`: also takes work with no callback (Note [Acts without events]).
  explicit HeldStream(std::string name, bool enqueues = false)
      : name_(std::move(name)), enqueues_(enqueues), thread_([this] { loop(); }) {}
  ~HeldStream() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  const std::string& name() const override { return name_; }
  void launch(std::function<void()> work, Done done) override {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({std::move(work), std::move(done), Origin()});
    ++launched_;
    cv_.notify_all();
  }
  bool busy() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return !queue_.empty();
  }
  bool enqueues() const override { return enqueues_; }
  // How long each work takes once the stream is open (a slow device).
  std::chrono::milliseconds delay{0};
  void enqueue(std::function<void()> work, Origin origin) override {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({std::move(work), nullptr, origin});
    ++enqueued_;
    cv_.notify_all();
  }
  void synchronize() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.empty(); });
  }
  int enqueued() const {
    std::lock_guard<std::mutex> lock(mu_);
    return enqueued_;
  }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // Opens the stream for `n` works, after which it holds the rest for ever (a hung kernel).
  void open_for(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    runs_left_ = n;
    cv_.notify_all();
  }
  int launched() const {
    std::lock_guard<std::mutex> lock(mu_);
    return launched_;
  }
  int finished() const {
    std::lock_guard<std::mutex> lock(mu_);
    return finished_;
  }
  // Waits until `n` works were launched, or 5 s.
  bool wait_launched(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(5), [&] { return launched_ >= n; });
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || (open_ && runs_left_ != 0 && !queue_.empty()); });
      if (stop_) return;
      if (runs_left_ > 0) --runs_left_;
      Item item = std::move(queue_.front());
      lock.unlock();
      std::this_thread::sleep_for(delay);
      std::exception_ptr error;
      try {
        if (item.work) item.work();
      } catch (...) {
        error = std::current_exception();
      }
      if (!item.done && error) report(item.origin, error);
      lock.lock();
      queue_.pop_front();
      ++finished_;
      cv_.notify_all();
      lock.unlock();
      if (item.done) item.done(error);
      lock.lock();
    }
  }

  struct Item {
    std::function<void()> work;
    Done done;  // null: enqueued
    Origin origin;
  };

  std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool enqueues_;
  bool open_ = false;
  int runs_left_ = -1;  // -1: no limit
  bool stop_ = false;
  int launched_ = 0;
  int enqueued_ = 0;
  int finished_ = 0;
  std::thread thread_;
};

// Hands each rank's compute thread a held stream the test keeps a pointer to.
struct HeldStreams {
  std::map<int64_t, HeldStream*> by_rank;
  bool enqueues = false;  // the streams made take enqueued work too
  RuntimeOptions options() {
    RuntimeOptions options;
    options.watchdog_seconds = 20;
    options.make_stream = [this](int64_t rank, std::string name) {
      auto stream = std::make_unique<HeldStream>(std::move(name), enqueues);
      by_rank[rank] = stream.get();
      return stream;
    };
    return options;
  }
};

// Rank 0: x -> relu -> neg -> y, sent to rank 1: y -> neg -> z.
proto::PlanProto two_rank_chain(const Shape& shape) {
  PlanBuilder b(2);
  const int64_t x = b.input(0, "x", shape);
  const int64_t h = b.reg(0, "h", shape);
  const int64_t y = b.reg(0, "y", shape);
  b.compute(0, "relu", "relu", NoParams{}, {x}, {h});
  b.compute(0, "neg0", "neg", NoParams{}, {h}, {y});
  auto [recv, received] = b.send_recv(0, 1, y, /*transfer_id=*/3);
  const int64_t z = b.reg(1, "z", shape);
  b.compute(1, "neg1", "neg", NoParams{}, {received}, {z});
  b.output(1, "z", z, shape);
  return b.plan();
}

TEST(ActStream, ActsOnOneStreamRunAheadOfTheirWorkAndNothingCrossesBeforeItHasRun) {
  const Shape shape{64, 16};  // 4 KiB: a transfer the RECV reads from rank 0's register
  std::vector<double> xv, want;
  for (int64_t i = 0; i < shape.numel(); ++i) {
    xv.push_back(i % 3 ? double(i) : -double(i));
    want.push_back(std::max(xv.back(), 0.0));  // neg(neg(relu(x)))
  }
  const Tensor xs = make_tensor(xv, shape, DataType::kFloat32);
  HeldStreams held;
  Runtime runtime(two_rank_chain(shape), held.options());
  ASSERT_EQ(held.by_rank.size(), 2u);
  held.by_rank.at(1)->open();
  HeldStream& zero = *held.by_rank.at(0);

  auto run = std::async(std::launch::async, [&] { return runtime.run({{"x", xs}}); });
  // Rank 0's tick, INPUT, relu and neg all act (each told by the one before it at its act, as
  // they share the stream), though none of their work has run.
  ASSERT_TRUE(zero.wait_launched(4)) << zero.launched() << " launched";
  EXPECT_EQ(zero.finished(), 0);
  // Rank 1 sees nothing of it: its RECV's input is only announced once rank 0's stream ran
  // neg, so rank 1 launched no more than its tick.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(held.by_rank.at(1)->launched(), 1);
  EXPECT_EQ(run.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "the iteration ended before its work ran";

  zero.open();
  const auto out = run.get();
  EXPECT_EQ(values_of(out.at("z")), want);
  EXPECT_EQ(zero.finished(), zero.launched());
  EXPECT_TRUE(runtime.shutdown());
}

// Note [Acts without events]: on a stream that takes work with no callback, the acts whose
// messages all go at the act (INPUT and relu: their readers and producers share the stream)
// only enqueue their work and are counted; the tick, which acknowledges run()'s caller, and
// neg0, whose output goes to the SEND on another thread, are launched and send those once run. The
// iteration still ends only once the stream has run everything: run() waits for the stream.
TEST(ActStream, ActsWithNoMessageForAnotherStreamAreEnqueuedAndTheIterationWaitsForThem) {
  const Shape shape{64, 16};
  std::vector<double> xv, want;
  for (int64_t i = 0; i < shape.numel(); ++i) {
    xv.push_back(i % 3 ? double(i) : -double(i));
    want.push_back(std::max(xv.back(), 0.0));
  }
  HeldStreams held;
  held.enqueues = true;
  Runtime runtime(two_rank_chain(shape), held.options());
  held.by_rank.at(1)->open();
  HeldStream& zero = *held.by_rank.at(0);
  auto run = std::async(std::launch::async, [&] {
    return runtime.run({{"x", make_tensor(xv, shape, DataType::kFloat32)}});
  });
  ASSERT_TRUE(zero.wait_launched(1)) << zero.launched() << " launched";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(zero.enqueued(), 2);  // INPUT, relu
  EXPECT_EQ(zero.launched(), 2);  // the tick, neg0
  EXPECT_EQ(zero.finished(), 0);
  EXPECT_EQ(run.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "the iteration ended before its work ran";
  zero.open();
  EXPECT_EQ(values_of(run.get().at("z")), want);
  EXPECT_EQ(zero.finished(), zero.launched() + zero.enqueued());
  // The next iteration's enqueued work has run too when run() returns, though nothing waited
  // on its acts: the stream is empty.
  runtime.run({{"x", make_tensor(xv, shape, DataType::kFloat32)}});
  EXPECT_EQ(zero.finished(), zero.launched() + zero.enqueued());
  EXPECT_FALSE(zero.busy());
  EXPECT_TRUE(runtime.shutdown());
}

// One rank: INPUT x -> relu -> neg -> OUTPUT y.
proto::PlanProto relu_neg_chain(const Shape& shape) {
  PlanBuilder b(1);
  const int64_t x = b.input(0, "x", shape);
  const int64_t h = b.reg(0, "h", shape);
  const int64_t y = b.reg(0, "y", shape);
  b.compute(0, "relu", "relu", NoParams{}, {x}, {h});
  b.compute(0, "neg", "neg", NoParams{}, {h}, {y});
  b.output(0, "y", y, shape);
  return b.plan();
}

// One rank, one stream: INPUT -> relu -> neg -> OUTPUT. Only the tick (it acknowledges run()'s
// caller) is launched; the rest is enqueued, the OUTPUT's hand-over of the result included, and
// counted at its act. A slow stream (20 ms a work) finishes the tick long before the OUTPUT's
// work: run() still returns the result, because it waits for the stream.
TEST(ActStream, RunWaitsForEnqueuedWorkThatNothingWaitsOn) {
  const Shape shape{4};
  const proto::PlanProto plan = relu_neg_chain(shape);
  HeldStreams held;
  held.enqueues = true;
  Runtime runtime(plan, held.options());
  HeldStream& stream = *held.by_rank.at(0);
  stream.delay = std::chrono::milliseconds(20);
  stream.open();
  for (int i = 0; i < 3; ++i) {
    const auto out = runtime.run({{"x", make_tensor({1, -2, 3, -4}, shape, DataType::kFloat32)}});
    EXPECT_EQ(values_of(out.at("y")), (std::vector<double>{-1, 0, -3, 0})) << "iteration " << i;
    EXPECT_FALSE(stream.busy());
  }
  EXPECT_EQ(stream.launched(), 3);   // the ticks
  EXPECT_EQ(stream.enqueued(), 12);  // INPUT, relu, neg, OUTPUT

  // RuntimeOptions::event_every_act: every act launched, as before the Note (to measure it).
  HeldStreams every;
  every.enqueues = true;
  RuntimeOptions options = every.options();
  options.event_every_act = true;
  Runtime launching(plan, options);
  every.by_rank.at(0)->open();
  const auto out = launching.run({{"x", make_tensor({1, -2, 3, -4}, shape, DataType::kFloat32)}});
  EXPECT_EQ(values_of(out.at("y")), (std::vector<double>{-1, 0, -3, 0}));
  EXPECT_EQ(every.by_rank.at(0)->launched(), 5);
  EXPECT_EQ(every.by_rank.at(0)->enqueued(), 0);
}

TEST(ActStream, ABusyStreamIsProgressNotAStall) {
  const Shape shape{2, 3};
  HeldStreams held;
  RuntimeOptions options = held.options();
  options.watchdog_seconds = 0.5;
  Runtime runtime(two_rank_chain(shape), options);
  held.by_rank.at(1)->open();
  // Rank 0's stream holds its work for 2 s, four times the watchdog's limit: a long kernel,
  // which the watchdog must not take for a hang.
  auto run = std::async(std::launch::async, [&] {
    return runtime.run({{"x", Tensor::zeros(shape, DataType::kFloat32)}});
  });
  ASSERT_TRUE(held.by_rank.at(0)->wait_launched(4));
  EXPECT_EQ(run.wait_for(std::chrono::seconds(2)), std::future_status::timeout)
      << "a busy stream is progress, not a stall";
  held.by_rank.at(0)->open();
  EXPECT_NO_THROW(run.get());
}

// Runs `run` (a runtime with a 0.1 s watchdog whose work never ends) and returns the stall's
// message, having checked that it came as the busy limit's deadline error, not before that limit
// (1 s) and not long after.
std::string stall_after_the_busy_limit(const std::function<void()>& run) {
  const auto start = std::chrono::steady_clock::now();
  try {
    run();
  } catch (const Error& e) {
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded) << what;
    EXPECT_NE(what.find("nothing finished for 10 times the watchdog's limit"), std::string::npos)
        << what;
    EXPECT_GE(waited, 0.9) << "not before the busy limit";
    EXPECT_LT(waited, 10.0);
    return what;
  }
  ADD_FAILURE() << "work that never ends must stop the run";
  return "";
}

// Note [Watchdog]: work under way keeps a run alive for StallClock::kBusyLimitFactor watchdog
// periods with nothing finishing, not for ever: a kernel or an NCCL collective that never ends
// (a peer that never joins) is reported, with the stream that held it.
TEST(ActStream, WorkThatNeverEndsIsAStallAfterTheBusyLimit) {
  const Shape shape{2, 3};
  HeldStreams held;
  RuntimeOptions options = held.options();
  options.watchdog_seconds = 0.1;  // the busy limit: 1 s
  Runtime runtime(two_rank_chain(shape), options);
  held.by_rank.at(1)->open();  // rank 0's stream never runs its work
  const std::string what = stall_after_the_busy_limit([&] {
    runtime.run({{"x", Tensor::zeros(shape, DataType::kFloat32)}});
  });
  EXPECT_NE(what.find("Under way:"), std::string::npos) << what;
  EXPECT_NE(what.find("busy"), std::string::npos) << what;
}

// Note [Acts without events] and Note [Hung streams]: once every act is counted, run() waits for
// the streams' enqueued work under the same watchdog. Here the stream runs the tick, then holds
// the enqueued INPUT, relu, neg and OUTPUT for ever: run() raises the stall naming the busy
// stream (it used to wait in the stream's synchronize for ever), and the runtime, which cannot
// free what that work may still write, leaves it allocated and still ends.
TEST(ActStream, EnqueuedWorkThatNeverEndsIsAStallNotAHang) {
  const Shape shape{4};
  const proto::PlanProto plan = relu_neg_chain(shape);
  HeldStreams held;
  held.enqueues = true;
  RuntimeOptions options = held.options();
  options.watchdog_seconds = 0.1;  // the busy limit: 1 s
  auto runtime = std::make_unique<Runtime>(plan, options);
  HeldStream& stream = *held.by_rank.at(0);
  stream.open_for(1);
  const std::string what = stall_after_the_busy_limit([&] {
    runtime->run({{"x", make_tensor({1, -2, 3, -4}, shape, DataType::kFloat32)}});
  });
  EXPECT_NE(what.find("stream '" + stream.name() + "' busy"), std::string::npos) << what;
  EXPECT_NE(what.find("(5 of 5 acts done)"), std::string::npos) << what;  // the tick too
  EXPECT_EQ(stream.finished(), 1);
  EXPECT_TRUE(stream.busy());
  runtime.reset();  // returns: the held stream is abandoned, not waited for
}

TEST(ActStream, AFailingWorkOnAStreamEndsTheRunNamingItsTaskAndIteration) {
  PlanBuilder b(1);
  const int64_t logits = b.input(0, "logits", Shape{2, 3});
  const int64_t labels = b.input(0, "labels", Shape{2}, {}, DataType::kInt64);
  const int64_t loss = b.reg(0, "loss", Shape{2});
  b.compute(0, "cross_entropy", "sparse_softmax_cross_entropy", NoParams{}, {logits, labels},
            {loss});
  b.output(0, "loss", loss, Shape{2});
  RuntimeOptions options;
  options.async_cpu_streams = true;
  Runtime runtime(b.plan(), options);
  auto feed = [](double label) {
    return std::map<std::string, Tensor>{
        {"logits", Tensor::zeros(Shape{2, 3}, DataType::kFloat32)},
        {"labels", make_tensor({0, label}, Shape{2}, DataType::kInt64)}};
  };
  runtime.run(feed(2));
  // The OUTPUT after it acted already (it shares the stream) when the work failed: the report
  // still names the task whose work threw, in the iteration of that act.
  expect_error([&] { runtime.run(feed(9)); }, ErrorCode::kOutOfRange,
               "rank 0, COMPUTE sparse_softmax_cross_entropy) in iteration 1 failed: "
               "[sparse_softmax_cross_entropy] every label must be in");
}

}  // namespace
}  // namespace ofl::actor

namespace ofl::actor {
namespace {

// Note [Hung streams] on the CPU worker stream: after a failed run it drops the work it has not
// started (a backlog is not run once the run is over), and once abandoned the work under way
// calls nothing back when it ends.
TEST(CpuWorkerStream, DropsWorkNotStartedAndAnAbandonedOneCallsNothingBack) {
  std::unique_ptr<ActStream> stream = make_cpu_worker_stream("test worker", 1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> started;
  std::atomic<int> ran{0}, done{0};
  stream->launch(
      [&] {
        started.set_value();
        released.wait();
      },
      [&](std::exception_ptr) { ++done; });
  for (int i = 0; i < 3; ++i) {
    stream->launch([&] { ++ran; }, [&](std::exception_ptr) { ++done; });
  }
  started.get_future().wait();
  stream->drop_pending();
  EXPECT_TRUE(stream->busy()) << "the work under way is still running";
  release.set_value();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (stream->busy() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_FALSE(stream->busy());
  EXPECT_EQ(ran.load(), 0) << "dropped work ran";
  EXPECT_EQ(done.load(), 1);

  // Abandoned while its work runs: when the work ends, no done is called.
  std::promise<void> release2;
  std::shared_future<void> released2 = release2.get_future().share();
  std::promise<void> started2;
  stream->launch(
      [&] {
        started2.set_value();
        released2.wait();
      },
      [&](std::exception_ptr) { ++done; });
  started2.get_future().wait();
  stream->abandon();
  release2.set_value();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(done.load(), 1) << "an abandoned stream called back";
  stream.release();  // abandoned streams are never destroyed (the runtime leaks them)
}

}  // namespace
}  // namespace ofl::actor
