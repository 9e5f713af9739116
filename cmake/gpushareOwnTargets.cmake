# What every one of gpushare's OWN targets (tests, helpers, examples, benchmarks, tools, the
# simulated CUDA runtime) is built with, set on the target by gpushare_own_target(<target>):
#   * warnings as errors;
#   * line tables only (-g1) in a RelWithDebInfo build;
#   * the sanitizer of a sanitizer build (GPUSHARE_SANITIZE) and the instrumentation of a coverage
#     build (GPUSHARE_COVERAGE, cmake/coverage.cmake);
#   * C++20, in C++ and in CUDA sources (CXX_STANDARD and CUDA_STANDARD 20: also for targets
#     that do not link gpushare::gpushare, such as the simulated runtime; see the top-level
#     CMakeLists.txt for nvcc's flag).
# Each is a property of the target that asks for it, never a directory-wide flag, and never a
# usage requirement of the gpushare INTERFACE targets: those propagate to every consumer, and a
# consumer's compiler version must not be able to break their build.
#
# CUDA sources: nvcc's own diagnostics are errors (-Werror all-warnings) and the host compiler
# gets -Wall -Wextra -Werror. Not -Wpedantic: nvcc's generated host code uses GCC line markers,
# which -Wpedantic reports ("style of line directive is a GCC extension") in every file.
function(gpushare_own_target target)
  target_compile_options(
    ${target}
    PRIVATE
      $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU,Clang,AppleClang>>:-Wall -Wextra -Wpedantic -Werror>
      $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror>)
  set_target_properties(${target} PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON
                                             CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON)
  # Line tables only (-g1) in a RelWithDebInfo build: enough for a backtrace, perf or a
  # sanitizer's report, and a file of ours compiles a quarter faster than with -g (issue 39;
  # examples/quickstart.cpp: 17.0 s -> 12.1 s). A Debug build keeps full debug information.
  target_compile_options(${target}
                         PRIVATE $<$<AND:$<CONFIG:RelWithDebInfo>,$<COMPILE_LANGUAGE:CXX>>:-g1>)
  if(GPUSHARE_SANITIZE) # C++ only: the CUDA targets are not built in a sanitizer build
    target_compile_options(
      ${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${GPUSHARE_SANITIZE}>
                        $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                        $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>)
    # GCC's -Wmaybe-uninitialized is unreliable under sanitizers (their instrumentation changes
    # the code it analyses): GCC 12 reports std::regex's own states (bits/regex_automaton.h,
    # used by `gpushare run --ready-when log:`) as maybe uninitialized in sanitizer builds only.
    # The ordinary builds keep the warning as an error.
    target_compile_options(
      ${target} PRIVATE $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-maybe-uninitialized>)
    target_link_options(${target} PRIVATE -fsanitize=${GPUSHARE_SANITIZE})
  endif()
  if(GPUSHARE_COVERAGE)
    # CUDA sources: nvcc passes the flags to its host compiler, which instruments the host code
    # of the .cu files; device code is not instrumented. One link flag serves: CUDA targets are
    # linked by the host compiler.
    target_compile_options(
      ${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:--coverage;-O0;-g>"
                        "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=--coverage,-O0;-g>")
    target_link_options(${target} PRIVATE --coverage)
  endif()
endfunction()
