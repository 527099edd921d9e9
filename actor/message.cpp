#include "actor/message.h"

#include <cstring>

#include "oneflowlike/common/error.h"

namespace ofl::actor {

// The one list of printable fields (Note [Register messages] in the header).
#define OFL_ACTOR_MESSAGE_FIELDS(X) \
  X(slot)                           \
  X(session)                        \
  X(src_rank)                       \
  X(src_actor)                      \
  X(dst_rank)                       \
  X(dst_actor)                      \
  X(register_id)                    \
  X(piece)                          \
  X(address)                        \
  X(bytes)

const char* message_kind_name(ActorMessage::Kind kind) {
  switch (kind) {
    case ActorMessage::Kind::kRegisterReady:
      return "register_ready";
    case ActorMessage::Kind::kRegisterAck:
      return "register_ack";
    case ActorMessage::Kind::kEndOfStream:
      return "end_of_stream";
    case ActorMessage::Kind::kDepartureProgress:
      return "departure_progress";
    case ActorMessage::Kind::kDeparture:
      return "departure";
    case ActorMessage::Kind::kActDone:
      return "act_done";
    case ActorMessage::Kind::kRunFailed:
      return "run_failed";
    case ActorMessage::Kind::kRunPosition:
      return "run_position";
  }
  return "unknown";
}

namespace {

ActorMessage make(ActorMessage::Kind kind, ActorMessage::Endpoint src, ActorMessage::Endpoint dst,
                  int64_t register_id, int32_t slot) {
  ActorMessage m;
  m.kind = kind;
  m.src_actor = src.actor;
  m.src_rank = static_cast<int32_t>(src.rank);
  m.dst_actor = dst.actor;
  m.dst_rank = static_cast<int32_t>(dst.rank);
  m.register_id = register_id;
  m.slot = static_cast<int16_t>(slot);
  return m;
}

}  // namespace

ActorMessage ActorMessage::register_ready(Endpoint src, Endpoint dst, int64_t register_id,
                                          int32_t slot, int64_t piece) {
  ActorMessage m = make(Kind::kRegisterReady, src, dst, register_id, slot);
  m.piece = piece;
  return m;
}

ActorMessage ActorMessage::register_ack(Endpoint src, Endpoint dst, int64_t register_id,
                                        int32_t slot) {
  return make(Kind::kRegisterAck, src, dst, register_id, slot);
}

ActorMessage ActorMessage::end_of_stream(Endpoint src, Endpoint dst, int64_t register_id) {
  return make(Kind::kEndOfStream, src, dst, register_id, /*slot=*/0);
}

ActorMessage ActorMessage::departure_progress(int64_t src_rank, int64_t dst_rank, uint32_t session,
                                              int64_t iterations) {
  ActorMessage m = make(Kind::kDepartureProgress, {0, src_rank}, {0, dst_rank}, 0, 0);
  m.session = session;
  m.piece = iterations;
  return m;
}

ActorMessage ActorMessage::departure(int64_t src_rank, int64_t dst_rank) {
  return make(Kind::kDeparture, {0, src_rank}, {0, dst_rank}, 0, 0);
}

ActorMessage ActorMessage::act_done(Endpoint actor) {
  return make(Kind::kActDone, actor, actor, 0, 0);
}

ActorMessage ActorMessage::run_failed(int64_t src_rank, int64_t dst_rank, int64_t iteration,
                                      int64_t code) {
  ActorMessage m = make(Kind::kRunFailed, {0, src_rank}, {0, dst_rank}, /*register_id=*/code, 0);
  m.piece = iteration;
  return m;
}

ActorMessage ActorMessage::run_position(int64_t src_rank, int64_t dst_rank, int64_t position,
                                        uint32_t session, int64_t iteration, bool answer) {
  ActorMessage m =
      make(Kind::kRunPosition, {0, src_rank}, {0, dst_rank}, iteration, answer ? 1 : 0);
  m.session = session;
  m.piece = position;
  return m;
}

comm::MessageBytes to_bytes(const ActorMessage& message) {
  comm::MessageBytes bytes{};
  std::memcpy(bytes.data(), &message, sizeof(message));
  return bytes;
}

ActorMessage from_bytes(const comm::MessageBytes& bytes) {
  ActorMessage message;
  std::memcpy(&message, bytes.data(), sizeof(message));
  return message;
}

std::string ActorMessage::to_string() const {
  std::string s = str_cat(message_kind_name(kind), "{");
  bool first = true;
#define OFL_PRINT_FIELD(name)                             \
  s += str_cat(first ? "" : " ", #name, "=", this->name); \
  first = false;
  OFL_ACTOR_MESSAGE_FIELDS(OFL_PRINT_FIELD)
#undef OFL_PRINT_FIELD
  return s + "}";
}

}  // namespace ofl::actor
