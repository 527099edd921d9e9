// Communication benchmarks between processes (docs/benchmarks.md, "Communication (issue 5)").
// One rank of a job started by the launcher; scripts/bench/bench_comm.sh runs it next to
// ucx_perftest in the same invocation. Rank 0 prints the results.
//
//   bench_comm transfer [bytes [acks_every]]
//                         (2 ranks) register data, SEND side expose -> RECV side fetch, 4 KiB to
//                         64 MiB (or `bytes`): bandwidth as the receiver sees it; one credit per
//                         transfer as in the runtime, or per `acks_every` (an experiment); up to
//                         4 KiB the piece travels in its message, unacknowledged
//   bench_comm roundtrip  (2 ranks) actor messages alone: a 64-byte message and its answer
//   bench_comm latency    (2 ranks) a chain of transfers bouncing between the two ranks inside
//                         one iteration of the actor runtime: time per hop (actor to actor)
//   bench_comm allreduce [MiB]
//                         (N ranks) a compiled plan whose P -> B boxing is an all-reduce
//                         (one COLLECTIVE task per rank), run and its sum checked; then the
//                         collective engine the runtime runs it on, timed from 4 KiB up to
//                         MiB (default 64) of float32: time and bus bandwidth, against a memcpy
//                         of the bytes each rank receives (measured here)
//   bench_comm broadcast [MiB]
//                         (N ranks) the collective engine's broadcast from rank 0 (Note
//                         [Broadcast]), by binomial tree and by chain up to 1 MiB, by chain above,
//                         from a barrier until the last member has it, against a memcpy of the
//                         tensor

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "actor/collective_engine.h"
#include "actor/runtime.h"
#include "comm/ucx_transport.h"
#include "compiler/builder.h"
#include "compiler/compile.h"
#include "oneflowlike/collective.h"
#include "oneflowlike/common/logging.h"
#include "oneflowlike/ops/reduce.h"
#include "tests/cpp/actor/plan_builder.h"

