// pprun's text data (exec/src/data/), on real files written here.
// Scenario and expected:
// - a folder holding b.txt "world", a.txt "hello " and sub/c.txt "!" reads as the one stream
//   "hello world!" (sorted path order, across file ends), each file memory-mapped while the
//   corpus lives (listed in /proc/self/maps) and unmapped after.
// - a missing path, an empty file, a binary file (a NUL byte at offset 3), an empty folder and
//   (when not root) an unreadable file: a UsageError in one line naming the file and why.
// - 1000 bytes with seq_len 9 (windows of 10): 50 held-out bytes from offset 950, 105 training
//   windows at multiples of 9 ending by 950, 5 held-out windows from 950. Each epoch visits every
//   training window once, in an order that depends on the seed and differs between epochs; the
//   same seed gives the same order in another object (a resumed run, another rank).
// - replicas: with data position 8 and M 4, replicas 0 and 1 of dp 2 read global micro-batches
//   8..11 and 12..15: disjoint, and together what one replica of M 8 reads.
// - micro-batches: inputs [2, 9] and labels [2, 9] int64, labels the inputs shifted by one byte,
//   the bytes of the windows; held-out ones come from the held-out part only.
// - the default corpus the build copies (share/pipescope/corpus) opens as text.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "data/text_batches.hpp"
#include "data/text_corpus.hpp"
#include "data/text_windows.hpp"
#include "pipescope/core/errors.hpp"

using namespace pipescope::exec;
using pipescope::UsageError;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("pipescope_test_text_data_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string stream_of(const TextCorpus& corpus) {
  std::string text(static_cast<std::size_t>(corpus.size_bytes()), '\0');
  corpus.copy(0, corpus.size_bytes(), reinterpret_cast<std::uint8_t*>(text.data()));
  return text;
}

bool mapped_in_this_process(const fs::path& file) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find(fs::canonical(file).string()) != std::string::npos;
}

}  // namespace

TEST_CASE("a folder reads as one stream in sorted path order, memory-mapped", "[text_data]") {
  const fs::path dir = fresh_dir("folder");
  write(dir / "b.txt", "world");
  write(dir / "a.txt", "hello ");
  write(dir / "sub" / "c.txt", "!");
  {
    const TextCorpus corpus = TextCorpus::open(dir.string());
    CHECK(corpus.files() == std::vector<std::string>{(dir / "a.txt").string(), (dir / "b.txt").string(), (dir / "sub" / "c.txt").string()});
    CHECK(corpus.size_bytes() == 12);
    CHECK(stream_of(corpus) == "hello world!");
    std::string across(4, '\0');  // "o wo": the end of a.txt and the start of b.txt
    corpus.copy(4, 4, reinterpret_cast<std::uint8_t*>(across.data()));
    CHECK(across == "o wo");
    CHECK(mapped_in_this_process(dir / "b.txt"));
  }
  CHECK_FALSE(mapped_in_this_process(dir / "b.txt"));
  // A single file is a corpus of its own.
  CHECK(stream_of(TextCorpus::open((dir / "b.txt").string())) == "world");
  fs::remove_all(dir);
}

