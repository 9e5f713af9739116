# Shared by the consumer projects: builds and runs common/cuda_main.cu as `target`, a .cu file that
# links only gpushare::cuda (no CUDA_STANDARD, no -std of its own): the target must make nvcc
# compile the headers as C++20 (nvcc 13 defaults to C++17). Needs gpushare::cuda; does nothing
# without a CUDA compiler. A macro, not a function: enable_language() must run at file scope.
set(gpushare_cu_consumer_dir ${CMAKE_CURRENT_LIST_DIR})
macro(gpushare_cu_consumer target)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    add_executable(${target} ${gpushare_cu_consumer_dir}/cuda_main.cu)
    target_link_libraries(${target} PRIVATE gpushare::cuda)
    add_custom_command(TARGET ${target} POST_BUILD COMMAND ${target})
  endif()
endmacro()
