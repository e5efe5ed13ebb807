#include "traced_steps.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <set>
#include <system_error>
#include <utility>

namespace pipescope::cli {
namespace {

namespace fs = std::filesystem;

// FILE's stem and extension as pprun splits them (t.json.gz -> "t", ".json.gz").
std::pair<std::string, std::string> stem_and_extension(const fs::path& path) {
  std::string extension = path.extension().string();
  std::string stem = path.stem().string();
  if (extension == ".gz" && path.stem().has_extension()) {
    extension = path.stem().extension().string() + extension;
    stem = path.stem().stem().string();
  }
  return {stem, extension};
}

// The N of "<stem>.step<N><extension>", or -1.
long step_of(const std::string& name, const std::string& stem, const std::string& extension) {
  const std::string prefix = stem + ".step";
  if (name.size() <= prefix.size() + extension.size() || !name.starts_with(prefix) || !name.ends_with(extension)) return -1;
  const std::string_view digits(name.data() + prefix.size(), name.size() - prefix.size() - extension.size());
  long step = -1;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (error != std::errc() || end != digits.data() + digits.size()) return -1;
  return step;
}

std::string canonical_text(const fs::path& path) {
  std::error_code error;
  const fs::path canonical = fs::weakly_canonical(path, error);
  return error ? path.lexically_normal().string() : canonical.string();
}

}  // namespace

std::vector<std::string> with_traced_steps(const std::vector<std::string>& inputs) {
  std::set<std::string> given;
  for (const std::string& input : inputs) given.insert(canonical_text(input));
  std::vector<std::string> out;
  std::set<std::string> added;
  for (const std::string& input : inputs) {
    const fs::path path(input);
    std::error_code error;
    const auto [stem, extension] = stem_and_extension(path);
    const fs::file_time_type file_time = fs::last_write_time(path, error);
    std::vector<std::pair<long, std::string>> siblings;
    // A step file itself, or a path that is not a readable file: reading it says what is wrong.
    if (!error && step_of(path.filename().string(), stem, extension) < 0 && fs::is_regular_file(path, error)) {
      const fs::path folder = path.has_parent_path() ? path.parent_path() : fs::path(".");
      for (fs::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
        const long step = step_of(it->path().filename().string(), stem, extension);
        if (step < 0 || !it->is_regular_file(error)) continue;
        const fs::file_time_type sibling_time = fs::last_write_time(it->path(), error);
        if (error) continue;
        const double older_s = std::chrono::duration<double>(file_time - sibling_time).count();
        if (older_s < 0 || older_s > kSameRunWindowSeconds) continue;
        const std::string sibling = (path.has_parent_path() ? path.parent_path() / it->path().filename()
                                                            : it->path().filename()).string();
        const std::string key = canonical_text(sibling);
        if (!given.contains(key) && added.insert(key).second) siblings.emplace_back(step, sibling);
      }
      error.clear();
    }
    std::sort(siblings.begin(), siblings.end());
    for (auto& [step, sibling] : siblings) out.push_back(std::move(sibling));
    out.push_back(input);
  }
  return out;
}

}  // namespace pipescope::cli
