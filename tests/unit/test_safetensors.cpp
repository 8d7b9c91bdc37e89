// safetensors round trip, and every kind of corrupt file rejected with a message (no crash).
#include <cstdio>
#include <fstream>

#include "ckpt/safetensors.h"
#include "testing.h"

namespace mt {
namespace {

std::string temp_path(const char* name) { return ::testing::TempDir() + name; }

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_all(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

TEST(Safetensors, RoundTrip) {
  test::HostTensor a = test::randn({3, 4}, 1);
  test::HostTensor b = test::randint({5}, 9, 2);
  const std::string path = temp_path("round_trip.safetensors");
  save_safetensors(path, {{"a", a.view()}, {"b", b.view()}}, {{"k", "v"}});
  const SafetensorsFile f = SafetensorsFile::load(path);
  EXPECT_EQ(f.meta("k"), "v");
  ASSERT_EQ(f.get("a").shape, a.shape);
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(f.get("a").f32()[i], a.f32()[i]);
  for (int64_t i = 0; i < b.numel(); ++i) EXPECT_EQ(f.get("b").i32()[i], b.i32()[i]);
  EXPECT_THROW(f.get("missing"), Error);
  EXPECT_THROW(f.meta("missing"), Error);
  std::remove(path.c_str());
}

TEST(Safetensors, CorruptFilesAreRejectedWithAMessage) {
  test::HostTensor a = test::randn({3, 4}, 1);
  const std::string good = temp_path("good.safetensors"), bad = temp_path("bad.safetensors");
  save_safetensors(good, {{"a", a.view()}});
  const std::vector<uint8_t> bytes = read_all(good);
  // Every truncation, and a byte flipped at every header position, must throw mt::Error or load
  // cleanly: never crash.
  for (size_t len = 0; len < bytes.size(); len += (len < 200 ? 1 : 7)) {
    write_all(bad, std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<long>(len)));
    EXPECT_THROW(SafetensorsFile::load(bad), Error) << "truncated to " << len;
  }
  for (size_t pos = 0; pos < 8 + 64 && pos < bytes.size(); ++pos) {
    std::vector<uint8_t> mutated = bytes;
    mutated[pos] ^= 0x5a;
    write_all(bad, mutated);
    try {
      SafetensorsFile::load(bad);
    } catch (const Error&) {
    }
  }
  EXPECT_THROW(SafetensorsFile::load(temp_path("does_not_exist.safetensors")), Error);
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

}  // namespace
}  // namespace mt
