// Finding, reading and checking the per-rank files of a torch.profiler run (torch_profiler_files.hpp).
#include "torch_profiler_files.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <zlib.h>

#include "file_progress.hpp"
#include "file_text.hpp"
#include "gzip.hpp"
#include "torch_profiler_actions.hpp"
#include "torch_profiler_document.hpp"
#include "torch_profiler_stream.hpp"
#include "pipescope/core/input_file.hpp"
#include "pipescope/core/json_limits.hpp"
#include "pipescope/core/terminal_text.hpp"
#include "pipescope/traces/torch_profiler.hpp"
#include "pipescope/traces/trace_limits.hpp"

namespace pipescope::traces {
namespace detail {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr std::string_view kUtf8ByteOrderMark = "\xEF\xBB\xBF";

// Up to `limit` bytes of a regular file (all of it without a limit); TraceError naming the file
// for anything else: a FIFO or device is never opened for a blocking read.
std::string read_regular(const std::string& path, std::size_t limit = std::string::npos) {
  if (auto problem = input_file_problem(path, "a torch.profiler trace file")) throw TraceError(*problem);
  std::string problem;
  const int fd = open_regular_file(path, problem);
  if (fd < 0) throw TraceError(path + ": cannot open the file: " + problem);
  std::string bytes;
  char chunk[1 << 16];
  while (bytes.size() < limit) {
    const ssize_t n = ::read(fd, chunk, std::min(sizeof chunk, limit - bytes.size()));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      throw TraceError(path + ": cannot read the file: " + std::strerror(errno));
    }
    bytes.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return bytes;
}

std::string without_byte_order_mark(std::string text) {
  if (text.starts_with(kUtf8ByteOrderMark)) text.erase(0, kUtf8ByteOrderMark.size());
  return text;
}

// The first `limit` bytes of a gzip stream's content (fewer when it is shorter or broken):
// enough to recognise a header without inflating a large file.
std::string gunzip_prefix(std::string_view compressed, std::size_t limit) {
  z_stream stream{};
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) return {};
  std::string out(limit, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  stream.avail_in = static_cast<uInt>(compressed.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  inflate(&stream, Z_SYNC_FLUSH);
  out.resize(out.size() - stream.avail_out);
  inflateEnd(&stream);
  return out;
}

// torch writes `"schemaVersion": 1` first, then its header (device properties, which grow with
// the GPUs, and the distributed info) before the events; pipescope's own traces and other
// Chrome traces have no schemaVersion.
constexpr std::size_t kHeaderBytes = 1 << 16;

bool has_torch_header(std::string_view text) {
  const std::string_view head = text.substr(0, kHeaderBytes);
  return text.substr(0, 512).find("\"schemaVersion\"") != std::string_view::npos &&
         (head.find("\"distributedInfo\"") != std::string_view::npos ||
          head.find("\"traceEvents\"") != std::string_view::npos);
}

bool ends_with(std::string_view name, std::string_view suffix) {
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_trace_file_name(const fs::path& p) {
  const std::string name = p.filename().string();
  return ends_with(name, ".json") || ends_with(name, ".json.gz");
}

// torch.profiler's own names for its files (tensorboard_trace_handler: WORKER.TIME.pt.trace.json[.gz]).
bool is_torch_file_name(const fs::path& p) {
  const std::string name = p.filename().string();
  return ends_with(name, ".pt.trace.json") || ends_with(name, ".pt.trace.json.gz");
}

// What the start of a file is: torch's header, other JSON, or unreadable (the reason).
struct FileHead {
  bool torch = false;
  std::optional<std::string> unreadable;
};

FileHead look_at(const std::string& path) {
  const std::string raw = read_regular(path, kHeaderBytes);
  FileHead head;
  std::string text = raw;
  if (looks_gzipped(raw)) {
    text = gunzip_prefix(raw, kHeaderBytes);
    if (text.empty()) {
      head.unreadable = "its gzip data does not decompress";
      return head;
    }
  }
  text = without_byte_order_mark(std::move(text));
  head.torch = has_torch_header(text);
  const auto first = text.find_first_not_of(" \t\r\n");
  if (!head.torch && (first == std::string::npos || (text[first] != '{' && text[first] != '[')))
    head.unreadable = first == std::string::npos ? "the file is empty" : "it is not JSON";
  return head;
}

std::string event_place(const std::string& path, std::size_t index, const json& e) {
  const auto name = e.find("name");
  return fmt::format("{}: traceEvents[{}]{}", path, index,
                     name != e.end() && name->is_string()
                         ? fmt::format(" (\"{}\")", printable(name->get_ref<const std::string&>()))
                         : std::string());
}

// A number field of an event, checked: its type, and the bound `problem_of` holds it to.
double checked_number(const json& e, const char* field, const std::string& place,
                      std::optional<std::string> (*problem_of)(double)) {
  const json& v = e[field];
  if (!v.is_number()) throw TraceError(fmt::format("{}: field '{}' must be a number", place, field));
  const double value = v.get<double>();
  if (auto problem = problem_of(value)) throw TraceError(fmt::format("{}: field '{}' {}", place, field, *problem));
  return value;
}

// Every event the reader uses, held to the rules of pipescope's own traces: complete events
// ("X") with a string name and bounded times, ids that are integers or strings, and `[memory]`
// samples with a bounded byte count.
void check_events(RankFile& f, const json& doc) {
  const json& events = doc["traceEvents"];
  for (std::size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    if (!e.is_object()) throw TraceError(fmt::format("{}: traceEvents[{}]: an event must be an object", f.path, i));
    const auto ph = e.find("ph");
    if (ph == e.end() || ph->is_null()) continue;
    if (!ph->is_string()) throw TraceError(fmt::format("{}: field 'ph' must be a string", event_place(f.path, i, e)));
    const std::string place = event_place(f.path, i, e);
    for (const char* id : {"pid", "tid"})
      if (const auto it = e.find(id); it != e.end() && !it->is_number_integer() && !it->is_string())
        throw TraceError(fmt::format("{}: field '{}' must be an integer or a string", place, id));
    const std::string& phase = ph->get_ref<const std::string&>();
    if (phase == "X") {
      const auto name = e.find("name");
      if (name == e.end() || !name->is_string())
        throw TraceError(fmt::format("{}: field 'name' must be a string", place));
      if (!e.contains("ts")) throw TraceError(fmt::format("{}: field 'ts' is missing", place));
      if (!e.contains("dur")) throw TraceError(fmt::format("{}: field 'dur' is missing", place));
      const double ts = checked_number(e, "ts", place, timestamp_problem);
      checked_number(e, "dur", place, duration_problem);
      f.first_us = std::min(f.first_us, ts);
      f.last_us = std::max(f.last_us, ts);
    }
    if (e.value("name", json()) == kMemorySampleName) {
      const auto args = e.find("args");
      if (args == e.end() || !args->is_object() || !args->contains("Total Allocated")) continue;
      if (!e.contains("ts")) throw TraceError(fmt::format("{}: field 'ts' is missing", place));
      checked_number(e, "ts", place, timestamp_problem);
      const json& bytes = (*args)["Total Allocated"];
      if (!bytes.is_number()) throw TraceError(fmt::format("{}: args.'Total Allocated' must be a number", place));
      if (auto problem = bytes_problem(bytes.get<double>()))
        throw TraceError(fmt::format("{}: args.'Total Allocated' {}", place, *problem));
    }
  }
}

// Files of one run: one world size, distinct ranks, and (on one host) overlapping profiles.
void check_one_run(const std::vector<RankFile>& files) {
  std::map<int, const RankFile*> by_rank;
  for (const auto& f : files) {
    if (files.size() > 1 && !f.has_distributed_info)
      throw TraceError(
          fmt::format("{} has no distributedInfo (torch.profiler writes it for a run with a process group), "
                      "so its rank is unknown: give it alone, or the files of one distributed run",
                      f.path));
    if (f.world_size != files.front().world_size)
      throw TraceError(fmt::format("{} and {} are not of one run: world size {} and {}", files.front().path, f.path,
                                   files.front().world_size, f.world_size));
    if (f.rank < 0 || f.rank >= f.world_size)
      throw TraceError(
          fmt::format("{}: distributedInfo.rank {} is outside the world size {}", f.path, f.rank, f.world_size));
    const auto [it, added] = by_rank.emplace(f.rank, &f);
    if (!added) throw TraceError(fmt::format("{} and {} both hold rank {}", it->second->path, f.path, f.rank));
    const RankFile& first = files.front();
    if (&f != &first && f.host == first.host && (f.last_us < first.first_us || first.last_us < f.first_us))
      throw TraceError(fmt::format("{} and {} are not of one run: recorded at different times on host {}", first.path,
                                   f.path, printable(f.host)));
  }
}

// The one streaming pass (torch_profiler_stream.hpp): a gzip file inflated by chunks, a plain
// one mapped; false where it gives way to the reference parser.
bool read_rank_file_fast(FileText& file, RankFile& f, FileProgress& progress) {
  if (file.gzipped()) {
    const std::string head = without_byte_order_mark(gunzip_prefix(file.compressed(), kHeaderBytes));
    if (!has_torch_header(head)) return false;  // the whole text then says why (or gunzip what is broken)
    progress.set_text_bytes(gzip_size_hint(file.compressed()));
    GzipChunks chunks(file.compressed());
    return read_torch_chunks_fast(chunks, f, progress);
  }
  const std::string_view text = file.text();
  if (!has_torch_header(text)) return false;
  progress.set_text_bytes(text.size());
  return read_torch_text_fast(text, f, progress, [&file](std::uint64_t offset) { file.release_before(offset); });
}

}  // namespace

RankFile load_rank_file(const std::string& path, ReadProgress* progress) {
  RankFile f;
  f.path = path;
  FileText file(path, "a torch.profiler trace file");
  FileProgress file_progress(progress, file.file_bytes());
  if (read_rank_file_fast(file, f, file_progress)) {
    file_progress.finish();
    return f;
  }
  const std::string_view text = file.text();
  if (!has_torch_header(text)) throw TraceError(path + ": not a torch.profiler trace (no schemaVersion header)");
  file_progress.set_text_bytes(text.size());
  f = RankFile();
  f.path = path;
  if (auto problem = json_depth_problem(text)) throw TraceError(path + ": " + *problem);
  json doc;
  try {
    doc = parse_torch_document(text, file_progress);
  } catch (const json::exception& e) {
    std::string why = e.what();
    if (auto end = why.find("] "); why.rfind("[json.exception.", 0) == 0 && end != std::string::npos)
      why = why.substr(end + 2);
    throw TraceError(fmt::format("{}: not valid JSON: {}", path, why));
  }
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    throw TraceError(path + ": traceEvents: missing or not an array");
  read_torch_header(doc, f);
  check_events(f, doc);
  f.events = torch_events_of_document(doc);
  file_progress.finish();
  return f;
}

std::vector<RankFile> load_run_files(const std::vector<std::string>& paths, ReadProgress* progress) {
  const std::vector<std::string> file_paths = torch_profiler_files(paths);
  if (file_paths.empty()) throw TraceError("no torch.profiler trace files given");
  std::vector<RankFile> files;
  files.reserve(file_paths.size());
  for (const auto& p : file_paths) files.push_back(load_rank_file(p, progress));
  check_one_run(files);
  std::sort(files.begin(), files.end(), [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; });
  return files;
}

namespace {

// The path of rank `rank`'s file, for messages.
const std::string& path_of_rank(const std::vector<RankFile>& files, int rank) {
  for (const auto& f : files)
    if (f.rank == rank) return f.path;
  return files.front().path;
}

// What `numbers` (ascending, from 0) leaves out below its largest: "4 to 98", or "" when none.
std::string gap_in(const std::set<int>& numbers) {
  int expected = 0;
  for (const int n : numbers) {
    if (n < 0) continue;
    if (n != expected) return n - 1 == expected ? std::to_string(expected) : fmt::format("{} to {}", expected, n - 1);
    ++expected;
  }
  return "";
}

}  // namespace

// Stages are numbered 0..S-1 and every stage forwards micro-batches 0..M-1 in a step, so a
// number past a gap belongs to no run: a corrupt or foreign span that would make a stage or a
// micro-batch of its own in every figure. Refused when the files can show the gap is real
// (every rank's file given; for micro-batches, a step marked too). With ranks missing, their
// files may hold the gap: a stage is named in a note only when it lies beyond what the world
// can hold (as many stages per rank as the files show), a micro-batch always.
void check_numbering(const std::vector<RankFile>& files, const std::map<int, int>& stage_rank,
                     const std::map<int, std::set<int>>& forwards, bool steps_marked, std::vector<std::string>& notes) {
  const bool every_rank = static_cast<int>(files.size()) >= files.front().world_size;
  std::set<int> stages;
  std::map<int, int> stages_of_rank;
  for (const auto& [stage, rank] : stage_rank) stages.insert(stage), ++stages_of_rank[rank];
  if (const std::string gap = gap_in(stages); !gap.empty()) {
    const int last = *stages.rbegin();
    int per_rank = 1;
    for (const auto& [rank, count] : stages_of_rank) per_rank = std::max(per_rank, count);
    const std::string what = fmt::format("{}: PP: spans of stage {}, but no file has stage {}: not a stage of this run",
                                         path_of_rank(files, stage_rank.at(last)), last, gap);
    if (every_rank) throw TraceError(what);
    if (static_cast<std::int64_t>(last) >= static_cast<std::int64_t>(files.front().world_size) * per_rank)
      notes.push_back(fmt::format("{} (its {} ranks hold {} stages each)", what, files.front().world_size, per_rank));
  }
  for (const auto& [stage, micro_batches] : forwards) {
    const std::string gap = gap_in(micro_batches);
    if (gap.empty()) continue;
    const std::string what =
        fmt::format("{}: stage {} forwards micro-batch {}, but not micro-batch {}: not a micro-batch of this run",
                    path_of_rank(files, stage_rank.at(stage)), stage, *micro_batches.rbegin(), gap);
    if (steps_marked && every_rank) throw TraceError(what);
    notes.push_back(what +
                    (steps_marked ? " (or a rank's file is missing)" : " (or the profile started inside a step)"));
  }
}

}  // namespace detail

bool is_torch_profiler_input(const std::string& path) {
  std::error_code ec;
  // Only a torch run comes as a folder; what is in it (or missing) torch_profiler_files says.
  if (std::filesystem::is_directory(path, ec)) return true;
  if (non_regular_kind(path)) return false;  // a FIFO is never opened: read_trace refuses it
  try {
    return detail::look_at(path).torch;
  } catch (const TraceError&) {
    return false;  // read_trace says what is wrong with it
  }
}

std::vector<std::string> torch_profiler_files(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& path : paths) {
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec)) {
      files.push_back(path);
      continue;
    }
    std::vector<std::string> inside;
    bool any_json = false;
    for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
      if (!detail::is_trace_file_name(entry.path())) continue;
      any_json = true;
      const std::string file = entry.path().string();
      // A rank's file that cannot be read is an error, never an absent rank.
      if (auto kind = non_regular_kind(file)) {
        if (kind == "a directory") continue;
        throw TraceError(fmt::format("{} is {}, expected a torch.profiler trace file", file, *kind));
      }
      const detail::FileHead head = detail::look_at(file);
      if (head.unreadable) throw TraceError(fmt::format("{}: not a trace file: {}", file, *head.unreadable));
      if (head.torch)
        inside.push_back(file);
      else if (detail::is_torch_file_name(entry.path()))
        throw TraceError(file + ": not a torch.profiler trace (no schemaVersion header)");
    }
    if (ec) throw TraceError(fmt::format("{}: cannot list the folder: {}", path, ec.message()));
    if (inside.empty())
      throw TraceError(any_json
                           ? fmt::format("{}: no torch.profiler trace in the folder (its .json files have no "
                                         "schemaVersion header; give other traces by their file names)",
                                         path)
                           : fmt::format("{} is a directory, expected a trace file or the folder of a torch.profiler "
                                         "run: it holds no .json or .json.gz file",
                                         path));
    std::sort(inside.begin(), inside.end());
    files.insert(files.end(), inside.begin(), inside.end());
  }
  return files;
}

}  // namespace pipescope::traces
