# SPDX-License-Identifier: Apache-2.0
# Runs COMMAND (a list) and requires that it fails and that the first line of its output that
# reports an error matches PATTERN: the error a user sees first must be the one that explains.
#
#   cmake "-DCOMMAND=g++;-std=c++17;-fsyntax-only;x.cpp" "-DPATTERN=requires C\\+\\+20"
#         -P expect_first_error.cmake
foreach(var COMMAND PATTERN)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "expect_first_error.cmake: ${var} is not set")
  endif()
endforeach()
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "the compile succeeded, but it must be refused:\n${out}")
endif()
string(REPLACE ";" "," out_lines "${out}")
string(REPLACE "\n" ";" out_lines "${out_lines}")
foreach(line IN LISTS out_lines)
  if(line MATCHES "error")
    if(line MATCHES "${PATTERN}")
      message(STATUS "first error, as expected: ${line}")
      return()
    endif()
    message(FATAL_ERROR "the first error is not the expected one ('${PATTERN}'):\n${line}\n\n${out}")
  endif()
endforeach()
message(FATAL_ERROR "the compile failed without an error line:\n${out}")
