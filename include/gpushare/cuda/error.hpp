// SPDX-License-Identifier: Apache-2.0
// Errors of the CUDA layer: CUDA runtime errors become gpushare::error (errc::cuda_error, or
// errc::no_device when there is no usable GPU) with a message that says what to do. The
// conversion itself is internal: <gpushare/cuda/detail/errors.hpp>.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <gpushare/cuda/detail/errors.hpp>
#include <gpushare/error.hpp>
