#pragma once
/// xqajit's spdlog logger ("xqajit", stderr), created on first use with the
/// level from XQAJIT_LOG_LEVEL.

#include <spdlog/spdlog.h>

#include <memory>

namespace xqajit::detail {

std::shared_ptr<spdlog::logger> logger();

}  // namespace xqajit::detail
