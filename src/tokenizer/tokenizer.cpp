#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/utf8.h"

namespace tern {

using json = nlohmann::json;

// Everything a loaded tokenizer holds; immutable after load (BpeModel's word cache is internally synchronized).
struct TokenizerModel {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> bpe;
  std::unique_ptr<Decoder> decoder;

  std::vector<AddedToken> added_tokens;
  AddedTokenMatcher raw_added_tokens;         // matched in the input text
  AddedTokenMatcher normalized_added_tokens;  // matched after normalization
  std::unordered_map<std::string, int32_t> added_token_ids;

  std::vector<std::string> id_to_token;  // tokenizer.json spelling
  std::vector<std::string> id_to_bytes;
  std::vector<uint8_t> id_is_known;    // the id names a vocabulary or added token
  std::vector<uint8_t> id_is_special;

  std::vector<int32_t> special_prefix_ids;
  std::vector<int32_t> special_suffix_ids;
  std::optional<std::string> bos_token, eos_token;
  std::optional<int32_t> bos_id, eos_id;
};

namespace {

std::vector<AddedToken> parse_added_tokens(const json& document) {
  std::vector<AddedToken> tokens;
  const auto it = document.find("added_tokens");
  if (it == document.end() || it->is_null()) return tokens;
  if (!it->is_array()) fail("tokenizer.json: added_tokens must be an array");
  for (const json& entry : *it) {
    const auto id = entry.find("id");
    const auto content = entry.find("content");
    if (!entry.is_object() || id == entry.end() || !id->is_number_integer() || content == entry.end() ||
        !content->is_string()) {
      fail("tokenizer.json: added_tokens entry {} needs an integer 'id' and a string 'content'", entry.dump());
    }
    const int64_t value = id->get<int64_t>();
    if (value < 0 || value > INT32_MAX - 1) fail("tokenizer.json: added token id {} is out of range", value);
    AddedToken token;
    token.id = static_cast<int32_t>(value);
    token.content = content->get<std::string>();
    token.single_word = entry.value("single_word", false);
    token.lstrip = entry.value("lstrip", false);
    token.rstrip = entry.value("rstrip", false);
    token.normalized = entry.value("normalized", false);
    token.special = entry.value("special", false);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

// tokenizer_config.json writes special tokens as "text" or {"content": "text", ...}.
std::optional<std::string> config_token(const json& config, const char* field) {
  const auto it = config.find(field);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    if (const auto content = it->find("content"); content != it->end() && content->is_string()) {
      return content->get<std::string>();
    }
  }
  fail("tokenizer_config.json: {} must be a string or an object with a string 'content'", field);
}

struct SpecialTokenIds {
  std::vector<int32_t> prefix, suffix;
};

// The ids a post-processor puts around a single sequence. TemplateProcessing's "single" template is read as
// [special tokens...] $A [special tokens...].
void read_post_processor(const json& config, SpecialTokenIds& ids) {
  if (config.is_null()) return;
  if (!config.is_object()) fail("tokenizer.json: post_processor must be an object");
  const std::string type = required_string(config, "type", "post_processor");
  if (type == "ByteLevel") return;  // only adjusts offsets
  if (type == "Sequence") {
    const auto it = config.find("processors");
    if (it == config.end() || !it->is_array()) fail("tokenizer.json: Sequence post_processor needs 'processors'");
    for (const json& processor : *it) read_post_processor(processor, ids);
    return;
  }
  if (type == "TemplateProcessing") {
    const json single = config.value("single", json());
    const json special_tokens = config.value("special_tokens", json::object());
    if (!single.is_array()) fail("tokenizer.json: TemplateProcessing needs a 'single' array");
    bool seen_sequence = false;
    for (const json& piece : single) {
      if (piece.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      const auto special = piece.find("SpecialToken");
      if (special == piece.end() || !special->contains("id") || !(*special)["id"].is_string()) {
        fail("tokenizer.json: TemplateProcessing piece {} is neither a Sequence nor a SpecialToken", piece.dump());
      }
      const std::string name = (*special)["id"].get<std::string>();
      const auto entry = special_tokens.find(name);
      if (entry == special_tokens.end() || !entry->contains("ids") || !(*entry)["ids"].is_array()) {
        fail("tokenizer.json: TemplateProcessing special token '{}' has no entry in special_tokens", name);
      }
      for (const json& id : (*entry)["ids"]) {
        if (!id.is_number_integer()) fail("tokenizer.json: TemplateProcessing ids of '{}' must be integers", name);
        (seen_sequence ? ids.suffix : ids.prefix).push_back(id.get<int32_t>());
      }
    }
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    const json cls = config.value("cls", json()), sep = config.value("sep", json());
    if (!cls.is_array() || cls.size() != 2 || !sep.is_array() || sep.size() != 2) {
      fail("tokenizer.json: {} needs 'cls' and 'sep' as [token, id]", type);
    }
    ids.prefix.push_back(cls[1].get<int32_t>());
    ids.suffix.push_back(sep[1].get<int32_t>());
    return;
  }
  fail("tokenizer.json: unsupported post_processor type '{}'", type);
}

// tokenizer_config.json's add_bos_token / add_eos_token, where present, decide about BOS / EOS (transformers
// rebuilds the post-processor from them).
void apply_config_flags(const json& config, const std::optional<int32_t>& bos_id, const std::optional<int32_t>& eos_id,
                        SpecialTokenIds& ids) {
  const auto set_flag = [](std::vector<int32_t>& side, const std::optional<int32_t>& id, bool wanted) {
    if (!id) return;
    std::erase(side, *id);
    if (wanted) side.insert(side.begin(), *id);
  };
  if (const auto it = config.find("add_bos_token"); it != config.end() && it->is_boolean()) {
    set_flag(ids.prefix, bos_id, it->get<bool>());
  }
  if (const auto it = config.find("add_eos_token"); it != config.end() && it->is_boolean()) {
    set_flag(ids.suffix, eos_id, it->get<bool>());
  }
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& dir) {
  const std::filesystem::path tokenizer_path = dir / "tokenizer.json";
  if (!std::filesystem::is_regular_file(tokenizer_path)) {
    fail("no tokenizer.json in {} (expected a Hugging Face model or tokenizer directory)", dir.string());
  }
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  const std::string config_text =
      std::filesystem::is_regular_file(config_path) ? read_file(config_path) : std::string();
  return from_json(read_file(tokenizer_path), config_text, dir.string());
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                               const std::string& source) {
  try {
    TokenizerJson file = parse_tokenizer_json(tokenizer_json, "tokenizer.json");
    json config = json::object();
    if (!tokenizer_config_json.empty()) {
      config = json::parse(tokenizer_config_json, nullptr, false);
      if (config.is_discarded() || !config.is_object()) fail("tokenizer_config.json: not a JSON object");
    }
    auto model = std::make_shared<TokenizerModel>();
    const json& document = file.document;

    const json model_config = document.value("model", json());
    if (!model_config.is_object()) fail("tokenizer.json: missing 'model' object");
    const std::string model_type = model_config.value("type", std::string("BPE"));
    if (model_type != "BPE") fail("tokenizer.json: unsupported model type '{}' (only BPE is implemented)", model_type);
    if (!file.has_vocab_object) fail("tokenizer.json: model.vocab must be an object of token -> id");

    model->normalizer = make_normalizer(document.value("normalizer", json()));
    PreTokenizerBuild pre_tokenizer = make_pre_tokenizer(document.value("pre_tokenizer", json()));
    model->pre_tokenizer = std::move(pre_tokenizer.pre_tokenizer);
    model->bpe = std::make_unique<BpeModel>(model_config, std::move(file.vocab), file.merges,
                                            pre_tokenizer.emits_raw_bytes);
    model->decoder = make_decoder(document.value("decoder", json()));
    model->added_tokens = parse_added_tokens(document);

    // The id space: model vocabulary plus added tokens (which may reuse vocabulary ids, as Llama 2's <s> does).
    std::size_t num_ids = model->bpe->id_to_token().size();
    for (const AddedToken& token : model->added_tokens) num_ids = std::max<std::size_t>(num_ids, token.id + 1);
    model->id_to_token.assign(num_ids, std::string());
    model->id_is_known.assign(num_ids, 0);
    model->id_is_special.assign(num_ids, 0);
    const auto& vocab = model->bpe->id_to_token();
    for (std::size_t id = 0; id < vocab.size(); ++id) {
      if (vocab[id].empty()) continue;
      model->id_to_token[id] = vocab[id];
      model->id_is_known[id] = 1;
    }
    for (const AddedToken& token : model->added_tokens) {
      model->id_to_token[token.id] = token.content;
      model->id_is_known[token.id] = 1;
      model->id_is_special[token.id] = token.special;
      model->added_token_ids[token.content] = token.id;
      if (token.normalized && model->normalizer) {
        std::string pattern = token.content;
        model->normalizer->normalize(pattern);
        model->normalized_added_tokens.add(token, std::move(pattern));
      } else if (token.normalized) {
        model->normalized_added_tokens.add(token, token.content);
      } else {
        model->raw_added_tokens.add(token, token.content);
      }
    }
    model->raw_added_tokens.build();
    model->normalized_added_tokens.build();

    model->id_to_bytes = model->id_to_token;
    if (model->decoder) {
      for (std::string& token : model->id_to_bytes) model->decoder->to_bytes(token);
    }

    model->bos_token = config_token(config, "bos_token");
    model->eos_token = config_token(config, "eos_token");
    const Tokenizer lookup(model);
    const auto resolve = [&](const std::optional<std::string>& token, const char* field) -> std::optional<int32_t> {
      if (!token) return std::nullopt;
      const auto id = lookup.token_to_id(*token);
      if (!id) fail("tokenizer_config.json: {} '{}' is not a token of tokenizer.json", field, *token);
      return id;
    };
    model->bos_id = resolve(model->bos_token, "bos_token");
    model->eos_id = resolve(model->eos_token, "eos_token");

    SpecialTokenIds special;
    read_post_processor(document.value("post_processor", json()), special);
    apply_config_flags(config, model->bos_id, model->eos_id, special);
    for (int32_t id : special.prefix) {
      if (id < 0 || static_cast<std::size_t>(id) >= num_ids) fail("tokenizer.json: post_processor id {} is not a token", id);
    }
    for (int32_t id : special.suffix) {
      if (id < 0 || static_cast<std::size_t>(id) >= num_ids) fail("tokenizer.json: post_processor id {} is not a token", id);
    }
    model->special_prefix_ids = std::move(special.prefix);
    model->special_suffix_ids = std::move(special.suffix);
    return Tokenizer(std::move(model));
  } catch (const Error& e) {
    fail("loading tokenizer from {}: {}", source, e.what());
  } catch (const std::exception& e) {
    fail("loading tokenizer from {}: {}", source, e.what());
  }
}

namespace {

void encode_normalized_piece(const TokenizerModel& model, std::string_view text, bool at_text_start,
                             std::vector<int32_t>& ids) {
  if (!model.pre_tokenizer) {
    model.bpe->encode_word(text, ids);
    return;
  }
  PreTokenizedText pieces(text, at_text_start);
  model.pre_tokenizer->pre_tokenize(pieces);
  for (const PreTokenPiece& piece : pieces.pieces) model.bpe->encode_word(piece.text, ids);
}

// One run of input text between raw added tokens: normalize, then split on normalized added tokens.
void encode_text_run(const TokenizerModel& model, std::string_view text, bool at_text_start,
                     std::vector<int32_t>& ids) {
  std::string normalized;
  if (model.normalizer) {
    normalized.assign(text);
    model.normalizer->normalize(normalized);
    text = normalized;
  }
  if (model.normalized_added_tokens.empty()) {
    encode_normalized_piece(model, text, at_text_start, ids);
    return;
  }
  for (const AddedTokenSplit& split : model.normalized_added_tokens.split(text)) {
    if (split.token_id >= 0) {
      ids.push_back(split.token_id);
    } else {
      encode_normalized_piece(model, text.substr(split.start, split.end - split.start),
                              at_text_start && split.start == 0, ids);
    }
  }
}

}  // namespace

void Tokenizer::encode_into(std::string_view text, bool add_special_tokens, std::vector<int32_t>& ids) const {
  if (const auto invalid = utf8::first_invalid_offset(text)) {
    fail("tokenizer: input text is not valid UTF-8 (byte {} of {})", *invalid, text.size());
  }
  const TokenizerModel& model = *model_;
  if (add_special_tokens) ids.insert(ids.end(), model.special_prefix_ids.begin(), model.special_prefix_ids.end());
  if (model.raw_added_tokens.empty()) {
    encode_text_run(model, text, true, ids);
  } else {
    for (const AddedTokenSplit& split : model.raw_added_tokens.split(text)) {
      if (split.token_id >= 0) {
        ids.push_back(split.token_id);
      } else {
        encode_text_run(model, text.substr(split.start, split.end - split.start), split.start == 0, ids);
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), model.special_suffix_ids.begin(), model.special_suffix_ids.end());
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  encode_into(text, add_special_tokens, ids);
  return ids;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(std::span<const std::string> texts,
                                                          bool add_special_tokens, int num_threads) const {
  std::vector<std::vector<int32_t>> results(texts.size());
  const std::size_t num_workers = std::clamp<std::size_t>(num_threads, 1, std::max<std::size_t>(texts.size(), 1));
  std::atomic<std::size_t> next{0};
  std::exception_ptr first_error;
  std::atomic<bool> failed{false};
  const auto work = [&] {
    for (std::size_t i = next++; i < texts.size() && !failed; i = next++) {
      try {
        results[i] = encode(texts[i], add_special_tokens);
      } catch (...) {
        // The first error is handed to the calling thread, which rethrows it after joining.
        if (!failed.exchange(true)) first_error = std::current_exception();
      }
    }
  };
  if (num_workers == 1) {
    work();
  } else {
    std::vector<std::jthread> workers;
    for (std::size_t w = 0; w < num_workers; ++w) workers.emplace_back(work);
  }
  if (first_error) std::rethrow_exception(first_error);
  return results;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const TokenizerModel& model = *model_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= model.id_to_token.size() || !model.id_is_known[id]) continue;
    if (skip_special_tokens && model.id_is_special[id]) continue;
    tokens.push_back(model.id_to_token[id]);
  }
  std::string text;
  if (model.decoder) {
    model.decoder->decode_chain(tokens);
    for (const std::string& token : tokens) text += token;
  } else {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) text += ' ';
      text += tokens[i];
    }
  }
  return text;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) fail("tokenizer: token id {} is outside the vocabulary [0, {})", id, vocab_size());
  return model_->id_to_bytes[id];
}

const std::string& Tokenizer::token_string(int32_t id) const {
  if (id < 0 || id >= vocab_size()) fail("tokenizer: token id {} is outside the vocabulary [0, {})", id, vocab_size());
  return model_->id_to_token[id];
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = model_->added_token_ids.find(std::string(token)); it != model_->added_token_ids.end()) {
    return it->second;
  }
  return model_->bpe->token_to_id(token);
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(model_->id_to_token.size()); }
std::optional<int32_t> Tokenizer::bos_id() const { return model_->bos_id; }
std::optional<int32_t> Tokenizer::eos_id() const { return model_->eos_id; }
const std::optional<std::string>& Tokenizer::bos_token() const { return model_->bos_token; }
const std::optional<std::string>& Tokenizer::eos_token() const { return model_->eos_token; }
bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && model_->id_is_special[id];
}
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return model_->added_tokens; }
const std::vector<int32_t>& Tokenizer::special_prefix_ids() const { return model_->special_prefix_ids; }
const std::vector<int32_t>& Tokenizer::special_suffix_ids() const { return model_->special_suffix_ids; }

}  // namespace tern
