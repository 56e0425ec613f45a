#pragma once
/// Forwarding header: cache.hpp lives in xqajit/cache/ (the cache stage); this path keeps
/// working for code written against earlier versions.
#include "xqajit/cache/cache.hpp"
