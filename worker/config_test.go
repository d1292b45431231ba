package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/worker"
)

func TestConfig_Validate(t *testing.T) {
	t.Parallel()
	base := func() worker.Config {
		return worker.Config{QueueURL: "http://127.0.0.1:1/000000000000/q", Key: worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"}}
	}
	t.Run("ZeroIsDefaultNoDelayIsZero", func(t *testing.T) {
		t.Parallel()
		c := base()
		c.WaitTime, c.MinBackoff, c.MaxBackoff, c.Grace = worker.NoDelay, worker.NoDelay, 2*time.Second, worker.NoDelay
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		if err := base().Validate(); err != nil {
			t.Fatal(err)
		}
		c = base()
		c.Prefetch = worker.NoPrefetch
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
	})
	tests := []struct {
		name   string
		mutate func(*worker.Config)
		field  string
		want   string
	}{
		{"negative grace", func(c *worker.Config) { c.Grace = -5 * time.Second }, "Grace", "Grace: must be between 0s and 1h, got -5s"},
		{"max under min", func(c *worker.Config) { c.MinBackoff, c.MaxBackoff = 5*time.Second, time.Second }, "MaxBackoff", "at least the minimum back-off (5s), got 1s"},
		{"max under default min", func(c *worker.Config) { c.MaxBackoff = time.Second }, "MaxBackoff", "at least the minimum back-off (5s)"},
		{"retention under a claim", func(c *worker.Config) { c.Retention = time.Minute }, "Retention", "(1m20s)"},
		{"too many pollers", func(c *worker.Config) { c.Pollers = 65 }, "Pollers", "between 1 and 64, got 65"},
		{"relative url", func(c *worker.Config) { c.QueueURL = "queue" }, "QueueURL", "absolute http or https URL"},
		{"pointer", func(c *worker.Config) { c.Key.Pointer = "id" }, "Key.Pointer", `starting with "/", got "id"`},
		{"negative prefetch", func(c *worker.Config) { c.Prefetch = -2 }, "Prefetch", "between 1 and 10000, or NoPrefetch, got -2"},
		{"prefetch beside bad pollers", func(c *worker.Config) { c.Pollers = -1 }, "Pollers", "between 1 and 64, got -1"},
		{"negative max payload", func(c *worker.Config) { c.MaxPayload = -1 }, "MaxPayload", "between 1 and 2147483648 bytes, got -1"},
		{"huge max payload", func(c *worker.Config) { c.MaxPayload = 3 << 30 }, "MaxPayload", "got 3221225472"},
		{"delete objects without S3", func(c *worker.Config) { c.DeleteObjects = true }, "DeleteObjects", "needs an S3 client"},
		{"queue stats too often", func(c *worker.Config) { c.QueueStatsInterval = 500 * time.Millisecond }, "QueueStatsInterval", "at least 1s, or negative to read none, got 500ms"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := base()
			tc.mutate(&c)
			err := c.Validate()
			var fe *worker.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, worker.ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want a FieldError for %s wrapping ErrInvalidConfig", err, tc.field)
			}
			if got := fe.Error(); !strings.Contains(got, tc.want) {
				t.Errorf("%q does not contain %q", got, tc.want)
			}
		})
	}
}

// NoDelay grace: a stop cancels running work at once, rather than letting
// it run for the default 25 seconds.
func TestWorker_NoGrace(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxReceive: 5})
	cfg := b.config()
	cfg.Grace = worker.NoDelay
	started := make(chan struct{})
	cancelled := make(chan bool, 1)
	stop := b.start(cfg, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		close(started)
		select {
		case <-ctx.Done():
			cancelled <- true
			return ctx.Err()
		case <-time.After(20 * time.Second):
			cancelled <- false
			return nil
		}
	}))
	b.send(`{"id":"slow"}`)
	<-started
	s := stop()
	if !<-cancelled {
		t.Fatal("the handler ran on after the stop: a grace of NoDelay was not zero")
	}
	if s.Completed != 0 || s.Deleted != 0 {
		t.Errorf("stats %+v: cut-off work was acknowledged", s)
	}
}
