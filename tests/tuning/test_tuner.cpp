// The tuner's CPU side: candidates per family and arch (the GQA backend axis),
// selection and the interleaved re-timing over a fake timer, the tuning key of
// a sparse MLA launch, the plan's heuristic with the table ignored, prewarm
// following the table, and Engine::tune's refusals that need no GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "support/process.hpp"
#include "support/temp_dir.hpp"
#include "support/tuning_fixtures.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/error.hpp"
#include "xqajit/ops/decode.hpp"
#include "xqajit/ops/mla_decode.hpp"

using namespace xqajit;
using namespace xqajit::test;

namespace {

std::size_t count_if_backend(const std::vector<TunedChoice>& v, Backend b) {
  return static_cast<std::size_t>(
      std::count_if(v.begin(), v.end(), [b](const TunedChoice& c) { return c.backend == b; }));
}

DecodeParams gqa_params(int batch, int pages_per_seq) {
  DecodeParams p;
  p.batch = batch, p.num_q_heads = 64, p.num_kv_heads = 8, p.head_dim = 128, p.page_size = 64;
  p.max_pages_per_seq = pages_per_seq;
  return p;
}

}  // namespace

TEST_CASE("tuner: candidates come from the family's table, filtered by what fits") {
  const auto& g = candidate_space(Kind::gqa);
  CHECK(g.kv_tiles == std::vector<int>{16, 32, 64, 128});
  CHECK(g.backend_axis);
  const std::size_t per_tile = 1 + g.fixed_splits.size();
  const auto gqa = tuning_candidates(gqa_spec());
  // sm_90a: portable at every tile, hopper only at 64 and 128 (keys are wgmma M blocks of 64).
  CHECK(count_if_backend(gqa, Backend::portable) == 4 * per_tile);
  CHECK(count_if_backend(gqa, Backend::hopper) == 2 * per_tile);
  CHECK(count_if_backend(gqa, Backend::automatic) == 0);
  for (const auto& c : gqa)
    if (c.backend == Backend::hopper) CHECK(c.kv_tile >= 64);
  // Every candidate is a spec the toolchain accepts.
  for (const auto& c : gqa) CHECK_NOTHROW(validate(candidate_spec(gqa_spec(), c)));
  // Elsewhere, no hopper backend.
  KernelSpec ada = gqa_spec();
  ada.arch = Arch::parse("sm_89");
  const auto on_ada = tuning_candidates(ada);
  CHECK(count_if_backend(on_ada, Backend::hopper) == 0);
  CHECK(count_if_backend(on_ada, Backend::portable) == on_ada.size());  // tile 128 may not fit sm_89's smem
  // A filter drops candidates (here: tiles above 64 "do not fit").
  const auto small = tuning_candidates(gqa_spec(), [](const KernelSpec& s, const TunedChoice& c) {
    return c.kv_tile <= 64 && candidate_fits(s, c);
  });
  CHECK(small.size() == 4 * per_tile);  // portable 16/32/64, hopper 64
  // MLA: backend x split policy where both backends run (sm_90a), one backend elsewhere.
  const auto mla = tuning_candidates(mla_spec());
  const auto n_backends = backends_for(Kind::mla, Arch::parse("sm_90a")).size();
  CHECK(mla.size() == n_backends * (1 + candidate_space(Kind::mla).fixed_splits.size()));
  KernelSpec ampere = mla_spec();
  ampere.arch = Arch::parse("sm_80");
  for (const auto& c : tuning_candidates(ampere)) CHECK(c.backend == Backend::portable);
  // The heuristic is itself a candidate, with its backend explicit.
  const TunedChoice h = heuristic_choice(gqa_spec());
  CHECK(h.num_splits == 0);
  CHECK(h.backend != Backend::automatic);
  CHECK(std::find(gqa.begin(), gqa.end(), h) != gqa.end());
  CHECK(candidate_spec(gqa_spec(), TunedChoice{128, 4, Backend::hopper}).kv_tile == 128);
}

