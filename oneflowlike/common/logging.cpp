#include "oneflowlike/common/logging.h"

#include <glog/logging.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace ofl {

bool verbose_logging() {
  const char* value = std::getenv("OFL_VERBOSE");
  return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
}

void init_logging(const char* program) {
  static std::once_flag once;
  std::call_once(once, [program] {
    if (google::IsGoogleLoggingInitialized()) return;
    FLAGS_logtostderr = true;
    // glog reads GLOG_minloglevel into FLAGS_minloglevel itself; otherwise INFO is opt-in, and
    // asking for VLOG lines (GLOG_v, which are INFO lines) asks for INFO too.
    if (std::getenv("GLOG_minloglevel") == nullptr) {
      const bool info = verbose_logging() || FLAGS_v > 0;
      FLAGS_minloglevel = info ? google::GLOG_INFO : google::GLOG_WARNING;
    }
    google::InitGoogleLogging(program);
  });
}

}  // namespace ofl
