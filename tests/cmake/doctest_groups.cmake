# SPDX-License-Identifier: Apache-2.0
# Test executables built from several test files (issue 39). Every test file includes the
# library, which is header-only: compiled alone, each file spent most of its time compiling the
# same headers (about 12 of the 15 s of mp-lease.cpp at -O2). A group compiles them once per
# unity source instead, and each file keeps its own CTest tests, as if it were its own program.
#
# gpushare_doctest_group(<target> BATCHES <n> SOURCES <file>... [ALONE <file>...])
#   An executable of at most <n> unity sources (tests/cmake/unity_source.cmake): the files are
#   dealt out by size, largest first, each to the lightest batch so far; in its unity source
#   each file sits in a namespace of its own. ALONE files are compiled on their own (a file with
#   source properties of its own, such as COMPILE_DEFINITIONS). It links gpushare_doctest_main
#   and is built as gpushare_own_target() builds every target of ours.
#
# gpushare_doctest_tests(<target> <file stem> [PREFIX <p>] [EXTRA_ARGS <arg>...]
#                        [LABELS <label>...] [ENVIRONMENT <var=value>...]
#                        [FIXTURES_REQUIRED <fixture>...] [RESOURCE_LOCK <lock>...]
#                        [TIMEOUT <s>] [RUN_SERIAL])
#   Registers the test cases of one file of the group: "<p><test case>" (p defaults to
#   "<stem>/"), each run as `<target> --source-file=*/<file> --test-case=<name> <args>`, found
#   after each build of the executable (tests/cmake/discover_group.cmake), as
#   doctest_discover_tests() finds them for a whole program. Every test gets
#   SKIP_REGULAR_EXPRESSION GPUSHARE_SKIP, and fails if it ran no test case. A file may be registered more than once under other
#   prefixes (the CUDA tests run on a GPU and on cudasim); a file never registered is an error
#   at configure time, so that no test is built and left unrun.

set(gpushare_doctest_groups_dir ${CMAKE_CURRENT_LIST_DIR})

