// Fixture for tests/cudasim/check_independent.cmake's self-test (see angled.cpp): an include with
// blanks around '#' counts too. Never compiled.
#pragma once
// clang-format off
 #  include "gpushare/cuda.hpp"
// clang-format on
