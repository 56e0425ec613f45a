// Tuning tables: bucketing, keys, nearest-bucket lookup (and its precomputed index
// against a scan), persistence (round trip, corrupt and foreign files, concurrent
// writers), bundles, the engine's snapshot. The tuner itself (candidates, selection,
// re-timing): test_tuner.cpp.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <stdexcept>
#include <thread>

#include "support/process.hpp"
#include "support/tuning_fixtures.hpp"
#include "support/temp_dir.hpp"
#include "xqajit/cache/bundle.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/ops/decode.hpp"
#include "xqajit/tuning/tuner.hpp"

using namespace xqajit;

using namespace xqajit::test;

TEST_CASE("tuning: batch and sequence buckets round down to powers of two") {
  CHECK(batch_bucket(0) == 1);
  CHECK(batch_bucket(1) == 1);
  CHECK(batch_bucket(3) == 2);
  CHECK(batch_bucket(64) == 64);
  CHECK(batch_bucket(100) == 64);
  CHECK(batch_bucket(2048) == 2048);
  CHECK(batch_bucket(100000) == 2048);
  CHECK(seq_bucket(1) == 1);
  CHECK(seq_bucket(1000) == 512);
  CHECK(seq_bucket(8192) == 8192);
  CHECK(seq_bucket(40000) == 32768);
  CHECK(seq_bucket(std::int64_t{1} << 40) == std::int64_t{1} << 40);
}

TEST_CASE("tuning: keys ignore the variant knobs but not the device, toolchain or shape") {
  TuningKey a{h100(), gqa_spec(), 8, 1024};
  TuningKey b = a;
  b.spec.kv_tile = 32;
  b.spec.backend = Backend::portable;
  CHECK(a == b);
  b = a, b.device.toolchain = "fp-v2";
  CHECK_FALSE(a == b);
  b = a, b.device.sm_count = 114;
  CHECK_FALSE(a == b);
  b = a, b.spec.group = 4;
  CHECK_FALSE(a == b);
  b = a, b.batch = 16;
  CHECK_FALSE(a == b);
  CHECK(same_group(a, b));
  const auto h = [](const TuningKey& k) {
    return tuning_group_hash(k.device.name, k.device.cc_major, k.device.cc_minor, k.device.sm_count,
                             k.device.toolchain, k.spec);
  };
  b = a, b.spec.kv_tile = 128;
  CHECK(h(a) == h(b));
  b = a, b.spec.q_len = 2;
  CHECK(h(a) != h(b));
}

TEST_CASE("tuning: exact hit, else nearest bucket of the same device and spec, else heuristic") {
  TuningTable t;
  t.put(entry(8, 1024, {32, 4, Backend::automatic}));
  t.put(entry(64, 32768, {128, 0, Backend::automatic}));
  const TuningDevice d = h100();
  auto look = [&](KernelSpec s, std::int64_t batch, std::int64_t seq) {
    return t.lookup(d.name, d.cc_major, d.cc_minor, d.sm_count, d.toolchain, s, batch, seq);
  };
  auto r = look(gqa_spec(), 12, 2000);  // buckets 8, 1024
  CHECK(r.source == ChoiceSource::tuned);
  CHECK(r.choice == TunedChoice{32, 4, Backend::automatic});
  r = look(gqa_spec(), 128, 65536);  // nearest: 64 x 32768
  CHECK(r.source == ChoiceSource::nearest);
  CHECK(r.choice.kv_tile == 128);
  r = look(gqa_spec(), 4, 1024);  // one batch step from 8: its tile, its split count x 8 / 4
  CHECK(r.source == ChoiceSource::nearest);
  CHECK(r.choice.kv_tile == 32);
  CHECK(r.choice.num_splits == 8);
  r = look(gqa_spec(), 16, 1024);  // 4 splits x 8 / 16
  CHECK(r.source == ChoiceSource::nearest);
  CHECK(r.choice.num_splits == 2);
  CHECK(look(gqa_spec(), 48, 1024).choice.num_splits == 0);  // bucket 32, nearest 64: 0 (automatic) stays
  CHECK(look(gqa_spec(), 48, 1024).choice.kv_tile == 128);
  // Two batch steps or more from every entry: a split count tuned for another grid is not used.
  CHECK(look(gqa_spec(), 2, 1024).source == ChoiceSource::heuristic);
  CHECK(look(gqa_spec(), 1024, 32768).source == ChoiceSource::heuristic);
  KernelSpec other = gqa_spec();
  other.head_dim = 64;
  CHECK(look(other, 8, 1024).source == ChoiceSource::heuristic);
  CHECK(t.lookup("NVIDIA A100", 8, 0, 108, d.toolchain, gqa_spec(), 8, 1024).source == ChoiceSource::heuristic);
  CHECK(t.lookup(d.name, 9, 0, 132, "fp-other", gqa_spec(), 8, 1024).source == ChoiceSource::heuristic);
  // put replaces the entry of an equal key.
  t.put(entry(8, 1024, {16, 0, Backend::automatic}));
  CHECK(t.entries().size() == 2);
  CHECK(look(gqa_spec(), 8, 1024).choice.kv_tile == 16);
}

