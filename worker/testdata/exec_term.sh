#!/bin/sh
# Usage: exec_term.sh READY-FILE MODE
# Creates READY-FILE, then waits. MODE "exit0" exits 0 on SIGTERM; MODE
# "ignore" ignores SIGTERM (and so do its children), leaving SIGKILL to end
# it.
case $2 in
exit0) trap 'echo "got TERM" >&2; exit 0' TERM ;;
ignore) trap '' TERM ;;
esac
: >"$1"
while :; do
	sleep 1 &
	wait $!
done
