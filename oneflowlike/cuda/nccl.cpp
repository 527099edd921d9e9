// NCCL communicators and collectives (nccl.h).
//
// Note [Collectives through NCCL]: a COLLECTIVE task's chunks (Note [Collective tasks] in
// oneflowlike/collective.h) are balanced ranges of one axis, so they may be uneven and, along an
// inner axis, strided. NCCL's reduce-scatter and all-gather take equal contiguous chunks only:
//  - even chunks that are contiguous (the flat elements, or an axis with nothing before it) go
//    to ncclReduceScatter / ncclAllGather directly;
//  - strided chunks are packed into device scratch first (one cudaMemcpy2DAsync per chunk: a
//    chunk along an axis is `rows` runs of equal width), and unpacked after;
//  - uneven chunks become one ncclReduce or ncclBroadcast per chunk, rooted at its owner, in
//    one NCCL group, which NCCL runs as one collective;
//  - an all-to-all and a grouped send/recv (Note [Grouped send/recv]) are one group of
//    ncclSend/ncclRecv per peer; a block contiguous in its register moves from or into it
//    directly, the others through packed scratch (a block is runs of rows: region_runs); a
//    member's block to itself is a device copy;
//  - a broadcast is ncclBroadcast from the root's input into every member's output.
// NCCL sums in its own order (its ring or tree), not ring_sum_order: a plan run through NCCL
// equals the CPU run within float tolerance, not bit for bit.

#include "oneflowlike/cuda/nccl.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <glog/logging.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "oneflowlike/collective.h"
#include "oneflowlike/cuda/check.h"
#include "oneflowlike/cuda/device.h"

namespace ofl::cuda {

namespace {

using Op = proto::CollectiveProto;

// Note [NCCL loaded on first use]: liboneflowlike does not link NCCL. PyTorch's CUDA wheels
// bring their own libnccl.so.2, newer than the toolkit's: had we linked the toolkit's, importing
// oneflowlike before torch would bind torch to it and torch would fail to load (a missing
// ncclCommResume). So NCCL is opened with dlopen when a communicator is first made: the
// libnccl.so.2 already in the process if there is one (torch's), else the search path's, else
// the toolkit's that CMake found (OFL_NCCL_LIBRARY), each call through a pointer from dlsym.
struct NcclApi {
  void* handle = nullptr;
  std::string error;  // why it could not load
// clang-format off
#define OFL_NCCL_FUNCTIONS(_)                                                                \
  _(ncclGetErrorString) _(ncclGetLastError) _(ncclGetVersion) _(ncclGetUniqueId)            \
  _(ncclCommInitRankConfig) _(ncclCommFinalize) _(ncclCommDestroy) _(ncclCommAbort)          \
  _(ncclCommGetAsyncError)                                                                    \
  _(ncclGroupStart) _(ncclGroupEnd) _(ncclAllReduce) _(ncclReduceScatter) _(ncclReduce)      \
  _(ncclAllGather) _(ncclBroadcast) _(ncclSend) _(ncclRecv)
// clang-format on
#define OFL_NCCL_POINTER(name) decltype(&::name) name = nullptr;
  OFL_NCCL_FUNCTIONS(OFL_NCCL_POINTER)
#undef OFL_NCCL_POINTER
};

const NcclApi& nccl_api() {
  static NcclApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    for (const char* path : {"libnccl.so.2", OFL_NCCL_LIBRARY}) {
      api.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (api.handle != nullptr) break;
      api.error += str_cat(api.error.empty() ? "" : "; ", dlerror());
    }
    if (api.handle == nullptr) return;
    api.error.clear();  // an earlier path failed, this one loaded
#define OFL_NCCL_LOAD(name)                                                  \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(api.handle, #name)); \
  if (api.name == nullptr && api.error.empty()) api.error = str_cat("no " #name " in NCCL");
    OFL_NCCL_FUNCTIONS(OFL_NCCL_LOAD)
#undef OFL_NCCL_LOAD
  });
  return api;
}

// NCCL's functions, raising when it cannot be loaded.
const NcclApi& nccl() {
  const NcclApi& api = nccl_api();
  OFL_CHECK_CODE(api.handle != nullptr && api.error.empty(), ErrorCode::kUnavailable,
                 "[nccl] NCCL could not be loaded: ", api.error,
                 ". Install NCCL 2 (libnccl.so.2), or set OFL_CUDA_COLLECTIVES=host.");
  return api;
}

ncclComm_t native(void* comm) { return static_cast<ncclComm_t>(comm); }

// ncclInProgress passes: every communicator is nonblocking, and the caller polls ready() (Note
// [Nonblocking communicators] in nccl.h).
void nccl_check(ncclResult_t result, const char* call, const std::string& communicator,
                const std::string& what) {
  if (result == ncclSuccess || result == ncclInProgress) [[likely]] {
    return;
  }
  const char* last = nccl().ncclGetLastError(nullptr);
  throw_error(
      result == ncclInvalidArgument || result == ncclInvalidUsage ? ErrorCode::kInvalidArgument
                                                                  : ErrorCode::kUnavailable,
      str_cat("[nccl] ", call, " for ", what, " on ", communicator,
              " failed: ", nccl().ncclGetErrorString(result),
              last != nullptr && *last != '\0' ? str_cat(" (", last, ")") : std::string(), "."));
}

ncclDataType_t nccl_dtype(DataType dtype, bool reduction, const std::string& what) {
  switch (dtype) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kBool:
      // Moved as bytes; a sum of booleans is not one.
      OFL_CHECK(!reduction, "[nccl] ", what, " sums bool tensors, which has no meaning.");
      return ncclUint8;
  }
  OFL_ASSERT(false);
  return ncclFloat32;
}

