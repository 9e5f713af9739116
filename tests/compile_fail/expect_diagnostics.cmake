# SPDX-License-Identifier: Apache-2.0
# Runs one compiler over SOURCE once per case (-DCASE=<n>, n = 0 .. CASES-1), with -fsyntax-only
# and the warnings a careful user builds with, as errors. Case 0 must compile; every other case
# must fail with a diagnostic that contains PATTERN. Any other outcome fails the test, so a case
# that fails for an unrelated reason (a missing header, a typo) is caught, not counted as a pass.
#
#   cmake -DCOMPILER=... -DSOURCE=... -DINCLUDES="a;b" -DCASES=8 -DPATTERN="attribute [^ ]*nodiscard|nodiscard[^ ]* attribute"
#         [-DFLAGS="..."] -P expect_diagnostics.cmake
foreach(var COMPILER SOURCE INCLUDES CASES PATTERN)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "expect_diagnostics.cmake: ${var} is not set")
  endif()
endforeach()

set(include_flags)
foreach(dir IN LISTS INCLUDES)
  list(APPEND include_flags "-I${dir}")
endforeach()
separate_arguments(extra_flags UNIX_COMMAND "${FLAGS}")

set(failures 0)
math(EXPR last "${CASES} - 1")
foreach(n RANGE 0 ${last})
  execute_process(
    COMMAND ${COMPILER} -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -Werror ${extra_flags}
            ${include_flags} -DCASE=${n} ${SOURCE}
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE out
    ERROR_VARIABLE out)
  if(n EQUAL 0)
    if(NOT rc EQUAL 0)
      message(SEND_ERROR "case 0 (correct use) did not compile:\n${out}")
      math(EXPR failures "${failures} + 1")
    endif()
  elseif(rc EQUAL 0)
    message(SEND_ERROR "case ${n} compiled, but discarding the result must be rejected")
    math(EXPR failures "${failures} + 1")
  elseif(NOT out MATCHES "${PATTERN}")
    message(SEND_ERROR "case ${n} failed without a '${PATTERN}' diagnostic:\n${out}")
    math(EXPR failures "${failures} + 1")
  else()
    message(STATUS "case ${n}: rejected as expected")
  endif()
endforeach()
if(failures GREATER 0)
  message(FATAL_ERROR "${failures} of ${CASES} cases behaved wrongly")
endif()
