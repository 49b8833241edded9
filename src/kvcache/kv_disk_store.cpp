#include "kvcache/kv_disk_store.h"

#include <fcntl.h>
#include <nmmintrin.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "core/error.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

constexpr char kFileMagic[8] = {'T', 'E', 'R', 'N', 'K', 'V', '0', '1'};
constexpr uint32_t kFormatVersion = 1;
constexpr uint32_t kRecordMagic = 0x3152564b;  // "KVR1" in the file (little-endian)
constexpr int64_t kMaxSegmentBytes = int64_t{256} << 20;
// Bounds the identity read from a file header before trusting its length.
constexpr size_t kMaxIdentityBytes = size_t{64} << 10;
constexpr uint64_t kKeySeedHi = 0x6a09e667f3bcc908ull;
constexpr uint64_t kKeySeedLo = 0xbb67ae8584caa73bull;
constexpr uint64_t kIdentitySeed = 0x3c6ef372fe94f82bull;

// The fixed part of a segment file's header; the identity bytes and a CRC32C of everything before it follow.
struct FileHeader {
  char magic[8];
  uint32_t format_version;
  uint32_t identity_bytes;
  uint64_t block_bytes;
};
static_assert(sizeof(FileHeader) == 24);

// A record's header; the token ids (int32 each) and the payload follow. The checksum covers this header (with the
// checksum field zero), the tokens and the payload.
struct RecordHeader {
  uint32_t magic;
  uint32_t num_tokens;
  uint64_t key_hi, key_lo;
  uint64_t parent_hi, parent_lo;
  int32_t group;
  uint32_t checksum;
};
static_assert(sizeof(RecordHeader) == 48);

// CRC32C (Castagnoli) with the SSE4.2 crc32 instruction, part of the x86-64-v3 build baseline, so no library is
// needed. Chainable: crc32c(crc32c(0, a), b) == crc32c(0, a + b).
uint32_t crc32c(uint32_t crc, const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint64_t state = ~crc;
  for (; size >= 8; size -= 8, bytes += 8) {
    uint64_t word;
    std::memcpy(&word, bytes, 8);
    state = _mm_crc32_u64(state, word);
  }
  auto state32 = static_cast<uint32_t>(state);
  for (; size > 0; --size, ++bytes) state32 = _mm_crc32_u8(state32, *bytes);
  return ~state32;
}

// The splitmix64 finalizer: a bijection of 64-bit words whose every output bit depends on every input bit.
uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// A seeded hash over a sequence of 64-bit words. The constant added after each mix keeps a zero state from
// absorbing zero words unchanged; the word count, absorbed last, separates sequences that differ by trailing zeros.
class WordHasher {
 public:
  explicit WordHasher(uint64_t seed) : state_(mix64(seed)) {}
  void absorb(uint64_t word) {
    state_ = mix64(state_ ^ word) + 0x9e3779b97f4a7c15ull;
    ++num_words_;
  }
  uint64_t finish() const { return mix64(state_ ^ num_words_); }

 private:
  uint64_t state_;
  uint64_t num_words_ = 0;
};

uint64_t block_hash(uint64_t seed, const KvBlockKey& parent, int32_t group, std::span<const int32_t> tokens) {
  WordHasher hasher(seed);
  hasher.absorb(parent.hi);
  hasher.absorb(parent.lo);
  hasher.absorb(uint64_t{static_cast<uint32_t>(group)} << 32 | static_cast<uint32_t>(tokens.size()));
  for (size_t i = 0; i < tokens.size(); i += 2) {
    const uint64_t second = i + 1 < tokens.size() ? static_cast<uint32_t>(tokens[i + 1]) : 0;
    hasher.absorb(second << 32 | static_cast<uint32_t>(tokens[i]));
  }
  return hasher.finish();
}

std::string identity_directory_name(const std::string& identity) {
  WordHasher hasher(kIdentitySeed);
  hasher.absorb(identity.size());
  for (size_t i = 0; i < identity.size(); i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, identity.data() + i, std::min<size_t>(8, identity.size() - i));
    hasher.absorb(word);
  }
  return fmt::format("{:016x}", hasher.finish());
}

uint64_t record_bytes(size_t block_bytes, size_t num_tokens) {
  return sizeof(RecordHeader) + num_tokens * sizeof(int32_t) + block_bytes;
}

