# SPDX-License-Identifier: Apache-2.0
# Finds the test cases of one grouped doctest executable (tests/cmake/doctest_groups.cmake) and
# writes the CTest file that registers them: run after each build of the executable.
#
#   cmake -DEXECUTABLE=<program> -DENTRIES=<entries.cmake> -DCTEST_FILE=<out.cmake> -P ...
#
# ENTRIES, written at configure time, sets gpushare_entries (a list of numbers) and for each
# number n: gpushare_filter_<n> (the --source-file filter that selects one test file's cases),
# gpushare_prefix_<n> (the tests' name prefix), gpushare_args_<n> (more arguments) and
# gpushare_properties_<n> (CMake text pasted into set_tests_properties(... PROPERTIES <text>)).
cmake_minimum_required(VERSION 3.25) # script mode: the policies of the project
foreach(var EXECUTABLE ENTRIES CTEST_FILE WORKING_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "discover_group.cmake: ${var} is not set")
  endif()
endforeach()
include(${ENTRIES})

set(script "")
foreach(n IN LISTS gpushare_entries)
  set(filter "--source-file=${gpushare_filter_${n}}")
  execute_process(
    COMMAND ${EXECUTABLE} ${filter} --list-test-cases
    OUTPUT_VARIABLE output
    ERROR_VARIABLE output
    RESULT_VARIABLE result
    WORKING_DIRECTORY ${WORKING_DIR})
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "listing the test cases of ${EXECUTABLE} ${filter} failed "
                        "(${result}):\n${output}")
  endif()
  # doctest lists one test case per line between its own banner lines ("[doctest] ..." and a
  # rule of '='). A ';' in a name would split it as a CMake list: it stands in the CTest name
  # as ',', and in the --test-case filter as '?' (doctest's one-character wildcard). (Before
  # issue 39, doctest_discover_tests() split such names in two tests that each matched no test
  # case, so that 9 test cases never ran and were counted as passed twice.)
  string(ASCII 1 semicolon) # a stand-in while the output is split into lines
  string(REPLACE ";" "${semicolon}" output "${output}")
  string(REPLACE "\n" ";" lines "${output}")
  set(names)
  foreach(line IN LISTS lines)
    if(line STREQUAL "" OR line MATCHES "^\\[doctest\\] " OR line MATCHES "^=+$")
      continue()
    endif()
    if(line MATCHES "\\]==\\]")
      message(FATAL_ERROR "a test case name holds ']==]', which this script cannot quote: ${line}")
    endif()
    # doctest's --test-case filter splits at commas unless they are escaped.
    string(REPLACE "," "\\," case_filter "${line}")
    string(REPLACE "${semicolon}" "?" case_filter "${case_filter}")
    string(REPLACE "${semicolon}" "," line "${line}")
    set(name "${gpushare_prefix_${n}}${line}")
    string(APPEND script "add_test([==[${name}]==] [==[${EXECUTABLE}]==] [==[${filter}]==] "
                         "[==[--test-case=${case_filter}]==]")
    foreach(arg IN LISTS gpushare_args_${n})
      string(APPEND script " [==[${arg}]==]")
    endforeach()
    string(APPEND script ")\nset_tests_properties([==[${name}]==] PROPERTIES "
                         "WORKING_DIRECTORY [==[${WORKING_DIR}]==] ${gpushare_properties_${n}})\n")
    list(APPEND names "${name}")
  endforeach()
  if(NOT names)
    message(FATAL_ERROR "${EXECUTABLE} ${filter} lists no test case: a test file that compiles "
                        "to no test is a mistake (is it in this group?)")
  endif()
endforeach()
file(WRITE ${CTEST_FILE} "${script}")
