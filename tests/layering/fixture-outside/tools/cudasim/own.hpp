// cudasim is a runtime of its own: its detail namespace is not gpushare's.
namespace cudasim::detail {
inline int x = 0;
}
inline int y() { return cudasim::detail::x; }
