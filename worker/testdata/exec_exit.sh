#!/bin/sh
# Usage: exec_exit.sh CODE [STDERR-LINE...]
# Writes each STDERR-LINE to stderr and exits with CODE.
code=$1
shift
for line in "$@"; do
	printf '%s\n' "$line" >&2
done
exit "$code"
