#include "core/ordered_json_parser.h"

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tern {

namespace {

using Json = nlohmann::ordered_json;

// SAX events -> an ordered_json value, as nlohmann's json_sax_dom_parser builds it, except that a key's duplicate is
// found through an index of the open object's keys rather than by searching the object.
class LinearDomBuilder {
 public:
  LinearDomBuilder(Json& root, bool allow_exceptions) : root_(root), allow_exceptions_(allow_exceptions) {}

  bool null() { return add(nullptr); }
  bool boolean(bool value) { return add(value); }
  bool number_integer(Json::number_integer_t value) { return add(value); }
  bool number_unsigned(Json::number_unsigned_t value) { return add(value); }
  bool number_float(Json::number_float_t value, const Json::string_t& /*text*/) { return add(value); }
  bool string(Json::string_t& value) { return add(std::move(value)); }
  bool binary(Json::binary_t& value) { return add(Json::binary(std::move(value))); }

  bool start_object(std::size_t /*num_elements, unknown for text*/) {
    open_.push_back(place(Json::object()));
    key_index_.emplace_back();
    return true;
  }

  bool key(Json::string_t& key) {
    auto& members = open_.back()->get_ref<Json::object_t&>();
    const auto [slot, inserted] = key_index_.back().try_emplace(key, members.size());
    if (inserted) {
      members.emplace_back(std::move(key), nullptr);
      member_value_ = &members.back().second;
    } else {
      member_value_ = &(members.begin() + slot->second)->second;  // the last value wins, at the first key's place
    }
    return true;
  }

  bool end_object() {
    open_.pop_back();
    key_index_.pop_back();
    return true;
  }

  bool start_array(std::size_t /*num_elements, unknown for text*/) {
    open_.push_back(place(Json::array()));
    return true;
  }

  bool end_array() {
    open_.pop_back();
    return true;
  }

  template <class Exception>
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/, const Exception& error) {
    errored_ = true;
    if (allow_exceptions_) throw error;
    return false;
  }

  bool errored() const { return errored_; }

 private:
  // Puts `value` where the next value goes: the root, the end of the open array or the open object's last key.
  // Returns where it was put. Pointers into open containers stay valid: a container only grows while it is open.
  Json* place(Json value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Json* container = open_.back();
    if (container->is_array()) {
      container->push_back(std::move(value));
      return &container->back();
    }
    *member_value_ = std::move(value);
    return member_value_;
  }

  bool add(Json value) {
    place(std::move(value));
    return true;
  }

  Json& root_;
  const bool allow_exceptions_;
  std::vector<Json*> open_;  // the arrays and objects being filled, outermost first
  // One per open object: its keys and their positions in it.
  std::vector<std::unordered_map<std::string, std::size_t>> key_index_;
  Json* member_value_ = nullptr;  // the value of the open object's last key
  bool errored_ = false;
};

}  // namespace

Json parse_ordered_json(std::string_view text, bool allow_exceptions) {
  Json result;
  LinearDomBuilder builder(result, allow_exceptions);
  Json::sax_parse(text.begin(), text.end(), &builder, nlohmann::detail::input_format_t::json, /*strict=*/true);
  if (builder.errored()) return Json(Json::value_t::discarded);
  return result;
}

}  // namespace tern