TEST_CASE("tuner: rows per CTA are an axis of the hopper kernel where they name a variant") {
  CHECK(candidate_space(Kind::gqa).cta_rows == std::vector<int>{0, 8, 16, 32});
  CHECK(candidate_space(Kind::mla).cta_rows == std::vector<int>{0});
  // One token of group 8: 8 rows, the kernel's least N; no rows axis.
  for (const auto& c : tuning_candidates(gqa_spec())) CHECK(c.cta_rows == 0);
  // Speculative decoding, group 8 x q_len 8 = 64 rows: hopper tries 8, 16 and 32 beside the plan's.
  KernelSpec spec = gqa_spec();
  spec.q_len = 8;
  const auto all = tuning_candidates(spec);
  const std::size_t per_tile = 1 + candidate_space(Kind::gqa).fixed_splits.size();
  for (const int rows : {8, 16, 32}) {
    const auto n = std::count_if(all.begin(), all.end(), [&](const TunedChoice& c) { return c.cta_rows == rows; });
    CHECK(static_cast<std::size_t>(n) == 2 * per_tile);  // hopper at tiles 64 and 128
  }
  for (const auto& c : all) {
    if (c.cta_rows != 0) CHECK(c.backend == Backend::hopper);
    CHECK(candidate_spec(spec, c).cta_rows == c.cta_rows);
  }
  // 16 rows (q_len 2): only 8 names a variant.
  spec.q_len = 2;
  for (const auto& c : tuning_candidates(spec)) CHECK((c.cta_rows == 0 || c.cta_rows == 8));
  CHECK(to_string(TunedChoice{64, 0, Backend::hopper, 8}) == "kv_tile=64 splits=auto backend=hopper cta_rows=8");
}

TEST_CASE("tuner: graphs rotate over cache copies spanning 8 x L2, within half the free memory") {
  constexpr std::size_t MB = 1 << 20, GB = 1024 * MB, l2 = 50 * MB;
  CHECK(cache_rotation(0, l2, 80 * GB) == 1);              // unknown extent: the caller's cache only
  CHECK(cache_rotation(33 * MB, l2, 80 * GB) == 8);        // B=1 L=8192 bf16: capped at 8
  CHECK(cache_rotation(134 * MB, l2, 80 * GB) == 3);       // ceil(400 / 134)
  CHECK(cache_rotation(400 * MB, l2, 80 * GB) == 1);       // as large as the span
  CHECK(cache_rotation(2 * GB, l2, 80 * GB) == 1);
  CHECK(cache_rotation(33 * MB, l2, 140 * MB) == 3);       // 2 extra copies fit in 70 MB
  CHECK(cache_rotation(33 * MB, l2, 10 * MB) == 1);        // no room: no copies
  CHECK(cache_rotation(33 * MB, 0, 80 * GB) == 1);         // an unreported L2 counts as 1 MB
}

TEST_CASE("tuner: a graph holds about 400 us of launches, 4 to 20") {
  CHECK(graph_launches(10.0) == 20);
  CHECK(graph_launches(40.0) == 10);
  CHECK(graph_launches(100.0) == 4);
  CHECK(graph_launches(1000.0) == 4);
  CHECK(graph_launches(0.0) == 20);  // not measured
}

TEST_CASE("tuner: the fastest candidate wins; the heuristic keeps ties within noise") {
  const TuningKey key{h100(), gqa_spec(), 8, 8192};
  const TunedChoice h = heuristic_choice(gqa_spec());
  const TunedChoice fast{128, 8, Backend::hopper};
  FakeTimer timer{{h, 50}, {fast, 40}};
  timer.us[to_string(TunedChoice{16, 0, Backend::portable})] = -1;  // cannot run: skipped
  auto e = tune_key(key, timer);
  REQUIRE(e);
  CHECK(e->winner == fast);
  const auto n = tuning_candidates(gqa_spec()).size();
  CHECK(e->candidates.size() == n - 1);
  int heuristic_marks = 0;
  for (const auto& c : e->candidates) heuristic_marks += c.heuristic;
  CHECK(heuristic_marks == 1);
  // The separate re-timing ran once, winner vs heuristic, and gives the gain.
  CHECK(timer.interleaved_calls == 1);
  CHECK(e->confirm_winner_us == 40);
  CHECK(e->confirm_heuristic_us == 50);
  CHECK_FALSE(e->reverted);
  CHECK(e->gain() == Approx(1.25));

  // Within 1 %: the heuristic stays, and nothing is re-timed.
  timer.us[to_string(fast)] = 49.8;
  timer.interleaved_calls = 0;
  e = tune_key(key, timer);
  REQUIRE(e);
  CHECK(e->winner == h);
  CHECK(timer.interleaved_calls == 0);
  CHECK(e->gain() == 1.0);
}

