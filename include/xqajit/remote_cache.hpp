#pragma once
/// Forwarding header: remote_cache.hpp lives in xqajit/remote/ (the remote stage); this path keeps
/// working for code written against earlier versions.
#include "xqajit/remote/remote_cache.hpp"
