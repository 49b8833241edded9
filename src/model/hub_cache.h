#pragma once
// Where a --model argument's files are: a directory as given, or a Hugging Face model id (ORG/NAME, or
// ORG/NAME@REVISION) found in the local hub cache the way huggingface_hub finds it, so that a model downloaded for
// transformers or vLLM loads by the same name. Nothing is downloaded.
#include <filesystem>
#include <string>

namespace tern {

// The hub cache directory: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (huggingface_hub's constants.py).
std::filesystem::path hub_cache_dir();

// `model` itself where it is a directory; else, for an id, the snapshot its revision ("main" unless given) names:
// <cache>/models--ORG--NAME/snapshots/<commit>, the commit read from refs/<revision> or given as the revision.
// Throws tern::Error naming every path it looked at.
std::filesystem::path resolve_model_path(const std::string& model);

}  // namespace tern