uint32_t record_checksum(RecordHeader header, const int32_t* tokens, size_t num_tokens, const void* payload,
                         size_t block_bytes) {
  header.checksum = 0;
  uint32_t crc = crc32c(0, &header, sizeof(header));
  crc = crc32c(crc, tokens, num_tokens * sizeof(int32_t));
  return crc32c(crc, payload, block_bytes);
}

std::string key_hex(const KvBlockKey& key) { return fmt::format("{:016x}{:016x}", key.hi, key.lo); }

template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  std::fprintf(stderr, "tern: KV disk store: %s\n", fmt::format(format, std::forward<Args>(args)...).c_str());
}

// Moves all of `parts` to or from `fd` at `offset` with pwritev or preadv, continuing after short transfers.
// False on an error (errno tells which) or at the end of the file (errno 0).
bool transfer_all(ssize_t (*transfer)(int, const iovec*, int, off_t), int fd, std::span<iovec> parts,
                  uint64_t offset) {
  size_t first = 0;
  for (;;) {
    while (first < parts.size() && parts[first].iov_len == 0) ++first;
    if (first == parts.size()) return true;
    const ssize_t moved =
        transfer(fd, parts.data() + first, static_cast<int>(parts.size() - first), static_cast<off_t>(offset));
    if (moved < 0 && errno == EINTR) continue;
    if (moved < 0) return false;
    if (moved == 0) {
      errno = 0;
      return false;
    }
    offset += static_cast<uint64_t>(moved);
    for (auto left = static_cast<size_t>(moved); left > 0;) {
      const size_t step = std::min(left, parts[first].iov_len);
      parts[first].iov_base = static_cast<char*>(parts[first].iov_base) + step;
      parts[first].iov_len -= step;
      left -= step;
      if (parts[first].iov_len == 0) ++first;
    }
  }
}

bool pread_exact(int fd, void* data, size_t size, uint64_t offset) {
  iovec part{data, size};
  return transfer_all(preadv, fd, std::span(&part, 1), offset);
}

