// TorchScript models split at named submodules. Scenario: script modules built here (C++
// torch::jit::Module + define), saved to a temporary file and loaded back, and four files saved
// from Python by exec/examples/save_scripted_model.py with torch 2.15, the LibTorch linked here:
// scripted, traced, and two using scaled_dot_product_attention (an attention block in the MLP,
// and a model of two pre-norm transformer blocks).
// Expected:
// - mlp (inp 6->8, block0, block1 8->8 residual gelu, head 8->4; 56 + 72 + 72 + 36 = 236
//   parameters), batch 4: split at block1 gives segments of 128 and 108 parameters, split at
//   block0,head gives 56, 144, 36; boundaries [4,6] | [4,8] | [4,8] | [4,4]; running the
//   segments in sequence gives bit-identical outputs and parameter gradients to the unsplit
//   module (both in the interpreter without graph optimisation), through StageModule too; two
//   builds of one segment are independent copies (changing one's weights leaves the other's
//   output as it was);
// - a skip connection (inp's output used by head) and a tuple-returning block: 4 tensors cross
//   the split at block1 (the skip, the tuple whose second element is added after block1 as 2
//   tensors, and its first element, taken before block1), 2 at head (h, and the skip passed
//   through block1's segment), and splitting at fork makes 2 cross (block0's output and the
//   skip); all exact;
// - token ids (int64 [4,5]) into an embedding (vocab 11, width 8): exact gradients, including
//   the embedding's;
// - the Python files (12 -> 16 -> 5, 901 parameters) split at block1,head into 512 | 304 | 85
//   parameters, exact against the unsplit file, scripted and traced alike;
// - the attention files split exactly too: attention_mlp.pt (block1 is attention, 16 -> 48 qkv)
//   at block1,head into 512 | 816 | 85; transformer.pt (12 -> 32, 2 blocks of 4 heads, head over
//   the sequence mean; input [4, 6, 12]) at block1,head into 13120 | 12704 | 165, [4, 6, 32]
//   crossing the first split point;
// - refusals, each naming the culprit: an unknown split point (listing what forward calls), a
//   weighted submodule called on both sides of a split, a split point first called inside an if,
//   an int crossing a split point, a split point's weights read before it, split points out of
//   order, a non-Tensor forward argument, a wrong number of example inputs, and a file that is
//   not TorchScript (the message says which PyTorch to save with); a FIFO as the model file is
//   refused at once as not a regular file.
#include <ATen/CPUGeneratorImpl.h>
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/version.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sys/stat.h>
#include <unistd.h>

#include "pipescope/exec/torchscript_model.hpp"

using namespace pipescope;
using namespace pipescope::exec;
using Catch::Matchers::Contains;

namespace {

// A file in the temporary folder, removed at the end of the test.
struct TempFile {
  explicit TempFile(const std::string& stem)
      : path((std::filesystem::temp_directory_path() / fmt::format("pipescope_ts_{}_{}.pt", stem, ::getpid())).string()) {}
  ~TempFile() { std::filesystem::remove(path); }
  std::string path;
};

struct ModuleBuilder {
  std::shared_ptr<torch::jit::CompilationUnit> cu = std::make_shared<torch::jit::CompilationUnit>();
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(42);

