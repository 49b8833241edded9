#pragma once
// Decode context parallelism: which tokens of every sequence one rank of the group caches, and where. The scheduler
// keeps one block table for all ranks whose blocks hold block_size * size tokens (a logical block); each rank's
// cache has blocks of block_size token slots, and block b of the table is block b of every rank's cache. Tokens are
// interleaved over the ranks as vLLM does: position p lives on rank p % size, in slot (p % (block_size * size)) /
// size of its block, so a rank holds every size-th token of each logical block and the ranks' caches together
// hold size times the context one rank's memory could. In its own token order a rank's cache is an ordinary paged
// cache under the same table: its i-th token (position i * size + rank) sits at slot table[i / block_size] *
// block_size + i % block_size, so paged attention kernels can read it unchanged, given each query's count of the
// rank's tokens it sees ((position - rank) / size + 1 when position >= rank, else none).
#include <cstdint>

namespace tern {

struct KvContextShard {
  int rank = 0;
  int size = 1;  // 1: one rank caches every token (no context parallelism)

  bool holds(int64_t position) const { return position % size == rank; }
  // Tokens per block of the scheduler's tables for caches of `block_size` slots per block.
  int64_t tokens_per_block(int64_t block_size) const { return block_size * size; }
  // The cache slot (block * block_size + offset) of `position`, which this rank holds, given the block `block`
  // that the sequence's table lists for the position's logical block (position / tokens_per_block).
  int64_t slot(int64_t block, int64_t position, int64_t block_size) const {
    return block * block_size + (position % tokens_per_block(block_size)) / size;
  }
};

}  // namespace tern
