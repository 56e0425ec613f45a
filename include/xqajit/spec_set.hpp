#pragma once
/// Forwarding header: spec_set.hpp lives in xqajit/spec/ (the spec stage); this path keeps
/// working for code written against earlier versions.
#include "xqajit/spec/spec_set.hpp"
