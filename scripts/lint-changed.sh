#!/usr/bin/env bash
# Checks the C++ files a change touches against .clang-format (the whole file: a file is
# formatted as it is edited, the tree is never reformatted at once) and .clang-tidy (functions of
# at most 100 lines, bugprone and performance checks). The change: the files that differ from
# the merge base with origin/main (the working tree included); where there is no merge base (a
# clean clone of one branch) or nothing differs, the files of the last commit.
#
#   scripts/lint-changed.sh [--last-commit] [BUILD]   # BUILD: where the compile commands go (build/lint)
#
# --last-commit (what CI runs: a clean clone's origin may be anything) checks the files the last
# commit changed against its first parent, and nothing for a merge commit (its branches' commits
# were checked as they were made).
#
# clang-tidy needs each file's compile command: BUILD is configured without unity batches (a
# unity build lists only its batches), which takes seconds and builds nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
last_commit=0
if [ "${1:-}" = --last-commit ]; then last_commit=1; shift; fi
build=${1:-build/lint}
clang_format=${CLANG_FORMAT:-clang-format-14}
clang_tidy=${CLANG_TIDY:-clang-tidy-14}

files=()
if [ $last_commit = 0 ] && base=$(git merge-base HEAD origin/main 2>/dev/null); then
  mapfile -t files < <(git diff --name-only --diff-filter=d "$base" -- '*.cpp' '*.hpp' '*.h')
fi
if [ ${#files[@]} -eq 0 ]; then
  mapfile -t files < <(git diff-tree --no-commit-id --name-only --diff-filter=d -r HEAD -- '*.cpp' '*.hpp' '*.h')
fi
if [ ${#files[@]} -eq 0 ]; then
  echo "lint: no C++ file changed"
  exit 0
fi
echo "lint: ${#files[@]} C++ file(s): ${files[*]}"

"$clang_format" --dry-run -Werror "${files[@]}"

sources=()
for f in "${files[@]}"; do
  case "$f" in *.cpp) sources+=("$f") ;; esac
done
[ ${#sources[@]} -eq 0 ] && { echo "lint: formatted; no source file for clang-tidy"; exit 0; }
torch_args=()
[ -d build/libtorch ] || [ -z "${PIPESCOPE_TORCH_DIR:-}" ] || torch_args=(-DPIPESCOPE_TORCH_DIR="$PIPESCOPE_TORCH_DIR")
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  -DPIPESCOPE_UNITY_BUILD=OFF -DPIPESCOPE_WITH_BENCH=OFF "${torch_args[@]}" ${PIPESCOPE_LINT_CMAKE_ARGS:-} >/dev/null
# A file the build does not compile (an option switched off here) has no command to check it with.
checked=()
for f in "${sources[@]}"; do
  if grep -q "\"file\": \"$PWD/$f\"" "$build/compile_commands.json"; then checked+=("$f"); else echo "lint: $f: not compiled in $build, not tidied"; fi
done
[ ${#checked[@]} -eq 0 ] && exit 0
printf '%s\n' "${checked[@]}" | xargs -P "$(nproc)" -n 1 "$clang_tidy" -p "$build" --quiet
echo "lint: ${#files[@]} file(s) formatted, ${#checked[@]} tidied"
