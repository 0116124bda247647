// PostgreSQL implementation of Store (libpq), the shared store of a multi-user deployment.
#pragma once

#include <memory>
#include <string>

#include "server/store/store.h"

namespace kiln::server {

// `uri`: postgresql://USER@HOST:PORT/DB (the password from PGPASSWORD or ~/.pgpass, or in the
// URI). Creates the schema when missing; refuses a schema newer than this build; holds an
// advisory lock so that one coordinator at a time uses the database. `reader`: a standby's
// session that only reads (no lock, no schema changes; Write fails).
absl::StatusOr<std::unique_ptr<Store>> NewPostgresStore(const std::string& uri,
                                                        bool reader = false);

}  // namespace kiln::server
