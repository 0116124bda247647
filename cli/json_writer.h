// A small streaming JSON writer: escaped strings, finite numbers only (NaN/inf become null).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::cli {

// Writes one JSON value as compact text with ", " and ": " separators (one line).
// Usage: w.BeginObject().Key("a").Int(1).Key("b").BeginArray().Number(2.5).EndArray().EndObject();
class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(std::string_view key);
  JsonWriter& String(std::string_view value);
  JsonWriter& Number(double value);  // non-finite values are written as null
  JsonWriter& Int(int64_t value);
  JsonWriter& Uint(uint64_t value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();

  const std::string& str() const { return out_; }

 private:
  void BeforeValue();

  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

// `text` as a quoted JSON string literal.
std::string JsonQuote(std::string_view text);
// Shortest text that reads back as `value` ("82.6", not "82.599999999999994"); "null" if not
// finite.
std::string JsonNumber(double value);

}  // namespace kiln::cli
