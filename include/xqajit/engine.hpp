#pragma once
/// Forwarding header: engine.hpp lives in xqajit/runtime/ (the runtime stage); this path keeps
/// working for code written against earlier versions.
#include "xqajit/runtime/engine.hpp"
