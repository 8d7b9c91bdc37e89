// Owns reading a tokenizer's files (--vocab-file, --merge-file, --tokenizer-model) with errors
// that name the flag and the path.
#pragma once

#include <string>
#include <string_view>

namespace mt {

// The whole file. Throws mt::Error "<flag> <path>: <why>" when the flag is empty or the file
// cannot be read; `needed_by` names the tokenizer type for the empty-flag message.
std::string read_tokenizer_file(const std::string& path, const char* flag, const std::string& needed_by);

// Standard base64 (RFC 4648, '=' padding) -> bytes; false on a character outside the alphabet or a
// bad length. tiktoken's vocabularies spell their tokens this way.
bool decode_base64(std::string_view text, std::string& bytes);

// Throws like read_tokenizer_file when the flag is empty or the path is not a readable file.
void check_tokenizer_file(const std::string& path, const char* flag, const std::string& needed_by);

}  // namespace mt
