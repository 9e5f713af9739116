// SPDX-License-Identifier: Apache-2.0
// Writes the seed corpus of fuzz_table (valid small tables and near-misses) into corpus/table.
// Run by hand after a layout change:
//   g++ -std=c++20 -I include tests/fuzz/make_seeds.cpp -o /tmp/make_seeds && /tmp/make_seeds
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gpushare/gpushare.hpp>

using namespace gpushare::detail;

namespace {

std::vector<unsigned char> table(std::uint32_t slots) {
  std::vector<unsigned char> b(table_size(slots), 0);
  auto* h = reinterpret_cast<table_header*>(b.data());
  h->prefix.magic = table_magic;
  h->prefix.layout_version = gpushare::table_layout_version;
  h->prefix.init_state.store(init_state_ready);
  h->prefix.header_size = sizeof(table_header);
  h->prefix.slot_size = sizeof(slot_record);
  h->prefix.slot_count = slots;
  h->prefix.lock_size = table_lock_size;
  h->prefix.total_size = table_size(slots);
  h->capacity = 1ull << 30;
  std::strcpy(h->key, "seed");
  std::strcpy(h->domain, "gpusharefuzz");
  return b;
}

slot_record& slot(std::vector<unsigned char>& b, std::uint32_t i) {
  return reinterpret_cast<slot_record*>(b.data() + sizeof(table_header))[i];
}

void write(const std::string& name, const std::vector<unsigned char>& b) {
  const std::string path = "tests/fuzz/corpus/table/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    std::perror(path.c_str());
    return;
  }
  std::fwrite(b.data(), 1, b.size(), f);
  std::fclose(f);
}

} // namespace

int main() {
  write("empty-2-slots", table(2));
  {
    auto b = table(2);
    auto& s = slot(b, 0);
    s.state.store(slot_active);
    s.generation = 3;
    s.pid = 1;
    std::strcpy(s.name, "dead-owner");
    std::strcpy(s.platform.pod, "pod-a");
    std::strcpy(s.platform.pod_namespace, "team-a");
    s.platform.present = platform_has_job | platform_has_step;
    s.platform.slurm_job_id = 7;
    s.platform.slurm_step_id = gpushare::slurm_batch_step;
    std::strcpy(s.group.name, "pod-a");
    s.group.memory_limit = 1ull << 29;
    s.group.quantum_ns = 5'000'000;
    s.group.share = 2;
    s.settings.priority = 2;
    s.settings.share = 3;
    s.settings.compute_limit_ppm = 500'000;
    s.settings.memory_limit = 1ull << 29;
    s.memory.reserved = 1ull << 28;
    s.reclaim.reclaimable = 1ull << 27; // holds a cache, and is asked for some of it
    s.reclaim.asked.store(1ull << 26);
    s.reclaim.deadline_ns = 2'000'000'000;
    s.reclaim.seq.store(1);
    s.reclaim.asked_by = 2;
    s.reclaim.requests = 1;
    s.loan.borrowed = 1ull << 26; // part of the cache is on loan, and the request calls it back
    s.loan.loans = 1;
    s.loan.call = 1;
    s.memory.peak = 1ull << 28;
    s.settings.quantum_ns = 5'000'000;
    s.compute.wants_device = 1;
    s.compute.active_guards = 1;
    auto* h = reinterpret_cast<table_header*>(b.data());
    h->holder = 1;
    h->holder_generation = 3;
    h->reserved_total = 1ull << 28;
    h->committed_total = (1ull << 28) - (1ull << 26);
    h->held_total = 1ull << 28;
    h->lent_total = 1ull << 26;
    h->loans = 1;
    h->live_sessions = 1;
    h->device_waiters.store(1);
    h->startup_owner.store(startup_word(0, 3)); // the dead session holds the start-up lock too
    write("one-dead-holder", b);
  }
  {
    auto b = table(1);
    std::memset(b.data() + sizeof(table_header), 0xff, sizeof(slot_record));
    write("slot-all-ones", b);
  }
  {
    auto b = table(1);
    reinterpret_cast<table_header*>(b.data())->prefix.layout_version = 1;
    write("old-layout", b);
  }
  {
    auto b = table(1);
    reinterpret_cast<table_header*>(b.data())->prefix.init_state.store(init_state_initialising);
    write("initialising", b);
  }
  {
    auto b = table(2);
    b.resize(b.size() - 100);
    write("truncated", b);
  }
  write("tiny", std::vector<unsigned char>(16, 0x47));
  return 0;
}