namespace ofl {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// As SEND and RECV move register pieces in the runtime. Large pieces: the sender exposes, the
// receiver fetches and returns a credit (an actor-message-sized active message, the RECV's
// acknowledgement) for each one it has read (or, as an experiment, for each `acks_every`, the
// window as many times larger); at most kWindow in flight, as with register slots. Pieces of at
// most kInlineTransferBytes travel inside their announcing message (send_with_data; Note [Small
// transfers travel with their message]) and are not acknowledged in the runtime, whose
// iterations bound how far a sender runs ahead; here the receiver returns one credit per
// kWindow pieces, keeping the sender within kWindow * kWindow of it.
void transfer(comm::UcxTransport& t, size_t only_bytes, int acks_every) {
  OFL_CHECK(t.world_size() == 2, "[bench_comm] transfer needs 2 ranks.");
  constexpr int kWindow = 8;

  std::vector<char> buffer(64 << 20, 1);
  std::atomic<int64_t> received{0};  // credits (the sender), announcements (the receiver)
  t.serve_rank(t.rank(), [&](const comm::MessageBytes&) { received.fetch_add(1); });
  const comm::MessageBytes message{};
  uint64_t tag = 1;
  if (t.rank() == 0) std::printf("| bytes | ours (GB/s) |\n| --- | --- |\n");
  for (size_t bytes = 4096; bytes <= buffer.size(); bytes *= 4) {
    if (only_bytes != 0 && bytes != only_bytes) continue;
    const int n = static_cast<int>(std::clamp<size_t>((size_t{2} << 30) / bytes, 20, 200000));
    const bool small = bytes <= comm::kInlineTransferBytes;
    const int every = small ? kWindow : acks_every;
    double best = 0;
    for (int round = 0; round < 3; ++round) {
      t.barrier();
      const uint64_t first = tag;
      tag += n;
      const int64_t base = received.load();
      if (t.rank() == 1) {
        // Waiting, the sender drives the transport, as a communication thread does.
        for (int i = 0; i < n; ++i) {
          while (i - (received.load() - base) * every >= kWindow * every) t.progress();
          if (small) {
            t.send_with_data(0, message, first + i, buffer.data(), bytes);
          } else {
            t.expose(0, first + i, buffer.data(), bytes);
          }
        }
        while ((received.load() - base) * every < n) t.progress();
      } else {
        const auto start = Clock::now();
        for (int i = 0; i < n; ++i) {
          while (small && received.load() - base <= i) t.progress();  // its message came
          t.fetch(1, first + i, 0, buffer.data(), bytes);
          if ((i + 1) % every == 0 || i + 1 == n) t.send(1, message);
        }
        best = std::max(best, n * double(bytes) / seconds_since(start) / 1e9);
      }
    }
    if (t.rank() == 0) std::printf("| %zu | %.2f |\n", bytes, best);
  }
  t.stop_serving_rank(t.rank());
}

// Actor messages alone: rank 0 sends a 64-byte message to rank 1, which answers; each side's
// thread drives the transport itself while it waits, as ucx_perftest does.
void roundtrip(comm::UcxTransport& t) {
  OFL_CHECK(t.world_size() == 2, "[bench_comm] roundtrip needs 2 ranks.");
  std::atomic<int64_t> received{0};
  const comm::MessageBytes message{};
  t.serve_rank(t.rank(), [&](const comm::MessageBytes&) {
    received.fetch_add(1, std::memory_order_release);
  });
  constexpr int kRounds = 20000;
  t.barrier();
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    const int64_t base = int64_t{round} * kRounds;  // messages each side received before
    if (t.rank() == 0) {
      const auto start = Clock::now();
      for (int i = 1; i <= kRounds; ++i) {
        t.send(1, message);
        while (received.load(std::memory_order_acquire) < base + i) t.progress();
      }
      best = std::min(best, seconds_since(start) * 1e6 / kRounds);
    } else {
      // The answer goes from this thread, as an actor thread sends, not from the handler.
      for (int i = 1; i <= kRounds; ++i) {
        while (received.load(std::memory_order_acquire) < base + i) t.progress();
        t.send(0, message);
      }
    }
    t.barrier();
  }
  t.stop_serving_rank(t.rank());
  if (t.rank() == 0) {
    std::printf("actor message round trip across processes (64 bytes): %.2f us, %.2f us one way\n",
                best, best / 2);
  }
}

// Rank r's part of a plan that holds every rank.
proto::PlanProto part_of(const proto::PlanProto& plan, int64_t rank) {
  proto::PlanProto part = plan;
  part.clear_ranks();
  for (const auto& r : plan.ranks()) {
    if (r.rank() == rank) *part.add_ranks() = r;
  }
  return part;
}

void latency(const std::shared_ptr<comm::UcxTransport>& t) {
  OFL_CHECK(t->world_size() == 2, "[bench_comm] latency needs 2 ranks.");
  constexpr int kHops = 200;
  testing::PlanBuilder b(2);
  int64_t reg = b.input(0, "x", Shape{1});
  for (int hop = 0; hop < kHops; ++hop) {
    reg = b.send_recv(hop % 2, (hop + 1) % 2, reg, /*transfer_id=*/hop).second;
  }
  b.output(kHops % 2, "y", reg, Shape{1});
  actor::RuntimeOptions options;
  options.transport = t;
  // OFL_BENCH_SPIN_US: the runtime threads' spin before parking (RuntimeOptions).
  if (const char* spin = std::getenv("OFL_BENCH_SPIN_US"))
    options.spin_microseconds = std::atof(spin);
  actor::Runtime runtime(part_of(b.plan(), t->rank()), options);
  const std::map<std::string, Tensor> feed = {{"x", Tensor::zeros(Shape{1}, DataType::kFloat32)}};
  for (int i = 0; i < 20; ++i) runtime.run(feed);
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    t->barrier();
    const auto start = Clock::now();
    for (int i = 0; i < 20; ++i) runtime.run(feed);
    best = std::min(best, seconds_since(start) * 1e6 / (20.0 * kHops));
  }
  runtime.shutdown();
  t->barrier();
  if (t->rank() == 0) {
    std::printf(
        "actor hop across processes (a 4-byte transfer: the ready message carrying it): %.2f us\n",
        best);
  }
}