// One chunk of a row-major tensor along an axis: `rows` runs of `width` elements, `pitch`
// elements apart, the first at `offset` (Note [Collectives through NCCL]).
struct Strided {
  int64_t offset = 0;
  int64_t rows = 1;
  int64_t width = 0;
  int64_t pitch = 0;
  int64_t numel() const { return rows * width; }
};

Strided chunk_layout(const Shape& shape, int axis, int64_t n, int64_t chunk) {
  if (axis < 0) {
    const Range r = balanced_range(shape.numel(), n, chunk);
    return {r.begin, 1, r.size(), r.size()};
  }
  int64_t outer = 1;
  for (int i = 0; i < axis; ++i) outer *= shape[i];
  int64_t inner = 1;
  for (int i = axis + 1; i < shape.ndim(); ++i) inner *= shape[i];
  const Range r = balanced_range(shape[axis], n, chunk);
  return {r.begin * inner, outer, r.size() * inner, shape[axis] * inner};
}

std::vector<Strided> chunk_layouts(const Shape& shape, int axis, int64_t n) {
  std::vector<Strided> chunks;
  for (int64_t c = 0; c < n; ++c) chunks.push_back(chunk_layout(shape, axis, n, c));
  return chunks;
}

bool contiguous(const std::vector<Strided>& chunks) {
  for (const Strided& c : chunks) {
    if (c.rows > 1) return false;
  }
  return true;
}

bool even(const std::vector<Strided>& chunks) {
  for (const Strided& c : chunks) {
    if (c.numel() != chunks[0].numel()) return false;
  }
  return true;
}

// Where each chunk starts once the chunks are packed one after another (elements).
std::vector<int64_t> packed_offsets(const std::vector<Strided>& chunks) {
  std::vector<int64_t> offsets;
  int64_t at = 0;
  for (const Strided& c : chunks) {
    offsets.push_back(at);
    at += c.numel();
  }
  return offsets;
}

char* at(const Tensor& t, int64_t elements) {
  return static_cast<char*>(t.raw_data()) + elements * static_cast<int64_t>(dtype_size(t.dtype()));
}

