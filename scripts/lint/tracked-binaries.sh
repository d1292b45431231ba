#!/usr/bin/env bash
# Fail when git tracks a build output: an executable or object file in ELF,
# Mach-O or PE form, or a Go test binary or profile. Build outputs go to
# ignored folders (bin/) and never into git.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

found=0
while IFS= read -r -d '' f; do
	[[ -f "$f" ]] || continue
	magic=$(head -c 4 -- "$f" | od -An -tx1 | tr -d ' \n')
	case "$magic" in
	7f454c46 | cffaedfe | cefaedfe | feedfacf | feedface | cafebabe) ;;
	4d5a*) [[ "$f" == *.exe || "$f" == *.dll ]] || continue ;;
	*)
		case "$f" in
		*.test | *.prof | *.o | *.a | *.so) ;;
		*) continue ;;
		esac
		;;
	esac
	echo "lint: $f is a build output tracked in git: git rm --cached it and ignore it in .gitignore" >&2
	found=1
done < <(git ls-files -z)
exit "$found"