// The spec of this rank's member of a collective of `op` over every rank.
actor::CollectiveSpec spec_over_all(proto::CollectiveProto::Op op, comm::UcxTransport& t) {
  actor::CollectiveSpec spec;
  spec.op = op;
  for (int64_t r = 0; r < t.world_size(); ++r) spec.members.push_back(r);
  spec.member = t.rank();
  return spec;
}

// The best of five memcpys of `bytes`, in ms: the bound the collectives are measured against.
double best_memcpy_ms(size_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    best = std::min(best, seconds_since(start) * 1e3);
  }
  return best;
}

// One collective of `input` into `output` on the engine, from launch to done.
// The best time of each of `algorithms` at `bytes`: rounds of one run each, alternating, after
// a warm-up round; 50 rounds up to 1 MiB, 10 up to 16 MiB, 5 above. The first algorithm runs at
// every size, the others only up to 1 MiB. `once(algorithm)` times one run and checks it.
template <class Once>
std::map<proto::CollectiveProto::Algorithm, double> best_of_rounds(
    int64_t bytes, const std::vector<proto::CollectiveProto::Algorithm>& algorithms, Once once) {
  const int repeats = bytes <= (1 << 20) ? 50 : bytes <= (16 << 20) ? 10 : 5;
  std::map<proto::CollectiveProto::Algorithm, double> best_of;
  for (int i = 0; i < repeats + 1; ++i) {
    for (size_t a = 0; a < algorithms.size(); ++a) {
      if (a > 0 && bytes > (1 << 20)) continue;
      const double ms = once(algorithms[a]);
      if (!best_of.count(algorithms[a])) best_of[algorithms[a]] = 1e30;
      if (i > 0) best_of[algorithms[a]] = std::min(best_of[algorithms[a]], ms);
    }
  }
  return best_of;
}

double time_collective(actor::CollectiveEngine& engine, actor::ActStream& stream,
                       comm::Transport& t, const actor::CollectiveSpec& spec, const Tensor& input,
                       const Tensor& output, actor::CollectiveScratch* scratch) {
  std::atomic<bool> done{false};
  std::exception_ptr error;
  const auto start = Clock::now();
  stream.launch(actor::CollectiveWork{actor::make_collective_job(t, spec, input, output, scratch)},
                [&](std::exception_ptr e) {
                  error = e;
                  done.store(true, std::memory_order_release);
                });
  while (!done.load(std::memory_order_acquire)) std::this_thread::yield();
  const double ms = seconds_since(start) * 1e3;
  if (error) std::rethrow_exception(error);
  (void)engine;
  return ms;
}