TEST_CASE("bad text is refused in one line naming the file", "[text_data]") {
  const fs::path dir = fresh_dir("bad");
  write(dir / "empty.txt", "");
  write(dir / "binary.bin", std::string("abc\0def", 7));
  fs::create_directories(dir / "nothing");
  auto refusal = [](const fs::path& path) {
    try {
      TextCorpus::open(path.string());
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const std::string missing = refusal(dir / "missing.txt");
  CHECK_THAT(missing, Catch::Contains((dir / "missing.txt").string()) && Catch::Contains("no such file"));
  CHECK_THAT(refusal(dir / "empty.txt"), Catch::StartsWith("option --data: file " + (dir / "empty.txt").string()) &&
                                             Catch::Contains("is empty"));
  CHECK_THAT(refusal(dir / "binary.bin"), Catch::Contains((dir / "binary.bin").string()) &&
                                              Catch::Contains("binary, not text (a NUL byte at offset 3)"));
  CHECK_THAT(refusal(dir / "nothing"), Catch::Contains("holds no files"));
  // In a folder, the bad file is named, not the folder.
  CHECK_THAT(refusal(dir), Catch::Contains((dir / "binary.bin").string()));
  for (const auto& path : {dir / "empty.txt", dir / "binary.bin", dir / "missing.txt", dir / "nothing"})
    CHECK(refusal(path).find('\n') == std::string::npos);
  write(dir / "secret.txt", "text");
  ::chmod((dir / "secret.txt").c_str(), 0);
  if (::geteuid() == 0) {
    WARN("running as root: every file is readable, the unreadable case cannot be made");
  } else {
    CHECK_THAT(refusal(dir / "secret.txt"), Catch::Contains((dir / "secret.txt").string()) && Catch::Contains("cannot open it"));
  }
  fs::remove_all(dir);
}

TEST_CASE("windows: the held-out part and a seeded order per epoch", "[text_data]") {
  const TextWindows w(1000, 9, 42, "corpus");
  CHECK(w.window_bytes() == 10);
  CHECK(w.training_end() == 950);
  CHECK(w.training_windows() == 105);
  CHECK(w.held_out_windows() == 5);

  auto epoch_order = [](const TextWindows& windows, std::int64_t epoch) {
    std::vector<std::int64_t> starts;
    for (std::int64_t i = 0; i < windows.training_windows(); ++i)
      starts.push_back(windows.training_window_start(epoch * windows.training_windows() + i));
    return starts;
  };
  const auto epoch0 = epoch_order(w, 0), epoch1 = epoch_order(w, 1);
  std::set<std::int64_t> visited(epoch0.begin(), epoch0.end());
  CHECK(visited.size() == 105);  // every window once
  for (std::int64_t start : visited) {
    CHECK(start % 9 == 0);
    CHECK(start + 10 <= 950);  // never into the held-out part
  }
  CHECK(std::set<std::int64_t>(epoch1.begin(), epoch1.end()) == visited);
  CHECK(epoch0 != epoch1);
  std::vector<std::int64_t> in_order(epoch0);
  std::sort(in_order.begin(), in_order.end());
  CHECK(epoch0 != in_order);  // shuffled
  CHECK(epoch_order(TextWindows(1000, 9, 42, "corpus"), 1) == epoch1);
  CHECK(epoch_order(TextWindows(1000, 9, 43, "corpus"), 0) != epoch0);

  for (std::int64_t i = 0; i < 5; ++i) CHECK(w.held_out_window_start(i) == 950 + 9 * i);
  CHECK(w.held_out_window_start(5) == 950);  // a fixed set, read round
  CHECK(w.held_out_window_start(4) + 10 <= 1000);

  CHECK_THROWS_WITH(TextWindows(19, 9, 42, "tiny.txt"), Catch::Contains("--data tiny.txt: 19 bytes are too few") &&
                                                            Catch::Contains("--seq-len 9"));
  CHECK_NOTHROW(TextWindows(20, 9, 42, "small.txt"));
}

TEST_CASE("replicas read disjoint micro-batches that together make one replica's", "[text_data]") {
  std::set<std::int64_t> dp2, dp1;
  for (int replica = 0; replica < 2; ++replica)
    for (int i = 0; i < 4; ++i) CHECK(dp2.insert(replica_first_micro_batch(8, replica, 4) + i).second);
  for (int i = 0; i < 8; ++i) dp1.insert(replica_first_micro_batch(8, 0, 8) + i);
  CHECK(dp2 == dp1);
  CHECK(*dp2.begin() == 8);
}

TEST_CASE("micro-batches are byte tokens with next-byte labels", "[text_data]") {
  const fs::path dir = fresh_dir("batches");
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  write(dir / "letters.txt", text);
  const TextBatches batches(TextCorpus::open((dir / "letters.txt").string()), 9, 2, 42, "letters.txt");
  const MicroBatch mb = batches.training_micro_batch(3);
  REQUIRE(mb.inputs.size() == 1);
  CHECK(mb.inputs[0].sizes() == at::IntArrayRef({2, 9}));
  CHECK(mb.labels.sizes() == at::IntArrayRef({2, 9}));
  CHECK(mb.inputs[0].scalar_type() == at::kLong);
  for (int b = 0; b < 2; ++b) {
    const std::int64_t start = batches.windows().training_window_start(3 * 2 + b);
    for (int t = 0; t < 9; ++t) {
      CHECK(mb.inputs[0][b][t].item<std::int64_t>() == static_cast<unsigned char>(text[static_cast<std::size_t>(start + t)]));
      CHECK(mb.labels[b][t].item<std::int64_t>() == static_cast<unsigned char>(text[static_cast<std::size_t>(start + t + 1)]));
    }
  }
  const MicroBatch held = batches.held_out_micro_batch(1);  // windows 2 and 3 of the held-out part
  CHECK(held.inputs[0][0][0].item<std::int64_t>() == static_cast<unsigned char>(text[950 + 18]));
  CHECK(held.labels[1][8].item<std::int64_t>() == static_cast<unsigned char>(text[950 + 27 + 9]));
  fs::remove_all(dir);
}

TEST_CASE("the default corpus the build copies is text", "[text_data]") {
  // Where pprun looks for it (default_corpus_path): share/pipescope/corpus beside its folder.
  const std::string path = (fs::path(PPRUN_PATH).parent_path().parent_path() / "share" / "pipescope" / "corpus").string();
  const TextCorpus corpus = TextCorpus::open(path);
  CHECK(corpus.files().size() >= 2);
  CHECK(corpus.size_bytes() > 100000);  // enough windows for a visible learning run
  const TextWindows windows(corpus.size_bytes(), 64, 1234, path);
  CHECK(windows.held_out_windows() > 64);
}
