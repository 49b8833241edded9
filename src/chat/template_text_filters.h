#pragma once
// Jinja's filters that lay out text: truncate, wordwrap (Python's textwrap), striptags, urlencode and pprint
// (Python's pprint.pformat). striptags decodes numeric character references and the common named ones (&amp;,
// &lt;, &nbsp;, &raquo;, ...), not all 2,231 of HTML5; an unknown name stays as written.
#include "chat/value.h"

namespace tern::chat {

Value truncate_filter(const Value& input, const CallArgs& args);
Value wordwrap_filter(const Value& input, const CallArgs& args);
Value striptags_filter(const Value& input, const CallArgs& args);
Value urlencode_filter(const Value& input, const CallArgs& args);
Value pprint_filter(const Value& input, const CallArgs& args);

}  // namespace tern::chat
