#pragma once
// How `tern` shows weight loading on stderr: a line redrawn in place on a terminal (bytes, GB/s, time left), plain
// lines every few seconds otherwise (logs), and one closing line with the size, time and rate either way.
#include "model/load_progress.h"

namespace tern::cli {

LoadProgress::Listener load_progress_display();

}  // namespace tern::cli
