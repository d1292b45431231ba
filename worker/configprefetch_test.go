package worker_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sqsonce/sqsonce/worker"
)

// A Pollers (or MaxMessages) out of range is reported under its own name,
// as setDefaults promises; the derived Prefetch, which the caller did not
// set, is not reported as well.
func TestConfig_PrefetchNotBlamed(t *testing.T) {
	for _, c := range []worker.Config{
		{QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/q", Pollers: 2000},
		{QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/q", MaxMessages: 100000},
	} {
		err := c.Validate()
		var fe *worker.FieldError
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			if errors.As(e, &fe) && fe.Field == "Prefetch" {
				t.Errorf("Pollers %d, MaxMessages %d: Prefetch blamed: %v", c.Pollers, c.MaxMessages, e)
			}
		}
		if !strings.Contains(err.Error(), "Pollers") && !strings.Contains(err.Error(), "MaxMessages") {
			t.Errorf("the field set is not named: %v", err)
		}
	}
}
