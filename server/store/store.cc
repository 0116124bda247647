#include "server/store/store.h"

#include <sys/stat.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/store/sqlite/sqlite_store.h"

namespace kiln::server {

absl::StatusOr<std::unique_ptr<Store>> OpenStore(const std::string& spec,
                                                 const std::string& data_dir) {
  if (absl::StartsWith(spec, "postgresql://") || absl::StartsWith(spec, "postgres://"))
    return absl::UnimplementedError(
        "--store: PostgreSQL is not built into this coordinator yet; use sqlite:PATH");
  std::string path = spec;
  if (absl::StartsWith(path, "sqlite:")) path = path.substr(7);
  if (path.empty()) {
    if (mkdir(data_dir.c_str(), 0755) != 0 && errno != EEXIST)
      return absl::UnavailableError(
          absl::StrCat("--data-dir: cannot create ", data_dir, ": ", strerror(errno)));
    path = data_dir + "/kiln.db";
  }
  return NewSqliteStore(path);
}

}  // namespace kiln::server
