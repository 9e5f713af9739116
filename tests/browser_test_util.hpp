// SPDX-License-Identifier: Apache-2.0
// What the live page's browser tests share (mp-cli-page): where chromium is, a scratch profile
// directory, and a headless chromium driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: JSON messages ending in a NUL byte, the browser reading fd 3 and
// writing fd 4), so a test can read the live DOM of a page while its script keeps running, with
// no reload and no WebSocket client.
#pragma once

#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "support/json.hpp"

namespace browser_test {

/// Chromium's path: $GPUSHARE_CHROMIUM, else Debian's chromium; nullopt where none runs.
inline std::optional<std::string> chromium_path() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("GPUSHARE_CHROMIUM"); env != nullptr && *env != '\0')
    candidates.emplace_back(env);
  candidates.insert(candidates.end(), {"/usr/bin/chromium", "/usr/bin/chromium-browser"});
  for (const auto& c : candidates)
    if (::access(c.c_str(), X_OK) == 0) return c;
  return std::nullopt;
}

/// Chromium's path, or nullopt after a GPUSHARE_SKIP message saying how to install it (the test
/// then returns: CTest reports it skipped).
inline std::optional<std::string> chromium_or_skip() {
  auto path = chromium_path();
  if (!path)
    MESSAGE("GPUSHARE_SKIP: chromium is not installed (Debian: apt-get install -y "
            "--no-install-recommends chromium; or set GPUSHARE_CHROMIUM to a chromium binary)");
  return path;
}

/// A scratch directory (chromium's profile), removed at the end.
struct scratch_dir {
  std::string path;
  scratch_dir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gpushare-page-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
};

/// Headless chromium showing one page, driven over the DevTools protocol on a pipe. The browser
/// is killed (its process group) and reaped when this goes out of scope.
class live_browser {
public:
  live_browser(const std::string& chromium, const std::string& url) {
    int to[2], from[2];
    REQUIRE(::pipe2(to, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(from, O_CLOEXEC) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) start_child(chromium, url, profile_.path, to[0], from[1]);
    ::close(to[0]);
    ::close(from[1]);
    out_ = to[1];
    in_ = from[0];
    attach();
  }
  ~live_browser() {
    ::close(out_); // the browser exits when its pipe closes; the group kill makes sure
    ::kill(-pid_, SIGKILL);
    ::close(in_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  live_browser(const live_browser&) = delete;
  live_browser& operator=(const live_browser&) = delete;

  /// The value of the JavaScript expression `js` in the page (returned by value), as JSON.
  test::json evaluate(const std::string& js) {
    test::json q = call("Runtime.evaluate",
                        "{\"expression\":" + quoted(js) + ",\"returnByValue\":true}", session_);
    const test::json& r = q["result"];
    REQUIRE_MESSAGE(!r.has("exceptionDetails"), "the page threw evaluating " << js);
    return r["result"].has("value") ? r["result"]["value"] : test::json{};
  }

private:
  /// In the child: fds 3 and 4 become the pipe, nothing else stays open, chromium replaces it.
  [[noreturn]] static void start_child(const std::string& chromium, const std::string& url,
                                       const std::string& profile_dir, int read_end,
                                       int write_end) {
    ::setpgid(0, 0);
    if (::dup2(read_end, 100) < 0 || ::dup2(write_end, 101) < 0 || ::dup2(100, 3) < 0 ||
        ::dup2(101, 4) < 0)
      ::_exit(127);
    const int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
    for (int fd = 5; fd < 1024; ++fd) ::close(fd);
    const std::string profile = std::string("--user-data-dir=").append(profile_dir);
    ::execl(chromium.c_str(), chromium.c_str(), "--headless", "--no-sandbox", "--disable-gpu",
            "--no-first-run", "--disable-dev-shm-usage", "--disable-extensions",
            "--remote-debugging-pipe", profile.c_str(), url.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }

  void attach() {
    std::string target;
    for (int tries = 0; tries < 100 && target.empty(); ++tries) {
      const test::json t = call("Target.getTargets", "{}");
      const test::json& infos = t["result"]["targetInfos"];
      for (std::size_t i = 0; i < infos.size(); ++i)
        if (infos[i]["type"].str() == "page") target = infos[i]["targetId"].str();
      if (target.empty()) ::usleep(100'000);
    }
    REQUIRE_MESSAGE(!target.empty(), "chromium opened no page");
    const test::json a =
        call("Target.attachToTarget", "{\"targetId\":" + quoted(target) + ",\"flatten\":true}");
    session_ = a["result"]["sessionId"].str();
    REQUIRE(!session_.empty());
  }

  /// Sends one command and returns its answer (events and other answers are skipped).
  test::json call(const std::string& method, const std::string& params,
                  const std::string& session = "") {
    const int id = ++last_id_;
    std::string msg =
        "{\"id\":" + std::to_string(id) + ",\"method\":\"" + method + "\",\"params\":" + params;
    if (!session.empty()) msg += ",\"sessionId\":" + quoted(session);
    msg += "}";
    msg.push_back('\0');
    for (std::size_t done = 0; done < msg.size();) {
      const ssize_t n = ::write(out_, msg.data() + done, msg.size() - done);
      REQUIRE_MESSAGE(n > 0, "chromium closed its DevTools pipe");
      done += static_cast<std::size_t>(n);
    }
    const std::string needle = "{\"id\":" + std::to_string(id) + ",";
    for (;;) {
      const std::string m = next_message();
      if (m.rfind(needle, 0) != 0) continue;
      test::json j = test::parse_json(m);
      REQUIRE_MESSAGE(!j.has("error"), method << " failed: " << m);
      return j;
    }
  }

  /// The next NUL-terminated message from the browser (fails after 60 s of silence).
  std::string next_message() {
    for (;;) {
      if (const auto end = buffer_.find('\0'); end != std::string::npos) {
        std::string m = buffer_.substr(0, end);
        buffer_.erase(0, end + 1);
        return m;
      }
      pollfd p{in_, POLLIN, 0};
      REQUIRE_MESSAGE(::poll(&p, 1, 60'000) == 1, "chromium said nothing for 60 s");
      char chunk[65536];
      const ssize_t n = ::read(in_, chunk, sizeof chunk);
      REQUIRE_MESSAGE(n > 0, "chromium closed its DevTools pipe");
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }

  /// `s` as a JSON string literal.
  static std::string quoted(const std::string& s) {
    std::string q = "\"";
    for (const char c : s) {
      if (c == '"' || c == '\\') {
        q += '\\';
        q += c;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        char u[8];
        std::snprintf(u, sizeof u, "\\u%04x", static_cast<unsigned>(c));
        q += u;
      } else {
        q += c;
      }
    }
    return q + "\"";
  }

  scratch_dir profile_; // removed after the browser was reaped (members go after the body)
  pid_t pid_ = -1;
  int out_ = -1, in_ = -1;
  int last_id_ = 0;
  std::string session_;
  std::string buffer_;
};

} // namespace browser_test
