#!/usr/bin/env bash
# The README's commands, as a new user copies them (issue 40): every command line in the code
# blocks of README.md and of the guides in docs/*.md names a program that exists after the two
# set-up commands, and the quick ones run as written, from a scratch copy of the repository root
# (so their runs/ never touch the checkout's). A command written in several files is checked once.
#   tests/readme/readme_commands.sh [BUILD_DIR]     (CTest runs it as readme.commands)
# Prints one line per command and a count; exits 1 when a program is missing or a quick one fails.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
scratch=$(mktemp -d /tmp/packrat_readme.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
for f in configs experiments scripts examples; do ln -s "$root/$f" "$scratch/$f"; done
ln -s "$build" "$scratch/build"

# Command lines: lines of ```sh blocks and indented code that start with a program of the project.
# One line per command, "FILE<TAB>COMMAND" (FILE relative to the root), the first file that has it.
commands_of() {
  awk '/^```/ { inblock = !inblock; next } inblock || /^    [^ ]/ { sub(/^    /, ""); print }' "$root/$1" |
    grep -E '^(\./)?(build/bin/|scripts/|experiments/|OMP_NUM_THREADS=[0-9]+ build/bin/|mpirun )' |
    sed 's/[[:space:]]*#.*$//' | sed "s|^|$1\t|"
}
files=(README.md)
for f in "$root"/docs/*.md; do files+=("docs/${f##*/}"); done
commands=$(for f in "${files[@]}"; do commands_of "$f"; done | awk -F'\t' '$2 != "" && !seen[$2]++')

checked=0 ran=0 failed=0
# The program a command line runs: the first word that is neither an assignment nor an mpirun flag.
program_of() {
  local w
  for w in $1; do
    [[ $w == *=* || $w == mpirun || $w == -* || $w =~ ^[0-9]+$ ]] && continue
    printf '%s' "$w"
    return
  done
}
# Quick commands run as written, and a sweep's runs are listed (--list) without training.
quick() {
  [[ $1 == *--memory-report-only* || $1 == *--memory-timeline* || $1 == build/bin/fewbit* ||
     $1 == experiments/fewbit_backward/errors.sh* || $1 == scripts/walkthrough.sh* ]]
}
while IFS=$'\t' read -r file cmd; do
  [[ -z $cmd ]] && continue
  checked=$((checked + 1))
  prog=$(program_of "$cmd")
  if [[ ! -x $scratch/${prog#./} ]]; then
    failed=$((failed + 1))
    echo "FAIL  missing program '$prog': $cmd"
    echo "      in $file"
    continue
  fi
  run=""
  if quick "$cmd"; then run=$cmd; fi
  # errors.sh writes beside itself unless given a directory: the checkout's results stay as they are.
  if [[ $cmd == experiments/fewbit_backward/errors.sh ]]; then run="$cmd $scratch/errors"; fi
  if [[ $cmd == build/bin/sweep* && $cmd != *--report-only* ]]; then run="$cmd --list"; fi
  [[ -z $run ]] && { echo "ok    exists: $cmd"; continue; }
  ran=$((ran + 1))
  if out=$(cd "$scratch" && OMP_NUM_THREADS=2 timeout 600 bash -c "$run" 2>&1); then
    echo "ok    ran: $run"
  else
    failed=$((failed + 1))
    echo "FAIL  ran: $run"
    echo "      in $file"
    tail -3 <<<"$out" | sed 's/^/      /'
  fi
done <<<"$commands"
echo "readme commands: $checked checked, $ran run; $((checked - failed)) passed, $failed failed"
((failed == 0))
