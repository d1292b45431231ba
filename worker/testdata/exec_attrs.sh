#!/bin/sh
# Prints the SQSONCE_ATTR_ variables it was given, sorted; a line over 100
# bytes as its first 26 bytes and its length.
env | grep '^SQSONCE_ATTR_' | sort | awk '{ if (length($0) > 100) print substr($0, 1, 26) "... " length($0); else print }'
echo "multi: ${#SQSONCE_ATTR_MULTI} bytes"
