// Owns the declarative option table shared by all subcommands (name, type, default, help, which
// subcommands accept it) and the parser that turns argv into typed values, rejecting unknown
// flags, wrong types and bad choices with one clear message.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace mt {

// list: one or more values ("--data-path 0.3 a 0.7 b", Megatron's nargs); --name=v gives one.
enum class OptionType { integer, real, flag, text, choice, list };

struct OptionSpec {
  const char* name;           // "--hidden-size"
  OptionType type;
  const char* default_value;  // "" = unset
  const char* help;
  const char* choices;        // "a|b|c" for OptionType::choice
  const char* commands;       // "train" or "train,generate"
};

const std::vector<OptionSpec>& option_table();

// A Megatron-LM flag given that changes nothing here, and why.
struct MegatronNote {
  std::string given;  // "--transformer-impl transformer_engine"
  std::string why;
};

class Options {
 public:
  // Has a value: from the command line, the --config file or a default (flags: set).
  bool has(const std::string& name) const;
  // Given on the command line (not a default, nor from --config).
  bool given(const std::string& name) const { return given_.count(name) > 0; }
  long long integer(const std::string& name) const;
  double real(const std::string& name) const;
  bool flag(const std::string& name) const;
  const std::string& text(const std::string& name) const;
  // The values of a list option (a text option gives its one value).
  std::vector<std::string> list(const std::string& name) const;
  // Every option that has a value, as YAML that --config reads back.
  std::string to_yaml() const;
  // The Megatron-LM flags given that change nothing here, each with why.
  const std::vector<MegatronNote>& megatron_notes() const { return megatron_notes_; }
  // Options given twice with different values (the last one is used, as argparse does).
  const std::vector<std::string>& repeat_notes() const { return repeat_notes_; }
  // Those flags grouped by why, the old flags read under their current names (megatron_flags.h)
  // and the repeats, as one log line ("" when none).
  std::string megatron_notes_line() const;

 private:
  friend Options parse_options(const std::string& command, const std::vector<std::string>& args);
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> given_;  // on the command line
  std::vector<MegatronNote> megatron_notes_;
  std::vector<std::pair<std::string, std::string>> legacy_notes_;  // (old flag given, what it is read as)
  std::vector<std::string> repeat_notes_;  // "--seed ('1', then '2')"
};

// Parses "--name value" and "--name=value" (flags take no value). Throws mt::Error.
Options parse_options(const std::string& command, const std::vector<std::string>& args);
std::string options_help(const std::string& command);
// Whether train's option table has the flag (the rest of Megatron's flags: megatron_flags.h).
bool implemented_for_train(const std::string& name);

}  // namespace mt
