#pragma once
// A grammar compiled against one vocabulary: the pushdown automaton plus the per-node token classification.
// Immutable once built, so any number of matchers on any threads share one.
//
// tern has its own grammar engine: Debian packages no structured-generation library (xgrammar, llguidance,
// outlines-core), and the design here follows xgrammar (byte-level PDA, context-independent token precomputation,
// vocabulary sorted to share prefix work).
#include <memory>
#include <string>
#include <string_view>

#include "grammar/grammar_expr.h"
#include "grammar/pushdown_automaton.h"
#include "grammar/token_mask_cache.h"
#include "grammar/token_vocabulary.h"

namespace tern::grammar {

enum class GrammarKind {
  kEbnf,        // source: EBNF text with a `root` rule
  kRegex,       // source: a regular expression the whole output must match
  kJsonSchema,  // source: a JSON Schema document
  kJsonObject,  // any JSON object (OpenAI response_format json_object); source ignored
};

std::string_view grammar_kind_name(GrammarKind kind);

struct CompileOptions {
  // Classify the tokens of every automaton node at compile time; otherwise only the string-content-like ones, the
  // rest on first use (see TokenMaskCache).
  bool precompute_all = false;
  unsigned num_threads = 0;  // of the token precomputation; 0 = hardware concurrency (at most 8)
  // Region walks shared with the other grammars compiled for the same vocabulary (GrammarCache keeps one); without
  // it each compile walks its own.
  std::shared_ptr<RegionWalkCache> region_walks;
  PdaLimits limits;
};

// The grammar (AST) of a source of the given kind; throws tern::Error naming the position of a parse error.
Grammar grammar_from_source(GrammarKind kind, std::string_view source);

class CompiledGrammar {
 public:
  static std::shared_ptr<const CompiledGrammar> compile(GrammarKind kind, std::string_view source,
                                                        std::shared_ptr<const TokenVocabulary> vocabulary,
                                                        const CompileOptions& options = {});

  const PushdownAutomaton& pda() const { return pda_; }
  const TokenVocabulary& vocabulary() const { return *vocabulary_; }
  const TokenMaskCache& token_masks() const { return masks_; }
  // The grammar in EBNF (for JSON Schema: the generated grammar), for logs and debugging.
  const std::string& ebnf() const { return ebnf_; }
  // Bytes held: the automaton, the EBNF and the token masks classified so far, which grow as matchers reach new
  // nodes. Safe to call while matchers use the grammar.
  size_t memory_bytes() const;

  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary, const CompileOptions& options);

 private:
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  std::string ebnf_;
  PushdownAutomaton pda_;
  TokenMaskCache masks_;
};

}  // namespace tern::grammar
