#include "comm/transport.h"

#include "oneflowlike/common/error.h"

namespace ofl::comm {

namespace {

[[noreturn]] void no_tagged_transfers(const char* what) {
  OFL_CHECK_CODE(false, ErrorCode::kUnimplemented, "[transport] collectives need tagged ", what,
                 ". However, this transport has none.");
  std::abort();
}

}  // namespace

Transport::TaggedRequest Transport::send_tagged(int64_t, uint64_t, const void*, size_t) {
  no_tagged_transfers("sends");
}

Transport::TaggedRequest Transport::receive_tagged(int64_t, uint64_t, void*, size_t) {
  no_tagged_transfers("receives");
}

bool Transport::test(TaggedRequest&) { no_tagged_transfers("transfers"); }

}  // namespace ofl::comm