TEST_CASE("tuning: the active snapshot serves many threads and can be switched off") {
  auto t = std::make_shared<TuningTable>();
  t->put(entry(8, 1024, {32, 4, Backend::automatic}));
  set_active_tuning(t, "fp-v1");
  std::vector<std::thread> threads;
  std::atomic<int> hits{0};
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      for (int j = 0; j < 2000; ++j)
        if (tuned_choice(h100_info(), gqa_spec(), 8, 1024).source == ChoiceSource::tuned) ++hits;
    });
  for (auto& th : threads) th.join();
  CHECK(hits == 8000);
  set_active_tuning(nullptr);
  CHECK(tuned_choice(h100_info(), gqa_spec(), 8, 1024).source == ChoiceSource::heuristic);
}

TEST_CASE("tuning: persistence round trip keeps every field and candidate") {
  test::TempDir dir;
  const auto file = tuning_file(dir.path(), h100().name);
  CHECK(file.parent_path().filename() == "tuning");
  CHECK(file.filename() == "NVIDIA_H100_80GB_HBM3.json");
  TuningTable t;
  t.put(entry(8, 1024, {32, 4, Backend::automatic}));
  t.put(entry(1, 8192, {0, 8, Backend::hopper}, mla_spec()));
  t.put(entry(1, 4096, {64, 0, Backend::hopper, 16}));  // rows per CTA (h43)
  save_tuning(file, t);
  const TuningTable back = load_tuning(file);
  REQUIRE(back.entries().size() == 3);
  CHECK(back.entries()[2].winner.cta_rows == 16);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(back.entries()[i].key == t.entries()[i].key);
    CHECK(back.entries()[i].winner == t.entries()[i].winner);
    REQUIRE(back.entries()[i].candidates.size() == 2);
    CHECK(back.entries()[i].candidates[1].median_us == 12.5);
    CHECK(back.entries()[i].candidates[1].heuristic);
  }
  CHECK(back.lookup({h100(), mla_spec(), 1, 8192}).choice.backend == Backend::hopper);
  // A second save merges with what is there.
  TuningTable more;
  more.put(entry(64, 1024, {64, 2, Backend::automatic}));
  save_tuning(file, more);
  CHECK(load_tuning(file).entries().size() == 4);
}

TEST_CASE("tuning: corrupt, tampered and foreign-version files are ignored, never fatal") {
  test::TempDir dir;
  const auto file = dir / "t.json";
  CHECK(load_tuning(file).empty());  // missing
  {
    std::ofstream(file) << "{ not json";
  }
  CHECK(load_tuning(file).empty());
  TuningTable t;
  t.put(entry(8, 1024, {32, 4, Backend::automatic}));
  std::string text = t.to_json();
  {
    std::string tampered = text;
    tampered.replace(tampered.find("\"num_splits\": 4"), 15, "\"num_splits\": 5");
    std::ofstream(file) << tampered;
  }
  CHECK(load_tuning(file).empty());
  {
    std::string foreign = text;
    foreign.replace(foreign.find("\"version\": 1"), 12, "\"version\": 9");
    std::ofstream(file) << foreign;
  }
  CHECK(load_tuning(file).empty());
  CHECK_THROWS(TuningTable::from_json("[]"));
  // A corrupt file is replaced by the next save.
  save_tuning(file, t);
  CHECK(load_tuning(file).entries().size() == 1);
}

