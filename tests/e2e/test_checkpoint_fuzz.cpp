// Damaged checkpoints: a checkpoint mutated many ways (bytes flipped in a shard, with and without
// a matching checksum in the manifest; shards truncated; the manifest's text and fields changed)
// is either refused with an mt::Error or loaded, never a crash, a hang or another exception; a
// shard whose bytes no longer match the manifest is always refused.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/shard_file.h"
#include "testing.h"
#include "train/trainer.h"

namespace mt {
namespace {


void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(CheckpointFuzz, MutatedCheckpointsAreErrorsNeverCrashes) {
  ModelConfig m;
  m.num_layers = 1;
  m.hidden_size = 32;
  m.num_attention_heads = 2;
  m.seq_length = 16;
  m.vocab_size = 128;
  TrainConfig t;
  t.micro_batch_size = 2;
  t.global_batch_size = 2;
  t.train_iters = 2;
  t.eval_iters = 0;
  t.log_interval = 100;
  t.schedule.lr = 1e-3;
  test::TempDir dir;
  t.checkpoint.save = dir.path();
  Trainer(m, t).run([](const std::string&) {});
  const std::string iter = iteration_dir(dir.path(), 2), shard = iter + "/rank_0.safetensors",
                    manifest = iter + "/manifest.json";
  const std::string shard0 = test::read_bytes(shard), manifest0 = test::read_bytes(manifest);
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<uint8_t>(shard0[static_cast<size_t>(i)]);

  t.checkpoint.save.clear();
  Trainer loader(m, t);
  std::mt19937_64 rng(12345);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  // The shard rewritten with its checksum in the manifest updated: only the parser stands guard.
  auto rewrite_with_digest = [&](const std::string& bytes) {
    write_bytes(shard, bytes);
    nlohmann::json j = nlohmann::json::parse(manifest0);
    j["files"]["rank_0.safetensors"] = {{"bytes", bytes.size()}, {"checksum", checksum_of(bytes.data(), bytes.size())}};
    write_bytes(manifest, j.dump());
  };
  const int trials = 240;
  int refused = 0, loaded = 0;
  for (int k = 0; k < trials; ++k) {
    write_bytes(shard, shard0);
    write_bytes(manifest, manifest0);
    const int kind = k % 6;
    std::string bytes = shard0;
    switch (kind) {
      case 0:  // a byte flipped, the manifest unchanged: the checksum catches it
        bytes[pick(bytes.size())] ^= static_cast<char>(1 + pick(255));
        write_bytes(shard, bytes);
        break;
      case 1:  // truncated
        write_bytes(shard, bytes.substr(0, pick(bytes.size())));
        break;
      case 2:  // the header damaged, checksum updated
        bytes[8 + pick(header)] ^= static_cast<char>(1 + pick(255));
        rewrite_with_digest(bytes);
        break;
      case 3:  // the data damaged, checksum updated: loads (other numbers), must not crash
        bytes[8 + header + pick(bytes.size() - 8 - header)] ^= static_cast<char>(1 + pick(255));
        rewrite_with_digest(bytes);
        break;
      case 4: {  // a character of the manifest changed
        std::string text = manifest0;
        text[pick(text.size())] = "0123456789-\"{}[],:ax "[pick(21)];
        write_bytes(manifest, text);
        break;
      }
      default: {  // a manifest field removed or given a value of another kind
        nlohmann::json j = nlohmann::json::parse(manifest0);
        std::vector<std::string> keys;
        for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
        const std::string key = keys[pick(keys.size())];
        const nlohmann::json values[] = {-1, "x", nlohmann::json::array(), 1e300, nlohmann::json::object()};
        if (pick(3) == 0)
          j.erase(key);
        else
          j[key] = values[pick(5)];
        write_bytes(manifest, j.dump());
      }
    }
    try {
      loader.load_checkpoint(dir.path());
      ++loaded;
      EXPECT_TRUE(kind >= 2) << "trial " << k << ": a shard that does not match the manifest was loaded";
    } catch (const Error&) {
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "trial " << k << " (mutation " << kind << "): not an mt::Error: " << e.what();
    }
  }
  std::printf("    %d mutated checkpoints: %d refused with a message, %d loaded\n", trials, refused, loaded);
  EXPECT_EQ(refused + loaded, trials);
}

}  // namespace
}  // namespace mt
