// Checkpoint folders: one file, an index with shards, loose *.safetensors, and every
// way an index can disagree with its shards.
#include "io/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <type_traits>

#include "io/safetensors_builder.h"

namespace latentserve {
namespace {

using test::TensorSpec;
using ::testing::HasSubstr;

static_assert(std::is_move_constructible_v<Checkpoint> && std::is_move_assignable_v<Checkpoint>);

class CheckpointTest : public ::testing::Test {
 protected:
  TensorSpec f32(const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return {name, "F32", shape, test::to_bytes(test::random_floats(size_t(n), rng_))};
  }
  void write(const std::string& file, const std::vector<TensorSpec>& specs) {
    test::write_file(dir_ / file, test::build_safetensors(specs));
  }
  void write_text(const std::string& file, const std::string& text) {
    test::write_file(dir_ / file, test::Bytes(text.begin(), text.end()));
  }
  // Two shards: a, b in shard 1; c in shard 2; and the index that says so.
  void write_sharded() {
    write("model-00001-of-00002.safetensors", {a_, b_});
    write("model-00002-of-00002.safetensors", {c_});
    write_text("model.safetensors.index.json", R"({"metadata": {"total_size": 72}, "weight_map": {
      "a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
      "c": "model-00002-of-00002.safetensors"}})");
  }
  std::string open_error() {
    return test::error_of([&] { Checkpoint::open(dir_.path()); });
  }
  void expect_holds(const Checkpoint& ckpt, const TensorSpec& spec) {
    ASSERT_TRUE(ckpt.has(spec.name));
    const TensorView v = ckpt.tensor(spec.name);
    ASSERT_EQ(v.size_bytes(), spec.bytes.size());
    EXPECT_EQ(std::memcmp(v.data, spec.bytes.data(), spec.bytes.size()), 0) << spec.name;
  }

  test::TempDir dir_;
  std::mt19937 rng_{77};
  TensorSpec a_ = f32("a", {2, 3}), b_ = f32("b", {4}), c_ = f32("c", {2, 4});
};

TEST_F(CheckpointTest, SingleModelFile) {
  write("model.safetensors", {b_, a_});
  write("other.safetensors", {a_});  // ignored: model.safetensors comes first
  Checkpoint ckpt = Checkpoint::open(dir_.path());
  expect_holds(ckpt, a_);
  expect_holds(ckpt, b_);
  EXPECT_EQ(ckpt.tensor_names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ckpt.file_of("a"), dir_ / "model.safetensors");
  EXPECT_FALSE(ckpt.has("c"));
}

TEST_F(CheckpointTest, MissingTensorNamesTheTensorAndFolder) {
  write("model.safetensors", {a_});
  Checkpoint ckpt = Checkpoint::open(dir_.path());
  for (const std::string& message : {test::error_of([&] { ckpt.tensor("lm_head.weight"); }),
                                     test::error_of([&] { ckpt.file_of("lm_head.weight"); })}) {
    EXPECT_THAT(message, HasSubstr("'lm_head.weight'"));
    EXPECT_THAT(message, HasSubstr(dir_.path().string()));
  }
}