TEST_CASE("tuning: concurrent writers into one root keep a valid file with every entry") {
  test::TempDir dir;
  const auto file = tuning_file(dir.path(), h100().name);
  constexpr int kProcs = 2, kRounds = 8;
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int rc = 0;
      try {
        for (int r = 0; r < kRounds; ++r) {
          TuningTable t;
          t.put(entry(1 << (p * kRounds + r) % 12, std::int64_t{1024} << p, {32, r, Backend::automatic}));
          save_tuning(file, t);
        }
      } catch (...) {
        rc = 1;
      }
      _exit(rc);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  const TuningTable back = load_tuning(file);
  // Keys: batch bucket (p*8+r)%12 power, seq 1024<<p: all distinct per process.
  CHECK(back.entries().size() == kProcs * kRounds);
}

TEST_CASE("tuning: a bundle carries the table as a specially named entry next to cubins") {
  test::TempDir dir;
  TuningTable t;
  t.put(entry(8, 1024, {32, 4, Backend::automatic}));
  t.put(entry(1, 8192, {0, 8, Backend::hopper}, mla_spec()));
  BundleWriter writer;
  const std::string cubin = "not really a cubin";
  writer.add({"gqa_fake_name", "sm_90a", "fp-v1", 0, 0, {}}, std::vector<char>(cubin.begin(), cubin.end()));
  add_bundle_tuning(writer, t, "NVIDIA_H100.json", "fp-v1");
  writer.write(dir / "b.xqab");
  const BundleReader reader = BundleReader::open(dir / "b.xqab");
  reader.verify();
  REQUIRE(reader.entries().size() == 2);
  CHECK(is_tuning_entry_name(reader.entries()[1].name));
  CHECK_FALSE(is_tuning_entry_name(reader.entries()[0].name));
  const TuningTable back = load_bundle_tuning(reader);
  REQUIRE(back.entries().size() == 2);
  CHECK(back.lookup({h100(), gqa_spec(), 8, 1024}).choice == TunedChoice{32, 4, Backend::automatic});
  // Kernel lookups never see the tuning entry.
  BundleSet set({dir / "b.xqab"});
  CHECK_FALSE(set.find(kBundleTuningPrefix + std::string("x"), "fp-v1"));
}

TEST_CASE("tuning: the engine publishes the cache root's table; XQAJIT_TUNING=off disables it") {
  test::TempDir dir;
  Options o;
  o.cache_dir = dir.path();
  std::string fingerprint;
  {
    o.tuning = "off";
    Engine probe(o);
    fingerprint = probe.fingerprint();
    CHECK(active_tuning() == nullptr);
  }
  TuningTable t;
  TuningEntry e = entry(8, 1024, {32, 4, Backend::automatic});
  e.key.device.toolchain = fingerprint;
  t.put(e);
  save_tuning(tuning_file(dir.path(), e.key.device.name), t);
  o.tuning = "";
  {
    Engine engine(o);
    REQUIRE(active_tuning() != nullptr);
    CHECK(active_tuning()->entries().size() == 1);
    const auto r = tuned_choice(h100_info(), gqa_spec(), 8, 1024);
    CHECK(r.source == ChoiceSource::tuned);
    // decode_plan follows the table when the caller leaves the knobs automatic.
    DecodeParams p;
    p.batch = 8, p.num_q_heads = 64, p.num_kv_heads = 8, p.head_dim = 128, p.page_size = 64;
    p.max_pages_per_seq = 16;  // 1024 keys
    DeviceInfo d = h100_info();
    d.max_smem_per_block_optin = 232448;
    const DecodePlan plan = decode_plan(p, d);
    CHECK(plan.source == ChoiceSource::tuned);
    CHECK(plan.spec.kv_tile == 32);
    CHECK(plan.num_splits == 4);
    p.num_splits = 2;  // an explicit knob wins over the table
    CHECK(decode_plan(p, d).source == ChoiceSource::heuristic);
    p.num_splits = 0;
    p.batch = 16;  // bucket 16: the nearest entry, its 4 splits halved for twice the batch
    CHECK(decode_plan(p, d).source == ChoiceSource::nearest);
    CHECK(decode_plan(p, d).num_splits == 2);
    p.batch = 100;  // bucket 64: three batch steps from the entry, so the heuristic
    CHECK(decode_plan(p, d).source == ChoiceSource::heuristic);
  }
  o.tuning = (dir / "missing.json").string();
  {
    Engine engine(o);
    CHECK(active_tuning() == nullptr);
  }
  set_active_tuning(nullptr);
}

