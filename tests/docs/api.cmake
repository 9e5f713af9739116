# The API reference (docs/api.md), label "docs": the public headers' reference must build with
# no warning (docs/api/include), and the check must fail on a public constant whose comment was
# removed, or whose comment refers to nothing (docs/api/self-test). Both report themselves skipped where doxygen is missing
# (GPUSHARE_DOXYGEN, cmake/gpushareDocs.cmake).
set(api_check ${CMAKE_CURRENT_LIST_DIR}/check_api_docs.cmake)
set(api_args -DDOXYGEN=${GPUSHARE_DOXYGEN}
             -DDOXYFILE_IN=${PROJECT_SOURCE_DIR}/docs/api/Doxyfile.in)
add_test(NAME docs/api/include
         COMMAND ${CMAKE_COMMAND} ${api_args} -DMODE=include
                 -DINCLUDE_DIR=${PROJECT_SOURCE_DIR}/include
                 -DSCRATCH=${CMAKE_CURRENT_BINARY_DIR}/docs-api-include -P ${api_check})
add_test(NAME docs/api/self-test
         COMMAND ${CMAKE_COMMAND} ${api_args} -DMODE=self-test
                 -DHEADER=${PROJECT_SOURCE_DIR}/include/gpushare/version.hpp
                 -DSYMBOL=table_layout_version
                 -DSCRATCH=${CMAKE_CURRENT_BINARY_DIR}/docs-api-self-test -P ${api_check})
set_tests_properties(docs/api/include docs/api/self-test
                     PROPERTIES LABELS docs TIMEOUT 300 SKIP_REGULAR_EXPRESSION "GPUSHARE_SKIP")
