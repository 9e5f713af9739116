# Writes the stubs that make cudasim's libcudart.so.13 export the whole runtime API of the
# toolkit it impersonates (docs/cudasim.md, "The runtime's functions"). Run at build time by
# tools/cudasim/CMakeLists.txt:
#
#   cmake -DNM=<nm> -DTOOLKIT_LIB=<toolkit's libcudart.so.13> -DOBJECTS=<a|b|...>
#         -DHEADERS=<a|b|...> -DOUTPUT=<file.cpp> -P generate_stubs.cmake
#
# TOOLKIT_LIB's defined dynamic symbols (nm -D --defined-only) are the export list; OBJECTS are
# cudasim's compiled model, whose defined symbols are the functions it models; HEADERS are the
# toolkit's headers that declare the runtime API, which say what each function returns. For every
# exported function the model does not define, OUTPUT gets a stub that returns
# cudaErrorNotSupported through cudasim::not_modelled() (src/not_modelled.hpp). A stub returns an
# int whatever the function's parameters: on x86-64 (System V) the caller passes arguments in
# registers and on a stack it cleans up itself, so a callee that ignores them is safe, and an
# int in eax is what a caller of a function returning cudaError_t reads. That holds only for
# functions returning cudaError_t, so:
#   - a function the headers declare with another return type is not stubbed: it needs a model
#     (cudaCreateChannelDesc, cudaGetErrorName, cudaGetErrorString have one); a warning names it
#     and cudasim-exports fails until it has one;
#   - the __cuda* internals the headers do not declare (nvcc's registration calls and a few
#     newer ones with unpublished signatures) are stubbed like the others: those that return void
#     ignore the value, those that return cudaError_t get cudaErrorNotSupported;
#   - an export that is not a function (nm's A is the version definition, libcudart.so.13, which
#     the version script makes; data would be D, B or R) is not stubbed; data gets a warning.
cmake_minimum_required(VERSION 3.25)

foreach(var NM TOOLKIT_LIB OBJECTS HEADERS OUTPUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "generate_stubs.cmake: -D${var}=... is required")
  endif()
endforeach()
string(REPLACE "|" ";" OBJECTS "${OBJECTS}")
string(REPLACE "|" ";" HEADERS "${HEADERS}")

# nm's defined symbols of `files` (extra nm arguments in ARGN): lists <prefix>_functions (T, W,
# i) and <prefix>_others ("<type> <name>" for every other type). Versions are dropped: the
# version script gives every runtime name the toolkit's version (cudasim-exports checks it).
function(defined_symbols prefix files)
  execute_process(COMMAND ${NM} ${ARGN} --defined-only ${files} OUTPUT_VARIABLE text
                  RESULT_VARIABLE status ERROR_VARIABLE errors)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "generate_stubs.cmake: ${NM} failed on ${files}: ${errors}")
  endif()
  string(REPLACE "\n" ";" lines "${text}")
  set(functions "")
  set(others "")
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "^[0-9a-fA-F]* *([A-Za-z]) ([^@ ]+)")
      continue()
    endif()
    set(type ${CMAKE_MATCH_1})
    set(name ${CMAKE_MATCH_2})
    if(type MATCHES "^[TWi]$")
      list(APPEND functions ${name})
    else()
      list(APPEND others "${type} ${name}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES functions)
  set(${prefix}_functions ${functions} PARENT_SCOPE)
  set(${prefix}_others ${others} PARENT_SCOPE)
endfunction()

defined_symbols(toolkit "${TOOLKIT_LIB}" -D)
defined_symbols(model "${OBJECTS}")

# What each declared runtime function returns: "<type> CUDARTAPI <name>(" in the headers.
set(declared "")
foreach(header IN LISTS HEADERS)
  file(STRINGS "${header}" lines REGEX "CUDARTAPI[ \t]+[A-Za-z0-9_]+[ \t]*\\(")
  foreach(line IN LISTS lines)
    if(line MATCHES "([A-Za-z0-9_*]+)[ \t]+CUDARTAPI[ \t]+([A-Za-z0-9_]+)[ \t]*\\(")
      set(returns_${CMAKE_MATCH_2} "${CMAKE_MATCH_1}")
      list(APPEND declared ${CMAKE_MATCH_2})
    endif()
  endforeach()
endforeach()
if(NOT declared)
  message(FATAL_ERROR "generate_stubs.cmake: no CUDARTAPI declaration in ${HEADERS}")
endif()

set(stubs "")
set(stubbed "")
set(modelled 0)
set(needs_model "")
foreach(name IN LISTS toolkit_functions)
  if(name IN_LIST model_functions)
    math(EXPR modelled "${modelled} + 1")
    continue()
  endif()
  string(REGEX REPLACE "_pt[sd][sz]$" "" base "${name}") # the per-thread entry points
  if(DEFINED returns_${base} AND NOT returns_${base} STREQUAL "cudaError_t")
    list(APPEND needs_model "${name} (returns ${returns_${base}})")
    continue()
  endif()
  if(NOT DEFINED returns_${base} AND NOT name MATCHES "^__cuda")
    list(APPEND needs_model "${name} (declared in none of the headers)")
    continue()
  endif()
  string(APPEND stubs "int ${name}() { return cudasim::not_modelled(\"${name}\"); }\n")
  list(APPEND stubbed ${name})
endforeach()

list(LENGTH toolkit_functions exported)
list(LENGTH stubbed stub_count)
foreach(other IN LISTS toolkit_others)
  if(NOT other MATCHES "^A ")
    message(WARNING "cudasim: the toolkit's runtime exports data, ${other}, which cudasim does "
                    "not provide (cudasim-exports names it)")
  endif()
endforeach()
if(needs_model)
  list(JOIN needs_model ", " text)
  message(WARNING "cudasim: not exported, as a stub would break their ABI: ${text}")
endif()
message(STATUS "cudasim: the toolkit's libcudart.so.13 exports ${exported} functions: "
               "${modelled} modelled, ${stub_count} stubs returning cudaErrorNotSupported")

string(CONCAT content
       "// Generated at build time by tools/cudasim/generate_stubs.cmake from\n"
       "// ${TOOLKIT_LIB}: do not edit.\n"
       "// The toolkit's runtime exports ${exported} functions; cudasim models ${modelled}; the\n"
       "// ${stub_count} below are not modelled and return cudaErrorNotSupported.\n"
       "#include \"not_modelled.hpp\"\n\n"
       "extern \"C\" {\n\n" "${stubs}" "\n} // extern \"C\"\n")
file(WRITE "${OUTPUT}" "${content}")
