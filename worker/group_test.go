package worker

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
)

// Messages of a FIFO group that wait behind a long-running one are kept
// invisible, and their claims alive, until their turn: none comes back
// meanwhile, so none climbs towards the dead-letter queue while it waits.
//
// SQS returns several messages of one group in one receive; the local
// server returns only a group's head. So the batch is received from a
// standard queue, whose messages have no group: the worker, told that its
// queue is FIFO, runs them as one group, in order.
func TestWorker_FIFOWaitingMessagesKept(t *testing.T) {
	t.Parallel()
	client := sqstest.NewClient(t, nil)
	q := sqstest.CreateQueue(t, client, sqstest.QueueOptions{})
	db, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const vis = 2 * time.Second
	var mu sync.Mutex
	var order []string
	w, err := New(Config{
		QueueURL: q.URL, VisibilityTimeout: vis, MaxBackoff: time.Second, MinBackoff: time.Second,
		Key: KeyConfig{From: KeyFromBody, Pointer: "/id"},
	}, client, db, HandlerFunc(func(ctx context.Context, m *Message) error {
		mu.Lock()
		order = append(order, m.Key)
		mu.Unlock()
		if m.Key == "long" {
			time.Sleep(3 * vis) // the others' visibility would lapse twice over
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	w.queue = queueInfo{fifo: true}
	ctx := context.Background()
	keys := []string{"long", "next-1", "next-2"}
	for _, key := range keys {
		if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: aws.String(fmt.Sprintf(`{"id":%q}`, key))}); err != nil {
			t.Fatal(err)
		}
	}
	var msgs []types.Message
	for len(msgs) < len(keys) {
		out, err := w.receive(ctx, len(keys)-len(msgs))
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, out...)
	}
	if n := w.acquire(ctx, len(msgs)); n != len(msgs) {
		t.Fatalf("acquired %d slots", n)
	}
	var deleters, completers, jobs sync.WaitGroup
	deleters.Go(w.deleteLoop)
	completers.Go(w.completeLoop)
	w.inHand.Add(int64(len(msgs)))
	w.dispatch(ctx, ctx, time.Now(), msgs, &jobs)

	// While the group runs, nothing of it may be received again.
	again := make(chan []string, 1)
	go func() {
		var seen []string
		deadline := time.Now().Add(3*vis - 500*time.Millisecond)
		for time.Now().Before(deadline) {
			out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &q.URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 1})
			if err != nil {
				t.Error(err)
				break
			}
			for _, m := range out.Messages {
				seen = append(seen, aws.ToString(m.Body))
			}
		}
		again <- seen
	}()
	jobs.Wait()
	close(w.completes)
	completers.Wait()
	close(w.deletes)
	deleters.Wait()
	if seen := <-again; len(seen) > 0 {
		t.Errorf("received again while waiting their turn: %q", seen)
	}
	if fmt.Sprint(order) != "[long next-1 next-2]" {
		t.Errorf("ran %v", order)
	}
	if s := w.Stats(); s.Completed != 3 || s.Deleted != 3 {
		t.Errorf("stats %+v", s)
	}
	for _, key := range keys {
		if rec, err := db.Get(ctx, key); err != nil || rec.State != ledger.StateComplete || rec.Attempts != 1 {
			t.Errorf("%s: %+v, %v", key, rec, err)
		}
	}
}
