# SPDX-License-Identifier: Apache-2.0
"""gpushare's CUDA layer: DeviceSession and its stream guard.

Needs the extension gpushare._gpushare_cuda, built where CMake found the CUDA toolkit, and a CUDA
runtime (libcudart, or the simulated one: docs/cudasim.md) when imported. Streams and device
pointers are ints: `s.kernel(torch.cuda.current_stream().cuda_stream)`.
"""

try:
    from ._gpushare_cuda import DeviceInfo, DeviceKernelGuard, DeviceSession
except ImportError as e:  # not built, or no libcudart on the loader's path
    raise ImportError(
        "gpushare.cuda is not available: " + str(e) + ". It is built where CMake finds the "
        "CUDA toolkit, and needs libcudart.so (the CUDA runtime, or the simulated one from "
        "<build>/tools/cudasim/lib on LD_LIBRARY_PATH) when imported."
    ) from e

__all__ = ["DeviceInfo", "DeviceKernelGuard", "DeviceSession"]
