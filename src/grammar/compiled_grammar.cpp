#include "grammar/compiled_grammar.h"

#include <algorithm>
#include <thread>

#include "core/error.h"
#include "grammar/ebnf_parser.h"
#include "grammar/json_schema_converter.h"
#include "grammar/regex_parser.h"

namespace tern::grammar {

std::string_view grammar_kind_name(GrammarKind kind) {
  switch (kind) {
    case GrammarKind::kEbnf: return "ebnf";
    case GrammarKind::kRegex: return "regex";
    case GrammarKind::kJsonSchema: return "json_schema";
    case GrammarKind::kJsonObject: return "json_object";
  }
  return "unknown";
}

Grammar grammar_from_source(GrammarKind kind, std::string_view source) {
  switch (kind) {
    case GrammarKind::kEbnf: return parse_ebnf(source);
    case GrammarKind::kRegex: {
      Grammar grammar;
      grammar.rules.push_back({"root", parse_regex(source)});
      return grammar;
    }
    case GrammarKind::kJsonSchema: return parse_ebnf(json_schema_to_ebnf(source));
    case GrammarKind::kJsonObject: return parse_ebnf(json_object_ebnf());
  }
  fail("unknown grammar kind");
}

namespace {

unsigned resolve_threads(unsigned requested) {
  if (requested != 0) return requested;
  return std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
}

}  // namespace

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary,
                                 const CompileOptions& options)
    : vocabulary_(std::move(vocabulary)),
      ebnf_(to_ebnf(grammar)),
      pda_(build_pushdown_automaton(grammar, options.limits)),
      masks_(pda_, *vocabulary_, options.precompute_all, resolve_threads(options.num_threads),
             options.region_walks.get()) {}

size_t CompiledGrammar::memory_bytes() const {
  size_t bytes = sizeof(*this) + ebnf_.capacity() + pda_.nodes.capacity() * sizeof(PdaNode) +
                 pda_.byte_edges.capacity() * sizeof(ByteEdge) + pda_.call_edges.capacity() * sizeof(CallEdge) +
                 pda_.rule_start.capacity() * sizeof(uint32_t);
  for (const auto& name : pda_.rule_names) bytes += sizeof(name) + name.capacity();
  return bytes + masks_.memory_bytes();
}

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile(GrammarKind kind, std::string_view source,
                                                                std::shared_ptr<const TokenVocabulary> vocabulary,
                                                                const CompileOptions& options) {
  return std::make_shared<const CompiledGrammar>(grammar_from_source(kind, source), std::move(vocabulary), options);
}

}  // namespace tern::grammar
