#pragma once
// The disk tier of the KV cache: a log-structured store of fixed-size KV blocks in segment files, keyed by a chain
// hash of the token prefix each block ends. It survives a restart (a new store on the same directory indexes every
// valid record) and never serves a block whose record fails its checksum or differs from what the caller asks for.
// It knows nothing of models or backends: the caller names the model and layout in `identity`.
//
// Files: <dir>/<identity hash, 16 hex digits>/segment-<16-digit sequence>.kv. A segment starts with a header
// (magic "TERNKV01", format version, block_bytes, the identity string, a CRC32C of the header) followed by records,
// each a fixed header (magic, num_tokens, key, parent key, group, CRC32C of header, tokens and payload), the token
// ids and the payload. Records are appended and never rewritten; space comes back a whole segment at a time, oldest
// first. Not thread-safe: one engine thread uses it.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace tern {

// A block's identity: a hash of the whole token prefix it ends, chained block by block (vLLM's and SGLang's
// prefix-hash keys), so that a block is found without its ancestors' being loaded.
struct KvBlockKey {
  uint64_t hi = 0;
  uint64_t lo = 0;
  friend bool operator==(const KvBlockKey&, const KvBlockKey&) = default;
};

struct KvBlockKeyHash {
  size_t operator()(const KvBlockKey& key) const;
};

// The key of the block of `tokens` (one block's token ids) after the prefix whose last block has key `parent`
// (the root: KvBlockKey{}), for KV cache group `group`. Deterministic across processes and machines: two
// independently seeded 64-bit hashes over parent, group and tokens.
KvBlockKey chain_block_key(const KvBlockKey& parent, int32_t group, std::span<const int32_t> tokens);

struct KvDiskStoreStats {
  int64_t num_blocks = 0;  // blocks the index holds now
  int64_t num_bytes = 0;   // bytes of this store's segment files in use
  int64_t num_reads = 0, num_read_bytes = 0;  // blocks served and their payload bytes
  int64_t num_writes = 0, num_write_bytes = 0;
  // Records (or whole segment files) refused: checksum, header, truncation, or a record differing from its read.
  // Segment files of another identity or block size are skipped but are not corrupt and do not count.
  int64_t num_corrupt = 0;
  double read_seconds = 0, write_seconds = 0;  // wall time in read() and write()
};

class KvDiskStore {
 public:
  // Opens the identity's subdirectory of `dir` (both created if missing) for blocks of `block_bytes` payload bytes
  // and indexes the valid records of its segments. Segment files written under another identity (a hash
  // collision of the subdirectory's name) or block size are skipped with a warning each and left alone. A record
  // whose checksum fails, or a torn tail (a crash mid-write), is skipped with a warning and counted in
  // num_corrupt. `capacity_bytes` > 0 bounds the segment files: a write that would pass it first deletes the oldest
  // segments (their keys leave the index); segments hold at most min(256 MiB, capacity / 4) unless one record is
  // larger. Throws tern::Error when the directory cannot be created or written, or the capacity holds no block.
  KvDiskStore(std::string dir, std::string identity, size_t block_bytes, int64_t capacity_bytes);
  ~KvDiskStore();
  KvDiskStore(const KvDiskStore&) = delete;
  KvDiskStore& operator=(const KvDiskStore&) = delete;

  bool contains(const KvBlockKey& key) const;
  // Appends a record of the block (`payload`: block_bytes bytes) to the current segment; a key already held is not
  // written again. The record is durable once the OS has it (no fsync per record; a segment is synced when it
  // closes). An I/O error (a full disk) leaves the block unstored, with a warning.
  void write(const KvBlockKey& key, const KvBlockKey& parent, int32_t group, std::span<const int32_t> tokens,
             const void* payload);
  // Reads the block into `payload` (block_bytes bytes). Returns false without a warning when the key is not held.
  // Returns false, drops the key from the index with a warning and counts num_corrupt, when the record no longer
  // checks out (checksum; key, parent, group or tokens differing from the arguments: a hash collision or an
  // overwritten file) or cannot be read; `payload` holds garbage then.
  bool read(const KvBlockKey& key, const KvBlockKey& parent, int32_t group, std::span<const int32_t> tokens,
            void* payload);

  const KvDiskStoreStats& stats() const { return stats_; }
  size_t block_bytes() const { return block_bytes_; }
  const std::string& directory() const { return directory_; }  // the identity's subdirectory

 private:
  struct Location {
    uint64_t segment = 0;  // sequence number
    uint64_t offset = 0;   // of the record's header in the segment file
  };
  struct Segment {
    int64_t size_bytes = 0;
    std::vector<KvBlockKey> keys;  // written to it; an index entry may since point elsewhere or be gone
  };

  size_t file_header_bytes() const;
  std::string segment_path(uint64_t sequence) const;
  void scan_directory();
  // Indexes the valid records of one segment file when its header is valid and names this identity and block size.
  void scan_segment(uint64_t sequence);
  // Makes room for `record_bytes` more bytes under the capacity and the segment size, starting a segment when
  // needed. Returns false when the block cannot be stored.
  bool prepare_append(uint64_t record_bytes);
  bool start_segment();
  void close_current_segment();
  void delete_segment(uint64_t sequence);
  void drop_corrupt(const KvBlockKey& key, const std::string& why);

  std::string directory_;
  std::string identity_;
  size_t block_bytes_;
  int64_t capacity_bytes_;
  int64_t segment_bytes_;  // a segment ends before passing this, unless it holds no record yet
  std::unordered_map<KvBlockKey, Location, KvBlockKeyHash> index_;
  std::map<uint64_t, Segment> segments_;  // this store's segments by sequence, oldest first
  uint64_t next_sequence_ = 0;            // above every segment file name in the directory, ours or not
  std::optional<uint64_t> current_segment_;
  int current_fd_ = -1;
  KvDiskStoreStats stats_;
};

}  // namespace tern
