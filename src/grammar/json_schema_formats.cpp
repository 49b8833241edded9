#include "grammar/json_schema_formats.h"

#include <map>

#include "grammar/integer_range.h"

namespace tern::grammar {
namespace {

// Days 29 (February) and later in leap years are left out: the leap rule is not worth a regex.
const std::string kDate =
    R"([0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8])))";
// No leap seconds (":60"), which ajv accepts only at 23:59 UTC.
const std::string kClock = R"((?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?)";
const std::string kZone = R"((?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9]))";
// Labels of at most 62 characters, at most 4 of them: 4 * 62 + 3 dots stay under a host name's 253.
const std::string kHostLabel = R"([a-zA-Z0-9](?:[a-zA-Z0-9-]{0,60}[a-zA-Z0-9])?)";
const std::string kHostname = kHostLabel + R"((?:\.)" + kHostLabel + "){0,3}";
const std::string kIpv4Octet = R"((?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))";
const std::string kIpv4 = "(?:" + kIpv4Octet + R"(\.){3})" + kIpv4Octet;
// Paths, queries and fragments spelled with unreserved characters only.
const std::string kSegmentChar = "[a-zA-Z0-9._~-]";
const std::string kQueryAndFragment = R"((?:\?[a-zA-Z0-9._~=&-]*)?(?:#[a-zA-Z0-9._~-]*)?)";
// An absolute URI with a non-empty hier-part (ajv wants a '/' or ':' in it; the scheme's ':' is one).
const std::string kUri = R"([a-zA-Z][a-zA-Z0-9+.-]*:(?://[a-zA-Z0-9._~-]+(?::[0-9]{1,5})?(?:/)" + kSegmentChar +
                         R"(*)*|/?)" + kSegmentChar + "+(?:/" + kSegmentChar + "*)*)" + kQueryAndFragment;
// A relative reference whose first segment has no ':' (it would read as a scheme).
const std::string kRelativeReference = "/?" + kSegmentChar + "+(?:/" + kSegmentChar + "*)*" + kQueryAndFragment;
// Labels of letters, digits and inner hyphens, a top-level domain of letters only (ajv's url wants one); no user
// info, no IP hosts (ajv refuses private ranges).
const std::string kUrlLabel = "[a-z0-9]+(?:-[a-z0-9]+)*";
const std::string kUrl = "(?:https?|ftp)://" + kUrlLabel + R"((?:\.)" + kUrlLabel + R"()*\.[a-z]{2,63}(?::[1-9][0-9]{1,4})?(?:/)" +
                         kSegmentChar + "*)*";

std::string ipv6() {
  // Eight groups, or "::" standing for at least one zero group between `left` and `right` groups (left + right <= 7).
  const std::string group = "[0-9a-fA-F]{1,4}";
  std::string out = "(?:" + group + ":){7}" + group;
  for (int left = 0; left <= 7; ++left) {
    std::string head = left == 0 ? "" : group + "(?::" + group + "){" + std::to_string(left - 1) + "}";
    int max_right = 7 - left;
    std::string tail = max_right == 0 ? "" : "(?:" + group + "(?::" + group + "){0," + std::to_string(max_right - 1) + "})?";
    out += "|" + head + "::" + tail;
  }
  return out;
}

std::string duration() {
  const std::string date = "(?:[0-9]+Y(?:[0-9]+M)?(?:[0-9]+D)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)";
  const std::string time = "T(?:[0-9]+H(?:[0-9]+M)?(?:[0-9]+S)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)";
  return "P(?:" + date + "(?:" + time + ")?|" + time + "|[0-9]+W)";
}

const std::map<std::string, std::string, std::less<>>& string_formats() {
  static const std::map<std::string, std::string, std::less<>> formats = {
      {"date", kDate},
      {"time", kClock + kZone},
      {"date-time", kDate + "T" + kClock + kZone},
      {"iso-time", kClock + kZone + "?"},
      {"iso-date-time", kDate + "T" + kClock + kZone + "?"},
      {"duration", duration()},
      {"email", R"([a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)+[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)"},
      {"hostname", kHostname},
      {"ipv4", kIpv4},
      {"ipv6", ipv6()},
      {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
      {"uri", kUri},
      {"uri-reference", "(?:" + kUri + ")|(?:" + kRelativeReference + ")"},
      {"iri", kUri},
      {"iri-reference", "(?:" + kUri + ")|(?:" + kRelativeReference + ")"},
      {"url", kUrl},
      // Literal text only (no expressions), which is any string without braces, quotes, '%' or controls.
      {"uri-template", R"([a-zA-Z0-9._~:/?#@!$&()*+,;=-]*)"},
      {"json-pointer", "(?:/(?:[^~/]|~[01])*)*"},
      {"relative-json-pointer", "(?:0|[1-9][0-9]{0,8})(?:#|(?:/(?:[^~/]|~[01])*)*)"},
      {"byte", "(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"},
      // Literal text (letters, digits, spaces): always a valid ECMAScript regular expression.
      {"regex", "[a-zA-Z0-9 ]*"},
  };
  return formats;
}

}  // namespace

std::optional<std::string> string_format_regex(std::string_view format) {
  auto it = string_formats().find(format);
  if (it == string_formats().end()) return std::nullopt;
  return it->second;
}

std::optional<IntegerFormatRange> integer_format_range(std::string_view format) {
  if (format == "int32") return IntegerFormatRange{-(int64_t{1} << 31), (int64_t{1} << 31) - 1};
  if (format == "int64") return IntegerFormatRange{-kMaxJsonIntegerMagnitude, kMaxJsonIntegerMagnitude};
  return std::nullopt;
}

}  // namespace tern::grammar
