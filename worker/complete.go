package worker

import (
	"context"
	"sync"

	"github.com/sqsonce/sqsonce/ledger"
)

// Recording completions: a few completers take the completions of finished
// work from one channel and record all those waiting at that moment in one
// call. Nothing waits for company: an idle worker records each completion
// at once, and a busy one gathers those that finished while the previous
// call was in flight, so that a shared ledger makes about one round trip
// per batch of messages rather than one per message.
const (
	completers       = 2
	maxCompleteBatch = 64
)

// completion is one finished job's completion, and where its answer goes.
type completion struct {
	c    ledger.Completion
	done chan error
}

// recordComplete records c through the completers and returns the ledger's
// answer for it.
func (w *Worker) recordComplete(c ledger.Completion) error {
	done := make(chan error, 1)
	w.completes <- completion{c: c, done: done}
	return <-done
}

// completeLoop runs the completers until the channel is closed and drained.
func (w *Worker) completeLoop() {
	var wg sync.WaitGroup
	for range completers {
		wg.Go(w.completer)
	}
	wg.Wait()
}

func (w *Worker) completer() {
	batch := make([]completion, 0, maxCompleteBatch)
	cs := make([]ledger.Completion, 0, maxCompleteBatch)
	for first := range w.completes {
		batch = append(batch[:0], first)
	gather:
		for len(batch) < maxCompleteBatch {
			select {
			case c, ok := <-w.completes:
				if !ok {
					break gather
				}
				batch = append(batch, c)
			default:
				break gather
			}
		}
		cs = cs[:0]
		for _, b := range batch {
			cs = append(cs, b.c)
		}
		// Not bound to the worker's stop: done work is recorded whenever
		// it can be; the ledger bounds its own calls.
		errs := w.ledger.CompleteBatch(context.Background(), cs)
		for i, b := range batch {
			b.done <- errs[i]
		}
	}
}