  at::Tensor weight(std::vector<std::int64_t> sizes, double scale) {
    return (at::randn(sizes, gen, at::TensorOptions().dtype(at::kFloat)) * scale).requires_grad_(true);
  }
  // x @ weight.T + bias, optionally as a residual gelu block (in == out).
  torch::jit::Module dense(int in, int out, bool residual) {
    torch::jit::Module m(c10::QualifiedName("__torch__.Dense"), cu, true);
    m.register_parameter("weight", weight({out, in}, 0.4), false);
    m.register_parameter("bias", weight({out}, 0.1), false);
    m.define(residual ? "def forward(self, x):\n  return x + torch.gelu(torch.matmul(x, self.weight.t()) + self.bias)\n"
                      : "def forward(self, x):\n  return torch.matmul(x, self.weight.t()) + self.bias\n");
    return m;
  }
  // inp, block0, block1, head with the given forward.
  torch::jit::Module mlp(const std::string& forward) {
    torch::jit::Module root(c10::QualifiedName("__torch__.Net"), cu, true);
    root.register_module("inp", dense(6, 8, false));
    root.register_module("block0", dense(8, 8, true));
    root.register_module("block1", dense(8, 8, true));
    root.register_module("head", dense(8, 4, false));
    root.define(forward);
    return root;
  }
};

const char* kPlainForward =
    "def forward(self, x):\n"
    "  h = torch.relu(self.inp.forward(x))\n"
    "  h = self.block0.forward(h)\n"
    "  h = self.block1.forward(h)\n"
    "  return self.head.forward(h)\n";

struct ScriptRunResult {
  TensorList outputs;
  std::map<std::string, at::Tensor> gradients;  // by script parameter name
};

TensorList flatten(const c10::IValue& v) {
  if (v.isTensor()) return {v.toTensor()};
  TensorList out;
  for (const auto& element : v.toTuple()->elements()) {
    auto part = flatten(element);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

using LossFn = std::function<at::Tensor(const TensorList&, const at::Tensor&)>;

ScriptRunResult run_unsplit(const std::string& path, const TensorList& inputs, const at::Tensor& labels, const LossFn& loss) {
  torch::jit::Module m = torch::jit::load(path);
  m.train(true);
  torch::jit::GraphOptimizerEnabledGuard plain_interpreter(false);
  ScriptRunResult r;
  r.outputs = flatten(m.forward(std::vector<c10::IValue>(inputs.begin(), inputs.end())));
  loss(r.outputs, labels).backward();
  for (const auto& p : m.named_parameters(true)) r.gradients[p.name] = p.value.grad();
  return r;
}

ScriptRunResult run_segments(const ModelSpec& spec, const TensorList& inputs, const at::Tensor& labels) {
  std::vector<std::shared_ptr<Layer>> layers;
  for (const auto& l : spec.layers) layers.push_back(l.build());
  ScriptRunResult r;
  r.outputs = inputs;
  for (auto& layer : layers) r.outputs = layer->forward_layers(r.outputs);
  spec.loss(r.outputs, labels).backward();
  for (auto& layer : layers)
    for (const auto& p : layer->named_parameters(true)) r.gradients[p.key()] = p.value().grad();
  return r;
}

void require_identical(const ScriptRunResult& split, const ScriptRunResult& whole) {
  REQUIRE(split.outputs.size() == whole.outputs.size());
  for (std::size_t i = 0; i < whole.outputs.size(); ++i) CHECK(at::equal(split.outputs[i], whole.outputs[i]));
  REQUIRE(split.gradients.size() == whole.gradients.size());
  for (const auto& [name, grad] : whole.gradients) {
    INFO(name);
    REQUIRE(split.gradients.count(name) == 1);
    REQUIRE(grad.defined());
    CHECK(at::equal(split.gradients.at(name), grad));
  }
}

std::vector<std::string> parameter_names(const Layer& layer) {
  std::vector<std::string> names;
  for (const auto& p : layer.named_parameters(true)) names.push_back(p.key());
  return names;
}

std::vector<std::int64_t> sizes_of(const ModelSpec& spec, std::size_t boundary, std::size_t tensor = 0) {
  return spec.boundary.at(boundary).at(tensor).sizes;
}

LossFn sum_loss() {
  return [](const TensorList& out, const at::Tensor&) {
    at::Tensor total = out.at(0).sum();
    for (std::size_t i = 1; i < out.size(); ++i) total = total + out[i].sum();
    return total;
  };
}

TorchScriptSplitOptions options_for(std::vector<std::string> split_points, TensorList inputs, LossFn loss = nullptr) {
  TorchScriptSplitOptions o;
  o.split_points = std::move(split_points);
  o.example_inputs = std::move(inputs);
  o.loss = std::move(loss);
  return o;
}

at::Tensor example_batch() {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  return at::randn({4, 6}, gen, at::TensorOptions().dtype(at::kFloat));
}

}  // namespace

TEST_CASE("a scripted mlp split in 2 and 3 segments matches the unsplit module exactly") {
  TempFile file("mlp");
  ModuleBuilder b;
  b.mlp(kPlainForward).save(file.path);
  const at::Tensor x = example_batch();
  const at::Tensor labels = at::tensor({0, 3, 1, 2}, at::kLong);
  const ScriptRunResult whole = run_unsplit(file.path, {x}, labels, sum_loss());

  SECTION("2 segments") {
    const ModelSpec spec = load_torchscript_model(file.path, options_for({"block1"}, {x}, sum_loss()));
    REQUIRE(spec.layers.size() == 2);
    CHECK(spec.layers[0].name == "segment0");
    CHECK(spec.layers[0].type == "inp,block0");
    CHECK(spec.layers[1].type == "block1,head");
    CHECK(spec.layers[0].parameters == 128);
    CHECK(spec.layers[1].parameters == 108);
    REQUIRE(spec.boundary.size() == 3);
    CHECK(sizes_of(spec, 0) == std::vector<std::int64_t>{4, 6});
    CHECK(sizes_of(spec, 1) == std::vector<std::int64_t>{4, 8});
    CHECK(sizes_of(spec, 2) == std::vector<std::int64_t>{4, 4});
    CHECK(parameter_names(*spec.layers[1].build()) ==
          std::vector<std::string>{"block1.weight", "block1.bias", "head.weight", "head.bias"});
    require_identical(run_segments(spec, {x}, labels), whole);

    // Every build is a copy of its own: training one does not move another.
    auto first = spec.layers[0].build(), second = spec.layers[0].build();
    const at::Tensor before = second->forward_layers({x}).at(0);
    {
      at::NoGradGuard no_grad;
      for (auto& p : first->parameters(true)) p.add_(1.0);
    }
    CHECK(at::equal(second->forward_layers({x}).at(0), before));
    CHECK_FALSE(at::equal(first->forward_layers({x}).at(0), before));
  }
  SECTION("3 segments") {
    const ModelSpec spec = load_torchscript_model(file.path, options_for({"block0", "head"}, {x}, sum_loss()));
    REQUIRE(spec.layers.size() == 3);
    CHECK(spec.layers[0].parameters == 56);
    CHECK(spec.layers[1].parameters == 144);
    CHECK(spec.layers[2].parameters == 36);
    CHECK(spec.layers[1].type == "block0,block1");
    require_identical(run_segments(spec, {x}, labels), whole);
  }
  SECTION("no split point: one segment") {
    const ModelSpec spec = load_torchscript_model(file.path, options_for({}, {x}, sum_loss()));
    REQUIRE(spec.layers.size() == 1);
    CHECK(spec.layers[0].parameters == 236);
    require_identical(run_segments(spec, {x}, labels), whole);
  }
}

TEST_CASE("stage modules of a scripted model train the same weights as the unsplit module") {
  // The default loss (cross entropy against integer labels), through StageModule as the runtime
  // builds stages: parameter names "layer<i>.<script name>", gradients identical.
  TempFile file("stages");
  ModuleBuilder b;
  b.mlp(kPlainForward).save(file.path);
  const at::Tensor x = example_batch();
  const at::Tensor labels = at::tensor({0, 3, 1, 2}, at::kLong);
  const ModelSpec spec = load_torchscript_model(file.path, options_for({"block1"}, {x}));
  const ScriptRunResult whole = run_unsplit(file.path, {x}, labels, spec.loss);

  StageModule first(spec, 0, 1), second(spec, 1, 2);
  const TensorList out = second.forward(first.forward({x}));
  spec.loss(out, labels).backward();
  CHECK(at::equal(out.at(0), whole.outputs.at(0)));
  std::map<std::string, at::Tensor> gradients;
  for (const auto* stage : {&first, &second})
    for (const auto& p : stage->parameters()) gradients[p.name.substr(p.name.find('.') + 1)] = p.tensor.grad();
  REQUIRE(first.parameters().size() == 4);
  CHECK(first.parameters()[0].name == "layer0.inp.weight");
  REQUIRE(gradients.size() == whole.gradients.size());
  for (const auto& [name, grad] : whole.gradients) {
    INFO(name);
    CHECK(at::equal(gradients.at(name), grad));
  }
}

TEST_CASE("a skip connection and a tuple cross the split points as flat tensors") {
  TempFile file("skip");
  ModuleBuilder b;
  torch::jit::Module root(c10::QualifiedName("__torch__.SkipNet"), b.cu, true);
  root.register_module("inp", b.dense(6, 8, false));
  root.register_module("block0", b.dense(8, 8, true));
  torch::jit::Module fork(c10::QualifiedName("__torch__.Fork"), b.cu, true);
  fork.register_parameter("scale", b.weight({8}, 1.0), false);
  fork.define("def forward(self, x):\n  return (x * self.scale, torch.tanh(x))\n");
  root.register_module("fork", fork);
  root.register_module("block1", b.dense(8, 8, true));
  root.register_module("head", b.dense(8, 4, false));
  root.define(
      "def forward(self, x):\n"
      "  a = self.inp.forward(x)\n"
      "  pair = self.fork.forward(self.block0.forward(a))\n"
      "  h = self.block1.forward(pair[0]) + pair[1]\n"
      "  return self.head.forward(h) * a.sum(1, keepdim=True)\n");
  root.save(file.path);
  const at::Tensor x = example_batch();
  const at::Tensor labels = at::tensor({1, 1, 0, 2}, at::kLong);
  const ScriptRunResult whole = run_unsplit(file.path, {x}, labels, sum_loss());

  // Split at block1: a (the skip), the tuple (pair[1] is read after block1, 2 tensors) and pair[0]
  // (read before block1, passed to it) cross, 4 tensors; at head: h and a, which passes through
  // block1's segment untouched.
  const ModelSpec spec = load_torchscript_model(file.path, options_for({"block1", "head"}, {x}, sum_loss()));
  REQUIRE(spec.layers.size() == 3);
  CHECK(spec.layers[0].type == "inp,block0,fork");
  REQUIRE(spec.boundary.at(1).size() == 4);
  REQUIRE(spec.boundary.at(2).size() == 2);
  for (const auto& t : spec.boundary[1]) CHECK(t.sizes == std::vector<std::int64_t>{4, 8});
  require_identical(run_segments(spec, {x}, labels), whole);

  // Split right after the tuple is made: the tuple itself crosses, flattened to 2 tensors.
  const ModelSpec at_fork = load_torchscript_model(file.path, options_for({"fork"}, {x}, sum_loss()));
  CHECK(at_fork.boundary.at(1).size() == 2);  // block0's output and the skip a
  require_identical(run_segments(at_fork, {x}, labels), whole);
}

TEST_CASE("token ids feed an embedding in the first segment") {
  TempFile file("embed");
  ModuleBuilder b;
  torch::jit::Module embed(c10::QualifiedName("__torch__.Embedding"), b.cu, true);
  embed.register_parameter("weight", b.weight({11, 8}, 1.0), false);
  embed.define("def forward(self, tokens):\n  return torch.embedding(self.weight, tokens)\n");
  torch::jit::Module root(c10::QualifiedName("__torch__.TokenNet"), b.cu, true);
  root.register_module("embed", embed);
  root.register_module("block0", b.dense(8, 8, true));
  root.register_module("head", b.dense(8, 11, false));
  root.define("def forward(self, tokens):\n  return self.head.forward(self.block0.forward(self.embed.forward(tokens)))\n");
  root.save(file.path);

  const at::Tensor tokens = at::arange(20, at::kLong).remainder(11).reshape({4, 5});
  const at::Tensor labels = (tokens + 1).remainder(11);
  const ModelSpec spec = load_torchscript_model(file.path, options_for({"block0", "head"}, {tokens}));
  CHECK(spec.boundary.at(0).at(0).dtype == at::kLong);
  CHECK(sizes_of(spec, 1) == std::vector<std::int64_t>{4, 5, 8});
  CHECK(sizes_of(spec, 3) == std::vector<std::int64_t>{4, 5, 11});
  CHECK(spec.layers[0].parameters == 88);
  const ScriptRunResult whole = run_unsplit(file.path, {tokens}, labels, spec.loss);
  require_identical(run_segments(spec, {tokens}, labels), whole);
}

TEST_CASE("models saved from Python load and split exactly") {
  // Regenerate with PyTorch installed (from tests/exec/data):
  //   python ../../../exec/examples/save_scripted_model.py --out scripted_mlp.pt
  //   python ../../../exec/examples/save_scripted_model.py --out traced_mlp.pt --trace
  const std::string file = GENERATE(std::string("scripted_mlp.pt"), std::string("traced_mlp.pt"));
  const std::string path = std::string(PIPESCOPE_SOURCE_DIR) + "/tests/exec/data/" + file;
  INFO(path);
  CHECK(torchscript_split_point_candidates(path) == std::vector<std::string>{"inp", "block0", "block1", "head"});
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const at::Tensor x = at::randn({4, 12}, gen, at::TensorOptions().dtype(at::kFloat));
  const at::Tensor labels = at::tensor({4, 0, 2, 1}, at::kLong);
  const ModelSpec spec = load_torchscript_model(path, options_for({"block1", "head"}, {x}));
  REQUIRE(spec.layers.size() == 3);
  CHECK(spec.layers[0].parameters == 512);
  CHECK(spec.layers[1].parameters == 304);
  CHECK(spec.layers[2].parameters == 85);
  CHECK(sizes_of(spec, 3) == std::vector<std::int64_t>{4, 5});
  const ScriptRunResult whole = run_unsplit(path, {x}, labels, spec.loss);
  require_identical(run_segments(spec, {x}, labels), whole);
}

TEST_CASE("models using scaled_dot_product_attention load and split exactly") {
  // Regenerate with PyTorch installed (from tests/exec/data):
  //   python ../../../exec/examples/save_scripted_model.py --attention --out attention_mlp.pt
  //   python ../../../exec/examples/save_scripted_model.py --transformer --hidden 32 --out transformer.pt
  struct Case {
    std::string file;
    std::vector<std::int64_t> input_shape, first_boundary;
    std::vector<std::int64_t> segment_parameters;
  };
  const Case c = GENERATE(Case{"attention_mlp.pt", {4, 12}, {4, 16}, {512, 816, 85}},
                          Case{"transformer.pt", {4, 6, 12}, {4, 6, 32}, {13120, 12704, 165}});
  const std::string path = std::string(PIPESCOPE_SOURCE_DIR) + "/tests/exec/data/" + c.file;
  INFO(path);
  CHECK(torchscript_split_point_candidates(path) == std::vector<std::string>{"inp", "block0", "block1", "head"});
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const at::Tensor x = at::randn(c.input_shape, gen, at::TensorOptions().dtype(at::kFloat));
  const at::Tensor labels = at::tensor({4, 0, 2, 1}, at::kLong);
  const ModelSpec spec = load_torchscript_model(path, options_for({"block1", "head"}, {x}));
  REQUIRE(spec.layers.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(spec.layers[i].parameters == c.segment_parameters[i]);
  CHECK(sizes_of(spec, 1) == c.first_boundary);
  CHECK(sizes_of(spec, 3) == std::vector<std::int64_t>{4, 5});
  const ScriptRunResult whole = run_unsplit(path, {x}, labels, spec.loss);
  require_identical(run_segments(spec, {x}, labels), whole);
}

TEST_CASE("models that cannot be split are refused with the reason") {
  TempFile file("refused");
  ModuleBuilder b;
  const at::Tensor x = example_batch();
  auto refusal = [&](const std::string& forward, std::vector<std::string> split_points, TensorList inputs = {}) {
    b.mlp(forward).save(file.path);
    try {
      load_torchscript_model(file.path, options_for(std::move(split_points), inputs.empty() ? TensorList{x} : inputs));
    } catch (const TorchScriptModelError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };

  SECTION("a split point that names no submodule") {
    const std::string message = refusal(kPlainForward, {"blocks.1"});
    CHECK_THAT(message, Contains("split point 'blocks.1' names no submodule"));
    CHECK_THAT(message, Contains("forward calls: inp, block0, block1, head"));
  }
  SECTION("a submodule with weights called on both sides of a split point") {
    const std::string message = refusal(
        "def forward(self, x):\n"
        "  h = self.block0.forward(self.inp.forward(x))\n"
        "  h = self.block1.forward(h)\n"
        "  return self.head.forward(self.block0.forward(h))\n",
        {"block1"});
    CHECK_THAT(message, Contains("parameter 'block0.weight' is used by segment 0"));
    CHECK_THAT(message, Contains("segment 1 (from split point 'block1') through 'block0'"));
  }
  SECTION("control flow around a split point") {
    const std::string message = refusal(
        "def forward(self, x):\n"
        "  h = self.block0.forward(self.inp.forward(x))\n"
        "  if bool(h.sum() > 0):\n"
        "    h = self.block1.forward(h)\n"
        "  else:\n"
        "    h = self.block1.forward(h * 2.0)\n"
        "  return self.head.forward(h)\n",
        {"block1"});
    CHECK_THAT(message, Contains("split point 'block1' is first called inside a prim::If"));
  }
  SECTION("an int crossing a split point") {
    const std::string message = refusal(
        "def forward(self, x):\n"
        "  rows = x.size(0)\n"
        "  h = self.block1.forward(self.block0.forward(self.inp.forward(x)))\n"
        "  return self.head.forward(h) * rows\n",
        {"head"});
    CHECK_THAT(message, Contains("value 'rows' (int, from aten::size) is computed before split point 'head'"));
  }
  SECTION("a split point's weights read before the split point") {
    const std::string message = refusal(
        "def forward(self, x):\n"
        "  h = self.block1.forward(self.block0.forward(self.inp.forward(x))) + self.head.bias.sum()\n"
        "  return self.head.forward(h)\n",
        {"head"});
    CHECK_THAT(message, Contains("'head.bias' is used by aten::sum before its split point 'head'"));
  }
  SECTION("split points out of order") {
    CHECK_THAT(refusal(kPlainForward, {"head", "block0"}),
               Contains("split point 'block0' is called before split point 'head'"));
  }
  SECTION("a forward argument that is not a Tensor") {
    CHECK_THAT(refusal("def forward(self, x, scale: float):\n  return self.head.forward(self.block1.forward(self.block0.forward(self.inp.forward(x)))) * scale\n",
                       {"block1"}),
               Contains("forward's argument 'scale' has type float"));
  }
  SECTION("the wrong number of example inputs") {
    CHECK_THAT(refusal(kPlainForward, {"block1"}, {x, x}), Contains("forward takes 1 tensors but 2 example inputs"));
  }
  SECTION("a file that is not TorchScript") {
    {
      std::ofstream out(file.path);
      out << "not a zip archive";
    }
    try {
      load_torchscript_model(file.path, options_for({}, {x}));
      FAIL("accepted");
    } catch (const TorchScriptModelError& e) {
      CHECK_THAT(e.what(), Contains("cannot load it"));
      // The LibTorch linked (2.15 by default; PIPESCOPE_TORCH_DIR may name another).
      CHECK_THAT(e.what(), Contains(fmt::format("save it with torch {}.{} or older", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR)));
    }
  }
}

TEST_CASE("a FIFO given as the model file is refused, not waited on") {
  // Opening a FIFO for reading would block until a writer came; the model file is opened
  // without blocking, and only a regular file is read.
  TempFile fifo("fifo");
  REQUIRE(::mkfifo(fifo.path.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(load_torchscript_model(fifo.path, options_for({"block1"}, {example_batch()})),
                    Contains("TorchScript model '" + fifo.path + "': cannot open the file: a FIFO (named pipe), not a regular file"));
}
