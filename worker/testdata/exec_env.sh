#!/bin/sh
# Prints the sqsonce variables of its environment, one more inherited one,
# and then its stdin.
for name in SQSONCE_KEY SQSONCE_MESSAGE_ID SQSONCE_ATTEMPT SQSONCE_RECEIVE_COUNT SQSONCE_QUEUE_URL SQSONCE_GROUP_ID SQSONCE_TEST_INHERITED; do
	if eval "[ \"\${$name+set}\" = set ]"; then
		eval "printf '%s=%s\n' $name \"\$$name\""
	else
		printf '%s unset\n' "$name"
	fi
done
printf 'stdin='
cat
