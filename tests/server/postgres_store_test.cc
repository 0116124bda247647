// PostgreSQL-only behaviour of the store: one coordinator per database, reconnecting after the
// server dropped the connection. Runs under tests/deploy/with_postgres.sh; skips without it.
#include <chrono>

#include "gtest/gtest.h"
#include "tests/server/store_fixture.h"

namespace kiln::server {
namespace {

using testing::Job;
using PostgresServerTest = testing::StoreTest;

TEST_P(PostgresServerTest, ASecondCoordinatorOnTheSameDatabaseIsRefused) {
  auto first = Open();
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = Open();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("another kiln-coordinator"), std::string::npos)
      << second.status();
  first->reset();  // the first one stops: its lock goes with its session
  auto third = Open();
  EXPECT_TRUE(third.ok()) << third.status();
}

TEST_P(PostgresServerTest, ReconnectsAfterTheServerDroppedItsSession) {
  auto store = *Open();
  WriteBatch a;
  a.jobs = {Job("j-1", v1::RUNNING, 1)};
  ASSERT_TRUE(store->Write(a).ok());
  ASSERT_TRUE(
      Admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"));
  WriteBatch b;
  b.jobs = {Job("j-2", v1::RUNNING, 2)};
  absl::Status s = store->Write(b);
  EXPECT_TRUE(s.ok()) << s;
  auto jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 2u);
}

INSTANTIATE_TEST_SUITE_P(Server, PostgresServerTest, ::testing::Values("postgres"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln::server
