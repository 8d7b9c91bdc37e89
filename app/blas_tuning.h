// Picks OpenBLAS's kernels before the library is used. Debian's OpenBLAS 0.3.21 does not know
// recent Xeons (Sapphire/Emerald Rapids) and falls back to its generic "Prescott" kernels, which
// run sgemm 5-6x slower here. OpenBLAS reads OPENBLAS_CORETYPE only when it loads, so when the
// variable is unset and OpenBLAS chose the generic kernels on a CPU with AVX-512 (or AVX2), we set
// it and re-execute the program once. A user's own OPENBLAS_CORETYPE is always respected.
#pragma once

namespace mt {

// Call first thing in main(). Returns normally when no re-execution is needed or it failed.
void retune_openblas_or_continue(char** argv);

}  // namespace mt
