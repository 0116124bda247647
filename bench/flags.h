// Table-driven command-line flags shared by the benchmark programs' mains.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln::bench {

struct Flag {
  enum Kind {
    kSwitch,  // "--json": no value
    kValue,   // "--budget N": the next argument, whatever it looks like
    kList,    // "--space A B ...": every following argument up to the next flag, one call each
  };
  std::string name;  // "--budget"
  Kind kind = kSwitch;
  // Takes the value ("" for a switch); returns "" or why the value is refused.
  std::function<std::string(const std::string& value)> set;
  bool stop = false;  // the rest of the command line is not read (--help)
};

struct FlagError {
  // "--budget needs a value", "unknown flag --x", "unexpected argument x" (only where a table has
  // a list flag; without one every stray argument is an unknown flag), or the setter's refusal.
  std::string message;
  bool refused = false;  // the message is a setter's (the flag was known, its value was not)
};

// Reads argv[1..argc) in order against `flags`; nullopt when every argument was taken.
std::optional<FlagError> ParseFlags(int argc, char** argv, const std::vector<Flag>& flags);

}  // namespace kiln::bench
