// gzip compression for trace files (zlib), kept private to the traces library.
#pragma once

#include <string>
#include <string_view>

namespace pipescope::traces::detail {

bool looks_gzipped(std::string_view bytes);

// Throws TraceError naming `source` for corrupt or truncated data.
std::string gunzip(std::string_view compressed, const std::string& source);

std::string gzip(std::string_view plain);

}  // namespace pipescope::traces::detail
