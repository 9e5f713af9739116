# Runs one program in GPU mode on the simulated CUDA runtime and checks what it printed (see
# CMakeLists.txt here). Run with cmake -P and:
#   -DCHECK=showcase|memory_budget|bench   which checks
#   -DPROGRAM=<path> -DARGS="<arguments, split as a shell would>"
#   -DWORK_DIR=<dir>         where the benchmark writes its JSON (bench-gpu.json; CHECK=bench
#                            adds --json with it to the arguments)
# and, in the environment, LD_LIBRARY_PATH (cudasim's lib directory) and CUDASIM_STATE (this
# run's simulated device state, removed before and after).
#
# Counts (out-of-memory failures, jobs completed, guards) are checked always. Timing figures
# (p99s, shares, start latencies) are compared, gpushare against unmanaged, only where the program
# judged its measurement conditions good; where it did not (a busy machine), the check is that it
# says so, as the tests of the simulated mode (tests/mp-demos.cpp, mp-bench-gpu.cpp) do.
# A run whose only failures are such timing comparisons runs once more, and the check fails if
# the second run fails any check: a 4 s demo's figures rest on a few hundred wake-ups of two
# CPUs, and one slow moment can reorder two of them (a fresh-clone CI run, 2026-11-29, failed
# the showcase's once in four runs; 40 local reruns beside CPU hogs did not). Counts, the exit
# status and the printed labels are checked once: they do not depend on timing.
cmake_minimum_required(VERSION 3.20)

if(NOT DEFINED ENV{CUDASIM_STATE} OR NOT DEFINED ENV{LD_LIBRARY_PATH})
  message(FATAL_ERROR "run by CTest: CUDASIM_STATE and LD_LIBRARY_PATH must be set")
endif()
if(NOT EXISTS "${PROGRAM}")
  message(FATAL_ERROR "${PROGRAM} is not built")
endif()
set(state /dev/shm/$ENV{CUDASIM_STATE})
set(json_file ${WORK_DIR}/bench-gpu.json)
separate_arguments(args UNIX_COMMAND "${ARGS}")
if(CHECK STREQUAL "bench")
  list(APPEND args --json ${json_file})
endif()

macro(fail why)
  string(APPEND failures "  - ${why}\n")
  math(EXPR failure_count "${failure_count} + 1")
endmacro()

macro(expect_text text)
  string(FIND "${out}" "${text}" at)
  if(at EQUAL -1)
    fail("the output does not say \"${text}\"")
  endif()
endmacro()

macro(expect_first_line prefix)
  string(FIND "${first_line}" "${prefix}" at)
  if(NOT at EQUAL 0)
    fail("the first line does not start with \"${prefix}\": ${first_line}")
  endif()
endmacro()

