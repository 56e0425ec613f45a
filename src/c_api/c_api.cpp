// The C ABI (include/xqajit/c_api.h): errors, engines, specs, prewarm. The ops
// (decode, ...) have their own c_api_<op>.cpp next to this file.

#include "xqajit/c_api.h"

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "c_api/guard.hpp"
#include "xqajit/runtime/driver.hpp"
#include "xqajit/runtime/engine.hpp"
#include "xqajit/error.hpp"
#include "xqajit/spec/spec.hpp"

#ifndef XQAJIT_VERSION_STRING
#define XQAJIT_VERSION_STRING "unknown"
#endif

namespace xqajit::c_api {
namespace {

struct LastError {
  std::string message;
  std::map<std::string, std::string> details;
  std::string returned;  // the string last handed out through keep()
};

LastError& last() {
  thread_local LastError state;
  return state;
}

int record(int status, const std::exception& e, std::map<std::string, std::string> details = {}) {
  last().message = e.what();
  last().details = std::move(details);
  return status;
}

}  // namespace

int record_current_exception() {
  try {
    throw;
  } catch (const SpecError& e) {
    return record(XQAJIT_SPEC_ERROR, e, {{"field", e.field()}, {"value", e.value()}, {"allowed", e.allowed()}});
  } catch (const CompileError& e) {
    return record(XQAJIT_COMPILE_ERROR, e,
                  {{"spec_name", e.spec_name()}, {"options", nlohmann::json(e.options()).dump()}, {"log", e.log()}});
  } catch (const CudaError& e) {
    return record(XQAJIT_CUDA_ERROR, e,
                  {{"call", e.call()}, {"code", std::to_string(e.code())}, {"code_name", e.code_name()}});
  } catch (const ArgumentError& e) {
    return record(XQAJIT_ARGUMENT_ERROR, e);
  } catch (const LibraryError& e) {
    return record(XQAJIT_LIBRARY_ERROR, e);
  } catch (const CacheError& e) {
    return record(XQAJIT_CACHE_ERROR, e);
  } catch (const BundleError& e) {
    return record(XQAJIT_BUNDLE_ERROR, e);
  } catch (const NotAvailableError& e) {
    return record(XQAJIT_NOT_AVAILABLE, e);
  } catch (const Error& e) {
    return record(XQAJIT_ERROR, e);
  } catch (const nlohmann::json::exception& e) {
    return record(XQAJIT_ARGUMENT_ERROR, e);  // malformed JSON from the binding's caller
  } catch (const std::exception& e) {
    return record(XQAJIT_INTERNAL_ERROR, e);
  } catch (...) {
    last().message = "unknown exception";
    last().details.clear();
    return XQAJIT_INTERNAL_ERROR;
  }
}

const char* keep(std::string text) {
  last().returned = std::move(text);
  return last().returned.c_str();
}

int fail(int status, std::string message) {
  last().message = std::move(message);
  last().details.clear();
  return status;
}

namespace {

Options options_from_json(const char* text) {
  Options o = Options::from_env();
  if (text == nullptr || *text == '\0') return o;
  const nlohmann::json j = nlohmann::json::parse(text);
  for (const auto& [key, value] : j.items()) {
    if (value.is_null()) continue;
    if (key == "cache_dir") o.cache_dir = value.get<std::string>();
    else if (key == "disk_cache") o.disk_cache = value.get<bool>();
    else if (key == "cache_max_bytes") o.cache_max_bytes = value.get<std::uint64_t>();
    else if (key == "bundles") {
      o.bundles.clear();
      for (const auto& b : value) o.bundles.emplace_back(b.get<std::string>());
    }
    else if (key == "no_compile") o.no_compile = value.get<bool>();
    else if (key == "template_dir") o.template_dir = value.get<std::string>();
    else if (key == "log_level") o.log_level = value.get<std::string>();
    else if (key == "libcuda") o.libcuda_path = value.get<std::string>();
    else if (key == "libnvrtc") o.libnvrtc_path = value.get<std::string>();
    else
      throw ArgumentError("engine option '" + key +
                          "' is unknown: allowed cache_dir, disk_cache, cache_max_bytes, bundles, "
                          "no_compile, template_dir, log_level, libcuda, libnvrtc");
  }
  return o;
}

Arch gpu_arch(int device) {
  Driver& driver = Driver::instance();
  if (device < 0 || device >= driver.device_count())
    throw ArgumentError("device " + std::to_string(device) + " does not exist (" +
                        std::to_string(driver.device_count()) + " GPUs visible)");
  return driver.device(device).best_arch();
}

KernelSpec spec_from_json(const nlohmann::json& j) {
  if (j.is_string()) {
    const std::string text = j.get<std::string>();
    if (looks_like_name(text)) return parse_name(text);
    throw SpecError("name", text, "a canonical spec name such as gqa_bf16_kvbf16_obf16_d128_p64_g8_q1_sw0_t64_sm90a");
  }
  if (j.contains("name")) return parse_name(j.at("name").get<std::string>());
  std::map<std::string, std::string> fields;
  int device = 0;
  for (const auto& [key, value] : j.items()) {
    if (key == "device") device = value.get<int>();
    else if (value.is_string()) fields[key] = value.get<std::string>();
    else if (value.is_boolean()) fields[key] = value.get<bool>() ? "1" : "0";
    else fields[key] = value.dump();
  }
  if (fields.count("arch") == 0 && Driver::available()) {
    const Arch arch = gpu_arch(device);
    return spec_from_fields(fields, &arch);
  }
  return spec_from_fields(fields);  // throws SpecError naming arch when it is missing
}

}  // namespace

Engine& engine_of(XqajitEngine* handle) { return handle ? *handle->engine : default_engine(); }

std::string spec_result_json(const KernelSpec& spec) {
  nlohmann::json fields = nlohmann::json::object();
  for (const auto& [field, value] : spec_to_fields(spec)) fields[field] = value;
  // Every kernel a launch of this spec may use (backend=auto GQA on sm_90a: both
  // backends): what a prewarm of it compiles.
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelSpec& k : launch_variants({spec})) kernels.push_back(canonical_name(k));
  return nlohmann::json{{"name", canonical_name(spec)}, {"flags", flags(spec)}, {"fields", fields},
                        {"kernels", kernels}}
      .dump();
}

