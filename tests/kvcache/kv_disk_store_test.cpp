#include "kvcache/kv_disk_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>

#include "core/error.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

constexpr size_t kBlockBytes = 1024;
constexpr int32_t kBlockTokens = 4;

// One block as a sequence would write it: its tokens, its key in the chain and a payload that depends on both.
struct Block {
  KvBlockKey parent;
  KvBlockKey key;
  int32_t group = 0;
  std::vector<int32_t> tokens;
  std::vector<unsigned char> payload;
};

// `num_blocks` consecutive blocks of one sequence, chained from the root.
std::vector<Block> make_chain(int32_t num_blocks, int32_t first_token = 0, int32_t group = 0) {
  std::vector<Block> blocks;
  KvBlockKey parent;
  for (int32_t b = 0; b < num_blocks; ++b) {
    Block block;
    block.parent = parent;
    block.group = group;
    block.tokens.resize(kBlockTokens);
    std::iota(block.tokens.begin(), block.tokens.end(), first_token + b * kBlockTokens);
    block.key = chain_block_key(parent, group, block.tokens);
    block.payload.resize(kBlockBytes);
    for (size_t i = 0; i < kBlockBytes; ++i) {
      block.payload[i] = static_cast<unsigned char>(i * 7 + b * 13 + first_token);
    }
    parent = block.key;
    blocks.push_back(std::move(block));
  }
  return blocks;
}

void write_block(KvDiskStore& store, const Block& block) {
  store.write(block.key, block.parent, block.group, block.tokens, block.payload.data());
}

// Whether `store` serves `block` with its payload.
bool reads_back(KvDiskStore& store, const Block& block) {
  std::vector<unsigned char> payload(store.block_bytes());
  return store.read(block.key, block.parent, block.group, block.tokens, payload.data()) && payload == block.payload;
}

std::vector<fs::path> segment_files(const std::string& directory) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(directory)) {
    if (entry.path().extension() == ".kv") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

int64_t total_file_bytes(const std::string& directory) {
  int64_t bytes = 0;
  for (const auto& file : segment_files(directory)) bytes += static_cast<int64_t>(fs::file_size(file));
  return bytes;
}

class KvDiskStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() / fmt::format("tern_kv_disk_store_{}_{}", test->name(), getpid());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::unique_ptr<KvDiskStore> open(const std::string& identity = "model-a", size_t block_bytes = kBlockBytes,
                                    int64_t capacity_bytes = 0) {
    return std::make_unique<KvDiskStore>(root_.string(), identity, block_bytes, capacity_bytes);
  }

  fs::path root_;
};

TEST(ChainBlockKey, DependsOnParentGroupAndTokens) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const KvBlockKey root_key = chain_block_key({}, 0, tokens);
  EXPECT_EQ(root_key, chain_block_key({}, 0, tokens));
  EXPECT_NE(root_key, chain_block_key(root_key, 0, tokens));
  EXPECT_NE(root_key, chain_block_key({}, 1, tokens));
  EXPECT_NE(root_key, chain_block_key({}, 0, std::vector<int32_t>{1, 2, 3, 5}));
  EXPECT_NE(root_key, chain_block_key({}, 0, std::vector<int32_t>{2, 1, 3, 4}));
  // Trailing zero tokens and a shorter block differ (the length is hashed).
  EXPECT_NE(chain_block_key({}, 0, std::vector<int32_t>{1, 2, 3}),
            chain_block_key({}, 0, std::vector<int32_t>{1, 2, 3, 0}));
  EXPECT_NE(root_key.hi, root_key.lo);
}

TEST(ChainBlockKey, IsStable) {
  // Keys name files that outlive the process: a change of the hash orphans every cache on disk, so it must be
  // deliberate (and come with a format version bump).
  const KvBlockKey root_key = chain_block_key({}, 0, std::vector<int32_t>{1, 2, 3, 4});
  const KvBlockKey child_key = chain_block_key(root_key, 2, std::vector<int32_t>{5, 6, 7, 8});
  EXPECT_EQ(root_key.hi, 0xb6bc38ec6dcc7e17ull);
  EXPECT_EQ(root_key.lo, 0xe89eb448ef2ae45aull);
  EXPECT_EQ(child_key.hi, 0x720d757951185711ull);
  EXPECT_EQ(child_key.lo, 0x0fd51193ffe53c07ull);
}

