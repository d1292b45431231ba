#!/bin/sh
# Writes 1 MiB to stdout, 250 short lines and one 5000-byte line to stderr,
# and exits 0.
head -c 1048576 /dev/zero | tr '\0' 'o'
i=1
while [ $i -le 250 ]; do
	echo "stderr line $i" >&2
	i=$((i + 1))
done
head -c 5000 /dev/zero | tr '\0' 'e' >&2
echo >&2
echo "final line" >&2
