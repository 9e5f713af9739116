# SPDX-License-Identifier: Apache-2.0
# Runs one compiler over SOURCE, with -fsyntax-only and the warnings a careful user builds with,
# as errors, twice:
#   -DCASE=0   correct use: must compile;
#   -DCASE=-1  every discarding case (1 .. CASES-1) at once, each in a function of its own:
#              must fail, with a diagnostic that contains PATTERN on the line of each case (the
#              line marked `// case <n>` in SOURCE).
# Any other outcome fails the test: a case with no diagnostic on its own line (it compiled), or
# a compile that fails for an unrelated reason (a missing header, a typo), is caught, not counted
# as a pass. (One compile for every case instead of one each: the same checks, at a fraction of
# the time, since each compile spends seconds on the library's headers.)
#
#   cmake -DCOMPILER=... -DSOURCE=... -DINCLUDES="a;b" -DCASES=8 -DPATTERN="attribute [^ ]*nodiscard|nodiscard[^ ]* attribute"
#         [-DFLAGS="..."] -P expect_diagnostics.cmake
cmake_minimum_required(VERSION 3.25) # script mode: the policies of the project
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

function(compile case out_rc out_text)
  execute_process(
    COMMAND ${COMPILER} -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -Werror ${extra_flags}
            ${include_flags} -DCASE=${case} ${SOURCE}
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE text
    ERROR_VARIABLE text)
  set(${out_rc} ${rc} PARENT_SCOPE)
  set(${out_text} "${text}" PARENT_SCOPE)
endfunction()

set(failures 0)
compile(0 rc out)
if(NOT rc EQUAL 0)
  message(SEND_ERROR "case 0 (correct use) did not compile:\n${out}")
  math(EXPR failures "${failures} + 1")
endif()

# The line of each discarding case.
file(STRINGS ${SOURCE} lines)
set(number 0)
foreach(line IN LISTS lines)
  math(EXPR number "${number} + 1")
  if(line MATCHES "// case ([0-9]+)([^0-9]|$)")
    set(line_of_case_${CMAKE_MATCH_1} ${number})
  endif()
endforeach()

compile(-1 rc out)
get_filename_component(source_name ${SOURCE} NAME)
string(REPLACE "\n" ";" diagnostics "${out}")
math(EXPR last "${CASES} - 1")
foreach(n RANGE 1 ${last})
  if(NOT DEFINED line_of_case_${n})
    message(SEND_ERROR "${source_name} marks no line `// case ${n}`")
    math(EXPR failures "${failures} + 1")
    continue()
  endif()
  set(found FALSE)
  foreach(diagnostic IN LISTS diagnostics)
    if(diagnostic MATCHES "${source_name}:${line_of_case_${n}}:[0-9]+: " AND
       diagnostic MATCHES "${PATTERN}")
      set(found TRUE)
      break()
    endif()
  endforeach()
  if(found)
    message(STATUS "case ${n} (line ${line_of_case_${n}}): rejected as expected")
  else()
    message(SEND_ERROR "case ${n} (line ${line_of_case_${n}}) has no '${PATTERN}' diagnostic: "
                       "discarding its result must be rejected")
    math(EXPR failures "${failures} + 1")
  endif()
endforeach()
if(rc EQUAL 0)
  message(SEND_ERROR "the discarding cases compiled, but each must be rejected")
  math(EXPR failures "${failures} + 1")
endif()
if(failures GREATER 0)
  message(FATAL_ERROR "${failures} checks of ${CASES} cases failed; the compiler said:\n${out}")
endif()