// A box `region` of a row-major tensor of `shape` as strided runs (one per index of the axes
// before the last two that it does not span whole), in row-major order: packed one after
// another they hold the region's elements in order.
std::vector<Strided> region_runs(const Shape& shape, const std::vector<Range>& region) {
  const int ndim = shape.ndim();
  int partial = -1;  // the last axis the region does not cover whole
  for (int a = 0; a < ndim; ++a) {
    if (region[a].begin != 0 || region[a].end != shape[a]) partial = a;
  }
  if (region_is_empty(region)) return {};
  if (partial < 0) return {Strided{0, 1, shape.numel(), shape.numel()}};
  std::vector<int64_t> stride(ndim, 1);  // elements
  for (int a = ndim - 2; a >= 0; --a) stride[a] = stride[a + 1] * shape[a + 1];
  const int64_t width = region[partial].size() * stride[partial];
  const int row_axis = partial - 1;  // the rows of each run, -1: one row
  const int64_t rows = row_axis >= 0 ? region[row_axis].size() : 1;
  const int64_t pitch = row_axis >= 0 ? stride[row_axis] : width;
  int64_t base = region[partial].begin * stride[partial];
  if (row_axis >= 0) base += region[row_axis].begin * stride[row_axis];
  std::vector<Strided> runs;
  std::vector<int64_t> index(std::max(row_axis, 0), 0);  // over the axes before row_axis
  for (;;) {
    int64_t offset = base;
    for (int a = 0; a < row_axis; ++a) offset += (region[a].begin + index[a]) * stride[a];
    runs.push_back(Strided{offset, rows, width, pitch});
    int a = row_axis - 1;
    for (; a >= 0; --a) {
      if (++index[a] < region[a].size()) break;
      index[a] = 0;
    }
    if (a < 0) break;
  }
  return runs;
}

// Copies chunk `c` of `whole` to `packed` (or back: `unpack`), on `stream`.
void copy_chunk(const Tensor& whole, const Strided& c, char* packed, bool unpack,
                cudaStream_t stream, int device) {
  if (c.numel() == 0) return;
  const size_t elem = dtype_size(whole.dtype());
  char* strided = at(whole, c.offset);
  const size_t width = c.width * elem, pitch = c.pitch * elem;
  check(unpack ? cudaMemcpy2DAsync(strided, pitch, packed, width, width, c.rows,
                                   cudaMemcpyDeviceToDevice, stream)
               : cudaMemcpy2DAsync(packed, width, strided, pitch, width, c.rows,
                                   cudaMemcpyDeviceToDevice, stream),
        "cudaMemcpy2DAsync (collective chunk)", device);
}

}  // namespace

bool built_with_nccl() { return true; }

bool nccl_available() {
  const NcclApi& api = nccl_api();
  return api.handle != nullptr && api.error.empty();
}

std::string nccl_version() {
  int v = 0;
  if (!nccl_available() || nccl().ncclGetVersion(&v) != ncclSuccess) return "";
  return str_cat(v / 10000, ".", v % 10000 / 100, ".", v % 100);
}

void nccl_group_start(const std::string& what) {
  nccl_check(nccl().ncclGroupStart(), "ncclGroupStart", "this process's members", what);
}

void nccl_group_end(const std::string& what) {
  nccl_check(nccl().ncclGroupEnd(), "ncclGroupEnd", "this process's members", what);
}

NcclUniqueId nccl_unique_id() {
  ncclUniqueId id;
  nccl_check(nccl().ncclGetUniqueId(&id), "ncclGetUniqueId", "a new communicator", "its unique id");
  static_assert(sizeof(id) == kNcclUniqueIdBytes);
  NcclUniqueId out;
  std::memcpy(out.data(), &id, sizeof(id));
  return out;
}

