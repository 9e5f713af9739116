# Warnings-as-errors for gpushare's OWN targets (tests, examples, benchmarks, tools).
#
# Never apply this to the gpushare INTERFACE target: its usage requirements propagate to every
# consumer, and a consumer's compiler version must not be able to break their build.
function(gpushare_project_warnings target)
  target_compile_options(
    ${target} PRIVATE $<$<CXX_COMPILER_ID:GNU,Clang,AppleClang>:-Wall -Wextra -Wpedantic -Werror>)
endfunction()
