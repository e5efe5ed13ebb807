// pprun's option parser. Scenario: defaults match SPEC.md's documented ones (schedule 1f1b,
// 4 micro-batches, tiny-gpt on the default corpus with vocab 256, 4 steps, timeout 60 s); "--micro-batches 8 --chunks=2 --quiet" sets 8,
// 2 (and marks chunks as given) and quiet; --microbatch-group-size-per-vp-stage 6 sets the group
// size (0, not given, by default; 0 given is refused); unknown options, missing and malformed values are
// UsageErrors that name the option; --help lists every option with its default. --device is cpu
// by default, accepts cuda and rejects anything else naming --device. --trace and --metrics into
// a folder that does not exist are refused before the run; --bind-cores is a flag. The data
// decides the vocabulary when --vocab is left out: 256 byte tokens for text, 128 for
// --data synthetic and for --model mlp (synthetic by default); a --vocab other than 256 on text,
// mlp on text and --eval-every on synthetic data are refused naming the option.
#include <catch2/catch.hpp>

#include <chrono>

#include "pipescope/core/errors.hpp"
#include "pprun/options.hpp"

using pipescope::UsageError;
using namespace pipescope::exec;

TEST_CASE("defaults and explicit values") {
  const RunOptions d = parse_run_options({});
  CHECK(d.schedule == "1f1b");
  CHECK(d.micro_batches == 4);
  CHECK(d.model == "tiny-gpt");  // issue 17: the default run trains on text, which tiny-gpt reads
  CHECK(d.steps == 4);
  CHECK(d.timeout == std::chrono::seconds(60));
  CHECK_FALSE(d.chunks_given);

  const RunOptions o =
      parse_run_options({"--micro-batches", "8", "--chunks=2", "--quiet", "--lr", "0.5", "--seed", "7"});
  CHECK(o.micro_batches == 8);
  CHECK(o.chunks == 2);
  CHECK(o.chunks_given);
  CHECK(o.quiet);
  CHECK(o.learning_rate == 0.5);
  CHECK(o.seed == 7);
  CHECK(d.clip_grad == 0);  // no clipping unless asked
  CHECK(parse_run_options({"--clip-grad", "1.0"}).clip_grad == 1.0);
  CHECK(d.microbatch_group_size == 0);  // not given: the schedule's default (Megatron's P)
  CHECK(parse_run_options({"--microbatch-group-size-per-vp-stage", "6"}).microbatch_group_size == 6);
}

TEST_CASE("bad options name the option") {
  CHECK_THROWS_WITH(parse_run_options({"--bogus"}), Catch::Contains("--bogus"));
  CHECK_THROWS_WITH(parse_run_options({"--steps"}), Catch::Contains("--steps needs a value"));
  CHECK_THROWS_WITH(parse_run_options({"--steps", "3x"}), Catch::Contains("--steps"));
  CHECK_THROWS_WITH(parse_run_options({"--quiet=1"}), Catch::Contains("--quiet takes no value"));
  CHECK_THROWS_AS(check_run_options(parse_run_options({"--micro-batches", "0"})), UsageError);
  CHECK_THROWS_WITH(parse_run_options({"--microbatch-group-size-per-vp-stage", "0"}),
                    Catch::Contains("--microbatch-group-size-per-vp-stage: 0 is below the minimum 1"));
  CHECK_THROWS_WITH(check_run_options(parse_run_options({"--model", "resnet"})), Catch::Contains("--model"));
  CHECK_THROWS_WITH(check_run_options(parse_run_options({"--clip-grad", "-0.5"})),
                    Catch::Contains("option --clip-grad: -0.5 must be a finite norm >= 0"));
  CHECK_THROWS_WITH(check_run_options(parse_run_options({"--clip-grad", "inf"})), Catch::Contains("--clip-grad"));
  CHECK_THROWS_WITH(check_run_options(parse_run_options({"--resume"})), Catch::Contains("--checkpoint-dir"));
  CHECK_THROWS_WITH(check_run_options(parse_run_options({"--timeout", "0"})), Catch::Contains("--timeout"));
  // Output files go to folders that exist: a run must not find out after its last step.
  CHECK_THROWS_WITH(
      check_run_options(parse_run_options({"--trace", "/nonexistent-folder/t.json"})),
      Catch::Contains("option --trace /nonexistent-folder/t.json: folder /nonexistent-folder does not exist"));
  CHECK_THROWS_WITH(check_run_options(parse_run_options({"--metrics", "/nonexistent-folder/m.jsonl"})),
                    Catch::Contains("option --metrics"));
  CHECK_NOTHROW(check_run_options(parse_run_options({"--trace", "t.json", "--metrics", "m.jsonl"})));
}

