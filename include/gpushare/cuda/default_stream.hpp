// SPDX-License-Identifier: Apache-2.0
// GPUSHARE_CUDA_DEFAULT_STREAM: the default stream of the translation unit that names it.
#pragma once

#include <cuda_runtime_api.h>

/// The stream "0" means where this macro is expanded: cudaStreamPerThread in a translation unit
/// compiled for the per-thread default stream (nvcc --default-stream per-thread, or
/// CUDA_API_PER_THREAD_DEFAULT_STREAM defined before the CUDA headers), else cudaStreamLegacy.
/// gpushare's default stream arguments use it, so `scoped_kernel guard(session);` guards the
/// stream an unqualified kernel launch of the same file goes to. (A stream handle 0 passed to
/// gpushare explicitly means the legacy default stream, as in a translation unit without
/// per-thread default streams: pass cudaStreamPerThread, or this macro, instead.)
#if defined(__CUDART_API_PER_THREAD_DEFAULT_STREAM)
#define GPUSHARE_CUDA_DEFAULT_STREAM cudaStreamPerThread
#else
#define GPUSHARE_CUDA_DEFAULT_STREAM cudaStreamLegacy
#endif
