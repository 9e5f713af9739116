# The API reference built from a set of headers into a scratch directory (cmake -P), the way the
# gpushare_docs target builds it (docs/api/Doxyfile.in); tests/docs/api.cmake registers it.
#   -DDOXYGEN=<program>     empty: prints GPUSHARE_SKIP (the test shows as skipped)
#   -DDOXYFILE_IN=<path>    docs/api/Doxyfile.in
#   -DSCRATCH=<dir>         emptied first, removed at the end when the check passes
#   -DMODE=include          the headers under -DINCLUDE_DIR=<include>: doxygen must finish with
#                           no warning, the public classes must have pages and detail:: none
#   -DMODE=self-test        a copy of -DHEADER=<include>/gpushare/<file> must pass; the same
#                           copy without the comment on -DSYMBOL (the `///` lines just above the
#                           line that declares it) must fail, naming the symbol as undocumented;
#                           and with that comment replaced by a \ref to nothing, must fail too

if(NOT DOXYGEN)
  message("GPUSHARE_SKIP: doxygen not found (Debian/Ubuntu: apt-get install doxygen)")
  return()
endif()

# Runs doxygen on the headers under <include>/gpushare into <out>; sets <rc_var> to its exit
# status and <log_var> to what it printed.
function(run_doxygen include out rc_var log_var)
  set(GPUSHARE_DOCS_VERSION test)
  set(GPUSHARE_DOCS_OUTPUT ${out})
  set(GPUSHARE_DOCS_INPUT ${include}/gpushare)
  set(GPUSHARE_DOCS_STRIP ${include})
  configure_file(${DOXYFILE_IN} ${out}/Doxyfile @ONLY)
  execute_process(COMMAND ${DOXYGEN} ${out}/Doxyfile WORKING_DIRECTORY ${out}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE log ERROR_VARIABLE log)
  set(${rc_var} ${rc} PARENT_SCOPE)
  set(${log_var} "${log}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${SCRATCH})
file(MAKE_DIRECTORY ${SCRATCH})

if(MODE STREQUAL "include")
  run_doxygen(${INCLUDE_DIR} ${SCRATCH} rc log)
  if(NOT rc EQUAL 0 OR NOT log STREQUAL "")
    message(FATAL_ERROR "doxygen exited ${rc} on ${INCLUDE_DIR}/gpushare; every public symbol "
                        "needs a `///` comment and every reference a target:\n${log}")
  endif()
  # The reference has the public API (session: gpushare::v0::session) and nothing of detail::.
  foreach(page IN ITEMS classgpushare_1_1v0_1_1session.html
                        classgpushare_1_1v0_1_1cuda_1_1device__session.html)
    if(NOT EXISTS ${SCRATCH}/html/${page})
      message(FATAL_ERROR "the reference lacks ${page}: are the public headers its input?")
    endif()
  endforeach()
  file(GLOB detail_pages ${SCRATCH}/html/*_1_1detail*)
  if(detail_pages)
    message(FATAL_ERROR "the reference documents detail:: (EXCLUDE_SYMBOLS): ${detail_pages}")
  endif()
elseif(MODE STREQUAL "self-test")
  get_filename_component(name ${HEADER} NAME)
  file(READ ${HEADER} text)
  file(WRITE ${SCRATCH}/intact/include/gpushare/${name} "${text}")
  run_doxygen(${SCRATCH}/intact/include ${SCRATCH}/intact rc log)
  if(NOT rc EQUAL 0 OR NOT log STREQUAL "")
    message(FATAL_ERROR "doxygen exited ${rc} on an intact copy of ${name}:\n${log}")
  endif()
  # Drop the `///` lines just above the first line that declares SYMBOL.
  string(REGEX MATCH "(\n *///[^\n]*)+\n[^\n]*${SYMBOL}" commented "${text}")
  if(commented STREQUAL "")
    message(FATAL_ERROR "no `///` comment just above ${SYMBOL} in ${HEADER}")
  endif()
  string(REGEX REPLACE "^(\n *///[^\n]*)+" "" bare "${commented}")
  string(REPLACE "${commented}" "${bare}" stripped "${text}")
  file(WRITE ${SCRATCH}/stripped/include/gpushare/${name} "${stripped}")
  run_doxygen(${SCRATCH}/stripped/include ${SCRATCH}/stripped rc log)
  if(rc EQUAL 0 OR NOT log MATCHES "${SYMBOL}[^\n]* is not documented")
    message(FATAL_ERROR "doxygen exited ${rc} on ${name} without the comment on ${SYMBOL}; "
                        "expected a failure naming it as not documented:\n${log}")
  endif()
  message("without its comment, ${SYMBOL} fails the reference as expected:\n${log}")
  # The same comment replaced by one with a reference to nothing.
  string(REPLACE "${commented}" "\n/// See \\ref gpushare_no_such_symbol.${bare}" broken "${text}")
  file(WRITE ${SCRATCH}/broken/include/gpushare/${name} "${broken}")
  run_doxygen(${SCRATCH}/broken/include ${SCRATCH}/broken rc log)
  if(rc EQUAL 0 OR NOT log MATCHES "unable to resolve reference to 'gpushare_no_such_symbol'")
    message(FATAL_ERROR "doxygen exited ${rc} on ${name} with a reference to nothing; expected "
                        "a failure naming it:\n${log}")
  endif()
  message("a reference to nothing fails the reference as expected:\n${log}")
else()
  message(FATAL_ERROR "MODE must be include or self-test, not '${MODE}'")
endif()
file(REMOVE_RECURSE ${SCRATCH})