TEST_F(KvDiskStoreTest, WritesAndReadsBack) {
  auto store = open();
  const auto blocks = make_chain(3);
  EXPECT_FALSE(store->contains(blocks[0].key));
  for (const auto& block : blocks) write_block(*store, block);
  for (const auto& block : blocks) {
    EXPECT_TRUE(store->contains(block.key));
    EXPECT_TRUE(reads_back(*store, block));
  }
  std::vector<unsigned char> payload(kBlockBytes);
  const auto other = make_chain(1, 100);
  EXPECT_FALSE(store->read(other[0].key, other[0].parent, 0, other[0].tokens, payload.data()));
  EXPECT_EQ(store->stats().num_corrupt, 0);
  EXPECT_TRUE(store->directory().starts_with(root_.string()));
  EXPECT_EQ(store->block_bytes(), kBlockBytes);
}

TEST_F(KvDiskStoreTest, CountsStats) {
  auto store = open();
  const auto blocks = make_chain(3);
  for (const auto& block : blocks) write_block(*store, block);
  EXPECT_TRUE(reads_back(*store, blocks[1]));
  EXPECT_TRUE(reads_back(*store, blocks[2]));
  const KvDiskStoreStats& stats = store->stats();
  EXPECT_EQ(stats.num_blocks, 3);
  EXPECT_EQ(stats.num_writes, 3);
  EXPECT_EQ(stats.num_write_bytes, 3 * static_cast<int64_t>(kBlockBytes));
  EXPECT_EQ(stats.num_reads, 2);
  EXPECT_EQ(stats.num_read_bytes, 2 * static_cast<int64_t>(kBlockBytes));
  EXPECT_EQ(stats.num_bytes, total_file_bytes(store->directory()));
  EXPECT_GT(stats.num_bytes, 3 * static_cast<int64_t>(kBlockBytes));
  EXPECT_GT(stats.write_seconds, 0);
  EXPECT_GT(stats.read_seconds, 0);
}

TEST_F(KvDiskStoreTest, DuplicateWriteIsANoOp) {
  auto store = open();
  const auto blocks = make_chain(1);
  write_block(*store, blocks[0]);
  const int64_t bytes = store->stats().num_bytes;
  Block changed = blocks[0];
  changed.payload.assign(kBlockBytes, 0xee);
  write_block(*store, changed);
  EXPECT_EQ(store->stats().num_writes, 1);
  EXPECT_EQ(store->stats().num_bytes, bytes);
  EXPECT_EQ(total_file_bytes(store->directory()), bytes);
  EXPECT_TRUE(reads_back(*store, blocks[0]));
}

TEST_F(KvDiskStoreTest, RestartFindsBlocks) {
  auto writer = open();
  const auto blocks = make_chain(4);
  for (const auto& block : blocks) write_block(*writer, block);
  // The writer is still open (as after a crash, nothing was closed): what write() returned is on disk.
  auto reader = open();
  EXPECT_EQ(reader->stats().num_blocks, 4);
  EXPECT_EQ(reader->stats().num_corrupt, 0);
  for (const auto& block : blocks) EXPECT_TRUE(reads_back(*reader, block));
  // New writes go to a segment of their own.
  const auto more = make_chain(1, 1000);
  write_block(*reader, more[0]);
  EXPECT_EQ(segment_files(reader->directory()).size(), 2u);
  writer.reset();
  reader.reset();
  auto again = open();
  EXPECT_EQ(again->stats().num_blocks, 5);
  for (const auto& block : blocks) EXPECT_TRUE(reads_back(*again, block));
  EXPECT_TRUE(reads_back(*again, more[0]));
}

TEST_F(KvDiskStoreTest, OtherIdentityDoesNotSeeBlocks) {
  auto store_a = open("model-a");
  const auto blocks = make_chain(2);
  for (const auto& block : blocks) write_block(*store_a, block);
  store_a.reset();
  auto store_b = open("model-b");
  EXPECT_EQ(store_b->stats().num_blocks, 0);
  EXPECT_FALSE(store_b->contains(blocks[0].key));
  write_block(*store_b, make_chain(1, 500)[0]);
  store_b.reset();
  store_a = open("model-a");
  EXPECT_NE(store_a->directory(), open("model-b")->directory());
  EXPECT_EQ(store_a->stats().num_blocks, 2);
  for (const auto& block : blocks) EXPECT_TRUE(reads_back(*store_a, block));
}

