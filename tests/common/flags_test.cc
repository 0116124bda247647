// Tests of the table-driven flag parser of the kiln programs.
#include "common/flags.h"

#include <initializer_list>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kiln {
namespace {

// argv for ParseFlags: the program name, then `args`.
class Argv {
 public:
  Argv(std::initializer_list<std::string> args) : strings_{"prog"} {
    strings_.insert(strings_.end(), args.begin(), args.end());
    for (std::string& s : strings_) pointers_.push_back(s.data());
  }
  int argc() const { return static_cast<int>(pointers_.size()); }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> pointers_;
};

struct Parsed {
  bool json = false, help = false;
  std::string out;
  std::vector<std::string> spaces;
};

std::vector<Flag> Table(Parsed* p, bool with_list) {
  std::vector<Flag> flags = {
      {"--json", Flag::kSwitch,
       [p](const std::string&) {
         p->json = true;
         return std::string();
       }},
      {"--out", Flag::kValue,
       [p](const std::string& v) {
         if (v.empty()) return std::string("--out: empty");
         p->out = v;
         return std::string();
       }},
      {"--help", Flag::kSwitch,
       [p](const std::string&) {
         p->help = true;
         return std::string();
       },
       /*stop=*/true},
  };
  if (with_list)
    flags.push_back({"--space", Flag::kList, [p](const std::string& v) {
                       p->spaces.push_back(v);
                       return std::string();
                     }});
  return flags;
}

TEST(FlagsTest, SwitchesValuesAndLists) {
  Parsed p;
  Argv a{"--space", "a.json", "-b.json", "--json", "--out", "--x"};
  EXPECT_FALSE(ParseFlags(a.argc(), a.argv(), Table(&p, true)).has_value());
  EXPECT_TRUE(p.json);
  EXPECT_EQ(p.out, "--x");  // a value is the next argument, whatever it looks like
  EXPECT_EQ(p.spaces, (std::vector<std::string>{"a.json", "-b.json"}));
}

TEST(FlagsTest, EqualsForm) {
  Parsed p;
  Argv a{"--out=a=b", "--space=x.json", "y.json"};
  EXPECT_FALSE(ParseFlags(a.argc(), a.argv(), Table(&p, true)).has_value());
  EXPECT_EQ(p.out, "a=b");
  EXPECT_EQ(p.spaces, (std::vector<std::string>{"x.json", "y.json"}));
  Argv empty{"--out="};
  auto e = ParseFlags(empty.argc(), empty.argv(), Table(&p, false));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "--out: empty");  // the setter sees the empty value
  Argv switch_value{"--json=yes"};
  e = ParseFlags(switch_value.argc(), switch_value.argv(), Table(&p, false));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "--json takes no value");
  Argv unknown{"--nope=1"};
  e = ParseFlags(unknown.argc(), unknown.argv(), Table(&p, false));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "unknown flag --nope");
}

TEST(FlagsTest, AFlagOfTheTableIsNoValue) {
  Parsed p;
  Argv a{"--out", "--json"};  // the value was forgotten
  auto e = ParseFlags(a.argc(), a.argv(), Table(&p, false));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "--out needs a value");
  EXPECT_FALSE(p.json);
}

TEST(FlagsTest, RepeatableOrOnce) {
  std::vector<std::string> seen;
  const std::vector<Flag> flags = {
      {"--pin", Flag::kValue,
       [&](const std::string& v) {
         seen.push_back(v);
         return std::string();
       }},
      {"--budget", Flag::kValue,
       [&](const std::string& v) {
         seen.push_back(v);
         return std::string();
       },
       /*stop=*/false, /*repeatable=*/false},
  };
  EXPECT_FALSE(ParseFlags({"--pin", "a", "--pin=b", "--budget", "5"}, flags).has_value());
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b", "5"}));
  auto e = ParseFlags({"--budget", "5", "--budget=6"}, flags);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "--budget given more than once");
  EXPECT_FALSE(e->refused);
}

TEST(FlagsTest, PositionalArguments) {
  Parsed p;
  std::vector<std::string> positional;
  EXPECT_FALSE(
      ParseFlags({"submit", "--json", "job-1", "-", "--out", "o"}, Table(&p, false), &positional)
          .has_value());
  EXPECT_EQ(positional, (std::vector<std::string>{"submit", "job-1", "-"}));
  EXPECT_TRUE(p.json);

  // A dash that names no flag is an unknown flag, not an argument; the arguments before an
  // error are kept (the CLI's error names the command's help).
  positional.clear();
  auto e = ParseFlags({"jobs", "-x", "later"}, Table(&p, false), &positional);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "unknown flag -x");
  EXPECT_EQ(positional, (std::vector<std::string>{"jobs"}));
  e = ParseFlags({"--"}, Table(&p, false), &positional);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "unknown flag --");
}

TEST(FlagsTest, ErrorsNameTheArgument) {
  Parsed p;
  Argv missing{"--out"};
  auto e = ParseFlags(missing.argc(), missing.argv(), Table(&p, true));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "--out needs a value");
  EXPECT_FALSE(e->refused);

  Argv unknown{"--nope"};
  e = ParseFlags(unknown.argc(), unknown.argv(), Table(&p, true));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "unknown flag --nope");

  // A stray argument: unexpected where the table takes lists (after a switch ends the list),
  // an unknown flag where it takes none.
  Argv stray{"--space", "a", "--json", "b"};
  e = ParseFlags(stray.argc(), stray.argv(), Table(&p, true));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "unexpected argument b");
  Argv stray_no_lists{"b"};
  e = ParseFlags(stray_no_lists.argc(), stray_no_lists.argv(), Table(&p, false));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "unknown flag b");

  Argv refused{"--out", ""};
  e = ParseFlags(refused.argc(), refused.argv(), Table(&p, false));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "--out: empty");
  EXPECT_TRUE(e->refused);
}

TEST(FlagsTest, StopFlagEndsParsing) {
  Parsed p;
  Argv a{"--help", "--nope", "--json"};
  EXPECT_FALSE(ParseFlags(a.argc(), a.argv(), Table(&p, false)).has_value());
  EXPECT_TRUE(p.help);
  EXPECT_FALSE(p.json);
}

// The common setters: text, a switch's value, a whole number in range naming flag and value.
TEST(FlagsTest, CommonSettersStoreAndRefuse) {
  std::string name;
  bool on = false;
  int count = 0;
  const std::vector<Flag> flags = {{"--name", Flag::kValue, StoreText(&name)},
                                   {"--on", Flag::kSwitch, StoreBool(&on, true)},
                                   {"--count", Flag::kValue, StoreInt("--count", 1, 64, &count)}};
  EXPECT_FALSE(ParseFlags({"--name", "x", "--on", "--count=64"}, flags).has_value());
  EXPECT_EQ(name, "x");
  EXPECT_TRUE(on);
  EXPECT_EQ(count, 64);
  for (const char* bad : {"0", "65", "7x", ""}) {
    auto e = ParseFlags({"--count", bad}, flags);
    ASSERT_TRUE(e.has_value()) << bad;
    EXPECT_EQ(e->message,
              std::string("--count must be a whole number in 1..64, got '") + bad + "'");
    EXPECT_EQ(count, 64) << "a refused value leaves the old one";
  }
}

}  // namespace
}  // namespace kiln
