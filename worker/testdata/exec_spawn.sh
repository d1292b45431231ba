#!/bin/sh
# Usage: exec_spawn.sh PID-FILE MODE
# Starts a grandchild that would outlive this script and writes its pid to
# PID-FILE. MODE "wait": the grandchild is an ordinary sleep and the script
# waits forever. MODE "wait-ignore": the same, but the grandchild ignores
# SIGTERM. MODE "exit": the grandchild keeps stdout open and the script
# exits 0 at once.
case $2 in
wait) sleep 60 </dev/null >/dev/null 2>&1 & ;;
wait-ignore) (trap '' TERM; exec sleep 60) </dev/null >/dev/null 2>&1 & ;;
exit) sleep 60 </dev/null 2>/dev/null & ;;
esac
echo $! >"$1.tmp" && mv "$1.tmp" "$1"
if [ "$2" = exit ]; then
	echo done
	exit 0
fi
while :; do
	sleep 1 &
	wait $!
done
