// Owns reading a tokenizer's files (--vocab-file, --merge-file, --tokenizer-model) with errors
// that name the flag and the path.
#pragma once

#include <string>

namespace mt {

// The whole file. Throws mt::Error "<flag> <path>: <why>" when the flag is empty or the file
// cannot be read; `needed_by` names the tokenizer type for the empty-flag message.
std::string read_tokenizer_file(const std::string& path, const char* flag, const std::string& needed_by);

// Throws like read_tokenizer_file when the flag is empty or the path is not a readable file.
void check_tokenizer_file(const std::string& path, const char* flag, const std::string& needed_by);

}  // namespace mt