NcclCommunicator::NcclCommunicator(void* comm, int64_t member, int64_t size, int device,
                                   std::string name)
    : comm_(comm),
      member_(member),
      size_(size),
      device_(device),
      name_(std::move(name)),
      stream_(std::make_unique<Stream>(device, StreamKind::kCollective)) {}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;  // aborted
  // After a sticky CUDA error cudaSetDevice fails too; a destructor must not throw, and the
  // NCCL calls below name their communicator, not a device.
  std::unique_ptr<DeviceGuard> guard;
  try {
    guard = std::make_unique<DeviceGuard>(device_);
  } catch (const std::exception& e) {
    LOG(WARNING) << "[nccl] communicator '" << name_ << "' at its end: " << e.what();
  }
  // After an error ncclCommDestroy may wait for ever on kernels that never end; so may a
  // finalisation whose peers never finalise (DeviceCollectives waits for all of them under one
  // deadline first; alone, a communicator waits 10 s).
  finalize();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (finalizing() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ncclResult_t state = ncclSuccess;
  if (nccl().ncclCommGetAsyncError(native(comm_), &state) != ncclSuccess) state = ncclSystemError;
  if (state == ncclSuccess) {
    nccl().ncclCommDestroy(native(comm_));
    return;
  }
  LOG(WARNING) << "[nccl] communicator '" << name_ << "' (member " << member_ << " of " << size_
               << ") did not end in order ("
               << (state == ncclInProgress ? "still finalising after 10 s"
                                           : nccl().ncclGetErrorString(state))
               << "); aborting it.";
  nccl().ncclCommAbort(native(comm_));
}

void NcclCommunicator::finalize() {
  if (comm_ == nullptr || finalize_called_) return;
  ncclResult_t state = ncclSuccess;
  if (nccl().ncclCommGetAsyncError(native(comm_), &state) != ncclSuccess || state != ncclSuccess) {
    return;  // failed or busy: the destructor aborts it
  }
  finalize_called_ = true;
  try {
    DeviceGuard guard(device_);
    const ncclResult_t result = nccl().ncclCommFinalize(native(comm_));
    if (result != ncclSuccess && result != ncclInProgress) {
      LOG(WARNING) << "[nccl] communicator '" << name_ << "' (member " << member_
                   << "): ncclCommFinalize failed: " << nccl().ncclGetErrorString(result);
    }
  } catch (const std::exception& e) {
    LOG(WARNING) << "[nccl] communicator '" << name_ << "' at its end: " << e.what();
  }
}

bool NcclCommunicator::finalizing() const {
  if (comm_ == nullptr || !finalize_called_) return false;
  ncclResult_t state = ncclSuccess;
  return nccl().ncclCommGetAsyncError(native(comm_), &state) == ncclSuccess &&
         state == ncclInProgress;
}

void NcclCommunicator::abort() {
  if (comm_ == nullptr) return;
  try {
    DeviceGuard guard(device_);
    nccl().ncclCommAbort(native(comm_));
    stream_->synchronize();  // the unpacking queued behind an aborted collective
  } catch (const std::exception& e) {
    LOG(WARNING) << "[nccl] communicator '" << name_ << "' (member " << member_
                 << ") aborting: " << e.what();
  }
  comm_ = nullptr;
}

