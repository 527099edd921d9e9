// The trace option: every act's start and end, as Chrome trace JSON.

#include <algorithm>

#include "actor/runtime.h"
#include "actor/runtime_internal.h"

namespace ofl::actor {

namespace {

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::vector<Runtime::Act> Runtime::take_acts() {
  std::vector<Act> acts;
  for (const auto& thread : threads_) {
    for (const TraceEvent& e : thread->take_trace()) {
      const Actor& actor = *e.actor;
      Act act;
      act.rank = actor.rank();
      act.thread = thread->index();
      act.tick = actor.task() < 0;
      if (!act.tick) {
        act.task = index_.task(actor.task()).proto.name();
        act.kind = index_.task(actor.task()).proto.kind();
      }
      act.iteration = e.iteration;
      act.micro_batch = e.micro_batch;
      act.begin_us = (e.begin_ns - trace_origin_ns_) / 1000.0;
      act.end_us = (e.end_ns - trace_origin_ns_) / 1000.0;
      acts.push_back(std::move(act));
    }
  }
  return acts;
}

std::string Runtime::chrome_trace() {
  std::string json = "{\"traceEvents\":[";
  bool first = true;
  auto add = [&](const std::string& event) {
    json += (first ? "\n" : ",\n") + event;
    first = false;
  };
  for (const auto& thread : threads_) {
    add(str_cat("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":", thread->rank(), ",\"tid\":",
                thread->index(), ",\"args\":{\"name\":\"", json_escape(thread->name()), "\"}}"));
  }
  for (const Act& act : take_acts()) {
    const std::string name = act.tick ? str_cat("tick of rank ", act.rank) : act.task;
    const std::string kind = act.tick ? "TICK" : proto::TaskProto::Kind_Name(act.kind);
    add(str_cat("{\"name\":\"", json_escape(name), "\",\"cat\":\"", kind,
                "\",\"ph\":\"X\",\"pid\":", act.rank, ",\"tid\":", act.thread,
                ",\"ts\":", act.begin_us, ",\"dur\":", act.end_us - act.begin_us,
                ",\"args\":{\"iteration\":", act.iteration, ",\"micro_batch\":", act.micro_batch,
                "}}"));
  }
  return json + "\n]}\n";
}

}  // namespace ofl::actor