TEST_CASE("options --bind-cores and --no-bind-cores are flags; neither leaves the choice to binds_cores") {
  CHECK_FALSE(parse_run_options({}).bind_cores);
  CHECK_FALSE(parse_run_options({}).no_bind_cores);
  CHECK(parse_run_options({"--bind-cores"}).bind_cores);
  CHECK(parse_run_options({"--no-bind-cores"}).no_bind_cores);
  CHECK_THROWS_WITH(parse_run_options({"--bind-cores=1"}), Catch::Contains("--bind-cores takes no value"));
  CHECK_THROWS_WITH(check_run_options(parse_run_options({"--bind-cores", "--no-bind-cores"})),
                    Catch::Contains("options --bind-cores and --no-bind-cores contradict each other"));
}

TEST_CASE("--trace traces every step after the first by default, at most 8; --trace-steps K the last K") {
  auto count = [](std::vector<std::string> args) { return traced_step_count(parse_run_options(args)); };
  CHECK(count({"--steps", "40"}) == 0);  // nothing traced without --trace
  CHECK(count({"--trace", "t.json", "--steps", "1"}) == 1);
  CHECK(count({"--trace", "t.json", "--steps", "2"}) == 1);
  CHECK(count({"--trace", "t.json", "--steps", "4"}) == 3);
  CHECK(count({"--trace", "t.json", "--steps", "40"}) == kDefaultTracedSteps);
  CHECK(count({"--trace", "t.json", "--steps", "40", "--trace-steps", "2"}) == 2);
  CHECK_THROWS_WITH(parse_run_options({"--trace", "t.json", "--trace-steps", "0"}),
                    Catch::Contains("option --trace-steps: 0 is below the minimum 1"));
  CHECK_THROWS_WITH(check_run_options(parse_run_options({"--trace-steps", "2"})),
                    Catch::Contains("--trace-steps needs --trace"));
}

TEST_CASE("--trace-steps names the earlier steps' traces after the last one's") {
  CHECK(traced_step_path("out/t.json", 9, 9) == "out/t.json");
  CHECK(traced_step_path("out/t.json", 7, 9) == "out/t.step7.json");
  CHECK(traced_step_path("t.json.gz", 8, 9) == "t.step8.json.gz");
  CHECK(traced_step_path("trace", 3, 9) == "trace.step3");
  CHECK(parse_run_options({"--trace", "t.json", "--trace-steps", "3", "--steps", "5"}).trace_steps == 3);
  CHECK_NOTHROW(check_run_options(parse_run_options({"--trace", "t.json", "--trace-steps", "3", "--steps", "5"})));
  CHECK_THROWS_WITH(check_run_options(parse_run_options({"--trace-steps", "2"})),
                    Catch::Contains("--trace-steps needs --trace"));
  CHECK_THROWS_WITH(check_run_options(parse_run_options({"--trace", "t.json", "--trace-steps", "6", "--steps", "5"})),
                    Catch::Contains("--trace-steps") && Catch::Contains("5 step(s)"));
  CHECK_THROWS_WITH(check_run_options(parse_run_options({"--trace", "t.json", "--trace-steps", "0"})),
                    Catch::Contains("--trace-steps: 0 is below the minimum 1"));
}

TEST_CASE("help lists every option with its default") {
  const std::string help = run_options_help();
  for (const char* option : {"--nproc-per-node",
                             "--schedule",
                             "--micro-batches",
                             "--chunks",
                             "--model",
                             "--layers",
                             "--hidden",
                             "--seq-len",
                             "--vocab",
                             "--micro-batch-size",
                             "--steps",
                             "--seed",
                             "--threads-per-rank",
                             "--bind-cores",
                             "--metrics",
                             "--trace",
                             "--trace-steps",
                             "--timeout",
                             "--checkpoint-dir",
                             "--checkpoint-every",
                             "--resume",
                             "--dp",
                             "--lr",
                             "--clip-grad",
                             "--quiet",
                             "--help",
                             "--version"})
    CHECK_THAT(help, Catch::Contains(option));
  CHECK_THAT(help, Catch::Contains("(default 1f1b)"));
  CHECK_THAT(help, Catch::Contains("(default 60)"));
}

