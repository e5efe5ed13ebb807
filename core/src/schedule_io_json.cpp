// pipescope.schedule/1 JSON (SPEC.md section 3): reader with errors that name the JSON path,
// writer that keeps one step per line so files stay readable and diffable, and the
// file-extension dispatch of read_schedule_file.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "pipescope/core/atomic_file.hpp"
#include "pipescope/core/errors.hpp"
#include "pipescope/core/input_file.hpp"
#include "pipescope/core/json_limits.hpp"
#include "pipescope/core/schedule_io.hpp"
#include "pipescope/core/size_limits.hpp"

namespace pipescope {
namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "pipescope.schedule/1";

// Quotes a value taken from the input for an error message: control characters escaped and
// long values cut, so the message stays one short line whatever the file holds.
std::string quoted_value(std::string_view text) {
  constexpr std::size_t kMaxShown = 40;
  std::string out = "'";
  for (std::size_t i = 0; i < text.size() && i < kMaxShown; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > kMaxShown) out += "...";
  out += "'";
  return out;
}

// The same escaping for a whole message (nlohmann's texts quote input tokens).
std::string quoted_value_keep_length(std::string_view text) {
  std::string out;
  for (char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

std::string type_name_of(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a fractional number";
    default: return "binary data";
  }
}

// Reads one document; every error names `source` and the JSON path of the value at fault.
class JsonScheduleReader {
 public:
  explicit JsonScheduleReader(const std::string& source) : source_(source) {}

  Schedule read(std::string_view text) const {
    // Kept top-level fields are copied and written back by recursive code: bounded first.
    if (auto problem = json_depth_problem(text)) fail("", "not valid JSON: " + *problem);
    json document;
    try {
      document = json::parse(text.begin(), text.end());
    } catch (const json::exception& e) {
      // nlohmann's text is "[json.exception.parse_error.101] parse error at line 1, ..." or,
      // for a number beyond double, "[json.exception.out_of_range.406] number overflow ...".
      std::string why = e.what();
      if (auto end = why.find("] "); why.rfind("[json.exception.", 0) == 0 && end != std::string::npos)
        why = why.substr(end + 2);
      const std::string_view prefix = "parse error at ";
      if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
      fail("", "not valid JSON: " + quoted_value_keep_length(why));
    }
    if (!document.is_object()) fail("", "expected a JSON object, got " + type_name_of(document));

    Schedule schedule;
    const auto format_it = document.find("format");
    const json* format = format_it == document.end() ? nullptr : &*format_it;
    if (!format) fail("format", "missing (expected \"" + std::string(kFormat) + "\")");
    if (!format->is_string() || format->get_ref<const std::string&>() != kFormat)
      fail("format", "expected \"" + std::string(kFormat) + "\", got " +
                         (format->is_string() ? quoted_value(format->get_ref<const std::string&>())
                                              : type_name_of(*format)));
    if (auto it = document.find("schedule"); it != document.end()) {
      if (!it->is_string()) fail("schedule", "expected a string, got " + type_name_of(*it));
      schedule.name = it->get<std::string>();
    } else {
      schedule.name = source_;
    }
    schedule.num_ranks = positive_count(document, "num_ranks");
    schedule.num_stages = positive_count(document, "num_stages");
    schedule.num_micro_batches = positive_count(document, "num_micro_batches");
    if (static_cast<long long>(schedule.num_stages) * schedule.num_micro_batches > INT_MAX)
      fail("num_micro_batches", "num_stages x num_micro_batches exceeds " + std::to_string(INT_MAX));

    const json& placement = required(document, "stage_to_rank", "");
    if (!placement.is_array()) fail("stage_to_rank", "expected an array, got " + type_name_of(placement));
    if (placement.size() != static_cast<std::size_t>(schedule.num_stages))
      fail("stage_to_rank", "has " + std::to_string(placement.size()) + " entries, num_stages is " +
                                std::to_string(schedule.num_stages));
    schedule.stage_to_rank.reserve(placement.size());
    for (std::size_t s = 0; s < placement.size(); ++s) {
      const std::string path = "stage_to_rank[" + std::to_string(s) + "]";
      const int rank = non_negative_int(placement[s], path);
      if (rank >= schedule.num_ranks)
        fail(path, "rank " + std::to_string(rank) + " out of range (num_ranks is " +
                       std::to_string(schedule.num_ranks) + ")");
      schedule.stage_to_rank.push_back(rank);
    }

    const json& programs = required(document, "programs", "");
    if (!programs.is_array()) fail("programs", "expected an array, got " + type_name_of(programs));
    if (programs.size() != static_cast<std::size_t>(schedule.num_ranks))
      fail("programs", "has " + std::to_string(programs.size()) + " programs, num_ranks is " +
                           std::to_string(schedule.num_ranks));
    schedule.programs.resize(programs.size());
    for (std::size_t r = 0; r < programs.size(); ++r)
      schedule.programs[r] = read_program(programs[r], schedule, static_cast<int>(r), "programs[" + std::to_string(r) + "]");
    schedule.communication = read_communication(document);

    for (auto it = document.begin(); it != document.end(); ++it) {
      static constexpr std::string_view kKnown[] = {"format", "schedule", "num_ranks", "num_stages",
                                                    "num_micro_batches", "stage_to_rank", "programs",
                                                    "communication"};
      bool known = false;
      for (auto k : kKnown) known = known || it.key() == k;
      if (!known) schedule.extra_fields[it.key()] = it.value();
    }
    return schedule;
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& why) const {
    throw ScheduleError(source_ + ": " + (path.empty() ? "" : path + ": ") + why);
  }

  const json& required(const json& object, const char* key, const std::string& parent) const {
    auto it = object.find(key);
    if (it == object.end()) fail(parent.empty() ? key : parent + "." + key, "missing");
    return *it;
  }

  int non_negative_int(const json& value, const std::string& path) const {
    if (value.is_number_unsigned()) {
      const auto v = value.get<std::uint64_t>();
      if (v > static_cast<std::uint64_t>(INT_MAX)) fail(path, "number " + std::to_string(v) + " is too large");
      return static_cast<int>(v);
    }
    if (value.is_number_integer()) {
      // nlohmann stores non-negative literals as unsigned, so this one is negative.
      fail(path, "expected a non-negative integer, got " + std::to_string(value.get<std::int64_t>()));
    }
    if (value.is_number_float()) fail(path, "expected a non-negative integer, got " + value.dump());
    fail(path, "expected a non-negative integer, got " + type_name_of(value));
  }

  int positive_count(const json& object, const char* key) const {
    const int value = non_negative_int(required(object, key, ""), key);
    if (value < 1) fail(key, "must be at least 1");
    return value;
  }

  // "communication": "torch" marks torch's semantics (a schedule converted from torch's CSV);
  // absent or "pipescope", SPEC section 3's.
  Communication read_communication(const json& document) const {
    auto it = document.find("communication");
    if (it == document.end()) return Communication::Pipescope;
    if (it->is_string() && it->get_ref<const std::string&>() == "torch") return Communication::Torch;
    if (it->is_string() && it->get_ref<const std::string&>() == "pipescope") return Communication::Pipescope;
    fail("communication", "expected \"pipescope\" or \"torch\", got " +
                              (it->is_string() ? quoted_value(it->get_ref<const std::string&>()) : type_name_of(*it)));
  }

  Program read_program(const json& program, const Schedule& schedule, int rank, const std::string& path) const {
    if (!program.is_array()) fail(path, "expected an array of steps, got " + type_name_of(program));
    Program steps(program.size());
    for (std::size_t t = 0; t < program.size(); ++t) {
      const json& step = program[t];
      const std::string step_path = path + "[" + std::to_string(t) + "]";
      if (!step.is_array()) fail(step_path, "expected an array of instructions, got " + type_name_of(step));
      steps[t].reserve(step.size());
      for (std::size_t i = 0; i < step.size(); ++i)
        read_instruction(step[i], schedule, rank, step_path + "[" + std::to_string(i) + "]", steps[t]);
    }
    return steps;
  }

  // An optional integer field: kNone when absent or null.
  int optional_int(const json& object, const char* key, const std::string& path) const {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return kNone;
    return non_negative_int(*it, path + "." + key);
  }

  // Appends the instruction to `step`; a rank-level collective (no "stage", as DeepSpeed writes
  // them) stands for every stage of `rank`, so it is appended once per stage, ascending.
  void read_instruction(const json& object, const Schedule& schedule, int rank, const std::string& path, Step& step) const {
    if (!object.is_object()) fail(path, "expected an instruction object, got " + type_name_of(object));
    Instruction instr;
    const json& op = required(object, "op", path);
    if (!op.is_string()) fail(path + ".op", "expected a string, got " + type_name_of(op));
    const auto parsed_op = op_from_name(op.get_ref<const std::string&>());
    if (!parsed_op) fail(path + ".op", "unknown op " + quoted_value(op.get_ref<const std::string&>()));
    instr.op = *parsed_op;

    const bool rank_level = instr.op == Op::ReduceTiedGrads || instr.op == Op::ReduceGrads || instr.op == Op::OptimizerStep;
    if (rank_level && !object.contains("stage")) {
      if (object.contains("micro_batch") && !object["micro_batch"].is_null())
        fail(path + ".micro_batch", std::string(op_name(instr.op)) + " works on the whole batch and takes no micro_batch");
      for (const char* key : {"peer_stage", "stage_id"})
        if (object.contains(key) && !object[key].is_null())
          fail(path + "." + key, std::string("not allowed on a rank-level ") + std::string(op_name(instr.op)) + " (no stage)");
      instr.micro_batch = kNone;
      instr.buffer = optional_int(object, "buffer", path);
      for (int s = 0; s < schedule.num_stages; ++s)
        if (schedule.stage_to_rank[s] == rank) {
          instr.stage = s;
          step.push_back(instr);
        }
      return;
    }
    instr.stage = non_negative_int(required(object, "stage", path), path + ".stage");
    if (instr.stage >= schedule.num_stages)
      fail(path + ".stage", "stage " + std::to_string(instr.stage) + " out of range (num_stages is " +
                                std::to_string(schedule.num_stages) + ")");

    instr.micro_batch = optional_int(object, "micro_batch", path);
    if (needs_micro_batch(instr.op)) {
      if (instr.micro_batch == kNone) fail(path + ".micro_batch", "missing (required on " + std::string(op_name(instr.op)) + ")");
      if (instr.micro_batch >= schedule.num_micro_batches)
        fail(path + ".micro_batch", "micro-batch " + std::to_string(instr.micro_batch) +
                                        " out of range (num_micro_batches is " +
                                        std::to_string(schedule.num_micro_batches) + ")");
    } else if (instr.micro_batch != kNone) {
      fail(path + ".micro_batch", std::string(op_name(instr.op)) + " works on the whole batch and takes no micro_batch");
    }

    instr.buffer = optional_int(object, "buffer", path);
    instr.peer_stage = optional_int(object, "peer_stage", path);
    if (instr.peer_stage != kNone) {
      if (!is_p2p(instr.op))
        fail(path + ".peer_stage", "only sends and receives have a peer stage, not " + std::string(op_name(instr.op)));
      if (instr.peer_stage >= schedule.num_stages)
        fail(path + ".peer_stage", "stage " + std::to_string(instr.peer_stage) + " out of range (num_stages is " +
                                       std::to_string(schedule.num_stages) + ")");
    }
    check_aliases(object, instr, path);
    step.push_back(instr);
  }

  // Unknown fields are accepted, except the names other tools use for the known ones
  // (torch's action text, DeepSpeed's *_id fields): those must agree with what they duplicate.
  void check_aliases(const json& object, const Instruction& instr, const std::string& path) const {
    if (auto it = object.find("action"); it != object.end()) {
      if (!it->is_string()) fail(path + ".action", "expected a string, got " + type_name_of(*it));
      const std::string expected = to_string(instr);
      if (it->get_ref<const std::string&>() != expected)
        fail(path + ".action", quoted_value(it->get_ref<const std::string&>()) + " contradicts op/stage/micro_batch (" +
                                   expected + ")");
    }
    struct Alias {
      const char* name;
      int value;
    };
    for (const Alias alias : {Alias{"stage_id", instr.stage}, Alias{"micro_batch_id", instr.micro_batch},
                              Alias{"buffer_id", instr.buffer}}) {
      auto it = object.find(alias.name);
      if (it == object.end()) continue;
      const int value = it->is_null() ? kNone : non_negative_int(*it, path + "." + alias.name);
      if (value != alias.value)
        fail(path + "." + alias.name, std::to_string(value) + " contradicts the value " +
                                          (alias.value == kNone ? std::string("absent") : std::to_string(alias.value)) +
                                          " given by the known field");
    }
  }

  std::string source_;
};

void append_int(std::string& out, long long value) {
  char digits[24];
  auto [end, ec] = std::to_chars(digits, digits + sizeof digits, value);
  out.append(digits, end);
}

void append_instruction(std::string& out, const Instruction& instr) {
  out += "{\"op\": \"";
  out += op_name(instr.op);
  out += "\", \"stage\": ";
  append_int(out, instr.stage);
  if (instr.micro_batch != kNone) {
    out += ", \"micro_batch\": ";
    append_int(out, instr.micro_batch);
  }
  if (instr.buffer != kNone) {
    out += ", \"buffer\": ";
    append_int(out, instr.buffer);
  }
  if (instr.peer_stage != kNone) {
    out += ", \"peer_stage\": ";
    append_int(out, instr.peer_stage);
  }
  out += '}';
}

}  // namespace

Schedule parse_schedule_json(std::string_view text, const std::string& source) {
  return JsonScheduleReader(source).read(text);
}

std::string to_schedule_json(const Schedule& schedule) {
  std::string out;
  out.reserve(64 + schedule.instruction_count() * 72);
  out += "{\n  \"format\": \"";
  out += kFormat;
  out += "\",\n  \"schedule\": ";
  out += json(schedule.name).dump(-1, ' ', false, json::error_handler_t::replace);
  out += ",\n  \"num_ranks\": ";
  append_int(out, schedule.num_ranks);
  out += ",\n  \"num_stages\": ";
  append_int(out, schedule.num_stages);
  out += ",\n  \"num_micro_batches\": ";
  append_int(out, schedule.num_micro_batches);
  out += ",\n  \"stage_to_rank\": [";
  for (std::size_t s = 0; s < schedule.stage_to_rank.size(); ++s) {
    if (s) out += ", ";
    append_int(out, schedule.stage_to_rank[s]);
  }
  out += "],\n";
  if (schedule.communication == Communication::Torch) out += "  \"communication\": \"torch\",\n";
  if (schedule.extra_fields.is_object()) {
    for (auto it = schedule.extra_fields.begin(); it != schedule.extra_fields.end(); ++it) {
      out += "  ";
      out += json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace);
      out += ": ";
      out += it.value().dump(-1, ' ', false, json::error_handler_t::replace);
      out += ",\n";
    }
  }
  out += "  \"programs\": [";
  for (std::size_t r = 0; r < schedule.programs.size(); ++r) {
    out += r ? ",\n    [" : "\n    [";
    const Program& program = schedule.programs[r];
    for (std::size_t t = 0; t < program.size(); ++t) {
      out += t ? ",\n      [" : "\n      [";
      for (std::size_t i = 0; i < program[t].size(); ++i) {
        if (i) out += ", ";
        append_instruction(out, program[t][i]);
      }
      out += ']';
    }
    out += program.empty() ? "]" : "\n    ]";
  }
  out += schedule.programs.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

namespace {

// What the file holds, or what lowering it would make when that is more.
ScheduleSize file_size_estimate(const Schedule& schedule) {
  ScheduleSize size = estimated_size(schedule.num_ranks, schedule.num_stages, schedule.num_micro_batches);
  std::int64_t steps = 0;
  for (const Program& program : schedule.programs) steps += static_cast<std::int64_t>(program.size());
  size.instructions = std::max(size.instructions, static_cast<std::int64_t>(schedule.instruction_count()));
  size.step_slots = std::max(size.step_slots, steps);
  return size;
}

}  // namespace

Schedule read_schedule_file(const std::string& path) {
  if (auto problem = input_file_problem(path, "a schedule file")) throw ScheduleError(*problem);
  std::string text;
  try {
    text = read_file(path);
  } catch (const std::runtime_error& e) {
    throw ScheduleError(e.what());
  }
  std::string extension = path.size() >= 4 ? path.substr(path.size() - 4) : std::string();
  for (char& c : extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool is_csv = extension == ".csv";
  Schedule schedule = is_csv ? parse_torch_csv(text, path) : parse_schedule_json(text, path);
  // The passes and the validator size tables by the declared counts, which a file may set far
  // beyond what it holds.
  check_schedule_size(path + ": num_stages " + std::to_string(schedule.num_stages) + " x num_micro_batches " +
                          std::to_string(schedule.num_micro_batches),
                      file_size_estimate(schedule));
  return schedule;
}

}  // namespace pipescope
