// SPDX-License-Identifier: Apache-2.0
// The help texts of the gpushare tool, one per subcommand.
#pragma once

#include <string_view>

namespace gpushare::cli {

inline constexpr std::string_view main_usage =
    R"(Usage: gpushare <command> [options]

Shows and administers the gpushare tables on this machine (files /dev/shm/gpushare.*, or in a
table directory).

Commands:
  status    every table and its live sessions (--json for scripts)
  top       the same, refreshed until Ctrl-C
  set       change a live session's share, priority or limits (or a table's default guard bound)
  evict     end a session stopped or hung inside a guard, so the others get the device
  clean     remove tables that no live session uses
  metrics   Prometheus text format, for node exporter's textfile collector or over HTTP
            (--listen)
  run       run a program that does not use gpushare under a memory budget

Options:
  -h, --help     this text; `gpushare <command> --help` describes a command
  --version      print the version

Every command looks at the tables of one directory: --dir DIR, else GPUSHARE_DIR, else /dev/shm;
and of every domain, or of one: --domain D, else the domain in GPUSHARE_DOMAIN when it is set
(as a session's default domain is); --all-domains ignores it.

Exit codes: 0 success, 1 run-time error, 2 bad command line (`run` returns the program's own
code; see `gpushare run --help`). See docs/cli.md.
)";

inline constexpr std::string_view status_usage =
    R"(Usage: gpushare status [--dir DIR] [--domain D | --all-domains] [--json] [--interval S]

Lists every table on this machine with its capacity and free memory, and each live session:
name, pid, priority, share, limits, reserved memory, device time and state. Tables that cannot
be read (another user's, another gpushare version's, corrupt) are listed with the reason.

Options:
  --dir DIR      the table directory (default: GPUSHARE_DIR, else /dev/shm)
  --domain D     only tables of domain D (default: GPUSHARE_DOMAIN when it is set)
  --all-domains  tables of every domain, even when GPUSHARE_DOMAIN is set
  --json         machine-readable output (schema in docs/cli.md)
  --interval S   time between the two readings used for the recent device-time % (default
                 0.2 s; 0 skips it; at most 1min). Seconds, or a number with a unit ns,
                 us, ms, s, min or h: 500ms
)";

inline constexpr std::string_view top_usage =
    R"(Usage: gpushare top [--dir DIR] [--domain D | --all-domains] [--interval S] [--iterations N]
                    [--width N] [--ascii]

Shows what `gpushare status` shows, refreshed every interval until Ctrl-C, with each session's
share of device time over the last interval (RECENT) and over the last minute (LAST MINUTE, a
sparkline: one glyph per slice of the minute, from the lowest (up to 12.5% of the device, idle
too) to a full block (over 87.5%); blank before the session or top started). In a terminal too
narrow for the whole status, a compact view: name, state, share, recent and the minute.

Options:
  --dir DIR        the table directory (default: GPUSHARE_DIR, else /dev/shm)
  --domain D       only tables of domain D (default: GPUSHARE_DOMAIN when it is set)
  --all-domains    tables of every domain, even when GPUSHARE_DOMAIN is set
  --interval S     refresh interval (default 1 s; 10ms to 1h): seconds, or 500ms, 2min
  --iterations N   stop after N refreshes
  --width N        fit every line to N columns (default: the terminal's width; for a pipe,
                   COLUMNS if set, else no limit)
  --ascii          draw the history with ASCII characters (the default when the locale is not
                   UTF-8 or the output is not a terminal)
)";

inline constexpr std::string_view set_usage =
    R"(Usage: gpushare set <session> [--table T] [--dir DIR] [--domain D | --all-domains] [settings...]
       gpushare set --table-default [--max-guard DUR|none] [--capacity SIZE|unlimited]
                    [--table T] [--domain D | --all-domains]

Changes the settings of a live session. <session> is a session name, or a slot number (digits
only; it then needs --table when there is more than one table). To give a name made only of
digits, write it as name:<digits>.

With --table-default in place of <session>, sets what belongs to tables, in every table
selected (all of them, or those of --domain, or the one of --table); only the owner of a table's
file may:
  --max-guard DUR|none       the default guard bound: of the sessions that set none of their own
  --capacity SIZE|unlimited  the capacity (one table only: give --table), never below what is
                             committed; sessions without a memory limit of their own follow it

Where:
  --table T       the table: its key (GPU-8f1e...), or its object name (/gpushare....)
  --dir DIR       the table directory (default: GPUSHARE_DIR, else /dev/shm)
  --domain D      only tables of domain D (default: GPUSHARE_DOMAIN when it is set)
  --all-domains   tables of every domain, even when GPUSHARE_DOMAIN is set

Settings (the forms of the GPUSHARE_* environment variables):
  --share N                  1 to 1000000
  --priority P               low, normal, high, critical, or 0 to 7
  --compute-limit X%         above 0% and at most 100%, e.g. 30%
  --memory-limit SIZE        bytes, 512MiB, 4GiB, or a percentage of the capacity (20%)
  --memory-guarantee SIZE
  --quantum DUR              1us to 10s with a unit (ns, us, ms, s, min, h): 500us, 5ms
  --handover H               guard or yield
  --max-guard DUR|none       guard bound, 1ms to 1h with a unit (30s, 500ms, 2min): a holder that
                             runs one guard this long while others wait loses the device to
                             them; none: no bound of its own (the table's default applies)
  --compute-guarantee X%|none
                             share of wall time it gets on the device while it wants it, above
                             every priority class (10%); none: strict priority
  --pause-hold R|none        idle it may keep through short pauses while below its share, in
                             times its device time, 0 to 100 (2, 0.5); none: never
)";

