// SPDX-License-Identifier: Apache-2.0
// Included (with runtime_names_end.hpp) around the code of every CUDA-layer header: the CUDA
// runtime calls the layer makes always name the runtime's plain entry points.
//
// Why. A translation unit compiled with --default-stream per-thread (nvcc), or with
// CUDA_API_PER_THREAD_DEFAULT_STREAM defined, sees cuda_runtime_api.h map calls such as
// cudaEventRecord to their _ptsz variants by macro. gpushare's functions are inline: without
// this, their bodies would call different functions in different translation units (an ODR
// violation: the linker keeps one body, chosen arbitrarily). The two variants differ only in
// what stream handle 0 means: to gpushare, 0 always means the legacy default stream. Default
// stream arguments are GPUSHARE_CUDA_DEFAULT_STREAM (cuda/default_stream.hpp), evaluated where
// the call is written, so they name the default stream of the caller's translation unit; a
// per-thread translation unit that passes a stream explicitly passes cudaStreamPerThread.
//
// No include guard: each header includes it after its own includes (cuda_runtime_api.h must
// have defined the macros already) and includes runtime_names_end.hpp at its end.
#pragma push_macro("cudaEventRecord")
#undef cudaEventRecord
#pragma push_macro("cudaFreeAsync")
#undef cudaFreeAsync
#pragma push_macro("cudaMallocFromPoolAsync")
#undef cudaMallocFromPoolAsync
#pragma push_macro("cudaStreamIsCapturing")
#undef cudaStreamIsCapturing
#pragma push_macro("cudaStreamSynchronize")
#undef cudaStreamSynchronize
#pragma push_macro("cudaGetDriverEntryPointByVersion")
#undef cudaGetDriverEntryPointByVersion
#pragma push_macro("cudaStreamQuery")
#undef cudaStreamQuery
#pragma push_macro("cudaMallocAsync")
#undef cudaMallocAsync
#pragma push_macro("cudaEventRecordWithFlags")
#undef cudaEventRecordWithFlags

// In a per-thread translation unit the runtime header declares only the _ptsz names (its own
// declarations went through the macros): declare the plain entry points, which the runtime
// library exports in every build.
extern "C" {
cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t CUDARTAPI cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                               unsigned int flags);
cudaError_t CUDARTAPI cudaFreeAsync(void* devPtr, cudaStream_t hStream);
cudaError_t CUDARTAPI cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream);
cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool,
                                              cudaStream_t stream);
cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t stream,
                                            enum cudaStreamCaptureStatus* pCaptureStatus);
cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream);
cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream);
cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(
    const char* symbol, void** funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult* driverStatus);
}
