// The device registry: every built backend listed, specs routed to their backend, and clear
// errors for malformed, unknown or left-out specs.
#include "hardware/device_registry.h"

#include <set>

#include "gtest/gtest.h"

namespace kiln::hardware {
namespace {

TEST(DeviceRegistry, ListsTheBackendsOfThisBuild) {
  std::set<std::string> names;
  for (const Backend& b : Backends()) {
    EXPECT_FALSE(b.usage.empty()) << b.name;
    names.insert(b.name);
  }
  for (const char* always : {"cpu", "sim", "replay", "opencl", "cuda"})  // built or refused
    EXPECT_TRUE(names.count(always)) << always;
}

TEST(DeviceRegistry, RoutesSpecsAndNamesWhatIsWrong) {
  auto unknown = OpenDevice("tpu:0");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("known: cpu"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("sim:NAME"), std::string::npos);

  auto bad_index = OpenDevice("cuda:x");
  ASSERT_FALSE(bad_index.ok());
  EXPECT_NE(bad_index.status().message().find("expected cuda or cuda:N"), std::string::npos);
  auto negative = OpenDevice("opencl:-1");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("expected opencl or opencl:N"), std::string::npos);
  // A longer name that starts with a kind is not that kind.
  auto longer = OpenDevice("openclx");
  ASSERT_FALSE(longer.ok());
  EXPECT_NE(longer.status().message().find("unknown device"), std::string::npos);

  auto sim = OpenDevice("sim:systolic-32x32");
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_EQ((*sim)->Fingerprint().kind(), "sim");
  EXPECT_FALSE(OpenDevice("sim:not-a-shape").ok());
  EXPECT_FALSE(OpenDevice("replay:").ok());
}

}  // namespace
}  // namespace kiln::hardware
