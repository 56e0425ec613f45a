#pragma once
/// Forwarding header: driver.hpp lives in xqajit/runtime/ (the runtime stage); this path keeps
/// working for code written against earlier versions.
#include "xqajit/runtime/driver.hpp"
