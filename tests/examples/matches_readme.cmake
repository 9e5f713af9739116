# examples/quickstart.cpp is README.md's quick start, line for line: the first ```cpp block after
# "## Quick start" must equal the file without its leading // comment lines.
#   cmake -DREADME=<README.md> -DEXAMPLE=<quickstart.cpp> -P matches_readme.cmake
file(READ ${README} readme)
string(FIND "${readme}" "\n## Quick start\n" at)
if(at LESS 0)
  message(FATAL_ERROR "${README}: no \"## Quick start\" section")
endif()
string(SUBSTRING "${readme}" ${at} -1 readme)
string(FIND "${readme}" "```cpp\n" open)
string(LENGTH "```cpp\n" fence)
math(EXPR open "${open} + ${fence}")
string(SUBSTRING "${readme}" ${open} -1 readme)
string(FIND "${readme}" "```\n" close)
string(SUBSTRING "${readme}" 0 ${close} snippet)

file(READ ${EXAMPLE} example)
string(REGEX REPLACE "^(//[^\n]*\n)+" "" example "${example}")
if(NOT snippet STREQUAL example)
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/quickstart-from-readme.cpp "${snippet}")
  message(FATAL_ERROR "${EXAMPLE} differs from the quick start of ${README} (written to "
                      "${CMAKE_CURRENT_BINARY_DIR}/quickstart-from-readme.cpp: diff them)")
endif()
