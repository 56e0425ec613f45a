#pragma once
// A point in time as ISO 8601 UTC ("2026-11-27T19:21:00Z"), as the cache manifests
// record it and the CLI prints it.

#include <ctime>
#include <string>

namespace xqajit::detail {

inline std::string utc_iso8601(std::time_t t) {
  std::tm utc{};
  gmtime_r(&t, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace xqajit::detail
