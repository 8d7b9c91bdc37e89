#include "ops/op_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <vector>

#include "backend/backend.h"

namespace mt {

namespace {

struct OpTotal {
  int64_t calls = 0;
  double seconds = 0.0;
};

struct Profile {
  bool on = false;
  int depth = 0;  // routed ops in progress: only the outermost is timed
  double since = 0.0;
  std::map<std::string, OpTotal> ops;
};

Profile& profile() {
  static Profile p;
  return p;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Device work queued before (or by) the op is finished: the clock then measures the op's own work.
void settle(Device device) {
  if (device != Device::cpu) backend_for(device).synchronize();
}

}  // namespace

void set_op_profiling(bool on) {
  profile().on = on;
  reset_op_profile();
}

bool op_profiling() { return profile().on; }

void reset_op_profile() {
  profile().ops.clear();
  profile().since = now();
}

std::string op_profile_report() {
  const Profile& p = profile();
  const double wall = now() - p.since;
  std::vector<std::pair<std::string, OpTotal>> rows(p.ops.begin(), p.ops.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double timed = 0.0;
  for (const auto& r : rows) timed += r.second.seconds;
  std::string out = "op profile (" + std::to_string(rows.size()) + " ops; each op waits for its device, so the run is slower than unprofiled):\n";
  char line[160];
  std::snprintf(line, sizeof line, "  %-36s %9s %11s %10s %7s\n", "op", "calls", "total ms", "ms/call", "share");
  out += line;
  const auto share = [wall](double seconds) { return wall > 0 ? 100.0 * seconds / wall : 0.0; };
  for (const auto& [name, t] : rows) {
    std::snprintf(line, sizeof line, "  %-36s %9lld %11.2f %10.4f %6.1f%%\n", name.c_str(), static_cast<long long>(t.calls),
                  t.seconds * 1e3, t.seconds * 1e3 / static_cast<double>(t.calls), share(t.seconds));
    out += line;
  }
  const double outside = std::max(0.0, wall - timed);
  std::snprintf(line, sizeof line, "  %-36s %9s %11.2f %10s %6.1f%%\n", "(outside ops)", "", outside * 1e3, "", share(outside));
  out += line;
  return out;
}

OpTimer::OpTimer(const char* op, Device device) : device_(device) {
  Profile& p = profile();
  if (!p.on || device == Device::guard) return;
  nested_ = p.depth++ > 0;
  if (nested_) return;
  op_ = op;
  settle(device);
  start_ = now();
}

OpTimer::~OpTimer() {
  Profile& p = profile();
  if (op_) {
    settle(device_);
    OpTotal& t = p.ops[op_];
    ++t.calls;
    t.seconds += now() - start_;
  }
  if (op_ || nested_) --p.depth;
}

}  // namespace mt
