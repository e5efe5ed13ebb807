// gzip compression for trace files (zlib), kept private to the traces library.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace pipescope::traces::detail {

bool looks_gzipped(std::string_view bytes);

// The size a gzip stream's trailer gives its content (ISIZE, modulo 2^32), plus one, where it is
// plausible for `compressed`; 0 otherwise.
std::size_t gzip_size_hint(std::string_view compressed);

// Throws TraceError naming `source` for corrupt or truncated data.
std::string gunzip(std::string_view compressed, const std::string& source);

std::string gzip(std::string_view plain);

}  // namespace pipescope::traces::detail
