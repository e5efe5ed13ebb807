// `ppsim schedule NAME --stages P --micro-batches M [--chunks V] [--format json|torch-csv|text] [-o FILE]`
// Generates (or reads, with file:PATH) a schedule, validates it, and writes it in one of the
// three forms. An invalid schedule is never written.
#include <boost/program_options.hpp>
#include <iostream>

#include "command.hpp"
#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/errors.hpp"
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
       "output form: json, torch-csv or text (the step x rank grid)")
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
  const Format format = parse_format(format_text);

  const Schedule schedule = schedule_options.make(vm);
  validate(schedule, ValidationOptions{.blocking_sends = blocking_sends});
  const std::string text = render(schedule, format);
  if (output.empty())
    std::cout << text;
  else
    write_file_atomic(output, text);
  return 0;
}

const CommandRegistrar schedule_registrar{
    {"schedule", "generate a schedule (or read file:PATH), validate it, print or write it", run_schedule}};

}  // namespace
}  // namespace pipescope::cli
