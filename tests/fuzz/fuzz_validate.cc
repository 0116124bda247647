// Request validation: bytes -> JobSpec -> ValidateJobSpec, then what SubmitJob and binding do with
// an accepted spec (defaults, the model plan, the knob space and a rendered kernel). The first byte
// picks the decoding: even, the binary wire format gRPC delivers; odd, protobuf text format, which
// reaches nested fields (pins, dims, hf_config_json) with fewer mutations. Findings: a crash or
// sanitizer report, an error that echoes its input, a spec that stops validating once defaults
// are applied.
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/text_format.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "codegen/kernel_template.h"
#include "codegen/workload.h"
#include "server/planner/planner.h"
#include "server/validate.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

class Quiet : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
};

void ExploreOperator(const kiln::v1::JobSpec& spec) {
  const std::string kind = spec.chip().substr(0, spec.chip().find('-'));
  (void)kiln::codegen::WorkloadKey(spec.workload());
  auto tmpl = kiln::codegen::FindTemplate(spec.workload(), kind);
  if (!tmpl.ok()) return;
  kiln::codegen::ChipTraits traits;
  kiln::codegen::KnobSpace space = (*tmpl)->Space(spec.workload(), traits);
  for (const auto& [knob, value] : spec.pin()) (void)space.Pin(knob, value);
  if (space.CartesianSize() > 0) (void)space.IsValid(space.Decode(0));
  int rendered = 0;
  for (const auto& config : (*tmpl)->StartingConfigs(spec.workload(), traits)) {
    if (rendered == 2) break;
    if (!space.IsValid(config)) continue;
    auto kernel = (*tmpl)->Render(spec.workload(), config, traits);
    if (kernel.ok()) ++rendered;
  }
}

}  // namespace

// Protobuf logs every malformed string field it parses; at fuzzing speed that is all the output.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  kiln::v1::JobSpec spec;
  bool parsed;
  if (data[0] & 1) {
    google::protobuf::TextFormat::Parser parser;
    Quiet quiet;
    parser.RecordErrorsTo(&quiet);
    parsed = parser.ParseFromString(body, &spec);
  } else {
    parsed = spec.ParseFromString(body);
  }
  if (!parsed) return 0;
  absl::Status s = kiln::server::ValidateJobSpec(spec);
  kiln::fuzz::CheckErrorSize(s, "ValidateJobSpec");
  // The id checks see raw client text too (GetJob, CancelJob, Heartbeat...).
  kiln::fuzz::CheckErrorSize(kiln::server::ValidateJobId(spec.chip()), "ValidateJobId");
  kiln::fuzz::CheckErrorSize(kiln::server::ValidateWorkerId(spec.strategy()), "ValidateWorkerId");
  if (!s.ok()) return 0;
  kiln::server::NormalizeJobSpec(&spec, 0x5eed);
  s = kiln::server::ValidateJobSpec(spec);
  if (!s.ok())
    kiln::fuzz::Finding("an accepted spec fails validation with its defaults", s.ToString());
  if (kiln::server::IsModelJob(spec)) {
    auto plan = kiln::server::PlanModelJob(spec);
    kiln::fuzz::CheckErrorSize(plan.status(), "PlanModelJob");
  } else {
    ExploreOperator(spec);
  }
  return 0;
}
