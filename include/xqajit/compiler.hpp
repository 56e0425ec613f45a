#pragma once
/// Forwarding header: compiler.hpp lives in xqajit/compile/ (the compile stage); this path keeps
/// working for code written against earlier versions.
#include "xqajit/compile/compiler.hpp"