TEST_CASE("cli: prewarm and tune refuse an exploding spec set, naming the fields; tune --show reads tables") {
  test::TempDir dir;
  const std::string env = "XQAJIT_CACHE_DIR=" + dir.path().string();
  // up to 2 x 3 x 4 x 4 x 4 = 384 specs: over a bound of 100.
  const std::string product =
      "kind=gqa input=bf16 kv=bf16,fp8 head_dim=64,128,256 page_size=16,32,64,128 group=1,2,4,8 "
      "kv_tile=16,32,64,128 arch=sm_90a";
  auto r = test::run_cli_line(env, "prewarm --skip-invalid --max-specs 100 " + product);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("more than 100") != std::string::npos);
  CHECK(r.err.find("page_size x4") != std::string::npos);
  r = test::run_cli_line(env, "tune --max-specs 100 " + product);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("more than 100") != std::string::npos);

  TuningTable t;
  t.put(entry(8, 1024, {32, 4, Backend::automatic}));
  save_tuning(tuning_file(dir.path(), h100().name), t);
  r = test::run_cli_line(env, "tune --show");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("t32/s4") != std::string::npos);
  CHECK(r.out.find("gain 1.250x") != std::string::npos);
  r = test::run_cli_line(env, "tune --show --json");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("\"xqajit-tuning\"") != std::string::npos);
}

TEST_CASE("tuning: the precomputed index answers exactly like a scan of the group, for every bucket") {
  std::mt19937 rng(7);
  TuningTable t;
  std::vector<TuningEntry> put_order;
  for (int i = 0; i < 40; ++i) {
    const int b = 1 << (rng() % 12);
    const std::int64_t s = std::int64_t{1} << (rng() % 24);
    TuningEntry e = entry(b, s, {16 << (rng() % 4), static_cast<int>(rng() % 5), Backend::portable});
    t.put(e);
    put_order.push_back(e);
  }
  KernelSpec other = gqa_spec();
  other.group = 4;
  t.put(entry(1, 1, {128, 16, Backend::hopper}, other));  // another group: never an answer for gqa_spec()
  const TuningDevice d = h100();
  for (int lb = 0; lb <= 11; ++lb)
    for (int ls = 0; ls <= 42; ++ls) {
      const std::int64_t batch = std::int64_t{1} << lb, seq = std::int64_t{1} << ls;
      // The scan: smallest log2 distance among entries at most one batch step away; ties go
      // to the entry that is in the table first; a nearest entry's splits scale with the batch.
      const TuningEntry* best = nullptr;
      int best_d = 1 << 30;
      for (const auto& e : t.entries()) {
        if (!same_group(e.key, TuningKey{d, gqa_spec(), 1, 1})) continue;
        int eb = 0, es = 0;
        while ((1 << eb) < e.key.batch) ++eb;
        while ((std::int64_t{1} << es) < e.key.seq_len) ++es;
        if (std::abs(eb - lb) > TuningTable::kNearestBatchSteps) continue;
        const int dist = std::abs(eb - lb) + std::abs(es - std::min(ls, 40));
        if (dist < best_d) best_d = dist, best = &e;
      }
      const TunedLookup r =
          t.lookup(d.name, d.cc_major, d.cc_minor, d.sm_count, d.toolchain, gqa_spec(), batch, seq);
      INFO("batch " << batch << " seq " << seq);
      if (!best) {
        CHECK(r.source == ChoiceSource::heuristic);
        continue;
      }
      TunedChoice expect = best->winner;
      if (best_d != 0 && expect.num_splits > 0)
        expect.num_splits = std::max(1, static_cast<int>(std::lround(expect.num_splits *
                                                                     static_cast<double>(best->key.batch) / batch)));
      CHECK(r.choice == expect);
      CHECK((r.source == ChoiceSource::tuned) == (best_d == 0 && ls <= 40));
    }
  CHECK(t.lookup(d.name, d.cc_major, d.cc_minor, d.sm_count, d.toolchain, other, 1, 1).choice.kv_tile == 128);
}