TEST_CASE("tuner: a winner that loses the interleaved re-timing is reverted to the heuristic") {
  const TuningKey key{h100(), gqa_spec(), 1, 32768};
  const TunedChoice h = heuristic_choice(gqa_spec());
  const TunedChoice lucky{32, 16, Backend::portable};
  FakeTimer timer{{h, 50}, {lucky, 30}};  // one lucky median in the selection ...
  timer.retimed[to_string(lucky)] = 51.5;  // ... but 3 % slower when A/B re-timed
  auto e = tune_key(key, timer);
  REQUIRE(e);
  CHECK(e->reverted);
  CHECK(e->winner == h);
  CHECK(e->retimed_gain() < 1.0);
  CHECK(e->gain() == 1.0);
  // Within the noise in the re-timing: kept.
  timer.retimed[to_string(lucky)] = 50.3;
  e = tune_key(key, timer);
  REQUIRE(e);
  CHECK_FALSE(e->reverted);
  CHECK(e->winner == lucky);
  // The fields survive the table's JSON.
  TuningTable t;
  t.put(*e);
  const TuningTable back = TuningTable::from_json(t.to_json());
  CHECK(back.entries()[0].confirm_winner_us == 50.3);
  CHECK(back.entries()[0].confirm_heuristic_us == 50);
  CHECK_FALSE(back.entries()[0].reverted);
}

TEST_CASE("tuner: the heuristic is timed even when the filter drops it") {
  const TuningKey key{h100(), gqa_spec(), 8, 1024};
  const TunedChoice h{64, 0, Backend::portable};
  FakeTimer timer;
  timer.us[to_string(h)] = 20;
  timer.us[to_string(TunedChoice{32, 2, Backend::portable})] = 10;
  auto e = tune_key(
      key, timer, [](const KernelSpec&, const TunedChoice& c) { return c.kv_tile == 32; }, h);
  REQUIRE(e);
  CHECK(e->candidates.front().choice == h);
  CHECK(e->candidates.front().heuristic);
  CHECK(e->winner == TunedChoice{32, 2, Backend::portable});
}

TEST_CASE("tuner: MLA picks a backend per bucket; one runnable candidate tunes nothing") {
  FakeTimer timer;
  timer.fallback = 30;
  timer.us[to_string(TunedChoice{0, 0, Backend::portable})] = 20;
  auto e = tune_key({h100(), mla_spec(), 1, 32768}, timer,
                    [](const KernelSpec&, const TunedChoice& c) { return c.backend != Backend::automatic; });
  REQUIRE(e);
  CHECK(e->winner.backend == Backend::portable);
  // Only one candidate passes the filter: nothing to tune.
  FakeTimer t2;
  auto none = tune_key({h100(), mla_spec(), 1, 32768}, t2, [](const KernelSpec&, const TunedChoice& c) {
    return c.num_splits == 0 && c.backend == Backend::portable;
  });
  CHECK_FALSE(none);
  CHECK(t2.calls == 0);
  // Every candidate but one fails to run: nothing to tune either.
  FakeTimer t3;
  t3.fallback = -1;
  t3.us[to_string(TunedChoice{0, 0, Backend::portable})] = 20;
  for (const auto& c : tuning_candidates(mla_spec()))
    if (c.backend != Backend::portable || c.num_splits) t3.us[to_string(c)] = -1;
  CHECK_FALSE(tune_key({h100(), mla_spec(), 1, 32768}, t3));
}

