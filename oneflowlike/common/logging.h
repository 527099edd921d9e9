#pragma once
// Note [Logging]: glog is set up once per process by whichever entry point comes first (the
// Python module, a C++ program's main), writing to stderr. INFO lines (what the bootstrap and
// the runtime say when all is well) show only when asked: OFL_VERBOSE=1 (the launcher's
// --verbose sets it), glog's own GLOG_minloglevel, or GLOG_v (VLOG lines are INFO lines).
// Warnings and errors always show.

namespace ofl {

/// Initialises glog for this process (a no-op once done); `program` names it in log lines.
void init_logging(const char* program);

/// Whether OFL_VERBOSE asks for INFO lines.
bool verbose_logging();

}  // namespace ofl
