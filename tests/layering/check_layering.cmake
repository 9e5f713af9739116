# Layers that only point down (issue 26): a header under gpushare/detail/ or gpushare/cuda/detail/
# may include other detail headers, the standard and system headers, and only these public
# headers, the leaves:
#   gpushare/types.hpp, gpushare/table_types.hpp, gpushare/error.hpp, gpushare/version.hpp,
#   and, from gpushare/cuda/detail/ only, gpushare/cuda/error.hpp and gpushare/cuda/stats.hpp.
# Any other public header it includes is an offending edge, "<file> -> <include>"; the leaves
# themselves are held to the same list (cuda/error and cuda/stats to the CUDA one). So is a
# "#define GPUSHARE_DETAIL_<...>_DEFINED" in any header: the macro that once held an include
# cycle together (options.hpp <-> detail/parse.hpp).
#
#   cmake -DINCLUDE_DIR=<dir holding gpushare/> -P check_layering.cmake
# fails (listing every offence) if there is one. With -DEXPECT=<file>, it instead passes only if
# the offences are exactly the lines of <file> (sorted): how its self-test shows that it finds
# bad edges, and only those.
cmake_minimum_required(VERSION 3.25) # policies: IN_LIST
if(NOT INCLUDE_DIR)
  message(FATAL_ERROR "pass -DINCLUDE_DIR=<directory holding gpushare/>")
endif()
set(core_leaves gpushare/types.hpp gpushare/table_types.hpp gpushare/error.hpp
                gpushare/version.hpp)
set(cuda_leaves ${core_leaves} gpushare/cuda/error.hpp gpushare/cuda/stats.hpp)
set(include_regex "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"]")
set(macro_regex "^[ \t]*#[ \t]*define[ \t]+(GPUSHARE_DETAIL_[A-Za-z0-9_]*_DEFINED)")

file(GLOB_RECURSE headers RELATIVE ${INCLUDE_DIR} ${INCLUDE_DIR}/gpushare/*.hpp)
list(SORT headers)
set(offences "")
foreach(header IN LISTS headers)
  file(STRINGS ${INCLUDE_DIR}/${header} lines REGEX "^[ \t]*#[ \t]*(include|define)")
  set(leaves "")
  # A leaf itself includes only leaves (and detail headers): else the detail headers that
  # include it would reach what it includes (table_types.hpp once included options.hpp).
  if(header MATCHES "^gpushare/cuda/detail/" OR header MATCHES "^gpushare/cuda/(error|stats).hpp$")
    set(leaves ${cuda_leaves})
  elseif(header MATCHES "^gpushare/detail/" OR header IN_LIST core_leaves)
    set(leaves ${core_leaves})
  endif()
  foreach(line IN LISTS lines)
    if(line MATCHES "${macro_regex}")
      list(APPEND offences "${header}: #define ${CMAKE_MATCH_1}")
    elseif(leaves AND line MATCHES "${include_regex}")
      set(target ${CMAKE_MATCH_1})
      # A quoted include that is not "gpushare/..." is relative: the library uses none.
      if(NOT target MATCHES "^gpushare/" AND line MATCHES "\"")
        list(APPEND offences "${header} -> ${target}")
      elseif(target MATCHES "^gpushare/" AND NOT target MATCHES "/detail/"
             AND NOT target IN_LIST leaves)
        list(APPEND offences "${header} -> ${target}")
      endif()
    endif()
  endforeach()
endforeach()
list(SORT offences)
list(JOIN offences "\n" report)

if(EXPECT)
  file(STRINGS ${EXPECT} expected)
  list(SORT expected)
  list(JOIN expected "\n" expected_report)
  if(NOT report STREQUAL expected_report)
    message(NOTICE "found:\n${report}\nexpected:\n${expected_report}")
    message(FATAL_ERROR "layering self-test: the offences found are not those expected")
  endif()
  message(STATUS "layering self-test: found exactly the ${INCLUDE_DIR} offences expected")
  return()
endif()
if(offences)
  list(LENGTH offences count)
  message(NOTICE "${report}")
  message(FATAL_ERROR
          "${count} layering offence(s) under ${INCLUDE_DIR}, listed above: a detail header may "
          "include only detail headers and the leaves (types, table_types, error, version; "
          "cuda/detail also cuda/error and cuda/stats), and no header may hold an include cycle "
          "together with a GPUSHARE_DETAIL_*_DEFINED macro")
endif()
list(LENGTH headers count)
message(STATUS "layering: ${count} headers under ${INCLUDE_DIR}, every detail edge points down")
