// SPDX-License-Identifier: Apache-2.0
// The gpushare command-line tool: status, top, set, evict, clean and metrics for the tables of
// this machine, and run for programs under a budget. See docs/cli.md.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gpushare/error.hpp>
#include <gpushare/version.hpp>

#include "cli_args.hpp"
#include "cli_clean.hpp"
#include "cli_errors.hpp"
#include "cli_evict.hpp"
#include "cli_exporter.hpp"
#include "cli_run.hpp"
#include "cli_run_usage.hpp"
#include "cli_set.hpp"
#include "cli_status.hpp"
#include "cli_top.hpp"
#include "cli_usage.hpp"

// A ThreadSanitizer build of the tool: Debian's libcpp-httplib.so is not instrumented, so TSan
// cannot see its synchronisation (its function-local statics' guards, for one) and reports the
// accesses its interceptors make from inside it as races. Those calls are not checked; ours are.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GPUSHARE_CLI_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define GPUSHARE_CLI_TSAN 1
#endif
#if defined(GPUSHARE_CLI_TSAN) && defined(GPUSHARE_CLI_HTTPLIB) && GPUSHARE_CLI_HTTPLIB
extern "C" const char* __tsan_default_suppressions() {
  return "called_from_lib:libcpp-httplib.so\n";
}
#endif

namespace {

using namespace gpushare::cli;

struct command {
  std::string_view name;
  int (*run)(std::span<const std::string>);
  std::string_view usage;
};

constexpr command commands[] = {
    {"status", run_status, status_usage}, {"top", run_top, top_usage},
    {"set", run_set, set_usage},          {"evict", run_evict, evict_usage},
    {"clean", run_clean, clean_usage},    {"metrics", run_metrics, metrics_usage},
    {"run", run_run, run_usage},
};

const command* find_command(std::string_view name) {
  for (const auto& c : commands)
    if (c.name == name) return &c;
  return nullptr;
}

constexpr std::string_view command_names[] = {"status", "top",     "set", "evict",
                                              "clean",  "metrics", "run", "help"};
constexpr std::string_view main_options[] = {"--help", "--version"};

/// "unknown command 'stat'; did you mean 'status'?", or the same for an option.
std::string unknown_word(const std::string& word) {
  if (!word.empty() && word[0] == '-') {
    // "-status" or "--stat" may be a command typed as an option.
    std::string text = "unknown option '" + word + "'";
    const std::string suggestion = did_you_mean(word, main_options);
    return text + (suggestion.empty() ? did_you_mean(word, command_names) : suggestion);
  }
  return "unknown command '" + word + "'" + did_you_mean(word, command_names);
}

void print_stderr(const std::string& text) { std::fputs(text.c_str(), stderr); }

/// A bad command line: the error, then the usage, on stderr; exit code 2.
int usage_failure(const std::string& prefix, const std::string& message, std::string_view usage) {
  print_stderr(prefix + ": error: " + message + "\n\n" + std::string(usage));
  return 2;
}

/// A bad command line of a subcommand: the error, its synopsis (the usage's first paragraph) and
/// where the rest is, so that the error stays on screen (issue 42, B8: `run` printed 75 lines
/// after it); exit code 2.
int subcommand_usage_failure(const std::string& prefix, const std::string& message,
                             std::string_view usage) {
  const std::size_t end = usage.find("\n\n");
  print_stderr(prefix + ": error: " + message + "\n\n" + std::string(usage.substr(0, end)) +
               "\n(`" + prefix + " --help` shows every option)\n");
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> words(argv + 1, argv + argc);
  if (words.empty()) return usage_failure("gpushare", "no command given", main_usage);
  const std::string& first = words[0];
  if (first == "--version") {
    if (words.size() > 1)
      return usage_failure("gpushare", "--version takes no arguments, got '" + words[1] + "'",
                           main_usage);
    write_stdout("gpushare " GPUSHARE_VERSION_STRING " (table layout " +
                 std::to_string(gpushare::table_layout_version) + ")\n");
    return 0;
  }
  // `help [command]`, `--help [command]`, `-h [command]`.
  if (first == "help" || first == "-h" || first == "--help") {
    if (words.size() > 2)
      return usage_failure("gpushare", "unexpected extra argument '" + words[2] + "'", main_usage);
    if (words.size() == 1 || words[1] == "help") {
      write_stdout(std::string(main_usage));
      return 0;
    }
    if (const command* c = find_command(words[1])) {
      write_stdout(std::string(c->usage));
      return 0;
    }
    return usage_failure("gpushare", unknown_word(words[1]), main_usage);
  }
  const command* c = find_command(first);
  if (c == nullptr) return usage_failure("gpushare", unknown_word(first), main_usage);
  const std::string prefix = "gpushare " + std::string(c->name);
  try {
    return c->run(std::span<const std::string>(words).subspan(1));
  } catch (const usage_error& e) {
    return subcommand_usage_failure(prefix, e.what(), c->usage);
  } catch (const runtime_failure& e) {
    print_stderr(prefix + ": error: " + e.what() + "\n");
  } catch (const gpushare::error& e) {
    print_stderr(prefix + ": error: " + e.what() + "\n");
  } catch (const std::exception& e) {
    print_stderr(prefix + ": error: " + e.what() + "\n");
  }
  return 1;
}
