// One table-driven command-line parser for every kiln program: the kiln CLI, the daemons' mains
// and the benchmark programs, so that they agree on what a flag, a value and an error look like.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

struct Flag {
  enum Kind {
    kSwitch,  // "--json": no value ("--json=x" is an error)
    kValue,   // "--budget N" or "--budget=N"
    kList,    // "--space A B ...": every following argument up to the next flag, one call each
  };
  std::string name;  // "--budget"; a short alias such as "-h" has no "=" form
  Kind kind = kSwitch;
  // Takes the value ("" for a switch); returns "" or why the value is refused.
  std::function<std::string(const std::string& value)> set;
  bool stop = false;       // the rest of the command line is not read (--help)
  bool repeatable = true;  // false: a second one is an error rather than overriding the first
};

struct FlagError {
  // "--budget needs a value", "--json takes no value", "--budget given more than once",
  // "unknown flag --x", "unexpected argument x" (only where a table has a list flag; without one
  // and without positional arguments every stray argument is an unknown flag), or the setter's
  // refusal.
  std::string message;
  bool refused = false;  // the message is a setter's (the flag was known, its value was not)
};

// Setters for the common cases: a string, a switch's value, a whole number in lo..hi (refused
// with "FLAG must be a whole number in LO..HI, got 'V'").
std::function<std::string(const std::string&)> StoreText(std::string* dst);
std::function<std::string(const std::string&)> StoreBool(bool* dst, bool value);
std::function<std::string(const std::string&)> StoreInt(const char* flag, long lo, long hi,
                                                        int* dst);

// Reads `args` (the command line after the program's name) in order against `flags`; nullopt
// when every argument was taken. A value is the next argument, whatever it looks like, unless it
// is one of the table's "--" flags: then the value was forgotten, and taking the flag as the value
// would hide that. An argument that is not a flag goes to the list flag before it; else, when
// `positional` is given and the argument does not start with '-' (or is "-"), to `positional`
// (filled as parsing goes, so that after an error it holds those before it); else it is an error.
std::optional<FlagError> ParseFlags(const std::vector<std::string>& args,
                                    const std::vector<Flag>& flags,
                                    std::vector<std::string>* positional = nullptr);

// The same on main()'s argv[1..argc).
std::optional<FlagError> ParseFlags(int argc, char** argv, const std::vector<Flag>& flags,
                                    std::vector<std::string>* positional = nullptr);

}  // namespace kiln
