#pragma once
// Forced tool calls in the pythonic format (chat's pythonic parser: [NAME(KEY=VALUE, ...), ...]) write arguments as
// Python keyword arguments whose values are Python literals. This builds their grammar from a tool's schema.
#include <string>

#include "server/request_fields.h"

namespace tern::server {

// The rules of the keyword arguments of the tool `name`, `<rule_prefix>root` being all of them: the properties of the object
// `schema` in its order, the required ones always and the others optionally, comma-separated. A value follows its
// property's type (string, integer, number, boolean, null, a list of them) and a string's enum or const; arrays,
// objects and untyped values are any Python literal the parser reads (lists, string-keyed dicts, strings, numbers,
// True/False/None), their contents not held to the schema. Numbers have at most 15 digits before and after the
// point and two in the exponent, so that the parser reads every one. A schema not of an object, or a function or
// property name that is not a Python identifier, is a 400 naming `tools`.
std::string pythonic_arguments_rules(const std::string& name, const Json& schema, const std::string& rule_prefix);

}  // namespace tern::server
