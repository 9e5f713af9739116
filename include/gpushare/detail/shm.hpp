// SPDX-License-Identifier: Apache-2.0
// The shared table object, by job: its name (detail/object_name.hpp), its prefix and header checks
// (detail/object_header.hpp), whose object may be trusted (detail/object_trust.hpp), and creating,
// opening and mapping it under the init protocol (detail/object.hpp). Including this header brings
// them all.
#pragma once

#include <gpushare/detail/object.hpp>
#include <gpushare/detail/object_header.hpp>
#include <gpushare/detail/object_name.hpp>
#include <gpushare/detail/object_trust.hpp>
