// pprun's default corpus: a frozen copy of the project's own documentation (exec/corpus/), text
// that every checkout and install has, under the project's own terms, and enough of it (about
// 140 kB) for a small byte-level model to learn visibly in seconds. Frozen so that a run's losses
// do not move when the docs are edited. CMake copies it to share/pipescope/corpus in the build
// folder and installs it to PREFIX/share/pipescope/corpus.
#pragma once

#include <string>

namespace pipescope::exec {

// share/pipescope/corpus beside the folder of the running executable: bin/.. in an install, the
// build folder in a build tree (pprun lies in build/<preset>/exec/).
std::string default_corpus_path();

}  // namespace pipescope::exec