# result(<key> <var>): the value of the program's "result <key>=<value>" line ("" if none).
function(result key var)
  string(REPLACE "." "\\." pattern "${key}")
  string(REGEX MATCH "\nresult ${pattern}=([^\n]*)" line "\n${out}")
  set(${var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

# expect(<a> <op> <b> <what>): numbers a and b compare as op says (LESS, GREATER, EQUAL,
# GREATER_EQUAL, LESS_EQUAL); a missing number fails.
macro(expect a op b what)
  if("${a}" STREQUAL "" OR "${b}" STREQUAL "")
    fail("${what}: a figure is missing (\"${a}\" ${op} \"${b}\")")
  elseif(NOT "${a}" ${op} "${b}")
    fail("${what}: expected ${a} ${op} ${b}")
  endif()
endmacro()

macro(expect_result key op b)
  result(${key} value)
  expect("${value}" ${op} "${b}" "result ${key}")
endmacro()

# expect_timing(...) and expect_timing_result(...): as expect and expect_result, for a comparison
# of timing figures (counted in timing_failure_count too).
macro(expect_timing a op b what)
  set(before ${failure_count})
  expect("${a}" ${op} "${b}" "${what}")
  if(NOT before EQUAL failure_count)
    math(EXPR timing_failure_count "${timing_failure_count} + 1")
  endif()
endmacro()

macro(expect_timing_result key op b)
  result(${key} value)
  expect_timing("${value}" ${op} "${b}" "result ${key}")
endmacro()

# json(<var> <member>...): a member of the benchmark's JSON, read into `json` ("" when absent).
function(json var)
  string(JSON value ERROR_VARIABLE error GET "${json}" ${ARGN})
  if(error)
    set(value "")
  endif()
  set(${var} "${value}" PARENT_SCOPE)
endfunction()

# figure(<scenario> <key> <var>): a figure of the scenario's first repeat, from the JSON.
function(figure scenario key var)
  json(value results ${scenario} 0 figures ${key})
  set(${var} "${value}" PARENT_SCOPE)
endfunction()

# run_program(): runs the program once, its output in `out`, its exit status in `rc`.
macro(run_program)
  file(REMOVE ${state} ${json_file})
  execute_process(
    COMMAND ${PROGRAM} ${args}
    OUTPUT_VARIABLE out
    ERROR_VARIABLE err
    RESULT_VARIABLE rc
    TIMEOUT 110)
  file(REMOVE ${state})
  list(JOIN args " " shown)
  message("${PROGRAM} ${shown} exited with ${rc}; its output:\n${out}")
  if(err)
    message("its stderr:\n${err}")
  endif()
endmacro()

# check_output(): checks what run_program() got; sets `failures`, `failure_count` and
# `timing_failure_count`.
macro(check_output)
  set(failures "")
  set(failure_count 0)
  set(timing_failure_count 0)
  string(FIND "${out}" "\n" eol)
  string(SUBSTRING "${out}" 0 ${eol} first_line)

  if(NOT rc EQUAL 0)
    fail("exit status ${rc}, not 0")
  endif()

  set(gpu_on_cudasim "mode: GPU mode on the simulated CUDA runtime (cudasim")

  if(CHECK STREQUAL "showcase")
    expect_first_line("${gpu_on_cudasim}")
    expect_text("The CUDA runtime here is cudasim, a simulation")
    expect_text("Summary (GPU mode on the simulated CUDA runtime (cudasim);")
    result(mode mode)
    if(NOT mode STREQUAL "cudasim")
      fail("result mode=${mode}, not cudasim")
    endif()
    result(qos.p99_with_ms with99)
    expect("${with99}" GREATER 0 "inference p99 with gpushare")
    result(qos.p50_with_ms with)
    result(qos.trustworthy qos_trusted)
    if(qos_trusted STREQUAL "yes")
      # Without gpushare inference queues behind training's time slices: its median is several
      # times gpushare's. The p99s are not compared: of 153 requests, p99 is the second slowest,
      # set by a burst of arrivals and by when the two cores run the waiter, and one such hiccup
      # put gpushare's above unmanaged's in a fresh-clone CI run (2026-11-27: p99 85.6 vs 70.0 ms
      # while the p50s were 6.9 vs 41.3 ms; five reruns passed).
      expect_timing_result(qos.p50_without_ms GREATER "${with}")
      expect_text("latency:    inference p99 with gpushare ")
    elseif(qos_trusted STREQUAL "no")
      expect_text("no findings: the QoS figures are NOT trustworthy")
    else()
      fail("no result qos.trustworthy")
    endif()
    result(fair_share.trustworthy share_trusted)
    if(share_trusted STREQUAL "yes")
      # Shares 1:1:2 with gpushare: worker-c gets about 50%, worker-a about 25%.
      result(fair_share.shares_a a)
      expect_timing_result(fair_share.shares_c GREATER "${a}")
    elseif(share_trusted STREQUAL "no")
      expect_text("no findings: the fair-share figures are NOT trustworthy")
    else()
      fail("no result fair_share.trustworthy")
    endif()

  elseif(CHECK STREQUAL "memory_budget")
    expect_first_line("${gpu_on_cudasim}")
    result(mode mode)
    if(NOT mode STREQUAL "cudasim")
      fail("result mode=${mode}, not cudasim")
    endif()
    expect_result(memory_budget.without_oom GREATER_EQUAL 1)
    expect_result(memory_budget.without_errors EQUAL 0)
    expect_result(memory_budget.with_finished EQUAL 4)
    expect_result(memory_budget.with_failed EQUAL 0)

  elseif(CHECK STREQUAL "bench")
    expect_first_line("mode: cudasim (simulated CUDA runtime, cudasim")
    expect_text("NOT GPU measurements")
    expect_text("workload check: SKIPPED on cudasim")
    expect_text("=== gpushare GPU benchmark: summary (cudasim, SIMULATED CUDA RUNTIME:")
    expect_text("max split error, pp (CUDA events, cudasim)")
    if(NOT EXISTS ${json_file})
      fail("no JSON written to ${json_file}")
    else()
      file(READ ${json_file} json)
      json(mode mode)
      if(NOT mode STREQUAL "cudasim")
        fail("JSON mode \"${mode}\", not cudasim")
      endif()
      json(check workload_check)
      if(NOT check MATCHES "^skipped")
        fail("JSON workload_check \"${check}\" does not say it was skipped")
      endif()
      # The timing scenarios' figures are compared only where the program judged its conditions
      # good; where it did not (a busy machine), it must say so.
      foreach(scenario qos share handover)
        json(trusted_${scenario} results ${scenario} 0 trustworthy)
        if(NOT trusted_${scenario} STREQUAL "ON")
          expect_text("WARNING: these ${scenario} figures are NOT trustworthy")
        endif()
      endforeach()
      if(trusted_qos STREQUAL "ON")
        # qos: the inference p99 without gpushare is many times gpushare's.
        figure(qos qos.p99_ms.gpushare with)
        figure(qos qos.p99_ms.unmanaged without)
        expect("${with}" GREATER 0 "qos p99 with gpushare")
        expect_timing("${without}" GREATER "${with}" "qos p99 unmanaged vs gpushare")
      endif()
      if(trusted_share STREQUAL "ON")
        # share 3:1: unmanaged ignores the shares (about 25 points off), gpushare keeps them.
        figure(share share.3to1.error_pp_work.gpushare with)
        figure(share share.3to1.error_pp_work.unmanaged without)
        expect_timing("${without}" GREATER "${with}" "share 3:1 split error (work), unmanaged vs gpushare")
        figure(share share.1to1to2.error_pp_events.gpushare events)
        expect("${events}" GREATER_EQUAL 0 "share 1:1:2 split error (CUDA events)")
      endif()
      if(trusted_handover STREQUAL "ON")
        # handover: the stamp kernel's clock, mapped to the host's, gives a sane start latency.
        figure(handover handover.solo.p50_us solo)
        expect("${solo}" GREATER 0 "handover start latency on the idle device, us")
        expect_timing("${solo}" LESS 100000 "handover start latency on the idle device, us")
      endif()
      # memory: without gpushare jobs fail out of memory; with it all complete.
      figure(memory memory.out_of_memory.unmanaged oom)
      expect("${oom}" GREATER_EQUAL 1 "memory jobs out of memory without gpushare")
      figure(memory memory.completed.gpushare completed)
      expect("${completed}" EQUAL 4 "memory jobs completed with gpushare")
    endif()

  else()
    message(FATAL_ERROR "unknown CHECK '${CHECK}'")
  endif()
endmacro()

run_program()
check_output()
if(failure_count GREATER 0 AND failure_count EQUAL timing_failure_count)
  message("cudasim smoke test ${CHECK}: only timing comparisons failed, so it runs once more:\n"
          "${failures}")
  run_program()
  check_output()
endif()
if(failures)
  message(FATAL_ERROR "cudasim smoke test ${CHECK} FAILED:\n${failures}")
endif()
message("cudasim smoke test ${CHECK}: passed")
