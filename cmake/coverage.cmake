# Line coverage of gpushare's OWN targets (tests, helpers, tools, the simulated CUDA runtime):
# GPUSHARE_COVERAGE=ON builds them with --coverage (gcov data: .gcno when compiled, .gcda when
# the programs exit), unoptimised so that lines map one to one. tools/cudasim/coverage.sh
# configures such a build, runs the cudasim tests and reports the coverage of
# include/gpushare/cuda/ with gcovr.
#
# Applied by gpushare_own_target() on each of our targets (cmake/gpushareOwnTargets.cmake), in
# the top-level project only, as GPUSHARE_SANITIZE is: never as a usage requirement of
# gpushare::gpushare or gpushare::cuda, which a consumer would inherit.
option(GPUSHARE_COVERAGE "Build gpushare's own targets with --coverage (gcov line coverage)" OFF)
if(GPUSHARE_COVERAGE)
  if(NOT PROJECT_IS_TOP_LEVEL)
    message(FATAL_ERROR "GPUSHARE_COVERAGE is for gpushare's own builds only")
  endif()
  if(GPUSHARE_SANITIZE)
    message(FATAL_ERROR "GPUSHARE_COVERAGE and GPUSHARE_SANITIZE are separate builds")
  endif()
  # Debug unless the user chose otherwise (the Release default below then stays out). -O0
  # below wins over a build type's -O for g++ compiles, but not for nvcc's host compiles: nvcc
  # puts its own -O (from the build type's flags) after -Xcompiler's.
  get_property(gpushare_coverage_multi_config GLOBAL PROPERTY GENERATOR_IS_MULTI_CONFIG)
  if(NOT gpushare_coverage_multi_config AND NOT CMAKE_BUILD_TYPE)
    set(CMAKE_BUILD_TYPE Debug CACHE STRING "Build type" FORCE)
  elseif(NOT gpushare_coverage_multi_config AND NOT CMAKE_BUILD_TYPE STREQUAL "Debug")
    message(STATUS "gpushare: GPUSHARE_COVERAGE with CMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}: the "
                   ".cu files' host code keeps that build type's optimisation; Debug is exact")
  endif()
endif()
