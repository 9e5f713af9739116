# cudasim is an oracle for the CUDA layer, so it must not share code with it: fails when a file
# under -DDIR=<dir> (tools/cudasim) includes one of gpushare's headers, <gpushare/...> or
# "gpushare/...". The self-test runs it on independent-fixture/, whose files do, and must fail.
if(NOT DIR)
  message(FATAL_ERROR "pass -DDIR=<directory>")
endif()
file(GLOB_RECURSE files LIST_DIRECTORIES FALSE "${DIR}/*")
list(SORT files)
set(problems "")
foreach(file IN LISTS files)
  file(STRINGS "${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]gpushare/")
  foreach(line IN LISTS includes)
    file(RELATIVE_PATH name "${DIR}" "${file}")
    string(STRIP "${line}" line)
    string(APPEND problems "\n  ${name}: ${line}")
  endforeach()
endforeach()
if(problems)
  message(FATAL_ERROR "cudasim includes gpushare's headers (it must stay independent of the "
                      "code it tests):${problems}")
endif()
list(LENGTH files count)
message(STATUS "${count} files under ${DIR}, none includes gpushare's headers")
