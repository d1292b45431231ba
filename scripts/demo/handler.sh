#!/bin/sh
# The demo's example handler. sqsonce runs it once per attempt, without a
# shell of its own: the message body arrives on stdin, the operation key in
# SQSONCE_KEY. Exit 0 means done, 75 means "try again later", anything else
# means "this will never work" (the message goes to the dead-letter queue).
set -eu
body=$(cat)
state=${DEMO_STATE_DIR:?DEMO_STATE_DIR is not set}

case $body in
*'"always_fail":true'*)
	echo "refusing $SQSONCE_KEY: the account is closed" >&2
	exit 1
	;;
*'"fail_once":true'*)
	if [ ! -e "$state/failed-$SQSONCE_KEY" ]; then
		: >"$state/failed-$SQSONCE_KEY"
		echo "payment service busy for $SQSONCE_KEY, try later" >&2
		exit 75
	fi
	;;
esac

# The effect: one line per successful run.
echo "$SQSONCE_KEY" >>"$state/effects.log"
echo "charged $SQSONCE_KEY"
