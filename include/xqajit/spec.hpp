#pragma once
/// Forwarding header: spec.hpp lives in xqajit/spec/ (the spec stage); this path keeps
/// working for code written against earlier versions.
#include "xqajit/spec/spec.hpp"
