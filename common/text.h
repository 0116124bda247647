// Bounded, inert text from untrusted input: error-message quotes and generated-source comments.
#pragma once

#include <cstdio>
#include <string>

#include "absl/strings/string_view.h"

namespace kiln {

// Error messages quote at most this many bytes of what they refuse.
inline constexpr size_t kQuoteChars = 40;

// At most `max` bytes of `s` for an error message, each byte outside printable ASCII as '?', and
// "..." when cut, so that no message echoes unbounded input or moves a terminal's cursor.
inline std::string ShortQuote(absl::string_view s, size_t max = kQuoteChars) {
  std::string out;
  const size_t n = s.size() < max ? s.size() : max;
  out.reserve(n + 3);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  if (s.size() > max) out += "...";
  return out;
}

// `text` cut to at most `max` bytes on a UTF-8 character boundary, "..." marking the cut (for
// messages shown whole elsewhere: a compiler's errors run to pages).
inline std::string CutUtf8(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  size_t n = max > 3 ? max - 3 : 0;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n) + "...";
}

// `s` made safe inside a // or /* */ comment of C, C++, OpenCL C or CUDA: every byte outside
// printable ASCII (a newline would end the comment), '\' (a line splice at the end of a //
// comment), '?' (the "??/" trigraph is a backslash under -std=c++11) and '%' as "%XX", and the
// '/' of "*/" too; cut to `max` bytes with "...".
inline std::string CommentSafe(absl::string_view s, size_t max = 256) {
  std::string out;
  const size_t n = s.size() < max ? s.size() : max;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const bool closes_comment = c == '/' && i > 0 && s[i - 1] == '*';
    if (c < 0x20 || c >= 0x7f || c == '\\' || c == '?' || c == '%' || closes_comment) {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

}  // namespace kiln
