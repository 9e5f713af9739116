// Fixture for tests/cudasim/check_independent.cmake's self-test: names gpushare/ only in prose
// ("include/gpushare/cuda/"), which is allowed. Never compiled.
#include <cuda_runtime_api.h>
