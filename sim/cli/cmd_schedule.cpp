// `ppsim schedule NAME --stages P --micro-batches M [--chunks V] [--format json|torch-csv|text] [-o FILE]`
// Generates (or reads, with file:PATH) a schedule, validates it, and writes it in one of the
// three forms. An invalid schedule is never written.
#include <boost/program_options.hpp>
#include <cctype>
#include <filesystem>
#include <iostream>
#include <optional>

#include "command.hpp"
#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/option_conflicts.hpp"
#include "pipescope/core/terminal_text.hpp"
#include "pipescope/core/schedule_io.hpp"
#include "pipescope/core/validator.hpp"
#include "schedule_options.hpp"

namespace po = boost::program_options;

namespace pipescope::cli {
namespace {

enum class Format { Json, TorchCsv, Text };

Format parse_format(const std::string& text) {
  if (text == "json") return Format::Json;
  if (text == "torch-csv") return Format::TorchCsv;
  if (text == "text") return Format::Text;
  throw UsageError("--format: unknown format '" + text + "' (json, torch-csv, text)");
}

// The format an output's name asks for (s.json, s.csv, s.txt), or nothing for a name without an
// extension (/dev/stdout, a FIFO). Another extension is refused unless --format says the format
// (`format_given`), so that s.yaml never silently holds the text grid.
std::optional<Format> format_of_name(const std::string& path, bool format_given) {
  std::string extension = std::filesystem::path(path).extension().string();
  for (char& c : extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (extension.empty()) return std::nullopt;
  if (extension == ".json") return Format::Json;
  if (extension == ".csv") return Format::TorchCsv;
  if (extension == ".txt" || extension == ".text") return Format::Text;
  if (format_given) return std::nullopt;
  throw UsageError("-o " + path + ": a schedule is written as .json, .csv (torch) or .txt; give --format for another "
                   "extension");
}

std::string render(const Schedule& schedule, Format format) {
  switch (format) {
    case Format::Json: return to_schedule_json(schedule);
    case Format::TorchCsv: return to_torch_csv(schedule);
    case Format::Text: return to_text_grid(schedule);
  }
  return {};
}

int run_schedule(const std::vector<std::string>& args) {
  ScheduleOptions schedule_options;
  std::string format_text = "text";
  std::string output;
  bool blocking_sends = false;
  po::options_description options("ppsim schedule NAME [options]");
  options.add_options()("help,h", "this text");
  schedule_options.add_to(options);
  options.add_options()
      ("format", po::value(&format_text)->default_value(format_text),
       "output form: json, torch-csv or text (the step x rank grid); with -o, the file's extension decides "
       "(.json, .csv, .txt)")
      ("output,o", po::value(&output), "write to FILE (atomically) instead of stdout")
      ("blocking-sends", po::bool_switch(&blocking_sends), "validate under DeepSpeed's rendezvous rule too");
  po::positional_options_description positional;
  positional.add("schedule", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(options).positional(positional).run(), vm);
  if (vm.count("help")) {
    std::cout << options << "\nschedules:\n" << schedule_list_text();
    return 0;
  }
  po::notify(vm);
  if (schedule_options.name.empty()) throw UsageError("missing schedule NAME (see ppsim schedule --help)");
  // The output's name decides the format unless --format is given, and must not contradict it:
  // s.csv holds a torch CSV, never the text grid under that name.
  Format format = parse_format(format_text);
  if (!output.empty()) {
    const std::optional<Format> named = format_of_name(output, !vm["format"].defaulted());
    if (named && vm["format"].defaulted()) format = *named;
    else if (named && *named != format)
      throw UsageError(contradiction("--format", format_text, "the output name " + output,
                                     *named == Format::Json ? "the extension of a JSON schedule"
                                     : *named == Format::TorchCsv ? "the extension of a torch CSV"
                                                                  : "the extension of the text grid"));
  }

  const Schedule schedule = schedule_options.make(vm);
  validate(schedule, ValidationOptions{.blocking_sends = blocking_sends});
  const std::string text = render(schedule, format);
  if (output.empty())
    std::cout << (format == Format::Json ? printable_json(text) : printable_lines(text));
  else
    write_file_atomic(output, text);
  return 0;
}

const CommandRegistrar schedule_registrar{
    {"schedule", "generate a schedule (or read file:PATH), validate it, print or write it", run_schedule}};

}  // namespace
}  // namespace pipescope::cli
