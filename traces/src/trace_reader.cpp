// The trace reader: a file's bytes (gunzipped when they are gzip), then its events. With
// simdjson available, a fast pass reads well-formed files with the on-demand parser
// (trace_simdjson.cpp); anything it does not like is read again by nlohmann's SAX parser
// (trace_sax.cpp), which is the reference for the meaning and names the place of a problem
// (line and column, or event and field). Both feed one trace assembler (trace_assembler.cpp).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <unistd.h>

#include <fmt/format.h>

#include "file_progress.hpp"
#include "gzip.hpp"
#include "trace_assembler.hpp"
#include "trace_sax.hpp"
#include "trace_simdjson.hpp"
#include "pipescope/core/input_file.hpp"
#include "pipescope/traces/trace_io.hpp"
#include "pipescope/traces/trace_parsers.hpp"

namespace pipescope::traces {
namespace {

using detail::kPadding;

void check_not_empty(std::string_view json_text, const std::string& source) {
  if (json_text.find_first_not_of(" \t\r\n") == std::string_view::npos)
    throw TraceError(source + ": the file is empty");
}

std::optional<Trace> parse_fast(std::string_view json_text, bool text_is_padded, const std::string& source,
                                detail::FileProgress* progress = nullptr) {
  detail::TraceAssembler assembler(source);
  if (!detail::read_with_simdjson(json_text, text_is_padded, assembler, progress)) return std::nullopt;
  return assembler.finish();
}

// `progress`: the fast path reports as it reads; the reference parser (rare: files the fast
// path is not sure of) only at its end.
Trace parse_text(std::string_view json_text, bool text_is_padded, const std::string& source,
                 detail::FileProgress* progress = nullptr) {
  check_not_empty(json_text, source);
  if (auto fast = parse_fast(json_text, text_is_padded, source, progress)) return std::move(*fast);
  if (progress) progress->check_cancel();
  return detail::parse_with_sax(json_text, source);
}

std::string read_padded(const std::string& path) {
  if (auto problem = input_file_problem(path, "a trace file")) throw TraceError(*problem);
  // Opened without blocking: a FIFO put in the file's place after the check is refused too.
  std::string open_problem;
  const int fd = open_regular_file(path, open_problem);
  if (fd < 0) throw TraceError(fmt::format("{}: cannot open: {}", path, open_problem));
  std::FILE* file = ::fdopen(fd, "rb");
  if (!file) {
    ::close(fd);
    throw TraceError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  }
  // Read straight into the string (one copy, not two through a chunk buffer); whatever a
  // growing file has beyond the size seen first is read on in chunks.
  std::string bytes;
  if (std::fseek(file, 0, SEEK_END) == 0) {
    const long size = std::ftell(file);
    std::rewind(file);
    if (size > 0) {
      bytes.reserve(static_cast<std::size_t>(size) + kPadding);
      bytes.resize(static_cast<std::size_t>(size));
      bytes.resize(std::fread(bytes.data(), 1, bytes.size(), file));
    }
  }
  char chunk[1 << 16];
  std::size_t got = 0;
  while ((got = std::fread(chunk, 1, sizeof chunk, file)) > 0) bytes.append(chunk, got);
  const bool failed = std::ferror(file);
  std::fclose(file);
  if (failed) throw TraceError(path + ": cannot read the file");
  return bytes;
}

}  // namespace

Trace parse_trace(std::string_view json_text, const std::string& source) {
  return parse_text(json_text, false, source);
}

Trace read_trace(const std::string& path) { return read_trace(path, nullptr); }

Trace read_trace(const std::string& path, ReadProgress* progress) {
  std::string bytes = read_padded(path);
  detail::FileProgress file_progress(progress, bytes.size());
  if (detail::looks_gzipped(bytes)) bytes = detail::gunzip(bytes, path);
  const std::size_t size = bytes.size();
  file_progress.set_text_bytes(size);
  bytes.append(kPadding, ' ');
  Trace trace = parse_text(std::string_view(bytes.data(), size), true, path, &file_progress);
  file_progress.finish();
  return trace;
}

Trace parse_trace_reference(std::string_view json_text, const std::string& source) {
  check_not_empty(json_text, source);
  return detail::parse_with_sax(json_text, source);
}

std::optional<Trace> parse_trace_fast(std::string_view json_text, const std::string& source) {
  check_not_empty(json_text, source);
  return parse_fast(json_text, false, source);
}

bool have_fast_trace_parser() { return detail::have_simdjson(); }

}  // namespace pipescope::traces
