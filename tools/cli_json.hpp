// SPDX-License-Identifier: Apache-2.0
// The CLI's JSON writer: the shared one (support/json, target gpushare_json), under the CLI's
// namespace.
#pragma once

#include <json_writer.hpp>

namespace gpushare::cli {
using json::json_quote;
using json::json_writer;
} // namespace gpushare::cli
