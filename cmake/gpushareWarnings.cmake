# Warnings-as-errors for gpushare's OWN targets (tests, examples, benchmarks, tools).
#
# Never apply this to the gpushare INTERFACE target: its usage requirements propagate to every
# consumer, and a consumer's compiler version must not be able to break their build.
#
# CUDA sources: nvcc's own diagnostics are errors (-Werror all-warnings) and the host compiler
# gets -Wall -Wextra -Werror. Not -Wpedantic: nvcc's generated host code uses GCC line markers,
# which -Wpedantic reports ("style of line directive is a GCC extension") in every file.
function(gpushare_project_warnings target)
  target_compile_options(
    ${target}
    PRIVATE
      $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU,Clang,AppleClang>>:-Wall -Wextra -Wpedantic -Werror>
      $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror>)
endfunction()
