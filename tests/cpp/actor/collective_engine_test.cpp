// CollectiveEngine::stop (actor/collective_engine.h): after a failure the engine stops before
// the runtime aborts the NCCL communicators its jobs use (Note [Nonblocking communicators] in
// oneflowlike/cuda/nccl.h), so no job may be advanced once stop() has returned, with or
// without the engine's own thread, and its streams may still be destroyed.

#include "actor/collective_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

namespace ofl::actor {
namespace {

// A collective that never ends (a peer that never comes), counting its advances.
class NeverEnds final : public CollectiveJob {
 public:
  bool advance(bool* progressed) override {
    advances.fetch_add(1);
    *progressed = false;
    return false;
  }
  std::atomic<int64_t> advances{0};
};

void launch(ActStream& stream, const std::shared_ptr<CollectiveJob>& job, std::atomic<bool>* done) {
  stream.launch(CollectiveWork{job}, [done](std::exception_ptr) { done->store(true); });
}

TEST(CollectiveEngine, NoJobAdvancesAfterStopWithTheEnginesThread) {
  CollectiveEngine engine("test engine", /*threaded=*/true);
  std::unique_ptr<ActStream> stream = engine.make_stream("a collective actor");
  auto job = std::make_shared<NeverEnds>();
  std::atomic<bool> done{false};
  launch(*stream, job, &done);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (job->advances.load() == 0) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the engine never advanced the job";
    std::this_thread::yield();
  }
  engine.stop();
  const int64_t at_stop = job->advances.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(job->advances.load(), at_stop);
  EXPECT_FALSE(engine.advance());
  EXPECT_EQ(job->advances.load(), at_stop);
  EXPECT_FALSE(done.load());  // dropped, not finished
  stream.reset();             // forgets its work on a stopped engine
  engine.stop();              // a second stop does nothing
}

TEST(CollectiveEngine, NoJobAdvancesAfterStopWithoutAThread) {
  CollectiveEngine engine("test engine", /*threaded=*/false);
  std::unique_ptr<ActStream> stream = engine.make_stream("a collective actor");
  auto job = std::make_shared<NeverEnds>();
  std::atomic<bool> done{false};
  launch(*stream, job, &done);
  EXPECT_FALSE(engine.advance());
  EXPECT_EQ(job->advances.load(), 1);
  EXPECT_TRUE(stream->busy());
  engine.stop();
  EXPECT_FALSE(engine.advance());
  EXPECT_EQ(job->advances.load(), 1);
  // Its job never ends, but nothing of it runs again: not busy (Note [Hung streams]).
  EXPECT_FALSE(stream->busy());
  EXPECT_FALSE(done.load());
  stream.reset();
}

}  // namespace
}  // namespace ofl::actor
