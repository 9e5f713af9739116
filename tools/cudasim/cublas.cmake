# cudasim's cuBLAS subset (src/cublas.cpp, docs/cudasim.md): libcublas.so.13 next to the
# simulated libcudart.so.13, so that a program linked with cuBLAS (bench/gpu) runs on the
# simulated runtime under the same LD_LIBRARY_PATH. Its GEMMs are simulated kernels on the
# handle's stream that compute nothing. Included from this directory's CMakeLists.txt.
#
#   build/tools/cudasim/lib/libcublas.so.13     SONAME libcublas.so.13, symbols under the
#                                               version node libcublas.so.13, as NVIDIA's

add_library(gpushare_cudasim_cublas SHARED ${CMAKE_CURRENT_LIST_DIR}/src/cublas.cpp)
target_include_directories(gpushare_cudasim_cublas PRIVATE ${CUDAToolkit_INCLUDE_DIRS}
                                                           ${CMAKE_CURRENT_LIST_DIR}/include)
# Its GEMM kernel's model is declared with cudasimSetKernelModel: link the simulated runtime.
target_link_libraries(gpushare_cudasim_cublas PRIVATE gpushare_cudasim ${CMAKE_DL_LIBS})
target_link_options(gpushare_cudasim_cublas PRIVATE
                    "-Wl,--version-script=${CMAKE_CURRENT_LIST_DIR}/libcublas.map" -Wl,-z,defs)
set_target_properties(
  gpushare_cudasim_cublas
  PROPERTIES OUTPUT_NAME cublas
             SOVERSION 13
             VERSION 13.0.0
             LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/lib
             LINK_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/libcublas.map)
gpushare_own_target(gpushare_cudasim_cublas)
