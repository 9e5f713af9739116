# The API reference (docs/api.md): Doxygen over the public headers, as the target gpushare_docs,
# defined only when Doxygen is found. The HTML lands in <build>/docs/api/html/index.html. Any
# warning (an undocumented public symbol, a broken reference) fails the target.
#
# Sets GPUSHARE_DOXYGEN to the doxygen program, or to nothing when it is missing (the docs tests,
# tests/docs/api.cmake, then report themselves skipped).

find_package(Doxygen QUIET)
if(DOXYGEN_FOUND)
  set(GPUSHARE_DOXYGEN ${DOXYGEN_EXECUTABLE})
else()
  set(GPUSHARE_DOXYGEN "")
  message(STATUS "gpushare: doxygen not found, so no API reference target (gpushare_docs): "
                 "install it (Debian/Ubuntu: apt-get install doxygen) and configure again")
  return()
endif()

set(GPUSHARE_DOCS_VERSION ${PROJECT_VERSION})
set(GPUSHARE_DOCS_OUTPUT ${CMAKE_BINARY_DIR}/docs/api)
set(GPUSHARE_DOCS_INPUT ${PROJECT_SOURCE_DIR}/include/gpushare)
set(GPUSHARE_DOCS_STRIP ${PROJECT_SOURCE_DIR}/include)
configure_file(${PROJECT_SOURCE_DIR}/docs/api/Doxyfile.in ${GPUSHARE_DOCS_OUTPUT}/Doxyfile @ONLY)

# Runs every time it is asked for (a few seconds): with an output file to stay up to date, a
# second build after a failed one would find the HTML Doxygen still wrote and pass.
add_custom_target(
  gpushare_docs
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${GPUSHARE_DOCS_OUTPUT}/html
  COMMAND ${GPUSHARE_DOXYGEN} ${GPUSHARE_DOCS_OUTPUT}/Doxyfile
  WORKING_DIRECTORY ${GPUSHARE_DOCS_OUTPUT}
  COMMENT "API reference (Doxygen): ${GPUSHARE_DOCS_OUTPUT}/html/index.html"
  VERBATIM)
