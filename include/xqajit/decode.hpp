#pragma once
/// Kept for embedders of earlier versions: the typed launchers live in
/// xqajit/ops/ (GQA decode: ops/decode.hpp, MLA decode: ops/mla_decode.hpp).
#include "xqajit/ops/decode.hpp"
#include "xqajit/ops/mla_decode.hpp"
