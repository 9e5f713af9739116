// SPDX-License-Identifier: Apache-2.0
// The one rule for "is this an unfinished creation?" (issue 26, review N6): mapped_table::attach
// and copy_snapshot both ask judge_creation(), which is pure: the init state and one probe of the
// init lock. White-box: the rule is internal, and this is where it is pinned down.
#include <doctest/doctest.h>

#include <gpushare/detail/liveness.hpp>

namespace {
namespace d = gpushare::detail;
} // namespace

TEST_CASE("judge_creation: ready by its init state whatever the init lock says") {
  for (const d::holder h : {d::holder::none, d::holder::other, d::holder::unknown})
    CHECK(d::judge_creation(true, h) == d::creation::ready);
}

TEST_CASE("judge_creation: unready with the init lock held is a creator at work") {
  CHECK(d::judge_creation(false, d::holder::other) == d::creation::in_progress);
}

TEST_CASE("judge_creation: an unknown probe is never taken for an abandoned creation") {
  // Before: attach waited on it, copy_snapshot called it abandoned (no such table).
  CHECK(d::judge_creation(false, d::holder::unknown) == d::creation::in_progress);
}

TEST_CASE("judge_creation: unready with the init lock free means its creator is gone") {
  CHECK(d::judge_creation(false, d::holder::none) == d::creation::creator_gone);
}
