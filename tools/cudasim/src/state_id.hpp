// SPDX-License-Identifier: Apache-2.0
// How a cudasim state object (/dev/shm/<CUDASIM_STATE>) identifies itself, and the rule that
// says whether a program uses it. Shared by cudasim and `gpushare clean --cudasim`, which must
// agree on both; nothing else of the layout is needed outside cudasim.
//
//   offset 0: std::uint64_t magic   ("CUDASIM1" read as a little-endian number)
//   offset 8: std::uint32_t version (state_version; another version's programs may not lock)
//
// Every process that uses a state holds a shared flock() on the object for as long as it runs
// (the descriptor stays open; a forked child shares the lock, a killed process drops it). A
// cleaner removes the name only while it holds the exclusive flock, so never while a program
// uses it. A program that opened the object just before a cleaner removed its name notices,
// once it holds its shared lock, that the name now means another object or none, and starts
// again: it always ends up using the object that the name refers to.
#pragma once

#include <cstdint>

namespace cudasim {

inline constexpr std::uint64_t state_magic = 0x4355444153494d31ull; // "CUDASIM1"
/// 3: programs hold the shared flock (version 2 objects were made by programs that did not).
/// 4: the time-slice schedule (each context's device time and demand; slices.cpp).
inline constexpr std::uint32_t state_version = 4;
/// The first version whose programs hold the shared flock: for a state of this version or later,
/// whatever its layout, a cleaner can tell whether a program uses it.
inline constexpr std::uint32_t first_locking_version = 3;

} // namespace cudasim
