// SPDX-License-Identifier: Apache-2.0
// The CUDA layer: device sessions keyed by GPU UUID, stream guards timed by CUDA events, budgeted
// allocation. Needs the CUDA runtime (link CUDA::cudart, or use the gpushare::cuda target).
// Thrust integration is separate: <gpushare/cuda/thrust.hpp>.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <gpushare/gpushare.hpp>

#include <gpushare/cuda/chunked.hpp>
#include <gpushare/cuda/default_stream.hpp>
#include <gpushare/cuda/device.hpp>
#include <gpushare/cuda/device_session.hpp>
#include <gpushare/cuda/error.hpp>
#include <gpushare/cuda/memory_resource.hpp>
#include <gpushare/cuda/options.hpp>
#include <gpushare/cuda/scoped_kernel.hpp>
#include <gpushare/cuda/stats.hpp>
