// SPDX-License-Identifier: Apache-2.0
// Fuzz target: arbitrary bytes as a table's shared object. Attaching must refuse what is not a
// valid table with a typed error; a table that passes validation, whatever its other bytes say,
// must survive a snapshot, a join, a reservation attempt and a leave without crashing, hanging or
// reading outside the mapping.
//
// The pthread mutex inside the header is the C library's business, not gpushare's: it is
// re-initialised before use, so the fuzzer spends its time on the bytes gpushare interprets.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include <gpushare/gpushare.hpp>

namespace {

const std::string& key() {
  static const std::string k = "attach" + std::to_string(::getpid());
  return k;
}

const std::string& object_name() {
  static const std::string n =
      gpushare::table_name("gpusharefuzz", key(), gpushare::table_access::user);
  return n;
}

bool write_object(const std::uint8_t* data, std::size_t size) {
  const int fd = ::shm_open(object_name().c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
  if (fd < 0) return false;
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return done == size;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > (1u << 20) || !write_object(data, size)) return 0;
  try {
    auto m = gpushare::detail::mapped_table::open_existing(object_name(), 0);
    m.view().header->lock.store(0); // a garbage lock word is taken over after 2 ms: too slow here
    {
      gpushare::detail::table_core core(std::move(m));
      (void)gpushare::detail::take_snapshot(core);
    }
    gpushare::session_options o;
    o.domain = "gpusharefuzz";
    o.name = "fuzz";
    o.open_timeout = std::chrono::milliseconds(0);
    gpushare::session s(key(), o);
    (void)s.try_reserve(4096);
    (void)s.snapshot();
    s.yield();
    s.leave();
  } catch (const gpushare::error&) {
    // A typed refusal is the expected answer to most inputs.
  }
  ::shm_unlink(object_name().c_str());
  return 0;
}
