// SPDX-License-Identifier: Apache-2.0
// Restores the runtime's per-thread-default-stream macros hidden by runtime_names_begin.hpp.
// No include guard (see runtime_names_begin.hpp).
#pragma pop_macro("cudaEventRecord")
#pragma pop_macro("cudaFreeAsync")
#pragma pop_macro("cudaMallocFromPoolAsync")
#pragma pop_macro("cudaStreamIsCapturing")
#pragma pop_macro("cudaStreamSynchronize")
#pragma pop_macro("cudaGetDriverEntryPointByVersion")
#pragma pop_macro("cudaStreamQuery")
#pragma pop_macro("cudaMallocAsync")
#pragma pop_macro("cudaEventRecordWithFlags")