inline constexpr std::string_view evict_usage =
    R"(Usage: gpushare evict <session> [--table T] [--dir DIR] [--domain D | --all-domains]

Ends a live session at once, as if its process had died: its hold on the device passes to the
next waiting session, its reservations go back to the table, and its waiting threads wake. The
process is not signalled; its next gpushare call fails and says it was evicted.

When to use it: a session stopped or hung inside a guard (SIGSTOP, a debugger, a paused
container, a kernel that never returns), which `gpushare status` flags as "stopped or hung?".
Its process is alive, so liveness never frees the device, and every other session waits for it.
(A guard bound, `gpushare set <session> --max-guard 30s` or `--table-default`, makes the table
revoke such a hold by itself.)

Its process keeps whatever device memory it allocated, which the table no longer counts: evict
a process that will be killed or restarted.

<session> is a session name, name:<digits> for a name made only of digits, or a slot number
(which needs --table when there is more than one table).

Where:
  --table T       the table: its key (GPU-8f1e...), or its object name (/gpushare....)
  --dir DIR       the table directory (default: GPUSHARE_DIR, else /dev/shm)
  --domain D      only tables of domain D (default: GPUSHARE_DOMAIN when it is set)
  --all-domains   tables of every domain, even when GPUSHARE_DOMAIN is set

Only the owner of the table's file, or root, may evict.
)";

inline constexpr std::string_view clean_usage =
    R"(Usage: gpushare clean [--dir DIR] [--domain D | --all-domains] [--dry-run] [--force]
       gpushare clean --cudasim [--dry-run] [--force] [NAME...]

Removes tables that no live session uses. A table with a live session is never removed unless
--force is given.

Options:
  --dir DIR      the table directory (default: GPUSHARE_DIR, else /dev/shm)
  --domain D     only tables of domain D (default: GPUSHARE_DOMAIN when it is set)
  --all-domains  tables of every domain, even when GPUSHARE_DOMAIN is set
  --dry-run      say what would be removed; remove nothing
  --force        also remove your own tables with live sessions, and your own objects that cannot
                 be read (corrupt, another layout). Dangerous: processes still using a removed
                 table keep using it, but are no longer arbitrated with processes that start
                 later

Only objects you own are removed. Another user's objects are kept, except that root with --force
removes another user's table when it has verified, under the table's own lock, that it is a valid
gpushare table that no session uses; root never removes another user's object that is not such a
table (junk, an unfinished creation, a table in use), with or without --force.

With --cudasim, removes instead the simulated runtime's states (/dev/shm/NAME, NAME as in
CUDASIM_STATE; default: every one of yours) that no running program uses. --force also removes
one a program uses, or one an old cudasim version made (state version 2, whose programs did not
say whether they use it).
)";

inline constexpr std::string_view metrics_usage =
    R"(Usage: gpushare metrics [--dir DIR] [--domain D | --all-domains] [--listen [ADDR:]PORT
                         [--allow-host NAMES] [--token-file FILE]]

Prints every table's and every live session's figures in the Prometheus text format. For node
exporter's textfile collector:

  gpushare metrics > /var/lib/node_exporter/textfile/gpushare.prom.$$ &&
    mv /var/lib/node_exporter/textfile/gpushare.prom.$$ /var/lib/node_exporter/textfile/gpushare.prom

With --listen, serves them over HTTP instead, read afresh on every scrape, until SIGINT or
SIGTERM (then exit code 0): GET /metrics is what `gpushare metrics` would print at that moment,
GET / a live page of the tables (refreshed every 2 s from GET /status.json, the document of
`gpushare status --json --interval 0`); other paths get 404, other methods 405. It prints one
line, "serving metrics on http://ADDR:PORT/metrics", once it listens. No privileges are needed.

Options:
  --dir DIR           the table directory (default: GPUSHARE_DIR, else /dev/shm)
  --domain D          only tables of domain D (default: GPUSHARE_DOMAIN when it is set)
  --all-domains       tables of every domain, even when GPUSHARE_DOMAIN is set
  --listen ADDR:PORT  serve over HTTP: PORT alone listens on 127.0.0.1 (this machine only);
                      0.0.0.0:PORT on every IPv4 interface, [::]:PORT or [IPV6-ADDR]:PORT for
                      IPv6. Numeric addresses only. A request gets 5 s in all and 16 KiB of
                      head (408, 431 past them); at most 64 connections per address and 256
                      in all (503 past them); 8 requests are answered at once
  --allow-host NAMES  host names (comma-separated) the exporter answers to, besides its IP
                      addresses and localhost: a request whose Host header names another gets
                      421, so that a page in a browser on this machine cannot read it through a
                      name that resolves here (DNS rebinding)
  --token-file FILE   GET /metrics and /status.json need "Authorization: Bearer <token>", the
                      token being FILE's one line (mode 600; e.g. `openssl rand -hex 32`); 401
                      without it. The page at / asks with the token after #token= in its address

What --listen exposes: every session's name, pid, priority, share, memory and device time of
the tables listed (and pod identity where set). Serve it on 127.0.0.1 (the default) unless
something else must scrape it; on 0.0.0.0 use --token-file, and TLS through a proxy in front
(docs/kubernetes.md).

Exit codes: 0 success (with --listen: stopped by SIGINT or SIGTERM); 1 the tables cannot be
listed, or the address cannot be bound (in use, not this machine's, a port below 1024 without
privileges); 2 a bad command line, or --listen in a tool built without cpp-httplib (Debian:
libcpp-httplib-dev).
)";

} // namespace gpushare::cli
