#pragma once
/// Forwarding header: tuning.hpp lives in xqajit/tuning/ (the tuning stage); this path keeps
/// working for code written against earlier versions.
#include "xqajit/tuning/tuning.hpp"
