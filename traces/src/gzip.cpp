#include "gzip.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "file_text.hpp"

#include "pipescope/traces/trace.hpp"

namespace pipescope::traces::detail {

bool looks_gzipped(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

// A gzip stream ends with its content's size modulo 2^32 (ISIZE, little-endian): the size to
// make room for at once, where it is plausible (at least the compressed size, at most 1032 times
// it, deflate's best ratio), so a large file is not grown by doubling, which would hold the old
// and the new copy together. 0 when there is no such hint.
std::size_t gzip_size_hint(std::string_view compressed) {
  if (compressed.size() < 18 || !looks_gzipped(compressed)) return 0;
  std::uint32_t size = 0;
  for (int i = 0; i < 4; ++i)
    size |= static_cast<std::uint32_t>(static_cast<unsigned char>(compressed[compressed.size() - 4 + i])) << (8 * i);
  const std::size_t hint = size + std::size_t{1};  // one more: inflate then ends inside the buffer
  return hint >= compressed.size() && hint / 1032 <= compressed.size() ? hint : 0;
}

std::string gunzip(std::string_view compressed, const std::string& source) {
  GzipChunks chunks(compressed, source);
  std::string out;
  // Room for the whole content and the last chunk's window at once (gzip_size_hint).
  out.reserve(std::max<std::size_t>(std::max<std::size_t>(compressed.size() * 4, 1 << 16), gzip_size_hint(compressed)) +
              GzipChunks::kChunkBytes);
  while (chunks.append_to(out)) {
  }
  return out;
}

std::string gzip(std::string_view plain) {
  z_stream stream{};
  // 15 + 16: a gzip header, so `gunzip` and `zcat` read the file.
  if (deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("cannot start gzip compression");
  std::string out;
  out.resize(deflateBound(&stream, plain.size()) + 64);
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  stream.avail_in = static_cast<uInt>(plain.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int status = deflate(&stream, Z_FINISH);
  if (status != Z_STREAM_END) {
    deflateEnd(&stream);
    throw std::runtime_error("gzip compression failed");
  }
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

}  // namespace pipescope::traces::detail
