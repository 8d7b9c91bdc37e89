// Owns CpCommType: how context parallelism's attention exchanges keys and values (Megatron's
// --cp-comm-type); kept apart from context_parallel.h so configurations can name it without
// pulling in communicators and ops.
#pragma once

namespace mt {

enum class CpCommType { p2p, a2a, allgather };

// Megatron's --cp-comm-type spelling.
inline const char* cp_comm_type_name(CpCommType type) {
  switch (type) {
    case CpCommType::p2p: return "p2p";
    case CpCommType::a2a: return "a2a";
    case CpCommType::allgather: return "allgather";
  }
  return "?";
}

}  // namespace mt
