#!/usr/bin/env bash
# Fails (listing the files) when a tracked C++ file differs from what .clang-format makes of it.
# Fix with: git ls-files '*.cc' '*.h' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
bad=()
while IFS= read -r f; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done < <(git ls-files '*.cc' '*.h')
if [ ${#bad[@]} -ne 0 ]; then
  printf 'not formatted (clang-format -i FILE):\n'; printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "all $(git ls-files '*.cc' '*.h' | wc -l) C++ files formatted"
