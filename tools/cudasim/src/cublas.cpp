// SPDX-License-Identifier: Apache-2.0
// cudasim's cuBLAS subset (libcublas.so.13): what gpushare's GPU benchmark calls, so that it runs
// on the simulated CUDA runtime. A handle holds a stream; cublasGemmEx enqueues on it a simulated
// kernel whose duration is the GEMM's FLOPs at a fixed rate. It computes no numbers: C is left
// as it was. Every other cuBLAS function is absent (a program that needs one fails to load).
//
// The GEMM's model (docs/cudasim.md): 2 us + 2*m*n*k / rate, where the rate is 400 TFLOP/s for
// 16- and 8-bit inputs (tensor cores; an H100 SXM peaks at 989 TFLOP/s dense bf16, and cuBLAS
// reaches well over half of that on large GEMMs) and 50 TFLOP/s for anything else (fp32, tf32,
// fp64, complex; an H100 SXM peaks at 67 TFLOP/s fp32 and fp64 tensor). The 2 us is a small
// kernel's floor on a GPU.
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>

#include "cudasim/cudasim.h"

namespace {

struct handle_state {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

constexpr double tensor_flop_per_ns = 400'000; // 400 TFLOP/s
constexpr double other_flop_per_ns = 50'000;   // 50 TFLOP/s
constexpr unsigned long long floor_ns = 2'000;

// The simulated GEMM kernel: never runs; its one argument is its duration in ns.
void gemm_kernel(unsigned long long) {}

unsigned long long gemm_duration(const cudasimLaunch* l) {
  return *static_cast<const unsigned long long*>(l->args[0]);
}

std::once_flag model_once;
bool model_ok = false;

bool declare_model() {
  std::call_once(model_once, [] {
    const std::size_t sizes[] = {sizeof(unsigned long long)};
    model_ok = cudasimSetKernelModel(reinterpret_cast<const void*>(&gemm_kernel), 1, sizes,
                                     &gemm_duration, nullptr) == 0;
  });
  return model_ok;
}

bool tensor_type(cudaDataType t) {
  switch (t) {
  case CUDA_R_16F:
  case CUDA_R_16BF:
  case CUDA_R_8I:
  case CUDA_R_8U:
  case CUDA_R_8F_E4M3:
  case CUDA_R_8F_E5M2: return true;
  default: return false;
  }
}

bool valid_operation(cublasOperation_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

cublasStatus_t gemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                    std::int64_t m, std::int64_t n, std::int64_t k, const void* alpha,
                    const void* a, cudaDataType atype, std::int64_t lda, const void* b,
                    cudaDataType btype, std::int64_t ldb, const void* beta, void* c,
                    std::int64_t ldc) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  const auto* h = reinterpret_cast<const handle_state*>(handle);
  // The argument checks cuBLAS documents for cublasGemmEx.
  if (!valid_operation(transa) || !valid_operation(transb) || m < 0 || n < 0 || k < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  const std::int64_t rows_a = transa == CUBLAS_OP_N ? m : k;
  const std::int64_t rows_b = transb == CUBLAS_OP_N ? k : n;
  if (lda < (rows_a > 1 ? rows_a : 1) || ldb < (rows_b > 1 ? rows_b : 1) || ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS; // nothing to do
  if (!alpha || !beta || !c || (k > 0 && (!a || !b))) return CUBLAS_STATUS_INVALID_VALUE;
  if (!declare_model()) return CUBLAS_STATUS_INTERNAL_ERROR;
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const double rate =
      tensor_type(atype) && tensor_type(btype) ? tensor_flop_per_ns : other_flop_per_ns;
  constexpr double longest_ns = 3.6e12; // an hour: far beyond any GEMM, and no overflow
  const double compute_ns = flops / rate;
  unsigned long long ns =
      floor_ns + static_cast<unsigned long long>(compute_ns < longest_ns ? compute_ns : longest_ns);
  void* args[] = {&ns};
  // On the handle's stream (the calling thread's current device must be the handle's, as in
  // cuBLAS; the stream names the context here).
  if (cudaLaunchKernel(reinterpret_cast<const void*>(&gemm_kernel), dim3(1), dim3(1), args, 0,
                       h->stream) != cudaSuccess)
    return CUBLAS_STATUS_EXECUTION_FAILED;
  return CUBLAS_STATUS_SUCCESS;
}

} // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  // As cuBLAS does, create the current device's context (or fail as the runtime does).
  if (cudaFree(nullptr) != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!declare_model()) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto* h = new (std::nothrow) handle_state;
  if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
  *handle = reinterpret_cast<cublasHandle_t>(h);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete reinterpret_cast<handle_state*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int* version) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!version) return CUBLAS_STATUS_INVALID_VALUE;
  *version = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  reinterpret_cast<handle_state*>(handle)->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!stream) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = reinterpret_cast<const handle_state*>(handle)->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  reinterpret_cast<handle_state*>(handle)->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = reinterpret_cast<const handle_state*>(handle)->math;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* a, cudaDataType atype, int lda, const void* b,
                            cudaDataType btype, int ldb, const void* beta, void* c, cudaDataType,
                            int ldc, cublasComputeType_t, cublasGemmAlgo_t) {
  return gemm(handle, transa, transb, m, n, k, alpha, a, atype, lda, b, btype, ldb, beta, c, ldc);
}

cublasStatus_t cublasGemmEx_64(cublasHandle_t handle, cublasOperation_t transa,
                               cublasOperation_t transb, std::int64_t m, std::int64_t n,
                               std::int64_t k, const void* alpha, const void* a, cudaDataType atype,
                               std::int64_t lda, const void* b, cudaDataType btype,
                               std::int64_t ldb, const void* beta, void* c, cudaDataType,
                               std::int64_t ldc, cublasComputeType_t, cublasGemmAlgo_t) {
  return gemm(handle, transa, transb, m, n, k, alpha, a, atype, lda, b, btype, ldb, beta, c, ldc);
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
  case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
  case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
  case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
  case CUBLAS_STATUS_LICENSE_ERROR: return "an error was detected when checking the license";
  }
  return "unknown error";
}

} // extern "C"