TEST_CASE("tuner: a sparse MLA launch is keyed by its topk, the length its plan looks up") {
  test::TempDir dir;
  Options o;
  o.cache_dir = dir.path();
  o.tuning = "off";
  const Engine engine(o);
  const DeviceInfo d = h100_info();
  alignas(16) static char fake[256];
  MlaDecodeParams p;  // DeepSeek-V3.2: 128 heads over the fp8-with-scales cache, top-2048 lists
  p.batch = 64, p.num_heads = 128, p.page_size = 64, p.num_pages = 4096;
  p.kv = DType::fp8ds;
  p.sm_scale = 0.0721687836f;
  p.q = p.kv_cache = fake;
  p.out = fake;
  p.indices = reinterpret_cast<const std::int32_t*>(fake);
  p.topk = 2048;
  REQUIRE_NOTHROW(validate(p));
  const TuningKey key = tuning_key(engine, p, d);
  CHECK(key.spec.sparse);
  CHECK(key.batch == 64);
  CHECK(key.seq_len == 2048);  // no block table: the lists' length, not max_pages_per_seq x page_size
  MlaDecodeParams other = p;
  other.topk = 512;  // each topk its own key (not one key every tuned topk overwrites)
  CHECK(tuning_key(engine, other, d).seq_len == 512);
  // Both backends run sparse MLA on sm_90a: the tuner times both.
  const auto candidates = tuning_candidates(key.spec);
  CHECK(count_if_backend(candidates, Backend::hopper) > 0);
  CHECK(count_if_backend(candidates, Backend::portable) > 0);
  // A winner stored under the tuner's key is the plan's exact answer for the launch.
  auto t = std::make_shared<TuningTable>();
  TuningEntry e;
  e.key = key;
  e.winner = {0, 4, Backend::portable};
  e.candidates = {{e.winner, 10.0, false}, {heuristic_choice(p, d), 12.0, true}};
  t->put(e);
  set_active_tuning(t, key.device.toolchain);
  const MlaDecodePlan plan = mla_decode_plan(p, d);
  CHECK(plan.source == ChoiceSource::tuned);
  CHECK(plan.num_splits == 4);
  CHECK(plan.spec.sparse);
  set_active_tuning(nullptr);
}

TEST_CASE("tuner: the plan's heuristic ignores the table on this thread only") {
  auto t = std::make_shared<TuningTable>();
  t->put(entry(8, 1024, {32, 4, Backend::portable}));
  set_active_tuning(t, "fp-v1");
  const DeviceInfo d = h100_info();
  const DecodeParams p = gqa_params(8, 16);  // 1024 keys
  CHECK(decode_plan(p, d).source == ChoiceSource::tuned);
  {
    HeuristicPlansScope heuristic_only;
    CHECK(decode_plan(p, d).source == ChoiceSource::heuristic);
    ChoiceSource elsewhere = ChoiceSource::heuristic;
    std::thread([&] { elsewhere = decode_plan(p, d).source; }).join();
    CHECK(elsewhere == ChoiceSource::tuned);
  }
  CHECK(decode_plan(p, d).source == ChoiceSource::tuned);
  // heuristic_choice(params, device) is the plan's choice without the table, backend resolved.
  const TunedChoice h = heuristic_choice(p, d);
  CHECK(h.kv_tile == normalized(decode_spec(p, d.best_arch())).kv_tile);
  CHECK(h.num_splits == 0);
  CHECK(h.backend != Backend::automatic);
  set_active_tuning(nullptr);
}

TEST_CASE("tuner: prewarm follows the table: tuned variants of the set's specs are compiled too") {
  test::TempDir dir;
  Options o;
  o.cache_dir = dir.path();
  o.tuning = "off";
  const std::string fp = Engine(o).fingerprint();
  TuningTable t;
  auto add = [&](TunedChoice c, int batch, KernelSpec s = gqa_spec(), std::string toolchain = {}) {
    TuningEntry e = entry(batch, 1024, c, s);
    e.key.device.toolchain = toolchain.empty() ? fp : toolchain;
    t.put(e);
  };
  add({32, 4, Backend::portable}, 1);
  add({32, 8, Backend::portable}, 2);  // same variant: listed once
  add({128, 0, Backend::hopper}, 4);
  add({16, 0, Backend::portable}, 8, gqa_spec(), "another-toolchain");  // not this toolchain's
  KernelSpec mla = mla_spec();
  mla.group = 128;  // auto runs hopper here, so the tuned portable kernel is one more
  add({0, 2, Backend::portable}, 1, mla);
  save_tuning(tuning_file(dir.path(), h100().name), t);

  const auto names = [](const std::vector<KernelSpec>& v) {
    std::vector<std::string> out;
    for (const auto& s : v) out.push_back(canonical_name(normalized(s)));
    return out;
  };
  o.tuning = "";
  Engine engine(o);
  const std::vector<KernelSpec> set{gqa_spec(), mla};
  const auto specs = engine.prewarm_specs(set);
  KernelSpec t32 = gqa_spec(), h128 = gqa_spec(), mla_portable = mla;
  t32.kv_tile = 32, t32.backend = Backend::portable;
  h128.kv_tile = 128, h128.backend = Backend::hopper;
  mla_portable.backend = Backend::portable;
  const auto got = names(specs);
  CHECK(got == names({gqa_spec(), mla, t32, h128, mla_portable}));
  // A spec with an explicit tile never consults the table, so nothing is added for it.
  KernelSpec fixed = gqa_spec();
  fixed.kv_tile = 64;
  CHECK(engine.prewarm_specs({fixed}).size() == 1);
  // An explicit backend may be a spec set's expansion of backend=auto: it still follows the table.
  KernelSpec expanded = gqa_spec();
  expanded.backend = Backend::portable;
  CHECK(names(engine.prewarm_specs({expanded})) == names({expanded, t32, h128}));
  // Without a table (or with tuning off) the set is unchanged.
  o.tuning = "off";
  CHECK(Engine(o).prewarm_specs(set).size() == 2);
  set_active_tuning(nullptr);
}