Arch device_arch(int device) { return gpu_arch(device); }

}  // namespace xqajit::c_api

using namespace xqajit;
using c_api::guarded;

extern "C" {

int xqajit_c_abi_version(void) { return XQAJIT_C_ABI_VERSION; }
const char* xqajit_version(void) { return XQAJIT_VERSION_STRING; }
const char* xqajit_last_error(void) { return c_api::last().message.c_str(); }

const char* xqajit_last_error_detail(const char* key) {
  const auto& details = c_api::last().details;
  const auto it = key ? details.find(key) : details.end();
  return it == details.end() ? "" : it->second.c_str();
}

int xqajit_engine_create(const char* options_json, XqajitEngine** out) {
  return guarded([&]() -> int {
    auto handle = std::make_unique<XqajitEngine>();
    handle->owned = std::make_unique<Engine>(c_api::options_from_json(options_json));
    handle->engine = handle->owned.get();
    *out = handle.release();
    return XQAJIT_OK;
  });
}

void xqajit_engine_destroy(XqajitEngine* engine) { delete engine; }

int xqajit_engine_default(XqajitEngine** out) {
  return guarded([&]() -> int {
    static XqajitEngine handle{&default_engine(), nullptr};
    *out = &handle;
    return XQAJIT_OK;
  });
}

int xqajit_engine_stats(XqajitEngine* handle, const char** json) {
  return guarded([&]() -> int {
    Engine& e = c_api::engine_of(handle);
    const EngineStats s = e.stats();
    *json = c_api::keep(nlohmann::json{{"memory_hits", s.memory_hits},
                                       {"bundle_hits", s.bundle_hits},
                                       {"disk_hits", s.disk_hits},
                                       {"compiles", s.compiles},
                                       {"failures", s.failures},
                                       {"compile_seconds", s.compile_seconds},
                                       {"fingerprint", e.fingerprint()},
                                       {"cache_dir", e.options().cache_dir.string()},
                                       {"no_compile", e.options().no_compile}}
                                    .dump());
    return XQAJIT_OK;
  });
}

int xqajit_spec(const char* spec_json, const char** result_json) {
  return guarded([&]() -> int {
    const KernelSpec spec = c_api::spec_from_json(nlohmann::json::parse(spec_json));
    *result_json = c_api::keep(c_api::spec_result_json(spec));
    return XQAJIT_OK;
  });
}

int xqajit_prewarm(XqajitEngine* handle, const char* specs_json, int jobs, const char** result_json) {
  return guarded([&]() -> int {
    const nlohmann::json list = nlohmann::json::parse(specs_json);
    if (!list.is_array()) return c_api::fail(XQAJIT_ARGUMENT_ERROR, "prewarm: expected a list of specs");
    // A spec that does not parse or validate becomes a failed result, like a failed compile.
    // Engine::prewarm returns, in order, each spec's launch variants (one result per
    // kernel, launch_variants), then the tuned variants the table adds: the output
    // keeps each request's results at its place and the tuned ones last.
    std::vector<KernelSpec> specs;
    std::vector<std::size_t> kernels_of(list.size(), 0);
    std::vector<nlohmann::json> rejected(list.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
      try {
        specs.push_back(c_api::spec_from_json(list[i]));
        kernels_of[i] = launch_variants({specs.back()}).size();
      } catch (const Error& e) {
        rejected[i] = {{"name", list[i].dump()}, {"ok", false}, {"source", ""}, {"seconds", 0.0}, {"error", e.what()}};
      }
    }
    const std::vector<PrewarmResult> results = c_api::engine_of(handle).prewarm(specs, jobs);
    nlohmann::json out = nlohmann::json::array();
    auto emit = [&](const PrewarmResult& r) {
      out.push_back({{"name", r.name}, {"ok", r.ok}, {"source", to_string(r.source)}, {"seconds", r.seconds},
                     {"error", r.error}});
    };
    std::size_t next = 0;
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!rejected[i].is_null()) {
        out.push_back(rejected[i]);
        continue;
      }
      for (std::size_t k = 0; k < kernels_of[i]; ++k) emit(results.at(next++));
    }
    while (next < results.size()) emit(results[next++]);
    *result_json = c_api::keep(out.dump());
    return XQAJIT_OK;
  });
}

int xqajit_engine_cubin(XqajitEngine* handle, const char* spec_json, const char** result_json) {
  return guarded([&]() -> int {
    const KernelSpec spec = c_api::spec_from_json(nlohmann::json::parse(spec_json));
    const CubinRef ref = c_api::engine_of(handle).cubin(spec);
    *result_json = c_api::keep(nlohmann::json{{"name", ref.name},
                                              {"source", to_string(ref.source)},
                                              {"path", ref.path.string()},
                                              {"cubin_bytes", ref.cubin ? ref.cubin->size() : 0},
                                              {"seconds", ref.seconds}}
                                   .dump());
    return XQAJIT_OK;
  });
}

int xqajit_device_arch(int device, const char** arch) {
  return guarded([&]() -> int {
    *arch = c_api::keep(c_api::device_arch(device).str());
    return XQAJIT_OK;
  });
}

}  // extern "C"