void allreduce(const std::shared_ptr<comm::UcxTransport>& t, int64_t megabytes) {
  const int64_t n = t->world_size();
  {  // The compiled plan: its boxing is one collective per rank, and its sum is right.
    const int64_t elements = int64_t{1} << 16;
    compiler::GraphBuilder b("allreduce");
    std::string ranks;
    for (int64_t r = 0; r < n; ++r) ranks += str_cat(r ? ", " : "", r);
    b.set_placement(Placement::parse("cpu, [" + ranks + "]"));
    // Each rank holds one row; the sum over rows is partial on every rank; relu needs it whole
    // (B: without the hint SBP inference picks the cheaper reduce-scatter).
    const int x = b.input("x", Shape{n, elements}, DataType::kFloat32, {S(0)});
    const int y = b.op1("reduce_sum", ReduceParams{{0}, false}, {x});
    const int z = b.op1("relu", NoParams{}, {y}, "", {B()});
    b.fetch(b.op1("reduce_sum", ReduceParams{{0}, false}, {z}, "total"));
    compiler::CompileOptions compile;
    compile.ranks = {t->rank()};
    actor::RuntimeOptions options;
    options.transport = t;
    actor::Runtime runtime(compiler::compile_graph(std::move(b.graph()), compile), options);
    Tensor ones = Tensor::empty(Shape{n, elements}, DataType::kFloat32);
    std::fill(ones.data<float>(), ones.data<float>() + n * elements, 1.0f);
    const Tensor total = runtime.run({{"x", ones}}).at("total/out0");
    if (t->rank() == 0) {
      OFL_CHECK(total.data<float>()[0] == static_cast<float>(n * elements), "[bench_comm] the ",
                "all-reduce must sum to ", n * elements, ". However, got ", total.data<float>()[0]);
    }
    runtime.shutdown();
  }
  actor::CollectiveEngine engine("bench", /*threaded=*/true);
  std::unique_ptr<actor::ActStream> stream = engine.make_stream("bench all-reduce");
  actor::CollectiveSpec spec = spec_over_all(proto::CollectiveProto::ALL_REDUCE, *t);
  actor::CollectiveScratch scratch;
  if (t->rank() == 0) {
    std::printf(
        "| bytes | ours ms (the compiler's choice) | ours bus GB/s | memcpy ms of 2(n-1)/n of it "
        "| bound / ours | ring ms | recursive doubling ms |\n");
  }
  for (int64_t bytes = 4096; bytes <= megabytes * (1 << 20); bytes *= 4) {
    const int64_t elements = bytes / 4;
    Tensor in = Tensor::empty(Shape{elements}, DataType::kFloat32);
    std::fill(in.data<float>(), in.data<float>() + elements, 1.0f);
    Tensor out = Tensor::empty(Shape{elements}, DataType::kFloat32);
    // Both algorithms up to 1 MiB (Note [Recursive doubling]); the ring above.
    const bool both = bytes <= (1 << 20);
    const auto best_of = best_of_rounds(
        bytes, {proto::CollectiveProto::RING, proto::CollectiveProto::RECURSIVE_DOUBLING},
        [&](proto::CollectiveProto::Algorithm algorithm) {
          spec.algorithm = algorithm;
          t->barrier();
          const double ms = time_collective(engine, *stream, *t, spec, in, out, &scratch);
          OFL_CHECK(out.data<float>()[elements - 1] == static_cast<float>(n), "[bench_comm] the ",
                    "all-reduce must give ", n, ". However, got ", out.data<float>()[elements - 1]);
          return ms;
        });
    const double best =
        best_of.at(collective_algorithm(proto::CollectiveProto::ALL_REDUCE, bytes, n));
    const size_t received = static_cast<size_t>(2.0 * (n - 1) / n * bytes);
    const double memcpy_ms = best_memcpy_ms(received);
    t->barrier();
    if (t->rank() == 0) {
      char doubling[32] = "";
      if (both) {
        std::snprintf(doubling, sizeof doubling, "%.3f",
                      best_of.at(proto::CollectiveProto::RECURSIVE_DOUBLING));
      }
      std::printf("| %lld | %.3f | %.2f | %.3f | %.2f | %.3f | %s |\n",
                  static_cast<long long>(bytes), best, received / best / 1e6, memcpy_ms,
                  memcpy_ms / best, best_of.at(proto::CollectiveProto::RING), doubling);
    }
  }
}

// The largest of the members' `ms` at rank 0 (its own elsewhere), exchanged after the timing.
double slowest(comm::UcxTransport& t, double ms) {
  constexpr uint64_t kTag = 1;  // below the collectives' tags (Note [Collective tags])
  if (t.rank() != 0) {
    comm::Transport::TaggedRequest r = t.send_tagged(0, kTag, &ms, sizeof ms);
    while (!t.test(r)) std::this_thread::yield();
    return ms;
  }
  double slowest_ms = ms;
  for (int64_t r = 1; r < t.world_size(); ++r) {
    double theirs = 0;
    comm::Transport::TaggedRequest request = t.receive_tagged(r, kTag, &theirs, sizeof theirs);
    while (!t.test(request)) std::this_thread::yield();
    slowest_ms = std::max(slowest_ms, theirs);
  }
  return slowest_ms;
}

