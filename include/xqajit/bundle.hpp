#pragma once
/// Forwarding header: bundle.hpp lives in xqajit/cache/ (the cache stage); this path keeps
/// working for code written against earlier versions.
#include "xqajit/cache/bundle.hpp"