TEST_F(KvDiskStoreTest, OtherBlockSizeIsSkippedAndKept) {
  auto store = open("model-a", kBlockBytes);
  const auto blocks = make_chain(2);
  for (const auto& block : blocks) write_block(*store, block);
  const std::string directory = store->directory();
  const auto files = segment_files(directory);
  store.reset();

  auto bigger = open("model-a", 2 * kBlockBytes);
  EXPECT_EQ(bigger->directory(), directory);
  EXPECT_EQ(bigger->stats().num_blocks, 0);
  EXPECT_EQ(bigger->stats().num_bytes, 0);
  EXPECT_EQ(bigger->stats().num_corrupt, 0);
  std::vector<unsigned char> payload(2 * kBlockBytes, 1);
  bigger->write(blocks[0].key, blocks[0].parent, 0, blocks[0].tokens, payload.data());
  bigger.reset();
  for (const auto& file : files) EXPECT_TRUE(fs::exists(file));

  store = open("model-a", kBlockBytes);
  EXPECT_EQ(store->stats().num_blocks, 2);
  for (const auto& block : blocks) EXPECT_TRUE(reads_back(*store, block));
}

TEST_F(KvDiskStoreTest, FlippedPayloadByteIsRefused) {
  auto store = open();
  const auto blocks = make_chain(3);
  for (const auto& block : blocks) write_block(*store, block);
  const auto files = segment_files(store->directory());
  ASSERT_EQ(files.size(), 1u);
  {
    // The file ends with the last block's payload.
    std::fstream file(files[0], std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(-1, std::ios::end);
    const char byte = static_cast<char>(file.get() ^ 0x01);
    file.seekp(-1, std::ios::end);
    file.put(byte);
  }
  std::vector<unsigned char> payload(kBlockBytes);
  EXPECT_FALSE(store->read(blocks[2].key, blocks[2].parent, 0, blocks[2].tokens, payload.data()));
  EXPECT_EQ(store->stats().num_corrupt, 1);
  EXPECT_FALSE(store->contains(blocks[2].key));
  EXPECT_EQ(store->stats().num_blocks, 2);
  EXPECT_TRUE(reads_back(*store, blocks[0]));
  EXPECT_TRUE(reads_back(*store, blocks[1]));
  // A second read is a plain miss.
  EXPECT_FALSE(store->read(blocks[2].key, blocks[2].parent, 0, blocks[2].tokens, payload.data()));
  EXPECT_EQ(store->stats().num_corrupt, 1);

  // A restart skips the bad record and keeps the others.
  store.reset();
  store = open();
  EXPECT_EQ(store->stats().num_corrupt, 1);
  EXPECT_EQ(store->stats().num_blocks, 2);
  EXPECT_FALSE(store->contains(blocks[2].key));
  EXPECT_TRUE(reads_back(*store, blocks[1]));
}

TEST_F(KvDiskStoreTest, CorruptRecordIsSkippedOnRestart) {
  auto store = open();
  const auto blocks = make_chain(3);
  write_block(*store, blocks[0]);
  write_block(*store, blocks[1]);
  const fs::path file = segment_files(store->directory()).at(0);
  const auto end_of_second = static_cast<std::streamoff>(fs::file_size(file));
  write_block(*store, blocks[2]);
  store.reset();
  {
    // The second record ends with its payload's last byte.
    std::fstream stream(file, std::ios::in | std::ios::out | std::ios::binary);
    stream.seekg(end_of_second - 1);
    const char byte = static_cast<char>(stream.get() ^ 0x80);
    stream.seekp(end_of_second - 1);
    stream.put(byte);
  }
  store = open();
  EXPECT_EQ(store->stats().num_corrupt, 1);
  EXPECT_EQ(store->stats().num_blocks, 2);
  EXPECT_FALSE(store->contains(blocks[1].key));
  EXPECT_TRUE(reads_back(*store, blocks[0]));
  EXPECT_TRUE(reads_back(*store, blocks[2]));
}

TEST_F(KvDiskStoreTest, TornTailIsSkippedOnRestart) {
  auto store = open();
  const auto blocks = make_chain(3);
  write_block(*store, blocks[0]);
  write_block(*store, blocks[1]);
  const fs::path file = segment_files(store->directory()).at(0);
  const auto size_before_last = fs::file_size(file);
  write_block(*store, blocks[2]);
  const auto last_record_bytes = fs::file_size(file) - size_before_last;
  store.reset();
  fs::resize_file(file, size_before_last + last_record_bytes / 2);

  store = open();
  EXPECT_EQ(store->stats().num_blocks, 2);
  EXPECT_EQ(store->stats().num_corrupt, 1);
  EXPECT_TRUE(reads_back(*store, blocks[0]));
  EXPECT_TRUE(reads_back(*store, blocks[1]));
  EXPECT_FALSE(store->contains(blocks[2].key));
  // The block can be written again (to a new segment) and served.
  write_block(*store, blocks[2]);
  EXPECT_TRUE(reads_back(*store, blocks[2]));
}

TEST_F(KvDiskStoreTest, TornFileHeaderIsSkipped) {
  auto store = open();
  write_block(*store, make_chain(1)[0]);
  const fs::path file = segment_files(store->directory()).at(0);
  store.reset();
  fs::resize_file(file, 10);
  store = open();
  EXPECT_EQ(store->stats().num_blocks, 0);
  EXPECT_EQ(store->stats().num_corrupt, 1);
  EXPECT_TRUE(fs::exists(file));
}

TEST_F(KvDiskStoreTest, ReadOfAnotherBlockIsRefused) {
  auto store = open();
  const auto blocks = make_chain(4);
  for (const auto& block : blocks) write_block(*store, block);
  std::vector<unsigned char> payload(kBlockBytes);
  std::vector<int32_t> wrong_tokens = blocks[1].tokens;
  wrong_tokens[0] += 1;
  EXPECT_FALSE(store->read(blocks[1].key, blocks[1].parent, 0, wrong_tokens, payload.data()));
  EXPECT_FALSE(store->read(blocks[2].key, blocks[0].key, 0, blocks[2].tokens, payload.data()));
  EXPECT_FALSE(store->read(blocks[3].key, blocks[3].parent, 1, blocks[3].tokens, payload.data()));
  EXPECT_EQ(store->stats().num_corrupt, 3);
  EXPECT_EQ(store->stats().num_blocks, 1);
  EXPECT_EQ(store->stats().num_reads, 0);
  EXPECT_TRUE(reads_back(*store, blocks[0]));
}

TEST_F(KvDiskStoreTest, CapacityDeletesOldestSegments) {
  const int64_t capacity = 16 * 1024;  // segments of at most 4 KiB: three records of about 1.1 KiB each
  auto store = open("model-a", kBlockBytes, capacity);
  const auto blocks = make_chain(40);
  for (const auto& block : blocks) {
    write_block(*store, block);
    EXPECT_LE(store->stats().num_bytes, capacity);
  }
  EXPECT_EQ(store->stats().num_writes, 40);
  EXPECT_EQ(store->stats().num_bytes, total_file_bytes(store->directory()));
  EXPECT_LE(total_file_bytes(store->directory()), capacity);
  EXPECT_GT(segment_files(store->directory()).size(), 1u);
  EXPECT_FALSE(store->contains(blocks[0].key));
  EXPECT_TRUE(store->contains(blocks[39].key));
  EXPECT_LT(store->stats().num_blocks, 40);
  EXPECT_GT(store->stats().num_blocks, 6);
  // The kept blocks are the newest ones, and all of them are served.
  const int64_t first_kept = 40 - store->stats().num_blocks;
  for (int64_t b = 0; b < 40; ++b) {
    EXPECT_EQ(store->contains(blocks[b].key), b >= first_kept) << b;
    if (b >= first_kept) {
      EXPECT_TRUE(reads_back(*store, blocks[b])) << b;
    }
  }
  // A restart sees what is left.
  const int64_t num_blocks = store->stats().num_blocks;
  store.reset();
  store = open("model-a", kBlockBytes, capacity);
  EXPECT_EQ(store->stats().num_blocks, num_blocks);
  EXPECT_EQ(store->stats().num_corrupt, 0);
}

TEST_F(KvDiskStoreTest, FailsWhenTheDirectoryCannotBeCreated) {
  fs::create_directories(root_);
  std::ofstream(root_ / "a_file") << "x";
  EXPECT_THROW(KvDiskStore((root_ / "a_file").string(), "model-a", kBlockBytes, 0), Error);
  EXPECT_THROW(KvDiskStore(root_.string(), "model-a", kBlockBytes, 100), Error);
}

}  // namespace
}  // namespace tern
