// Owns the small Python list arithmetic Megatron's --moe-layer-freq accepts ("([0]*3+[1]*5)",
// "([1]*3+[0]*2)*2"), which Megatron evals: integer lists and integers combined with +, * and
// parentheses, evaluated here without Python.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mt {

// The list the expression denotes. Throws mt::Error naming the expression and the position when
// it is not list arithmetic or does not denote a list.
std::vector<int64_t> evaluate_list_expression(const std::string& text);

}  // namespace mt
