// The CUDA API of a build without the CUDA backend: no devices (Note [No CUDA device]).

#include "oneflowlike/common/error.h"
#include "oneflowlike/cuda/device.h"
#include "oneflowlike/cuda/nccl.h"

namespace ofl::cuda {

namespace {

constexpr const char* kWhy =
    "this build has no CUDA (configure with -DOFL_BUILD_CUDA=ON where nvcc "
    "is installed)";

[[noreturn]] void no_device(int index) {
  throw_error(ErrorCode::kUnavailable, str_cat("[cuda] no CUDA device ", index, ": ", kWhy, "."));
}

}  // namespace

bool built_with_cuda() { return false; }
int device_count() { return 0; }
std::string why_no_device() { return kWhy; }
void check_device(int index) { no_device(index); }
DeviceProperties properties(int index) { no_device(index); }

Stream::Stream(int device, StreamKind kind) : device_(device), kind_(kind) { no_device(device); }
Stream::~Stream() = default;
void Stream::synchronize() const { no_device(device_); }
bool Stream::idle() const { no_device(device_); }
Stream& stream(int device, StreamKind) { no_device(device); }
void synchronize(int device) { no_device(device); }

Event::Event(int device) : device_(device) { no_device(device); }
Event::~Event() = default;
void Event::record(const Stream&) { no_device(device_); }
bool Event::done() const { no_device(device_); }
void Event::synchronize() const { no_device(device_); }
void Event::block(const Stream&) const { no_device(device_); }
void call_when_done(const Stream& stream, std::function<void(std::exception_ptr)>) {
  no_device(stream.device());
}

void copy(void*, int dst_device, const void*, int src_device, size_t) {
  no_device(dst_device >= 0 ? dst_device : src_device);
}
void copy_queued(void*, int dst_device, const void*, int src_device, size_t) {
  no_device(dst_device >= 0 ? dst_device : src_device);
}
void zero(void*, int device, size_t) { no_device(device); }
PinnedRange::PinnedRange(void*, size_t, int) : why_not_("this build has no CUDA") {}
void set_device(int index) { no_device(index); }
DeviceGuard::DeviceGuard(int device) { no_device(device); }
DeviceGuard::~DeviceGuard() = default;
PinnedRange::~PinnedRange() = default;

Allocator* allocator(int index) { no_device(index); }
Allocator* pinned_host_allocator() { no_device(0); }
bool is_pinned_host_allocator(const Allocator*) { return false; }
size_t cached_bytes(int) { return 0; }
void empty_cache() {}

bool built_with_nccl() { return false; }
bool nccl_available() { return false; }
std::string nccl_version() { return ""; }
NcclUniqueId nccl_unique_id() { no_device(0); }
void nccl_group_start(const std::string&) { no_device(0); }
void nccl_group_end(const std::string&) { no_device(0); }
std::vector<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(
    const NcclUniqueId&, int64_t, const std::vector<HostedMember>& hosted, const std::string&,
    double) {
  no_device(hosted.empty() ? 0 : hosted[0].device);
}
NcclCommunicator::~NcclCommunicator() = default;
NcclCommunicator::Queued NcclCommunicator::collective(const proto::CollectiveProto&, const Tensor&,
                                                      const Tensor&, const std::string&) {
  no_device(device_);
}
bool NcclCommunicator::ready(const std::string&) const { no_device(device_); }
void NcclCommunicator::finalize() {}
void NcclCommunicator::abort() {}

}  // namespace ofl::cuda