TEST_F(CheckpointTest, ShardedIndex) {
  write_sharded();
  write("stray.safetensors", {a_});  // not in the index: ignored
  Checkpoint ckpt = Checkpoint::open(dir_.path());
  expect_holds(ckpt, a_);
  expect_holds(ckpt, b_);
  expect_holds(ckpt, c_);
  EXPECT_EQ(ckpt.tensor_names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(ckpt.file_of("b"), dir_ / "model-00001-of-00002.safetensors");
  EXPECT_EQ(ckpt.file_of("c"), dir_ / "model-00002-of-00002.safetensors");

  Checkpoint moved = std::move(ckpt);  // views stay valid after a move
  expect_holds(moved, c_);
}

TEST_F(CheckpointTest, IndexNotJson) {
  write_sharded();
  write_text("model.safetensors.index.json", R"({"weight_map": {"a": )");
  const std::string m = open_error();
  EXPECT_THAT(m, HasSubstr("model.safetensors.index.json"));
  EXPECT_THAT(m, HasSubstr("not valid JSON"));
}

TEST_F(CheckpointTest, IndexWithoutWeightMap) {
  write_sharded();
  write_text("model.safetensors.index.json", R"({"metadata": {}})");
  EXPECT_THAT(open_error(), HasSubstr("model.safetensors.index.json: no \"weight_map\""));
  write_text("model.safetensors.index.json", R"([1, 2])");
  EXPECT_THAT(open_error(), HasSubstr("expected a JSON object, found array"));
}

TEST_F(CheckpointTest, WeightMapNotAnObjectOfStrings) {
  write_sharded();
  write_text("model.safetensors.index.json", R"({"weight_map": ["model-00001-of-00002.safetensors"]})");
  EXPECT_THAT(open_error(), HasSubstr("\"weight_map\" must be an object of tensor name -> file name, found array"));
  write_text("model.safetensors.index.json", R"({"weight_map": {"a": 1}})");
  const std::string m = open_error();
  EXPECT_THAT(m, HasSubstr("weight_map entry for tensor 'a' must be a file name string"));
  write_text("model.safetensors.index.json", R"({"weight_map": {}})");
  EXPECT_THAT(open_error(), HasSubstr("\"weight_map\" is empty"));
}

TEST_F(CheckpointTest, ShardNameLeavingTheFolder) {
  write_sharded();
  write_text("model.safetensors.index.json", R"({"weight_map": {"a": "../model-00001-of-00002.safetensors"}})");
  const std::string m = open_error();
  EXPECT_THAT(m, HasSubstr("tensor 'a'"));
  EXPECT_THAT(m, HasSubstr("expected a file name in the model folder"));
}

TEST_F(CheckpointTest, ShardMissing) {
  write_sharded();
  std::filesystem::remove(dir_ / "model-00002-of-00002.safetensors");
  const std::string m = open_error();
  EXPECT_THAT(m, HasSubstr("model.safetensors.index.json"));
  EXPECT_THAT(m, HasSubstr("maps tensor 'c' to 'model-00002-of-00002.safetensors', which is not a file"));
}

TEST_F(CheckpointTest, ShardWithoutTheTensorMappedToIt) {
  write_sharded();
  write("model-00002-of-00002.safetensors", {f32("d", {3})});  // c is gone, d took its place
  const std::string m = open_error();
  EXPECT_THAT(m, HasSubstr("maps tensor 'c' to 'model-00002-of-00002.safetensors', which does not hold it"));
}

TEST_F(CheckpointTest, TensorInTheWrongShard) {
  write_sharded();
  write_text("model.safetensors.index.json", R"({"weight_map": {
      "a": "model-00002-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
      "c": "model-00002-of-00002.safetensors"}})");
  const std::string m = open_error();
  EXPECT_THAT(m, HasSubstr("maps tensor 'a' to 'model-00002-of-00002.safetensors', but it is in "
                           "'model-00001-of-00002.safetensors'"));
}

TEST_F(CheckpointTest, TensorInTwoShards) {
  write_sharded();
  write("model-00002-of-00002.safetensors", {b_, c_});  // b now in both shards
  const std::string m = open_error();
  EXPECT_THAT(m, HasSubstr("tensor 'b' is in two files"));
  EXPECT_THAT(m, HasSubstr("model-00001-of-00002.safetensors"));
  EXPECT_THAT(m, HasSubstr("model-00002-of-00002.safetensors"));
}

TEST_F(CheckpointTest, MalformedShardIsNamed) {
  write_sharded();
  write_text("model-00002-of-00002.safetensors", "junk");
  const std::string m = open_error();
  EXPECT_THAT(m, HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_THAT(m, HasSubstr("shorter than the 8-byte header length"));
}

TEST_F(CheckpointTest, LooseSafetensorsFiles) {
  write("weights-a.safetensors", {a_});
  write("weights-b.safetensors", {b_, c_});
  write_text("notes.txt", "not weights");
  Checkpoint ckpt = Checkpoint::open(dir_.path());
  expect_holds(ckpt, a_);
  expect_holds(ckpt, c_);
  EXPECT_EQ(ckpt.tensor_names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(ckpt.file_of("c"), dir_ / "weights-b.safetensors");
}

TEST_F(CheckpointTest, LooseFilesWithARepeatedName) {
  write("consolidated.safetensors", {a_, b_});
  write("model-00001-of-00001.safetensors", {b_});
  const std::string m = open_error();
  EXPECT_THAT(m, HasSubstr(dir_.path().string()));
  EXPECT_THAT(m, HasSubstr("tensor 'b' is in two files: consolidated.safetensors and model-00001-of-00001.safetensors"));
}

TEST_F(CheckpointTest, FolderWithoutSafetensors) {
  write_text("config.json", "{}");
  const std::string m = open_error();
  EXPECT_THAT(m, HasSubstr(dir_.path().string()));
  EXPECT_THAT(m, HasSubstr("holds no safetensors weights"));
  const std::string missing = test::error_of([&] { Checkpoint::open(dir_ / "no_such_model"); });
  EXPECT_THAT(missing, HasSubstr("no_such_model"));
  EXPECT_THAT(missing, HasSubstr("does not exist"));
  write_text("plain_file", "x");
  EXPECT_THAT(test::error_of([&] { Checkpoint::open(dir_ / "plain_file"); }), HasSubstr("is not a directory"));
}

}  // namespace
}  // namespace latentserve
