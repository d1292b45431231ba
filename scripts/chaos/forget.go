package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sqsonce/sqsonce/scripts/chaos/internal/event"
)

// forgetRec is a record of an operation waiting in a worker's hands that
// the campaign forgot, with the real `sqsonce ledger forget` through the
// worker's ledger socket: the operator's way to let an operation run
// again. The worker learns it at its next beat (the ledger answers that
// the claim is gone) and must then not start the operation's work; its
// next delivery runs it.
type forgetRec struct {
	Key string
	Run int
	T   time.Time // just before the command ran
	// Waited is how long the run had held the claim, not started, when
	// the command ran.
	Waited time.Duration
	// End is when the command had finished: the record was gone then.
	End time.Time
}

// forgetWaitingFor bounds how long forgetting looks for an operation that
// waits in the current run's hands.
const forgetWaitingFor = 15 * time.Second

// forgetSome forgets the records of n operations that wait in the hands
// of the campaign's current run, spread over the timeline (c.tl), until
// ctx ends.
func (c *campaign) forgetSome(ctx context.Context, n int) {
	for k := range n {
		at := (float64(k) + 0.5) / float64(n)
		for c.tl.fraction() < at && ctx.Err() == nil {
			sleepCtx(ctx, 100*time.Millisecond)
		}
		if ctx.Err() != nil {
			return
		}
		c.forgetWaiting(ctx)
	}
}

// forgetWaiting forgets the record of an operation that the current run
// claimed a second ago or more and has not started, settled nor released:
// on a FIFO queue, a message waiting behind a running one of its group. It
// looks for one for up to forgetWaitingFor.
func (c *campaign) forgetWaiting(ctx context.Context) {
	deadline := time.Now().Add(forgetWaitingFor)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		c.mu.Lock()
		p := c.cur
		c.mu.Unlock()
		if p != nil && p.alive() {
			if key, claimed, ok := c.waitingKey(p.id); ok {
				c.forget(ctx, p.id, key, claimed)
				return
			}
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	c.logf("forget: no operation waited in a worker's hands for a second or more within %v", forgetWaitingFor)
}

// waitingKey finds in run id's events the key of an operation it claimed
// a second ago or more and has neither started, settled, released nor
// been told it lost: the one claimed first.
func (c *campaign) waitingKey(id int) (key string, claimed time.Time, ok bool) {
	claims := map[string]event.WorkerEvent{} // owner -> its claim
	done := map[string]bool{}
	err := event.ReadLines(filepath.Join(c.runsDir, fmt.Sprintf("run-%d.events", id)), func(e event.WorkerEvent) {
		switch e.Ev {
		case event.EvClaim:
			claims[e.Owner] = e
		case event.EvStart, event.EvComplete, event.EvFail, event.EvRelease, event.EvLost:
			done[e.Owner] = true
		}
	})
	if err != nil {
		return "", time.Time{}, false
	}
	var best *event.WorkerEvent
	for owner, e := range claims {
		if done[owner] || time.Since(time.Unix(0, e.T)) < time.Second {
			continue
		}
		if best == nil || e.T < best.T {
			best = &e
		}
	}
	if best == nil {
		return "", time.Time{}, false
	}
	return best.Key, time.Unix(0, best.T), true
}

// forget runs `sqsonce ledger forget --yes key` (through the run's ledger
// socket) and records it when it says it forgot the record.
func (c *campaign) forget(ctx context.Context, run int, key string, claimed time.Time) {
	f := forgetRec{Key: key, Run: run, T: time.Now()}
	f.Waited = f.T.Sub(claimed)
	cmd := exec.CommandContext(ctx, c.cliBin, "ledger", "forget", "--config", c.cliConfig(), "--yes", key)
	cmd.Env = cliEnv()
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "forgot") {
		if ctx.Err() == nil {
			c.logf("forget %s (run %d): %v: %s", key, run, err, strings.TrimSpace(string(out)))
		}
		return
	}
	f.End = time.Now()
	c.mu.Lock()
	c.forgets = append(c.forgets, f)
	c.mu.Unlock()
	c.logf("forgot the record of %s, which run %d had claimed %.1fs before and not started: %s", key, run, f.Waited.Seconds(), lastLine(string(out)))
}

// completedThenForgotten reports whether key's record was forgotten by the
// campaign after a worker had recorded the operation complete: the
// operation was chosen while it waited, and ran and completed before the
// command removed its record (the events the choice reads come a moment
// late). Its message was then deleted, and nothing runs it again: the
// record stays absent, with the work done. complete holds, by key, the
// times at which workers recorded completions.
func (c *campaign) completedThenForgotten(key string, complete map[string][]int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.forgets {
		if f.Key != key {
			continue
		}
		for _, t := range complete[key] {
			if t <= f.End.UnixNano() {
				return true
			}
		}
	}
	return false
}
