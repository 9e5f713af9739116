// Fixture for tests/cudasim/check_independent.cmake's self-test: includes gpushare's headers, as
// no file under tools/cudasim may. Never compiled.
#include <gpushare/gpushare.hpp>