TEST_CASE("tuner: prewarm compiles a tuned rows-per-CTA variant, and the plan's rows of a tuned hopper tile") {
  KernelSpec spec = gqa_spec();  // group 8 x q_len 8: 64 rows
  spec.q_len = 8;
  TuningTable t;
  t.put(entry(1, 1024, {64, 0, Backend::hopper, 16}, spec));
  t.put(entry(8, 1024, {128, 0, Backend::hopper}, spec));
  std::vector<std::string> got;
  for (const auto& s : with_tuned_variants({spec}, t, "")) got.push_back(canonical_name(normalized(s)));
  const auto has = [&](const std::string& part) {
    return std::any_of(got.begin(), got.end(), [&](const std::string& n) { return n.find(part) != std::string::npos; });
  };
  CHECK(has("_t64_r16_hopper_"));
  CHECK(has("_t128_hopper_"));
  CHECK(has("_t128_r16_hopper_"));  // the rule's rows at B=1
  CHECK(has("_t128_r32_hopper_"));  // and up to SMs / 2
}

TEST_CASE("tuner: Engine::tune checks the call before touching a GPU") {
  test::TempDir dir;
  Options o;
  o.cache_dir = dir.path();
  Engine engine(o);
  DecodeParams bad = gqa_params(8, 16);  // no buffers
  CHECK_THROWS_AS(engine.tune(bad, nullptr), ArgumentError);
  MlaDecodeParams bad_mla;
  CHECK_THROWS_AS(engine.tune(bad_mla, nullptr), ArgumentError);
  if (!Driver::available(o.libcuda_path)) {
    // Valid-looking params on a host without a GPU: a driver error, never a crash or a silent no-op.
    DecodeParams p = gqa_params(8, 16);
    alignas(16) static char fake[256];
    p.q = p.k_cache = p.v_cache = fake;
    p.out = fake;
    p.block_table = reinterpret_cast<const std::int32_t*>(fake);
    p.seq_lens = reinterpret_cast<const std::int32_t*>(fake);
    CHECK_THROWS_AS(engine.tune(p, nullptr), Error);
  }
  // Capture refusal (NotAvailableError on a capturing stream) needs a GPU: tests/gpu/test_engine_paths.cpp.
}

TEST_CASE("cli: prewarm compiles the tuned variants the table names for the set", "[cli]") {
  test::TempDir dir;
  Options o;
  o.cache_dir = dir.path();
  o.tuning = "off";
  KernelSpec s = gqa_spec();
  s.head_dim = 64, s.group = 1, s.page_size = 16;
  TuningEntry e = entry(8, 1024, {16, 2, Backend::portable}, s);
  e.key.device.toolchain = Engine(o).fingerprint();
  TuningTable t;
  t.put(e);
  save_tuning(tuning_file(dir.path(), h100().name), t);
  const auto r =
      test::run_cli_line("XQAJIT_CACHE_DIR=" + dir.path().string(),
                         "--json prewarm --threads kind=gqa input=bf16 head_dim=64 group=1 page_size=16 "
                         "arch=sm_90a");
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["tuned_variants"] == 1);
  REQUIRE(doc["results"].size() == 2);
  KernelSpec variant = s;
  variant.kv_tile = 16, variant.backend = Backend::portable;
  CHECK(doc["results"][1]["name"] == canonical_name(normalized(variant)));
  CHECK(doc["compiled"] == 2);
}
