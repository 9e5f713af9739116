// SPDX-License-Identifier: Apache-2.0
// What a runtime function cudasim does not model does (the stubs generate_stubs.cmake writes
// for every function of the toolkit's libcudart.so.13 that the model lacks). Deliberately free
// of the CUDA headers: the stubs are declared without their parameters, which those headers
// would contradict.
#pragma once

namespace cudasim {

/// Counts a call of `name` and fails it: cudaErrorInitializationError in a forked child or a
/// misconfigured process (as every call), else cudaErrorNotSupported, recorded as the thread's
/// last error. Says on stderr, once per function and process, that `name` is not modelled.
int not_modelled(const char* name) noexcept;

} // namespace cudasim
