package main

import (
	"context"
	"fmt"
	"math/rand/v2"
)

// Each ledger phase of the standard campaign brings the work it watches:
// operations of its own, sent when the phase needs the worker busy, so
// that its verdict depends neither on what the main workload has left (a
// seed whose last operation completed before the phase, a machine slow
// or fast) nor on luck. They are normal operations, one delivery each,
// and the audit counts them with the rest: each must complete, once.

// phaseWork sends n operations of phase's own (ids "phase-K-I") and
// returns them. They join the workload that the audit goes through.
func (c *campaign) phaseWork(ctx context.Context, phase string, n int) ([]*op, error) {
	c.mu.Lock()
	k := len(c.phaseOps)
	c.mu.Unlock()
	rng := rand.New(rand.NewPCG(c.cfg.Seed, uint64(k)+100))
	ops := make([]*op, n)
	bodies := make([]string, n)
	for i := range ops {
		id := fmt.Sprintf("%s-%d-%d", phase, k, i)
		ops[i] = &op{id: id, class: classNormal, copies: 1, body: fmt.Sprintf(`{"id":%q,"amount":%d}`, id, rng.IntN(100000))}
		bodies[i] = ops[i].body
	}
	c.mu.Lock()
	c.phaseOps = append(c.phaseOps, ops...)
	c.mu.Unlock()
	for len(bodies) > 0 {
		m := min(len(bodies), 10)
		if err := c.snd.sendBatch(ctx, bodies[:m]); err != nil {
			return nil, fmt.Errorf("%s: send its operations: %w", phase, err)
		}
		bodies = bodies[m:]
	}
	c.logf("%s: sent %d operations of its own", phase, n)
	return ops, nil
}

// allOps returns the workload's operations and those the phases sent.
func (c *campaign) allOps(wl *workload) []*op {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append(append([]*op(nil), wl.ops...), c.phaseOps...)
}

// opByID returns the operation id of the workload or of a phase, or nil.
func (c *campaign) opByID(wl *workload, id string) *op {
	if o := wl.byID[id]; o != nil {
		return o
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range c.phaseOps {
		if o.id == id {
			return o
		}
	}
	return nil
}
