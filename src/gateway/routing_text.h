#pragma once
// The text a cache-aware policy matches for a request: what the replica will turn into the prompt, in an order
// that preserves shared prefixes. Completions: the prompt (strings as they are, token ids as decimal text; a batch
// of prompts joined). Chat: each message's role and text content in turn, a canonical stand-in for the rendered
// template (whose shared prefixes are those of the messages).
#include <string>
#include <string_view>

namespace tern::gateway {

// `path` is the request target's path; a body that is not JSON, nests deeper than kMaxNestingDepth
// (core/nesting_limit.h) or has no prompt/messages yields "" (the replica answers such a request with its own 400,
// so how it is routed does not matter).
std::string routing_text(std::string_view path, std::string_view body);

}  // namespace tern::gateway
