// A libpq connection for the PostgreSQL store: parameterized statements, RAII results, reconnect.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

struct pg_conn;
struct pg_result;

namespace kiln::server::pg {

// One statement parameter: text, or bytes sent in binary (for bytea columns).
struct Param {
  std::string value;
  bool binary = false;
};
inline Param Text(std::string v) { return {std::move(v), false}; }
inline Param Int(int64_t v) { return {std::to_string(v), false}; }
Param Real(
    double v);  // exact (17 significant digits; NaN and infinities as PostgreSQL spells them)
inline Param Bytes(std::string v) { return {std::move(v), true}; }

// A one-dimensional array parameter in PostgreSQL's text form, built element by element: with
// unnest() one statement writes a batch's rows (INSERT ... SELECT * FROM unnest($1::text[], ...)),
// one round trip where a statement a row cost one each.
class Array {
 public:
  Array& Text(std::string_view v);  // quoted, with '"' and '\' escaped
  Array& Int(int64_t v);
  Array& Real(double v);  // as pg::Real spells it
  Array& Bool(bool v);
  Array& Bytes(std::string_view v);  // bytea in hex
  Param Build() const { return pg::Text(s_ + "}"); }

 private:
  void Next() { s_ += s_.size() > 1 ? "," : ""; }
  std::string s_ = "{";
};

// The rows of one statement; owns the PGresult.
class Result {
 public:
  explicit Result(pg_result* r) : r_(r) {}
  Result(Result&& o) noexcept : r_(o.r_) { o.r_ = nullptr; }
  Result& operator=(Result&&) = delete;
  ~Result();
  int rows() const;
  std::string Value(int row, int col) const;  // bytes as returned (binary when asked for)

 private:
  friend class Connection;
  pg_result* r_;
};

class Connection {
 public:
  // `uri` is a libpq connection URI (postgresql://USER[:PASS]@HOST:PORT/DB?...). A connect
  // timeout of 5 s and a TCP user timeout of 30 s apply unless the URI sets its own.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const std::string& uri);
  ~Connection();

  // Runs one statement. Results come back binary when `binary_result` (bodies), else text.
  absl::StatusOr<Result> Exec(const std::string& sql, const std::vector<Param>& params = {},
                              bool binary_result = false);
  // Runs several statements separated by ';' without parameters (one implicit transaction).
  absl::Status ExecScript(const std::string& sql);
  bool broken() const;                                   // the server connection was lost
  absl::Status Reset();                                  // reconnects with the same parameters
  const std::string& target() const { return target_; }  // "HOST:PORT/DB", for messages

 private:
  explicit Connection(pg_conn* c);
  absl::Status Error(const std::string& what) const;

  pg_conn* conn_;
  std::string target_;
};

}  // namespace kiln::server::pg
