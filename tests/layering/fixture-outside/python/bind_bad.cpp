// A fixture for check_no_detail.cmake.
#include <gpushare/cuda/detail/calls.hpp>
namespace cu = gpushare::cuda;
void f() {
  namespace d = cu::detail;
  (void)gpushare::detail::wait_forever_ns;
  const char* s = "the details"; // "detail" in a word or a string is not a use
}
