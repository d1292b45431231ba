package replay_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/replay"
	"github.com/sqsonce/sqsonce/worker"
)

// A key taken from the FIFO deduplication id stays the same through a dead
// letter and a replay, although each copy has a deduplication id of its
// own: the worker dead-letters, replay moves the copy back, and the worker
// runs the same operation again, not a new one named after the copy.
func TestReplayer_KeyFromDeduplicationID(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	keys := worker.KeyConfig{From: worker.KeyFromDeduplicationID}
	var mu sync.Mutex
	var runs []string
	w, err := worker.New(worker.Config{
		QueueURL: b.queue.URL, WaitTime: time.Second, VisibilityTimeout: 2 * time.Second,
		Key: keys, MinBackoff: worker.NoDelay, MaxBackoff: worker.NoDelay, Logger: b.cfgLogger(),
	}, sqstest.NewClient(t, nil), b.db, worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
		mu.Lock()
		defer mu.Unlock()
		runs = append(runs, m.Key)
		if len(runs) == 1 {
			return worker.Permanent(errors.New("bad card"))
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	if _, err := b.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &b.queue.URL, MessageBody: aws.String(`{"amount":1}`),
		MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("op-1")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dead letter", func() bool { v, _ := sqstest.Count(t, b.client, b.queue.DLQURL); return v == 1 })
	dl := b.visible(b.queue.DLQURL, "the DLQ")
	for _, m := range dl {
		if d := m.Attributes["MessageDeduplicationId"]; !strings.HasPrefix(d, "sqsonce-copy-") || attr(m, worker.AttrDeduplicationID) != "op-1" {
			t.Fatalf("dead letter: deduplication id %q, %s %q", d, worker.AttrDeduplicationID, attr(m, worker.AttrDeduplicationID))
		}
	}
	b.unhideAll(b.queue.DLQURL, 1)

	keyOf, err := worker.MessageKeyFunc(keys)
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.KeyOf = keyOf
	sum, err := b.run(cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, b.log)
	}
	b.want(sum, replay.Summary{Moved: 1, Reset: 1})
	waitFor(t, "the replayed operation", func() bool {
		rec, err := b.db.Get(context.Background(), "op-1")
		return err == nil && rec.State == ledger.StateComplete
	})
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(runs, " ") != "op-1 op-1" {
		t.Errorf("ran %q, want op-1 twice (once failing, once after the replay)", runs)
	}
	if rec, _ := b.db.Get(context.Background(), "op-1"); rec.Attempts != 2 {
		t.Errorf("record %+v", rec)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 20s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
