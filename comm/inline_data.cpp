#include "comm/inline_data.h"

#include <algorithm>
#include <cstring>

#include "oneflowlike/common/error.h"

namespace ofl::comm {

void InlineData::put(uint64_t tag, const void* data, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Piece piece;
  piece.tag = tag;
  if (!spare_.empty()) {
    piece.copy = std::move(spare_.back());
    spare_.pop_back();
  }
  piece.copy.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
  piece.data = piece.copy.data();
  piece.bytes = bytes;
  pieces_.push_back(std::move(piece));
}

void InlineData::put_borrowed(uint64_t tag, const void* data, size_t bytes, void* token) {
  std::lock_guard<std::mutex> lock(mu_);
  pieces_.push_back(Piece{tag, {}, static_cast<const char*>(data), bytes, token});
}

void* InlineData::take(uint64_t tag, int64_t src_rank, void* dst, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(pieces_.begin(), pieces_.end(),
                         [tag](const Piece& piece) { return piece.tag == tag; });
  OFL_CHECK_CODE(it != pieces_.end(), ErrorCode::kInternal, "[transport] transfer ", tag,
                 " from rank ", src_rank,
                 " must have come with its message. However, no piece of it is here.");
  OFL_CHECK_CODE(it->bytes == bytes, ErrorCode::kInternal, "[transport] transfer ", tag,
                 " from rank ", src_rank, " must deliver ", bytes,
                 " bytes. However, its piece has ", it->bytes, ".");
  std::memcpy(dst, it->data, bytes);
  void* token = it->token;
  if (token == nullptr && spare_.size() < 64) spare_.push_back(std::move(it->copy));
  if (it == pieces_.begin()) {
    pieces_.pop_front();
  } else {
    pieces_.erase(it);
  }
  return token;
}

std::vector<void*> InlineData::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<void*> tokens;
  for (const Piece& piece : pieces_) {
    if (piece.token != nullptr) tokens.push_back(piece.token);
  }
  pieces_.clear();
  return tokens;
}

}  // namespace ofl::comm