// Adds the wall time of its scope to a stats counter.
class ScopeTimer {
 public:
  explicit ScopeTimer(double& seconds) : seconds_(seconds), start_(std::chrono::steady_clock::now()) {}
  ~ScopeTimer() { seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  double& seconds_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

size_t KvBlockKeyHash::operator()(const KvBlockKey& key) const { return static_cast<size_t>(key.lo); }

KvBlockKey chain_block_key(const KvBlockKey& parent, int32_t group, std::span<const int32_t> tokens) {
  return {block_hash(kKeySeedHi, parent, group, tokens), block_hash(kKeySeedLo, parent, group, tokens)};
}

KvDiskStore::KvDiskStore(std::string dir, std::string identity, size_t block_bytes, int64_t capacity_bytes)
    : identity_(std::move(identity)), block_bytes_(block_bytes), capacity_bytes_(capacity_bytes) {
  if (block_bytes_ == 0) fail("KV disk store: block_bytes must be positive");
  if (identity_.size() > kMaxIdentityBytes) {
    fail("KV disk store: the identity has {} bytes, more than {}", identity_.size(), kMaxIdentityBytes);
  }
  directory_ = (fs::path(dir) / identity_directory_name(identity_)).string();
  std::error_code error;
  fs::create_directories(directory_, error);
  if (error) fail("KV disk store: cannot create directory {}: {}", directory_, error.message());
  if (access(directory_.c_str(), W_OK | X_OK) != 0) {
    fail("KV disk store: cannot write to directory {}: {}", directory_, std::strerror(errno));
  }
  const auto smallest_segment = static_cast<int64_t>(file_header_bytes() + record_bytes(block_bytes_, 0));
  segment_bytes_ = kMaxSegmentBytes;
  if (capacity_bytes_ > 0) {
    if (capacity_bytes_ < smallest_segment) {
      fail("KV disk store: a capacity of {} bytes cannot hold one block of {} bytes", capacity_bytes_, block_bytes_);
    }
    segment_bytes_ = std::min(segment_bytes_, capacity_bytes_ / 4);
  }
  scan_directory();
}

KvDiskStore::~KvDiskStore() { close_current_segment(); }

size_t KvDiskStore::file_header_bytes() const { return sizeof(FileHeader) + identity_.size() + sizeof(uint32_t); }

std::string KvDiskStore::segment_path(uint64_t sequence) const {
  return fmt::format("{}/segment-{:016d}.kv", directory_, sequence);
}

void KvDiskStore::scan_directory() {
  std::vector<uint64_t> sequences;
  std::error_code error;
  for (fs::directory_iterator it(directory_, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    constexpr std::string_view prefix = "segment-", suffix = ".kv";
    if (name.size() != prefix.size() + 16 + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix)) {
      continue;
    }
    const std::string digits = name.substr(prefix.size(), 16);
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    const uint64_t sequence = std::stoull(digits);
    sequences.push_back(sequence);
    // Every segment file, ours or not, reserves its name: new segments never reuse one.
    next_sequence_ = std::max(next_sequence_, sequence + 1);
  }
  if (error) fail("KV disk store: cannot list directory {}: {}", directory_, error.message());
  // Oldest first, so that a key found in two segments points at the newer record.
  std::sort(sequences.begin(), sequences.end());
  for (uint64_t sequence : sequences) scan_segment(sequence);
  stats_.num_blocks = static_cast<int64_t>(index_.size());
}

void KvDiskStore::scan_segment(uint64_t sequence) {
  const std::string path = segment_path(sequence);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat status {};
  if (fd < 0 || fstat(fd, &status) != 0) {
    warn("cannot open {}: {}; skipping it", path, std::strerror(errno));
    if (fd >= 0) close(fd);
    return;
  }
  const auto file_bytes = static_cast<uint64_t>(status.st_size);

  // The header: a file that is not a readable segment of this format counts as corrupt; a valid segment of
  // another identity or block size is another configuration's and is only skipped.
  const auto refuse = [&](const std::string& why, bool corrupt) {
    warn("skipping {}: {}", path, why);
    if (corrupt) ++stats_.num_corrupt;
    close(fd);
  };
  FileHeader header{};
  if (!pread_exact(fd, &header, sizeof(header), 0) || std::memcmp(header.magic, kFileMagic, 8) != 0) {
    return refuse("not a KV segment file (bad or missing header)", true);
  }
  if (header.format_version != kFormatVersion) {
    return refuse(fmt::format("format version {}, this build reads {}", header.format_version, kFormatVersion), false);
  }
  const uint64_t header_bytes = sizeof(FileHeader) + uint64_t{header.identity_bytes} + sizeof(uint32_t);
  if (header.identity_bytes > kMaxIdentityBytes || header_bytes > file_bytes) {
    return refuse("truncated or corrupt header", true);
  }
  std::string identity(header.identity_bytes, '\0');
  uint32_t stored_crc = 0;
  if (!pread_exact(fd, identity.data(), identity.size(), sizeof(header)) ||
      !pread_exact(fd, &stored_crc, sizeof(stored_crc), sizeof(header) + identity.size())) {
    return refuse(fmt::format("cannot read the header: {}", std::strerror(errno)), true);
  }
  if (crc32c(crc32c(0, &header, sizeof(header)), identity.data(), identity.size()) != stored_crc) {
    return refuse("header checksum mismatch", true);
  }
  if (identity != identity_) return refuse(fmt::format("written for another identity '{}'", identity), false);
  if (header.block_bytes != block_bytes_) {
    return refuse(fmt::format("blocks of {} bytes, this store's are {}", header.block_bytes, block_bytes_), false);
  }

  // The records, in order. A record failing its checksum is skipped; a torn or unreadable one ends the scan, since
  // what follows it cannot be located.
  Segment segment{static_cast<int64_t>(file_bytes), {}};
  std::vector<int32_t> tokens;
  std::vector<unsigned char> payload(block_bytes_);
  for (uint64_t offset = header_bytes; offset < file_bytes;) {
    RecordHeader record{};
    const bool header_fits = file_bytes - offset >= sizeof(record);
    if (!header_fits || !pread_exact(fd, &record, sizeof(record), offset) || record.magic != kRecordMagic ||
        record_bytes(block_bytes_, record.num_tokens) > file_bytes - offset) {
      warn("{}: a torn or unreadable record at offset {} ends the segment ({} bytes after it ignored)", path, offset,
           file_bytes - offset);
      ++stats_.num_corrupt;
      break;
    }
    tokens.resize(record.num_tokens);
    iovec parts[2] = {{tokens.data(), tokens.size() * sizeof(int32_t)}, {payload.data(), payload.size()}};
    if (!transfer_all(preadv, fd, parts, offset + sizeof(record))) {
      warn("{}: cannot read the record at offset {}: {}; ignoring the rest", path, offset, std::strerror(errno));
      ++stats_.num_corrupt;
      break;
    }
    if (record_checksum(record, tokens.data(), tokens.size(), payload.data(), block_bytes_) != record.checksum) {
      warn("{}: checksum mismatch in the record at offset {}; skipping it", path, offset);
      ++stats_.num_corrupt;
    } else {
      const KvBlockKey key{record.key_hi, record.key_lo};
      index_[key] = Location{sequence, offset};
      segment.keys.push_back(key);
    }
    offset += record_bytes(block_bytes_, record.num_tokens);
  }
  close(fd);
  stats_.num_bytes += segment.size_bytes;
  segments_[sequence] = std::move(segment);
}

bool KvDiskStore::contains(const KvBlockKey& key) const { return index_.contains(key); }

void KvDiskStore::write(const KvBlockKey& key, const KvBlockKey& parent, int32_t group,
                        std::span<const int32_t> tokens, const void* payload) {
  if (index_.contains(key)) return;
  ScopeTimer timer(stats_.write_seconds);
  const uint64_t size = record_bytes(block_bytes_, tokens.size());
  if (!prepare_append(size)) return;

  RecordHeader record{kRecordMagic, static_cast<uint32_t>(tokens.size()), key.hi, key.lo, parent.hi, parent.lo,
                      group, 0};
  record.checksum = record_checksum(record, tokens.data(), tokens.size(), payload, block_bytes_);
  const uint64_t sequence = *current_segment_;
  Segment& segment = segments_.at(sequence);
  const auto offset = static_cast<uint64_t>(segment.size_bytes);
  iovec parts[3] = {{&record, sizeof(record)},
                    {const_cast<int32_t*>(tokens.data()), tokens.size() * sizeof(int32_t)},
                    {const_cast<void*>(payload), block_bytes_}};
  if (!transfer_all(pwritev, current_fd_, parts, offset)) {
    warn("cannot write to {}: {}; the block is not stored", segment_path(sequence), std::strerror(errno));
    // Cut off the partial record; when even that fails, end the segment so that no record lands behind it.
    if (ftruncate(current_fd_, static_cast<off_t>(offset)) != 0) {
      struct stat status {};
      if (fstat(current_fd_, &status) == 0) {
        stats_.num_bytes += status.st_size - segment.size_bytes;
        segment.size_bytes = status.st_size;
      }
      close_current_segment();
    }
    return;
  }
  segment.size_bytes += static_cast<int64_t>(size);
  segment.keys.push_back(key);
  index_[key] = Location{sequence, offset};
  stats_.num_bytes += static_cast<int64_t>(size);
  stats_.num_blocks = static_cast<int64_t>(index_.size());
  ++stats_.num_writes;
  stats_.num_write_bytes += static_cast<int64_t>(block_bytes_);
}

bool KvDiskStore::prepare_append(uint64_t record_size) {
  if (current_segment_) {
    const Segment& current = segments_.at(*current_segment_);
    if (!current.keys.empty() && current.size_bytes + static_cast<int64_t>(record_size) > segment_bytes_) {
      close_current_segment();
    }
  }
  if (capacity_bytes_ > 0) {
    const auto needed = [&] {
      return static_cast<int64_t>(record_size + (current_segment_ ? 0 : file_header_bytes()));
    };
    while (stats_.num_bytes + needed() > capacity_bytes_ && !segments_.empty()) {
      delete_segment(segments_.begin()->first);
    }
    if (stats_.num_bytes + needed() > capacity_bytes_) {
      warn("a record of {} bytes does not fit in the capacity of {} bytes; the block is not stored", record_size,
           capacity_bytes_);
      return false;
    }
  }
  return current_segment_ || start_segment();
}

bool KvDiskStore::start_segment() {
  int fd = -1;
  for (;; ++next_sequence_) {
    // O_EXCL: another server writing this identity's directory may have taken the name since the scan.
    fd = open(segment_path(next_sequence_).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) break;
  }
  const uint64_t sequence = next_sequence_;
  const std::string path = segment_path(sequence);
  if (fd < 0) {
    warn("cannot create {}: {}; the block is not stored", path, std::strerror(errno));
    return false;
  }
  ++next_sequence_;

  FileHeader header{};
  std::memcpy(header.magic, kFileMagic, 8);
  header.format_version = kFormatVersion;
  header.identity_bytes = static_cast<uint32_t>(identity_.size());
  header.block_bytes = block_bytes_;
  uint32_t crc = crc32c(crc32c(0, &header, sizeof(header)), identity_.data(), identity_.size());
  iovec parts[3] = {{&header, sizeof(header)}, {identity_.data(), identity_.size()}, {&crc, sizeof(crc)}};
  if (!transfer_all(pwritev, fd, parts, 0)) {
    warn("cannot write to {}: {}; the block is not stored", path, std::strerror(errno));
    close(fd);
    unlink(path.c_str());
    return false;
  }
  segments_[sequence] = Segment{static_cast<int64_t>(file_header_bytes()), {}};
  stats_.num_bytes += static_cast<int64_t>(file_header_bytes());
  current_segment_ = sequence;
  current_fd_ = fd;
  return true;
}

void KvDiskStore::close_current_segment() {
  if (!current_segment_) return;
  if (fdatasync(current_fd_) != 0) {
    warn("cannot sync {}: {}", segment_path(*current_segment_), std::strerror(errno));
  }
  close(current_fd_);
  current_fd_ = -1;
  current_segment_.reset();
}

void KvDiskStore::delete_segment(uint64_t sequence) {
  if (current_segment_ == sequence) close_current_segment();
  const auto it = segments_.find(sequence);
  for (const KvBlockKey& key : it->second.keys) {
    const auto entry = index_.find(key);
    if (entry != index_.end() && entry->second.segment == sequence) index_.erase(entry);
  }
  const std::string path = segment_path(sequence);
  if (unlink(path.c_str()) != 0 && errno != ENOENT) warn("cannot delete {}: {}", path, std::strerror(errno));
  stats_.num_bytes -= it->second.size_bytes;
  stats_.num_blocks = static_cast<int64_t>(index_.size());
  segments_.erase(it);
}

bool KvDiskStore::read(const KvBlockKey& key, const KvBlockKey& parent, int32_t group,
                       std::span<const int32_t> tokens, void* payload) {
  const auto entry = index_.find(key);
  if (entry == index_.end()) return false;
  ScopeTimer timer(stats_.read_seconds);
  const Location location = entry->second;
  const std::string path = segment_path(location.segment);
  const bool is_current = current_segment_ == location.segment;
  const int fd = is_current ? current_fd_ : open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    drop_corrupt(key, fmt::format("cannot open {}: {}", path, std::strerror(errno)));
    return false;
  }
  RecordHeader record{};
  std::vector<int32_t> stored_tokens(tokens.size());
  iovec parts[3] = {{&record, sizeof(record)},
                    {stored_tokens.data(), stored_tokens.size() * sizeof(int32_t)},
                    {payload, block_bytes_}};
  const bool was_read = transfer_all(preadv, fd, parts, location.offset);
  const int read_error = errno;
  if (!is_current) close(fd);

  std::string problem;
  if (!was_read) {
    problem = read_error != 0 ? std::strerror(read_error) : "the file ends within the record";
  } else if (record.magic != kRecordMagic || record.num_tokens != tokens.size()) {
    problem = "the record's header differs from the block's";
  } else if (record_checksum(record, stored_tokens.data(), stored_tokens.size(), payload, block_bytes_) !=
             record.checksum) {
    problem = "checksum mismatch";
  } else if (KvBlockKey{record.key_hi, record.key_lo} != key ||
             KvBlockKey{record.parent_hi, record.parent_lo} != parent || record.group != group ||
             !std::equal(tokens.begin(), tokens.end(), stored_tokens.begin())) {
    problem = "the record holds another block (a hash collision or an overwritten file)";
  }
  if (!problem.empty()) {
    drop_corrupt(key, fmt::format("{} at offset {}: {}", path, location.offset, problem));
    return false;
  }
  ++stats_.num_reads;
  stats_.num_read_bytes += static_cast<int64_t>(block_bytes_);
  return true;
}

void KvDiskStore::drop_corrupt(const KvBlockKey& key, const std::string& why) {
  warn("dropping block {}: {}", key_hex(key), why);
  index_.erase(key);
  stats_.num_blocks = static_cast<int64_t>(index_.size());
  ++stats_.num_corrupt;
}

}  // namespace tern
