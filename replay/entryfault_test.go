package replay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/replay"
)

// SQS may fail single entries of a SendMessageBatch on its side
// (SenderFault false) while the call succeeds. A dead letter whose copy
// was not sent is left in the source, counted as failed, and the next run
// moves it: in the end every dead letter is in the target exactly once and
// gone from the source, and none is lost on the way.
func TestReplayer_SendEntryFailures(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	const n = 30
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("k%02d", i))
	}
	b.put(b.queue.DLQURL, bodies(want...))
	faults := sqstest.NewFaults(31, nil)
	faults.Set("SendMessageBatch", sqstest.Rates{EntryFailure: 0.3})

	var moved, failed int64
	for run := 1; ; run++ {
		if run > 10 {
			t.Fatalf("%d of %d moved after 10 runs\n%s", moved, n, b.log)
		}
		r, err := replay.New(b.config(), sqstest.NewClient(t, faults), b.db)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		sum, err := r.Run(ctx)
		cancel()
		moved += sum.Moved
		failed += sum.Failed
		if sum.Failed == 0 {
			if err != nil {
				t.Fatalf("run %d: %v\n%s", run, err, b.log)
			}
			break
		}
		if !errors.Is(err, replay.ErrNotMoved) || sum.DeleteFailed != 0 {
			t.Fatalf("run %d: summary %+v, error %v; want ErrNotMoved for the failed sends alone\n%s", run, sum, err, b.log)
		}
	}
	if entries := faults.Count("SendMessageBatch", sqstest.EntryFailure); entries == 0 || failed != int64(entries) {
		t.Fatalf("%d send entries failed, %d messages counted as failed; want as many, and some", entries, failed)
	}
	if moved != n {
		t.Errorf("moved %d in all, want %d", moved, n)
	}
	if got := ids(b.visible(b.queue.URL, "the target")); !slices.Equal(got, want) {
		t.Errorf("the target holds %v, want each dead letter once: %v", got, want)
	}
	if left := b.visible(b.queue.DLQURL, "the source"); len(left) != 0 {
		t.Errorf("left in the source: %v", ids(left))
	}
}
