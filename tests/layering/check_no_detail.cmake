# No gpushare internals outside the library (issue 43, item 4): code under tools/ (but
# tools/cudasim/, a runtime of its own), python/, bench/, examples/ and support/ uses only the
# public headers. An offence is a use of a `detail` namespace (`detail::x`, `gpushare::detail`,
# `cuda::detail`, an alias `namespace d = gpushare::detail;`) outside a // comment, or an include
# of a gpushare/.../detail/ header: "<file>: <text>". Names that end in _detail (the CLI's own
# exporter_detail, run_detail) are not gpushare's. White-box unit tests (tests/) may use them.
#
#   cmake -DROOT=<repository root> -P check_no_detail.cmake
# fails (listing every offence) if there is one. With -DEXPECT=<file>, it instead passes only if
# the offences are exactly the lines of <file> (sorted): its self-test.
cmake_minimum_required(VERSION 3.25)
if(NOT ROOT)
  message(FATAL_ERROR "pass -DROOT=<the repository root>")
endif()
set(dirs tools python bench examples support)
set(use_regex "(^|[^A-Za-z0-9_])detail[ \t]*(::|;)")
set(include_regex "^[ \t]*#[ \t]*include[ \t]*[<\"]gpushare/(.*/)?detail/")

set(offences "")
foreach(dir IN LISTS dirs)
  if(NOT IS_DIRECTORY ${ROOT}/${dir})
    continue()
  endif()
  file(GLOB_RECURSE sources RELATIVE ${ROOT} ${ROOT}/${dir}/*.cpp ${ROOT}/${dir}/*.hpp
       ${ROOT}/${dir}/*.h ${ROOT}/${dir}/*.cu)
  list(SORT sources)
  foreach(source IN LISTS sources)
    if(source MATCHES "^tools/cudasim/")
      continue()
    endif()
    # The lines that mention "detail" (file(STRINGS) keeps a line's ';' escaped in its element).
    file(STRINGS ${ROOT}/${source} lines REGEX "detail")
    foreach(piece IN LISTS lines)
      string(FIND "${piece}" "//" comment)
      if(NOT comment EQUAL -1)
        string(SUBSTRING "${piece}" 0 ${comment} piece)
      endif()
      if(piece MATCHES "${include_regex}" OR piece MATCHES "${use_regex}")
        string(STRIP "${piece}" text)
        string(REPLACE ";" "" text "${text}") # the report is a list: no ';' in its lines
        list(APPEND offences "${source}: ${text}")
      endif()
    endforeach()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES offences)
list(SORT offences)
list(JOIN offences "\n" report)

if(EXPECT)
  file(STRINGS ${EXPECT} expected)
  list(SORT expected)
  list(JOIN expected "\n" expected_report)
  if(NOT report STREQUAL expected_report)
    message(FATAL_ERROR "the check found:\n${report}\nbut the fixture expects:\n${expected_report}")
  endif()
  message(STATUS "the check found exactly the fixture's offences")
  return()
endif()
if(offences)
  message(FATAL_ERROR "gpushare internals used outside include/ (use a public header: "
                      "<gpushare/text.hpp>, <gpushare/types.hpp>, <gpushare/cuda/options.hpp>):\n"
                      "${report}")
endif()
message(STATUS "no gpushare internals outside include/")
