// SQLite implementation of Store (WAL journal; each value stored as its proto wire format).
#pragma once

#include <memory>
#include <string>

#include "server/store/store.h"

namespace kiln::server {

absl::StatusOr<std::unique_ptr<Store>> NewSqliteStore(const std::string& path);

}  // namespace kiln::server
