# Runs one example (tests examples/<name>, label examples) in a domain of its own, unique to this
# run, so that it neither sees nor leaves tables of other runs:
#   cmake -DPROGRAM=<path> -DNAME=<name> [-DKEEPS_TABLE=ON] -P run.cmake
# The example must exit 0. It must also remove its table, unless KEEPS_TABLE (the README's quick
# start, which shows a program that leaves its table for the next one): what is left in the domain
# is removed here either way, and reported as a failure when the example should have removed it.
string(RANDOM LENGTH 10 ALPHABET "abcdefghijklmnopqrstuvwxyz0123456789" random)
string(TIMESTAMP now "%s")
set(domain "ex${now}${random}") # 22 characters of the 32 a domain may have

execute_process(COMMAND ${CMAKE_COMMAND} -E env GPUSHARE_DOMAIN=${domain} ${PROGRAM}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")

file(GLOB left /dev/shm/gpushare.${domain}.*)
if(left)
  file(REMOVE ${left})
endif()
# A CUDA example runs on cudasim with a simulated device state of its own (CUDASIM_STATE, a
# /dev/shm name set by the test): remove it too, so that no run leaves it behind.
if(DEFINED ENV{CUDASIM_STATE} AND NOT "$ENV{CUDASIM_STATE}" STREQUAL "")
  file(REMOVE /dev/shm/$ENV{CUDASIM_STATE})
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NAME} exited with ${rc} (domain ${domain})")
endif()
if(left AND NOT KEEPS_TABLE)
  message(FATAL_ERROR "${NAME} left its table behind: ${left}")
endif()
