// Owns megatron.cpp's answer for every flag of Megatron-LM's training parser that the option
// table does not implement: accepted without effect (a kernel, fusion or framework choice that
// does not exist here or always holds), or not implemented yet (refused, naming the feature).
// The flag list itself is Megatron's, generated into megatron_arguments.inc.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mt {

// How many values a Megatron flag takes (argparse's nargs).
enum class MegatronValues { flag, one, optional, list };

struct MegatronArgument {
  const char* name;           // "--use-mcore-models"
  MegatronValues values;
  const char* dest;           // Megatron's attribute (aliases share it)
  const char* default_value;  // as Python prints it; "" = None
  const char* choices;        // "a|b|c" or ""
};

// Every flag of Megatron-LM's training parser (pinned commit in megatron_arguments.inc).
const std::vector<MegatronArgument>& megatron_arguments();
const MegatronArgument* find_megatron_argument(const std::string& name);

enum class MegatronTreatment { accepted, missing };

struct MegatronFlagStatus {
  MegatronTreatment treatment;
  const char* why;  // accepted: what megatron.cpp does instead; missing: the feature
  bool planned;     // missing: an open issue will add it
  const char* same_here = nullptr;  // missing: a value that is what megatron.cpp does anyway
};

// The status of a Megatron flag that the option table lacks; nullptr when none is recorded.
const MegatronFlagStatus* megatron_flag_status(const std::string& name);

// The status of value `value` of a Megatron choice flag that the option table implements but
// without that value (--tokenizer-type TikTokenizer); nullptr when none is recorded.
const MegatronFlagStatus* megatron_value_status(const std::string& name, const std::string& value);
// The (flag, value) pairs those statuses are recorded for.
std::vector<std::pair<std::string, std::string>> megatron_value_rules();

// The names and prefixes ("--fp8-*") the statuses are recorded under, for the test that keeps
// them current.
std::vector<std::string> megatron_flag_patterns();
bool matches_flag_pattern(const std::string& pattern, const std::string& name);

// True when the values given equal the flag's Megatron default, so that even a flag whose
// feature is missing changes nothing ("--rope-scaling-factor 8.0").
bool is_megatron_default(const MegatronArgument& a, const std::vector<std::string>& values);

// Flags that Megatron-LM's parser has dropped but scripts under its examples/ still pass (the SC21
// paper's): each is read as the flags that replaced it, or accepted without effect.
struct LegacyMegatronFlag {
  const char* name;         // "--activations-checkpoint-method"
  bool takes_value;
  const char* replacement;  // the current flags, "{}" standing for the value; "" = none (no effect)
  const char* why;          // when and what it was
  const char* choices = "";  // "a|b" when no replacement checks the value
};
const std::vector<LegacyMegatronFlag>& legacy_megatron_flags();

// args with every legacy flag replaced by its current spelling; `explained` gets one
// (given, how it is read) pair per legacy flag met.
std::vector<std::string> replace_legacy_megatron_flags(const std::vector<std::string>& args,
                                                       std::vector<std::pair<std::string, std::string>>& explained);

// Every Megatron flag with its status here, as Markdown (docs/megatron-flags.md) or as text
// (`megatron flags`). `implemented` says whether train's option table has a flag.
std::string megatron_flags_report(bool markdown, bool (*implemented)(const std::string& name));

}  // namespace mt
