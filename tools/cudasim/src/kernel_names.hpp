// SPDX-License-Identifier: Apache-2.0
// Kernels by name (docs/cudasim.md, "Kernels: durations and models"): the names a kernel is
// known by, and the patterns of CUDASIM_KERNELS and cudasimSetKernelModelByName that match them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cudasim {

/// The names of the kernel registered as `device_name` (what nvcc passes to
/// __cudaRegisterFunction: the mangled name, or the plain name of an extern "C" kernel): that
/// name; for a mangled one also its demangled signature ("void ns::reduce<4>(float*)") and its
/// qualified name without parameters or return type ("ns::reduce<4>"). None for "".
std::vector<std::string> kernel_names(const std::string& device_name);

/// Whether `pattern` matches the whole of `text`: `*` matches any run of characters (a `*` in a
/// name included), `?` any one character, anything else itself.
bool glob_match(std::string_view pattern, std::string_view text);

/// Whether `pattern` matches one of `names`.
bool matches_name(const std::string& pattern, const std::vector<std::string>& names);

} // namespace cudasim
