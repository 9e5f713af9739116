// SPDX-License-Identifier: Apache-2.0
// gpushare: several processes share one GPU by cooperating through a shared-memory table.
// This umbrella header is the whole GPU-free core API.
#pragma once

#include <gpushare/detail/require_cpp20.hpp>

#include <gpushare/discovery.hpp>
#include <gpushare/error.hpp>
#include <gpushare/interrupt.hpp>
#include <gpushare/notices.hpp>
#include <gpushare/options.hpp>
#include <gpushare/reservation.hpp>
#include <gpushare/scoped_kernel.hpp>
#include <gpushare/session.hpp>
#include <gpushare/startup.hpp>
#include <gpushare/table.hpp>
#include <gpushare/text.hpp>
#include <gpushare/version.hpp>