function(gpushare_doctest_group target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "BATCHES" "SOURCES;ALONE")
  if(NOT arg_SOURCES OR NOT arg_BATCHES OR arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "gpushare_doctest_group(${target} BATCHES <n> SOURCES <file>... "
                        "[ALONE <file>...]): ${ARGN}")
  endif()
  list(LENGTH arg_SOURCES count)
  if(count LESS arg_BATCHES)
    set(arg_BATCHES ${count})
  endif()

  # Largest first, each file to the batch with the fewest bytes so far (sizes stand in for
  # compile times: the shared part of a batch is alike in all of them).
  set(sized)
  foreach(source IN LISTS arg_SOURCES)
    get_filename_component(source ${source} ABSOLUTE)
    file(SIZE ${source} size)
    string(LENGTH "${size}" digits)
    math(EXPR pad "12 - ${digits}")
    string(REPEAT "0" ${pad} zeros)
    list(APPEND sized "${zeros}${size}|${source}")
  endforeach()
  list(SORT sized COMPARE STRING ORDER DESCENDING)
  math(EXPR last "${arg_BATCHES} - 1")
  foreach(i RANGE ${last})
    set(batch_${i})
    set(bytes_${i} 0)
  endforeach()
  set(stems)
  foreach(entry IN LISTS sized)
    string(REGEX REPLACE "^0*([0-9]+)\\|.*$" "\\1" size "${entry}")
    string(REGEX REPLACE "^[0-9]+\\|" "" source "${entry}")
    set(lightest 0)
    foreach(i RANGE ${last})
      if(bytes_${i} LESS bytes_${lightest})
        set(lightest ${i})
      endif()
    endforeach()
    list(APPEND batch_${lightest} ${source})
    math(EXPR bytes_${lightest} "${bytes_${lightest}} + ${size}")
    get_filename_component(stem ${source} NAME_WE)
    list(APPEND stems ${stem})
  endforeach()

  set(unity_sources)
  foreach(i RANGE ${last})
    list(SORT batch_${i})
    set(output ${CMAKE_CURRENT_BINARY_DIR}/unity/${target}-${i}.cpp)
    string(REPLACE ";" "$<SEMICOLON>" sources "${batch_${i}}")
    add_custom_command(
      OUTPUT ${output}
      COMMAND ${CMAKE_COMMAND} -DOUTPUT=${output} -DSOURCES=${sources} -P
              ${gpushare_doctest_groups_dir}/unity_source.cmake
      DEPENDS ${batch_${i}} ${gpushare_doctest_groups_dir}/unity_source.cmake
      COMMENT "Writing the unity source ${target}-${i}.cpp"
      VERBATIM)
    list(APPEND unity_sources ${output})
  endforeach()

  foreach(source IN LISTS arg_ALONE)
    get_filename_component(stem ${source} NAME_WE)
    list(APPEND stems ${stem})
  endforeach()
  add_executable(${target} ${unity_sources} ${arg_ALONE})
  target_link_libraries(${target} PRIVATE gpushare::gpushare gpushare_doctest_main)
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_compile_definitions(${target} PRIVATE "GPUSHARE_HELPER_DIR=\"${GPUSHARE_HELPER_DIR}\"")
  gpushare_own_target(${target})
  set_property(TARGET ${target} PROPERTY GPUSHARE_TEST_STEMS "${stems}")

  set(entries_file ${CMAKE_CURRENT_BINARY_DIR}/${target}-entries.cmake)
  set(tests_file ${CMAKE_CURRENT_BINARY_DIR}/${target}-tests.cmake)
  # Found again whenever the program or its files' registrations change (not a POST_BUILD step:
  # a changed registration alone must be found too).
  add_custom_command(
    OUTPUT ${tests_file}
    COMMAND ${CMAKE_COMMAND} -DEXECUTABLE=$<TARGET_FILE:${target}> -DENTRIES=${entries_file}
            -DCTEST_FILE=${tests_file} -DWORKING_DIR=${CMAKE_CURRENT_BINARY_DIR} -P
            ${gpushare_doctest_groups_dir}/discover_group.cmake
    DEPENDS ${target} ${entries_file} ${gpushare_doctest_groups_dir}/discover_group.cmake
    COMMENT "Listing the tests of ${target}"
    VERBATIM)
  add_custom_target(${target}_list ALL DEPENDS ${tests_file})
  set(include_file ${CMAKE_CURRENT_BINARY_DIR}/${target}-include.cmake)
  file(WRITE ${include_file}
       "if(EXISTS \"${tests_file}\")\n"
       "  include(\"${tests_file}\")\n"
       "else()\n"
       "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\n"
       "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include_file})
  # A deferred call's arguments are expanded when it runs: pass the values, not the variables.
  cmake_language(EVAL CODE "cmake_language(DEFER CALL _gpushare_doctest_write_entries [[${target}]] [[${entries_file}]])")
endfunction()

# A value as a CMake bracket argument of `level` '='s (default 1): one argument, whatever it
# holds but its own closing bracket.
function(_gpushare_bracket out value)
  set(level 1)
  if(ARGC GREATER 2)
    set(level ${ARGV2})
  endif()
  string(REPEAT "=" ${level} eq)
  string(FIND "${value}" "]${eq}]" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "cannot quote '${value}' for CTest")
  endif()
  set(${out} "[${eq}[${value}]${eq}]" PARENT_SCOPE)
endfunction()

function(gpushare_doctest_tests target stem)
  cmake_parse_arguments(PARSE_ARGV 2 arg "RUN_SERIAL" "PREFIX;TIMEOUT"
                        "EXTRA_ARGS;LABELS;ENVIRONMENT;FIXTURES_REQUIRED;RESOURCE_LOCK")
  get_property(stems TARGET ${target} PROPERTY GPUSHARE_TEST_STEMS)
  if(arg_UNPARSED_ARGUMENTS OR NOT stem IN_LIST stems)
    message(FATAL_ERROR "gpushare_doctest_tests(${target} ${stem} ...): not a file of the "
                        "group, or unknown arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT DEFINED arg_PREFIX)
    set(arg_PREFIX "${stem}/")
  endif()
  if(NOT DEFINED arg_TIMEOUT)
    set(arg_TIMEOUT 120)
  endif()
  # A test whose filters select no test case fails instead of passing with nothing run.
  set(properties "SKIP_REGULAR_EXPRESSION GPUSHARE_SKIP TIMEOUT ${arg_TIMEOUT}")
  string(APPEND properties " FAIL_REGULAR_EXPRESSION [=[\\[doctest\\] test cases: +0 \\|]=]")
  if(arg_RUN_SERIAL)
    string(APPEND properties " RUN_SERIAL TRUE")
  endif()
  foreach(property LABELS ENVIRONMENT FIXTURES_REQUIRED RESOURCE_LOCK)
    if(arg_${property})
      _gpushare_bracket(value "${arg_${property}}")
      string(APPEND properties " ${property} ${value}")
    endif()
  endforeach()

  get_property(entries TARGET ${target} PROPERTY GPUSHARE_TEST_ENTRIES)
  list(LENGTH entries n)
  # The file's own extension is not known here (.cpp or .cu): any file named <stem>.<ext>.
  _gpushare_bracket(filter "*/${stem}.*")
  _gpushare_bracket(prefix "${arg_PREFIX}")
  _gpushare_bracket(args "${arg_EXTRA_ARGS}")
  _gpushare_bracket(properties_text "${properties}" 2)
  set(text "list(APPEND gpushare_entries ${n})\nset(gpushare_filter_${n} ${filter})\n")
  string(APPEND text "set(gpushare_prefix_${n} ${prefix})\nset(gpushare_args_${n} ${args})\n")
  string(APPEND text "set(gpushare_properties_${n} ${properties_text})\n")
  set_property(TARGET ${target} APPEND PROPERTY GPUSHARE_TEST_ENTRIES "${stem}")
  set_property(TARGET ${target} APPEND_STRING PROPERTY GPUSHARE_TEST_ENTRIES_TEXT "${text}")
endfunction()

# At the end of the directory: every file of the group must have been registered.
function(_gpushare_doctest_write_entries target file)
  get_property(stems TARGET ${target} PROPERTY GPUSHARE_TEST_STEMS)
  get_property(entries TARGET ${target} PROPERTY GPUSHARE_TEST_ENTRIES)
  foreach(stem IN LISTS stems)
    if(NOT stem IN_LIST entries)
      message(FATAL_ERROR "${target}: the tests of ${stem} are built but not registered "
                          "(gpushare_doctest_tests(${target} ${stem} ...))")
    endif()
  endforeach()
  get_property(text TARGET ${target} PROPERTY GPUSHARE_TEST_ENTRIES_TEXT)
  file(CONFIGURE OUTPUT ${file} CONTENT "${text}" @ONLY)
endfunction()
