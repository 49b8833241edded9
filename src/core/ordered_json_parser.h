#pragma once
// Parses JSON text into nlohmann::ordered_json in time linear in its length.
// ordered_json keeps an object's keys in a vector, and its own parser inserts each key with a linear search for a
// duplicate, so an object of n keys costs O(n^2): a 2 MB request body of 160,000 keys took 45 s. This parser
// indexes the keys of each object while it is open, so it costs O(n), and gives what nlohmann's parser gives: keys in
// the order they first appear, the last value of a repeated key, the same errors.
#include <nlohmann/json.hpp>
#include <string_view>

namespace tern {

// As nlohmann::ordered_json::parse(text, nullptr, allow_exceptions): throws nlohmann's parse_error (or out_of_range,
// for a number no double holds) for malformed text, or returns a discarded value if `allow_exceptions` is false.
nlohmann::ordered_json parse_ordered_json(std::string_view text, bool allow_exceptions = true);

}  // namespace tern