TEST_CASE("--device is cpu or cuda") {
  CHECK(parse_run_options({}).device == "cpu");
  const RunOptions cuda = parse_run_options({"--device", "cuda"});
  CHECK(cuda.device == "cuda");
  CHECK_NOTHROW(check_run_options(cuda));
  CHECK_THROWS_WITH(check_run_options(parse_run_options({"--device=tpu"})),
                    Catch::Contains("--device") && Catch::Contains("tpu"));
  CHECK_THAT(run_options_help(), Catch::Contains("--device cpu|cuda"));
}

TEST_CASE("the data decides the default vocabulary and what fits it") {
  const RunOptions d = parse_run_options({});
  CHECK(d.data.empty());
  CHECK_FALSE(uses_synthetic_data(d));
  CHECK(d.vocab == 256);
  CHECK(d.eval_every == 0);
  const RunOptions synthetic = parse_run_options({"--data", "synthetic"});
  CHECK(uses_synthetic_data(synthetic));
  CHECK(synthetic.vocab == 128);
  const RunOptions mlp = parse_run_options({"--model", "mlp"});
  CHECK(uses_synthetic_data(mlp));
  CHECK(mlp.vocab == 128);
  CHECK(parse_run_options({"--data", "synthetic", "--vocab", "64"}).vocab == 64);
  CHECK(text_data_path(parse_run_options({"--data", "/some/text.txt"})) == "/some/text.txt");
  CHECK_NOTHROW(check_run_options(parse_run_options({"--vocab", "256"})));
  CHECK_THROWS_WITH(check_run_options(parse_run_options({"--vocab", "64"})), Catch::Contains("option --vocab 64"));
  CHECK_THROWS_WITH(check_run_options(parse_run_options({"--model", "mlp", "--data", "t.txt"})),
                    Catch::Contains("--model mlp"));
  CHECK_THROWS_WITH(check_run_options(parse_run_options({"--data", "synthetic", "--eval-every", "2"})),
                    Catch::Contains("--eval-every"));
  CHECK_THROWS_WITH(parse_run_options({"--data", ""}), Catch::Contains("option --data"));
  CHECK_THROWS_WITH(check_run_options(parse_run_options({"--eval-every", "-1"})), Catch::Contains("--eval-every"));
  const std::string help = run_options_help();
  for (const char* option : {"--data PATH", "--eval-every N", "share/pipescope/corpus", "synthetic"})
    CHECK_THAT(help, Catch::Contains(option));
}

// --recompute is --recompute-layers 1; off (0) by default; the two agree or are refused; 0 and
// negative counts are refused naming the option; --help names Megatron's analogue.
TEST_CASE("--recompute and --recompute-layers set the recomputed run length") {
  CHECK(parse_run_options({}).recompute_layers == 0);
  CHECK(parse_run_options({"--recompute"}).recompute_layers == 1);
  CHECK(parse_run_options({"--recompute-layers", "3"}).recompute_layers == 3);
  CHECK(parse_run_options({"--recompute", "--recompute-layers=1"}).recompute_layers == 1);
  CHECK_THROWS_WITH(parse_run_options({"--recompute-layers", "0"}),
                    "option --recompute-layers: 0 is below the minimum 1");
  CHECK_THROWS_WITH(parse_run_options({"--recompute-layers", "-2"}),
                    "option --recompute-layers: -2 is below the minimum 1");
  CHECK_THROWS_WITH(
      parse_run_options({"--recompute-layers", "2", "--recompute"}),
      Catch::StartsWith("option --recompute: asks for runs of 1 layer(s), but runs of 2 were asked for already"));
  CHECK_THROWS_WITH(parse_run_options({"--recompute=1"}), "option --recompute takes no value");
  CHECK_THAT(run_options_help(), Catch::Contains("--recompute-layers N") && Catch::Contains("--recompute-num-layers"));
}
