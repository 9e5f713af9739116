// SPDX-License-Identifier: Apache-2.0
// Tables of a test's own, removed when the test ends: a whole domain of one's own (temp_domain:
// the CLI and trust tests, which list or scan a domain), or one table of a unique key in the
// shared test domain "gpusharetest" (unique_table: most tests).
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include <gpushare/discovery.hpp>
#include <gpushare/gpushare.hpp>
#include <gpushare/text.hpp>

namespace test {

/// A domain no other test or run uses, "<prefix><pid>-<n>"; every table in it is removed when it
/// goes out of scope.
class temp_domain {
public:
  explicit temp_domain(std::string_view prefix) {
    static std::atomic<int> counter{0};
    name_ = prefix;
    name_ += std::to_string(::getpid());
    name_ += '-';
    name_ += std::to_string(counter++);
  }
  ~temp_domain() {
    for (const auto& e : gpushare::list_tables(name_)) ::shm_unlink(e.object_name.c_str());
  }
  temp_domain(const temp_domain&) = delete;
  temp_domain& operator=(const temp_domain&) = delete;

  const std::string& name() const { return name_; }
  /// Options for a session `session_name` of this domain, with `capacity` (0: the device's).
  gpushare::session_options options(const std::string& session_name,
                                    std::uint64_t capacity = 0) const {
    gpushare::session_options o;
    o.domain = name_;
    o.name = session_name;
    o.capacity = capacity;
    return o;
  }
  /// The shared-memory name of table `key` ("/gpushare.<domain>.u<uid>.<key>").
  std::string object_name(const std::string& key,
                          gpushare::table_access access = gpushare::table_access::user) const {
    return gpushare::table_name(name_, key, access);
  }
  /// The file of table `key` under /dev/shm.
  std::string path(const std::string& key) const { return gpushare::table_file(object_name(key)); }
  bool exists(const std::string& key) const { return ::access(path(key).c_str(), F_OK) == 0; }

private:
  std::string name_;
};

/// A table key unique to this test run in domain "gpusharetest"; the table object is unlinked when
/// it goes out of scope.
class unique_table {
public:
  explicit unique_table(const std::string& what, std::uint64_t capacity = 0) {
    static std::atomic<int> counter{0};
    key_ = "test-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    opts_.capacity = capacity;
    opts_.domain = domain;
  }
  ~unique_table() {
    for (auto access : {gpushare::table_access::user, gpushare::table_access::group})
      ::shm_unlink(gpushare::table_name(domain, key_, access).c_str());
  }
  unique_table(const unique_table&) = delete;
  unique_table& operator=(const unique_table&) = delete;

  static constexpr const char* domain = "gpusharetest";

  const std::string& key() const { return key_; }
  std::string object_name() const {
    return gpushare::table_name(domain, key_, gpushare::table_access::user);
  }
  /// Options for a session of this table (domain and capacity preset).
  gpushare::session_options options(const std::string& name = "test") const {
    gpushare::session_options o = opts_;
    o.name = name;
    return o;
  }
  gpushare::session join(const std::string& name = "test") const {
    return gpushare::session(key_, options(name));
  }
  gpushare::table open() const {
    return gpushare::table::open(key_, gpushare::open_mode::open_or_create, opts_);
  }

private:
  std::string key_;
  gpushare::session_options opts_;
};

} // namespace test