std::vector<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(
    const NcclUniqueId& id, int64_t size, const std::vector<HostedMember>& hosted,
    const std::string& name, double timeout_s) {
  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), sizeof(uid));
  OFL_CHECK(!hosted.empty(), "[nccl] communicator '", name, "' needs a member in this process.");
  std::vector<ncclComm_t> comms(hosted.size(), nullptr);
  std::string members;  // for errors
  for (const HostedMember& m : hosted) {
    members += str_cat(members.empty() ? "" : ", ", "member ", m.member, " on cuda:", m.device);
  }
  // Until they are handed out, a failure aborts the ones made.
  auto abort_all = [&] {
    for (size_t i = 0; i < comms.size(); ++i) {
      if (comms[i] == nullptr) continue;
      try {
        DeviceGuard guard(hosted[i].device);
        nccl().ncclCommAbort(comms[i]);
      } catch (const std::exception& e) {
        LOG(WARNING) << "[nccl] aborting '" << name << "': " << e.what();
      }
    }
  };
  try {
    // Each member's init runs with its GPU current; the guard gives the caller back its device
    // (Note [Current devices]).
    std::vector<std::unique_ptr<DeviceGuard>> guards;
    // Several members in one process join in one group, or the first would wait for the others.
    nccl_check(nccl().ncclGroupStart(), "ncclGroupStart", name, "creating it");
    ncclResult_t ended = ncclSuccess;
    try {
      for (size_t i = 0; i < hosted.size(); ++i) {
        check_device(hosted[i].device);
        guards.push_back(std::make_unique<DeviceGuard>(hosted[i].device));
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;  // Note [Nonblocking communicators]
        nccl_check(nccl().ncclCommInitRankConfig(&comms[i], static_cast<int>(size), uid,
                                                 static_cast<int>(hosted[i].member), &config),
                   "ncclCommInitRankConfig", name, str_cat("member ", hosted[i].member));
      }
    } catch (...) {
      nccl().ncclGroupEnd();
      throw;
    }
    ended = nccl().ncclGroupEnd();
    while (!guards.empty()) guards.pop_back();  // the guards restore in reverse order
    nccl_check(ended, "ncclGroupEnd", name, "creating it");
    // Joined when no member is in progress any more; a member that never comes (it died after
    // the bootstrap) is a deadline, not a hang.
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + std::chrono::duration<double>(timeout_s);
    for (size_t i = 0; i < comms.size(); ++i) {
      for (;;) {
        ncclResult_t state = ncclSuccess;
        nccl_check(nccl().ncclCommGetAsyncError(comms[i], &state), "ncclCommGetAsyncError", name,
                   str_cat("member ", hosted[i].member, " joining"));
        if (state != ncclInProgress) {
          nccl_check(state, "ncclCommInitRankConfig", name,
                     str_cat("member ", hosted[i].member, " joining"));
          break;
        }
        OFL_CHECK_CODE(std::chrono::steady_clock::now() < deadline, ErrorCode::kDeadlineExceeded,
                       "[nccl] communicator '", name, "' of ", size,
                       " members was not made within ", timeout_s, " s (this process's ", members,
                       "): a member has not joined; its rank has failed, or runs another plan.");
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    std::vector<std::unique_ptr<NcclCommunicator>> out;
    for (size_t i = 0; i < hosted.size(); ++i) {
      out.push_back(std::unique_ptr<NcclCommunicator>(
          new NcclCommunicator(comms[i], hosted[i].member, size, hosted[i].device, name)));
      comms[i] = nullptr;  // its destructor ends it from here on
    }
    return out;
  } catch (...) {
    abort_all();
    throw;
  }
}

// Polled by the collective engine while collectives run: the communicator's description is made
// only for an error.
bool NcclCommunicator::ready(const std::string& what) const {
  const auto where = [&] {
    return str_cat(name_, " (member ", member_, " of ", size_, ", cuda:", device_, ")");
  };
  OFL_CHECK_CODE(comm_ != nullptr, ErrorCode::kUnavailable, "[nccl] ", what, " on ", where(),
                 ": the communicator was aborted.");
  ncclResult_t state = ncclSuccess;
  const ncclResult_t polled = nccl().ncclCommGetAsyncError(native(comm_), &state);
  if (polled == ncclSuccess && state == ncclSuccess) [[likely]] {
    return true;
  }
  nccl_check(polled, "ncclCommGetAsyncError", where(), what);
  if (state == ncclInProgress) return false;
  // The error may belong to this collective or to one queued before it on the communicator.
  nccl_check(state, "the communicator's collectives", where(), what);
  return true;
}

NcclCommunicator::Queued NcclCommunicator::collective(const proto::CollectiveProto& collective,
                                                      const Tensor& input, const Tensor& output,
                                                      const std::string& what) {
  const Op::Op op = collective.op();
  const int axis = collective.axis();
  OFL_CHECK(ready(what), "[nccl] ", what, " was queued on ", name_,
            " before the communicator's last call had finished in the background (Note "
            "[Nonblocking communicators]).");
  DeviceGuard guard(device_);
  const cudaStream_t s = static_cast<cudaStream_t>(stream_->native());
  ncclComm_t comm = native(comm_);
  const ncclDataType_t dt =
      nccl_dtype(output.dtype(), op == Op::ALL_REDUCE || op == Op::REDUCE_SCATTER, what);
  const int64_t n = size_, m = member_;
  const Device gpu{DeviceType::kCUDA, device_};
  Queued queued;  // the scratch stays alive until the queued work is done (the caller keeps it)
  // Note [Collective scratch]: the caching allocator hands back blocks freed by kernels whose
  // work may still be queued on the compute stream (Note [Kernel scratch]), and this stream is
  // another: before it touches fresh scratch it waits for what the compute stream has queued.
  // The event is recorded after the allocation: a block the rank's actor thread frees is freed
  // after the kernels using it were queued, so if this allocation got it, those kernels are
  // behind the event (recorded before the allocation, a block freed in between was not).
  auto packed = [&](int64_t numel) {
    queued.scratch.push_back(Tensor::empty(Shape{numel}, output.dtype(), gpu));
    Event ready(device_);
    ready.record(cuda::stream(device_, StreamKind::kCompute));
    ready.block(*stream_);
    return queued.scratch.back();
  };
  // A group this call opens is ended if NCCL raises inside it (nested groups launch at the
  // outermost end, so a caller's group stays open).
  int depth = 0;
  auto group_start = [&] {
    nccl_check(nccl().ncclGroupStart(), "ncclGroupStart", name_, what);
    ++depth;
  };
  auto group_end = [&] {
    --depth;
    nccl_check(nccl().ncclGroupEnd(), "ncclGroupEnd", name_, what);
  };
  struct EndOpenGroups {
    int& depth;
    ~EndOpenGroups() {
      for (; depth > 0; --depth) nccl().ncclGroupEnd();
    }
  } end_open_groups{depth};
  switch (op) {
    case Op::ALL_REDUCE:
      nccl_check(nccl().ncclAllReduce(input.raw_data(), output.raw_data(), input.numel(), dt,
                                      ncclSum, comm, s),
                 "ncclAllReduce", name_, what);
      break;
    case Op::REDUCE_SCATTER: {
      const std::vector<Strided> chunks = chunk_layouts(input.shape(), axis, n);
      const std::vector<int64_t> offsets = packed_offsets(chunks);
      Tensor source = input;
      if (!contiguous(chunks)) {
        source = packed(input.numel());
        for (int64_t c = 0; c < n; ++c) {
          copy_chunk(input, chunks[c], at(source, offsets[c]), /*unpack=*/false, s, device_);
        }
      }
      if (even(chunks)) {
        nccl_check(nccl().ncclReduceScatter(at(source, offsets[0]), output.raw_data(),
                                            chunks[0].numel(), dt, ncclSum, comm, s),
                   "ncclReduceScatter", name_, what);
        break;
      }
      group_start();
      for (int64_t c = 0; c < n; ++c) {
        nccl_check(nccl().ncclReduce(at(source, offsets[c]), c == m ? output.raw_data() : nullptr,
                                     chunks[c].numel(), dt, ncclSum, static_cast<int>(c), comm, s),
                   "ncclReduce", name_, what);
      }
      group_end();
      break;
    }
    case Op::ALL_GATHER: {
      const std::vector<Strided> chunks = chunk_layouts(output.shape(), axis, n);
      const std::vector<int64_t> offsets = packed_offsets(chunks);
      const bool direct = contiguous(chunks);
      Tensor target = direct ? output : packed(output.numel());
      if (even(chunks)) {
        nccl_check(nccl().ncclAllGather(input.raw_data(), target.raw_data(), chunks[0].numel(), dt,
                                        comm, s),
                   "ncclAllGather", name_, what);
      } else {
        group_start();
        for (int64_t c = 0; c < n; ++c) {
          nccl_check(nccl().ncclBroadcast(input.raw_data(), at(target, offsets[c]),
                                          chunks[c].numel(), dt, static_cast<int>(c), comm, s),
                     "ncclBroadcast", name_, what);
        }
        group_end();
      }
      if (!direct) {
        queued.finish = [output, chunks, offsets, target, s, device = device_] {
          for (size_t c = 0; c < chunks.size(); ++c) {
            copy_chunk(output, chunks[c], at(target, offsets[c]), /*unpack=*/true, s, device);
          }
        };
      }
      break;
    }
    case Op::BROADCAST: {
      const bool root = collective.root() == m;
      nccl_check(
          nccl().ncclBroadcast(root ? input.raw_data() : output.raw_data(), output.raw_data(),
                               output.numel(), dt, static_cast<int>(collective.root()), comm, s),
          "ncclBroadcast", name_, what);
      break;
    }
    case Op::ALL_TO_ALL:
    case Op::SEND_RECV: {
      // Per peer the block's runs: packed through scratch unless one contiguous run. A member
      // that sends nothing (the receiver of a transfer between GPUs) has no input.
      const CollectiveBlocks blocks = collective_blocks(
          collective, m, input.defined() ? input.shape() : Shape{}, output.shape());
      const size_t elem = dtype_size(output.dtype());
      struct Moved {
        int64_t member;
        std::vector<Strided> runs;
        int64_t numel = 0;
        char* data = nullptr;  // contiguous in the register, or packed
      };
      auto plan = [&](const std::vector<CollectiveBlock>& list, const Tensor& reg, bool unpack) {
        std::vector<Moved> moved;
        for (const CollectiveBlock& b : list) {
          Moved x{b.member, region_runs(reg.shape(), b.region)};
          for (const Strided& r : x.runs) x.numel += r.numel();
          if (x.numel == 0) continue;
          if (x.runs.size() == 1 && x.runs[0].rows == 1) {
            x.data = at(reg, x.runs[0].offset);
          } else {
            x.data = static_cast<char*>(packed(x.numel).raw_data());
            if (!unpack) {
              int64_t at_element = 0;
              for (const Strided& r : x.runs) {
                copy_chunk(reg, r, x.data + at_element * elem, /*unpack=*/false, s, device_);
                at_element += r.numel();
              }
            }
          }
          moved.push_back(std::move(x));
        }
        return moved;
      };
      const std::vector<Moved> sends = plan(blocks.sends, input, /*unpack=*/false);
      const std::vector<Moved> receives = plan(blocks.receives, output, /*unpack=*/true);
      for (const Moved& to_self : sends) {
        if (to_self.member != m) continue;
        for (const Moved& from_self : receives) {
          if (from_self.member != m) continue;
          OFL_ASSERT(to_self.numel == from_self.numel);
          check(cudaMemcpyAsync(from_self.data, to_self.data, to_self.numel * elem,
                                cudaMemcpyDeviceToDevice, s),
                "cudaMemcpyAsync (block to itself)", device_);
        }
      }
      group_start();
      for (const Moved& x : sends) {
        if (x.member == m) continue;
        nccl_check(nccl().ncclSend(x.data, x.numel, dt, static_cast<int>(x.member), comm, s),
                   "ncclSend", name_, what);
      }
      for (const Moved& x : receives) {
        if (x.member == m) continue;
        nccl_check(nccl().ncclRecv(x.data, x.numel, dt, static_cast<int>(x.member), comm, s),
                   "ncclRecv", name_, what);
      }
      group_end();
      queued.finish = [output, receives, s, device = device_, elem] {
        for (const Moved& x : receives) {
          if (x.runs.size() == 1 && x.runs[0].rows == 1) continue;  // received in place
          int64_t at_element = 0;
          for (const Strided& r : x.runs) {
            copy_chunk(output, r, x.data + at_element * elem, /*unpack=*/true, s, device);
            at_element += r.numel();
          }
        }
      };
      break;
    }
    default:
      OFL_CHECK(false, "[nccl] ", what, " is collective op ", static_cast<int>(op),
                ", which NCCL does not run here.");
  }
  return queued;
}

}  // namespace ofl::cuda
