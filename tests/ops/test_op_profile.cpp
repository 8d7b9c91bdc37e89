// Tests for ops/op_profile.h: what --profile-ops counts, and that it counts nothing when off.
#include "ops/op_profile.h"

#include <string>

#include "ops/elementwise.h"
#include "testing.h"

namespace mt::test {
namespace {

// The report's row for `op`: its calls column, or -1 when the op has no row.
long long calls_of(const std::string& report, const std::string& op) {
  const size_t at = report.find("\n  " + op + " ");
  if (at == std::string::npos) return -1;
  return std::stoll(report.substr(at + 3 + op.size()));
}

TEST(OpProfile, CountsEveryRoutedCallOnlyWhileOn) {
  HostTensor a = randn({64}, 1), b = randn({64}, 2), out = zeros({64});
  set_op_profiling(true);
  for (int i = 0; i < 3; ++i) add_fwd(out.view(), a.view(), b.view());
  scale_inplace(out.view(), 0.5f);
  std::string report = op_profile_report();
  EXPECT_EQ(calls_of(report, "add_fwd"), 3) << report;
  EXPECT_EQ(calls_of(report, "scale_inplace"), 1) << report;
  EXPECT_NE(report.find("(outside ops)"), std::string::npos) << report;

  reset_op_profile();  // forgets the calls so far
  add_fwd(out.view(), a.view(), b.view());
  report = op_profile_report();
  EXPECT_EQ(calls_of(report, "add_fwd"), 1) << report;
  EXPECT_EQ(calls_of(report, "scale_inplace"), -1) << report;

  set_op_profiling(false);
  add_fwd(out.view(), a.view(), b.view());
  EXPECT_EQ(calls_of(op_profile_report(), "add_fwd"), -1);
  EXPECT_FALSE(op_profiling());
}

TEST(OpProfile, AnOpInsideAnotherCountsAsTheOuterOne) {
  set_op_profiling(true);
  {
    const OpTimer outer("outer", Device::cpu);
    const OpTimer inner("inner", Device::cpu);
  }
  const std::string report = op_profile_report();
  set_op_profiling(false);
  EXPECT_EQ(calls_of(report, "outer"), 1) << report;
  EXPECT_EQ(calls_of(report, "inner"), -1) << report;
}

}  // namespace
}  // namespace mt::test
