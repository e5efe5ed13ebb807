// Reading and printing the quantities users type and read: byte sizes ("80GB", "1.5GiB",
// "4e9"), and times and sizes printed with a unit that fits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pipescope::sim {

// Accepts a plain number of bytes (integer or floating, "4e9") or a number with a unit:
// B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024); a leading '-'
// where `allow_negative`. Throws UsageError naming `option` otherwise.
std::int64_t parse_bytes(std::string_view text, std::string_view option, bool allow_negative = false);

std::string format_bytes(std::int64_t bytes);   // "1.50 GB", "312 B"
std::string format_seconds(double seconds);     // "33 s", "12.3 ms", "4.1 us"

}  // namespace pipescope::sim
