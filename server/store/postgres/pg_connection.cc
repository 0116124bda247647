#include "server/store/postgres/pg_connection.h"

#include <libpq-fe.h>

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/store/store.h"

namespace kiln::server::pg {
namespace {

void IgnoreNotice(void*, const char*) {}  // "relation already exists, skipping" and the like

std::string LastError(const PGconn* c) {
  std::string msg = c ? PQerrorMessage(c) : "out of memory";
  return std::string(absl::StripTrailingAsciiWhitespace(msg));
}

}  // namespace

Param Real(double v) {
  if (std::isnan(v)) return Text("NaN");
  if (std::isinf(v)) return Text(v > 0 ? "Infinity" : "-Infinity");
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return Text(buf);
}

Array& Array::Text(std::string_view v) {
  Next();
  s_ += '"';
  for (char c : v) {
    if (c == '"' || c == '\\') s_ += '\\';
    s_ += c;
  }
  s_ += '"';
  return *this;
}

Array& Array::Int(int64_t v) {
  Next();
  absl::StrAppend(&s_, v);
  return *this;
}

Array& Array::Real(double v) {
  Next();
  s_ += '"' + pg::Real(v).value + '"';
  return *this;
}

Array& Array::Bool(bool v) {
  Next();
  s_ += v ? "t" : "f";
  return *this;
}

Array& Array::Bytes(std::string_view v) {
  static constexpr char kHex[] = "0123456789abcdef";
  Next();
  s_ += "\"\\\\x";  // the element \x..., its backslash escaped inside the quotes
  for (unsigned char c : v) {
    s_ += kHex[c >> 4];
    s_ += kHex[c & 15];
  }
  s_ += '"';
  return *this;
}

Result::~Result() { PQclear(r_); }
int Result::rows() const { return PQntuples(r_); }
std::string Result::Value(int row, int col) const {
  return std::string(PQgetvalue(r_, row, col), PQgetlength(r_, row, col));
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(const std::string& uri) {
  // Earlier keywords are defaults: the URI (expanded from dbname) overrides them.
  const char* keys[] = {"connect_timeout", "tcp_user_timeout", "application_name", "dbname",
                        nullptr};
  const char* values[] = {"5", "30000", "kiln-coordinator", uri.c_str(), nullptr};
  PGconn* c = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (!c || PQstatus(c) != CONNECTION_OK) {
    std::string msg = LastError(c);
    PQfinish(c);
    return absl::UnavailableError(
        absl::StrCat("cannot connect to PostgreSQL store ", RedactStoreSpec(uri), ": ", msg));
  }
  return std::unique_ptr<Connection>(new Connection(c));
}

Connection::Connection(pg_conn* c) : conn_(c) {
  PQsetNoticeProcessor(conn_, IgnoreNotice, nullptr);
  const char* host = PQhost(conn_);
  target_ = absl::StrCat(host && *host ? host : "localhost", ":", PQport(conn_), "/", PQdb(conn_));
}

Connection::~Connection() { PQfinish(conn_); }

bool Connection::broken() const { return PQstatus(conn_) != CONNECTION_OK; }

absl::Status Connection::Reset() {
  PQreset(conn_);
  if (broken()) return Error("reconnect");
  PQsetNoticeProcessor(conn_, IgnoreNotice, nullptr);
  return absl::OkStatus();
}

absl::Status Connection::Error(const std::string& what) const {
  return absl::UnavailableError(
      absl::StrCat("postgresql ", target_, ": ", what, ": ", LastError(conn_)));
}

absl::StatusOr<Result> Connection::Exec(const std::string& sql, const std::vector<Param>& params,
                                        bool binary_result) {
  std::vector<const char*> values;
  std::vector<int> lengths, formats;
  for (const Param& p : params) {
    values.push_back(p.value.data());
    lengths.push_back(static_cast<int>(p.value.size()));
    formats.push_back(p.binary ? 1 : 0);
  }
  // Text parameters must be NUL-terminated: std::string data() is.
  Result r(PQexecParams(conn_, sql.c_str(), static_cast<int>(params.size()), nullptr, values.data(),
                        lengths.data(), formats.data(), binary_result ? 1 : 0));
  ExecStatusType st = PQresultStatus(r.r_);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    std::string first_line = sql.substr(0, sql.find('\n'));
    return Error(absl::StrCat("'", first_line.substr(0, 60), "'"));
  }
  return r;
}

absl::Status Connection::ExecScript(const std::string& sql) {
  Result r(PQexec(conn_, sql.c_str()));
  ExecStatusType st = PQresultStatus(r.r_);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return Error("script");
  return absl::OkStatus();
}

}  // namespace kiln::server::pg
