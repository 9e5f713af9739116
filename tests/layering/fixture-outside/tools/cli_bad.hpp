// A fixture for check_no_detail.cmake: its offences are in ../expected.txt.
#include "cli_args.hpp"
#include <gpushare/detail/parse.hpp>
#include <gpushare/text.hpp>
namespace gpushare {
inline std::uint64_t f(std::uint64_t a) { return detail::sat_add(a, 1); }
inline std::uint64_t g(std::uint64_t a) { return saturating_add(a, 1); } // not detail::x here
namespace exporter_detail {
inline int h() { return 1; }
} // namespace exporter_detail
inline int k() { return exporter_detail::h(); }
} // namespace gpushare
