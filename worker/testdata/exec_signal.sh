#!/bin/sh
# Usage: exec_signal.sh SIGNAL
# Writes a line to stderr and kills itself with SIGNAL.
echo "about to die" >&2
kill -s "$1" $$
sleep 10
