#pragma once
/// Forwarding header: tuner.hpp lives in xqajit/tuning/ (the tuning stage); this path keeps
/// working for code written against earlier versions.
#include "xqajit/tuning/tuner.hpp"