void broadcast(const std::shared_ptr<comm::UcxTransport>& t, int64_t megabytes) {
  const int64_t n = t->world_size();
  actor::CollectiveEngine engine("bench", /*threaded=*/true);
  std::unique_ptr<actor::ActStream> stream = engine.make_stream("bench broadcast");
  actor::CollectiveSpec spec = spec_over_all(proto::CollectiveProto::BROADCAST, *t);
  spec.root = 0;
  actor::CollectiveScratch scratch;
  if (t->rank() == 0) {
    std::printf(
        "| bytes | ours ms (the compiler's choice) | ours GB/s | memcpy ms | bound / ours "
        "| chain ms | tree ms |\n");
  }
  for (int64_t bytes = 4096; bytes <= megabytes * (1 << 20); bytes *= 4) {
    const int64_t elements = bytes / 4;
    Tensor in;
    if (t->rank() == 0) {
      in = Tensor::empty(Shape{elements}, DataType::kFloat32);
      std::fill(in.data<float>(), in.data<float>() + elements, 3.0f);
    }
    Tensor out = Tensor::empty(Shape{elements}, DataType::kFloat32);
    const bool both = bytes <= (1 << 20);
    const auto best_of = best_of_rounds(
        bytes, {proto::CollectiveProto::RING, proto::CollectiveProto::TREE},
        [&](proto::CollectiveProto::Algorithm algorithm) {
          spec.algorithm = algorithm;
          std::fill(out.data<float>(), out.data<float>() + elements, 0.0f);
          t->barrier();
          // Until the last member has it: each member's own time, the largest at rank 0.
          const double ms =
              slowest(*t, time_collective(engine, *stream, *t, spec, in, out, &scratch));
          OFL_CHECK(out.data<float>()[elements - 1] == 3.0f, "[bench_comm] the broadcast must ",
                    "give 3. However, got ", out.data<float>()[elements - 1]);
          return ms;
        });
    const double best =
        best_of.at(collective_algorithm(proto::CollectiveProto::BROADCAST, bytes, n));
    const double memcpy_ms = best_memcpy_ms(static_cast<size_t>(bytes));
    t->barrier();
    if (t->rank() == 0) {
      char tree[32] = "";
      if (both) std::snprintf(tree, sizeof tree, "%.3f", best_of.at(proto::CollectiveProto::TREE));
      std::printf("| %lld | %.3f | %.2f | %.3f | %.2f | %.3f | %s |\n",
                  static_cast<long long>(bytes), best, bytes / best / 1e6, memcpy_ms,
                  memcpy_ms / best, best_of.at(proto::CollectiveProto::RING), tree);
    }
  }
}

int run(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "transfer";
  auto t = comm::UcxTransport::connect(comm::LaunchEnv::from_environment());
  if (mode == "transfer") {
    // One size, or all; optionally one credit per `acks_every` transfers (an experiment: how
    // much of the cost the per-transfer acknowledgement is).
    transfer(*t, argc > 2 ? std::stoull(argv[2]) : 0, argc > 3 ? std::stoi(argv[3]) : 1);
  } else if (mode == "latency") {
    latency(t);
  } else if (mode == "roundtrip") {
    roundtrip(*t);
  } else if (mode == "allreduce") {
    allreduce(t, argc > 2 ? std::stoll(argv[2]) : 64);
  } else if (mode == "broadcast") {
    broadcast(t, argc > 2 ? std::stoll(argv[2]) : 64);
  } else {
    OFL_CHECK(false,
              "[bench_comm] mode must be transfer, roundtrip, latency, allreduce or broadcast. "
              "However, got '",
              mode, "'.");
  }
  t->leave();
  return 0;
}

}  // namespace
}  // namespace ofl

int main(int argc, char** argv) {
  ofl::init_logging(argv[0]);  // Note [Logging]
  try {
    return ofl::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[bench_comm] error: %s\n", e.what());
    return 1;
  }
}
