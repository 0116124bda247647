// A Store decorator that times every operation into kiln_store_operations_total and
// kiln_store_operation_seconds (the SQLite or PostgreSQL store underneath is unchanged).
#pragma once

#include <memory>

#include "server/metrics.h"
#include "server/store/store.h"

namespace kiln::server {

std::unique_ptr<Store> NewMeteredStore(std::unique_ptr<Store> inner, CoordinatorMetrics* metrics);

}  // namespace kiln::server
