// Tests of the benchmark programs' table-driven flag parser.
#include "bench/flags.h"

#include <initializer_list>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::bench {
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
  Argv a{"--space", "a.json", "-b.json", "--json", "--out", "--json"};
  EXPECT_FALSE(ParseFlags(a.argc(), a.argv(), Table(&p, true)).has_value());
  EXPECT_TRUE(p.json);
  EXPECT_EQ(p.out, "--json");  // a value is the next argument, whatever it looks like
  EXPECT_EQ(p.spaces, (std::vector<std::string>{"a.json", "-b.json"}));
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

}  // namespace
}  // namespace kiln::bench
