package worker

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// FlowConfig protects what the handlers call. It pauses the intake while
// the handlers' downstream is down, and it bounds how fast and how many
// operations start, for the handler's whole scope and for each value of a
// part of the message (Partitions). On a ledger that several workers share
// (PostgreSQL, DynamoDB) the pause and the limits hold for all of them.
//
// A message held for a limit or a pause is not a failure: no attempt is
// counted, it backs off nothing and is never dead-lettered for it; its
// visibility is kept while it is held, and on a standard queue what cannot
// be held is deferred (sent again with a delay under its key, the original
// deleted once SQS took the copy). FIFO messages are never sent again:
// their group is held.
//
// The zero FlowConfig pauses during an outage, with the default trip, and
// sets no limit.
type FlowConfig struct {
	// Mode is FlowOn (the default), FlowObserve (decide and report what
	// the pause and the limits would do, without doing it) or FlowOff.
	Mode FlowMode
	// Scope names what a pause and the limits apply to, on every worker
	// that shares the ledger: by default the queue's name; the sqsonce
	// command adds the handler's target (an http URL, an exec command), so
	// that workers of other queues, or of other targets, are not paused.
	Scope string
	// NoPause turns pausing off: failures follow the back-off to the
	// dead-letter queue, whatever their cause.
	NoPause bool
	// PauseOn adds failure classes that count towards a pause. Unavailable
	// errors (an http handler's 5xx, 429, 408, refused connections and
	// timeouts; a Go handler's worker.Unavailable) always count, and
	// permanent failures never do. FailureRetry counts every other
	// retryable failure too (an exec command's retry code, a Go error),
	// which usually say "this message, later" rather than "down".
	PauseOn []FailureClass
	// Trip says when failures mean an outage.
	Trip Trip
	// ProbeMax is the longest wait between two probes while paused:
	// 1s..1h; default 10s, so that a backlog drains soon after the
	// downstream is back.
	ProbeMax time.Duration

	// Rate is how many operations of the scope start per second, at most,
	// across the fleet; 0 sets no rate. Burst is how many may start at
	// once after a quiet spell: 1..10000; default 1.
	Rate  float64
	Burst int
	// Concurrency is how many operations of the scope run at once, at
	// most, across the fleet; 0 sets no bound. It needs a shared ledger:
	// on the embedded one Concurrency (the handlers) is that bound.
	Concurrency int
	// Partitions limit each value of a part of the message on its own.
	Partitions []FlowPartition
}

// FlowMode says whether flow control acts.
type FlowMode string

// Flow modes.
const (
	FlowOn      FlowMode = "on"
	FlowObserve FlowMode = "observe"
	FlowOff     FlowMode = "off"
)

// FailureClass is a kind of failure that FlowConfig.PauseOn may count.
type FailureClass string

// Failure classes.
const (
	FailureUnavailable FailureClass = "unavailable" // always counted
	FailureRetry       FailureClass = "retry"       // any other retryable failure
)

// Trip says when counted failures mean that the downstream is down:
// at least Failures of them within Window, from at least Keys distinct
// operation keys, making at least Ratio of the attempts that ended in the
// window, or in its latest part (its newest tenths: the successes of a
// busy spell before an outage do not hold the trip off for the whole
// window); or Failures of them in a row within Window, from Keys keys,
// with no success between them. A worker whose calls could not end
// Failures within Window (few calls at once to a downstream that hangs
// until the handler's timeout) needs as many as they could, at the pace
// of its latest failure, and at least Keys. Defaults: 10 in 30s, from 3
// keys, 90 %.
type Trip struct {
	Failures int           // 1..100000
	Window   time.Duration // 1s..1h
	Keys     int           // 1..Failures
	Ratio    float64       // (0, 1]
}

// FlowPartition limits each value of one part of the message on its own:
// a tenant, an account. A message without the part is in the "(none)"
// partition, under the scope's limits only. With a partition, a pause can
// be one value's alone (one tenant's endpoint down does not stop the
// others).
type FlowPartition struct {
	// Pointer is an RFC 6901 pointer into the payload (a JSON body), or
	// Attribute names a message attribute: exactly one of them.
	Pointer   string
	Attribute string
	// Rate, Burst and Concurrency hold for each value, as the scope's do.
	Rate        float64
	Burst       int
	Concurrency int
}

// Limits of flow control.
const (
	DefaultProbeMax = 10 * time.Second
	MinRate         = 1.0 / 86400 // one a day
	MaxRate         = 1e6
	MaxBurst        = 10000
)

// Defaults of Trip.
var DefaultTrip = Trip{Failures: 10, Window: 30 * time.Second, Keys: 3, Ratio: 0.9}

func (f *FlowConfig) setDefaults() {
	if f.Mode == "" {
		f.Mode = FlowOn
	}
	t, d := &f.Trip, DefaultTrip
	if t.Failures == 0 {
		t.Failures = d.Failures
	}
	if t.Window == 0 {
		t.Window = d.Window
	}
	if t.Keys == 0 {
		t.Keys = min(d.Keys, t.Failures)
	}
	if t.Ratio == 0 {
		t.Ratio = d.Ratio
	}
	if f.ProbeMax == 0 {
		f.ProbeMax = DefaultProbeMax
	}
	if f.Burst == 0 {
		f.Burst = 1
	}
	for i := range f.Partitions {
		if f.Partitions[i].Burst == 0 {
			f.Partitions[i].Burst = 1
		}
	}
}

// validate checks f after setDefaults; bad reports a field's problem.
func (f *FlowConfig) validate(bad func(field, got, want string, args ...any)) {
	switch f.Mode {
	case FlowOn, FlowObserve, FlowOff:
	default:
		bad("Flow.Mode", strconv.Quote(string(f.Mode)), "must be %s, %s or %s", FlowOn, FlowObserve, FlowOff)
	}
	for _, c := range f.PauseOn {
		if c != FailureUnavailable && c != FailureRetry {
			bad("Flow.PauseOn", strconv.Quote(string(c)), "must list only %s and %s", FailureUnavailable, FailureRetry)
		}
	}
	t := f.Trip
	if t.Failures < 1 || t.Failures > 100000 {
		bad("Flow.Trip.Failures", strconv.Itoa(t.Failures), "must be between 1 and 100000")
	}
	if t.Window < time.Second || t.Window > time.Hour {
		bad("Flow.Trip.Window", short(t.Window), "must be between 1s and 1h")
	}
	if t.Keys < 1 || t.Keys > t.Failures {
		bad("Flow.Trip.Keys", strconv.Itoa(t.Keys), "must be between 1 and Flow.Trip.Failures (%d)", t.Failures)
	}
	if !(t.Ratio > 0 && t.Ratio <= 1) {
		bad("Flow.Trip.Ratio", strconv.FormatFloat(t.Ratio, 'g', -1, 64), "must be greater than 0 and at most 1")
	}
	if f.ProbeMax < time.Second || f.ProbeMax > time.Hour {
		bad("Flow.ProbeMax", short(f.ProbeMax), "must be between 1s and 1h")
	}
	limits := func(field string, rate float64, burst, conc int) {
		if !(rate == 0 || rate >= MinRate && rate <= MaxRate) {
			bad(field+"Rate", strconv.FormatFloat(rate, 'g', -1, 64), "must be 0 (no rate) or between one a day (1/86400) and %g per second", MaxRate)
		}
		if burst < 1 || burst > MaxBurst {
			bad(field+"Burst", strconv.Itoa(burst), "must be between 1 and %d", MaxBurst)
		} else if b := (ledger.Bucket{Rate: rate, Burst: burst}); rate > 0 && float64(burst)*float64(b.Interval()) > float64(ledger.MaxRetention) {
			bad(field+"Burst", strconv.Itoa(burst), "at %g per second spans more than %v, the longest a rate bucket is kept", rate, ledger.MaxRetention)
		}
		if conc < 0 || conc > MaxConcurrency {
			bad(field+"Concurrency", strconv.Itoa(conc), "must be between 0 (no bound) and %d", MaxConcurrency)
		}
	}
	limits("Flow.", f.Rate, f.Burst, f.Concurrency)
	parts := map[string]int{} // the first partition of each part of the message
	for i, p := range f.Partitions {
		field := fmt.Sprintf("Flow.Partitions[%d].", i)
		part, what, name := "", "Attribute", p.Attribute // part: the part named, when valid
		switch {
		case (p.Pointer == "") == (p.Attribute == ""):
			bad(field+"Pointer", "", "or Attribute, exactly one of them, must name the part of the message")
		case p.Pointer != "":
			what, name = "Pointer", p.Pointer
			if tokens, err := parsePointer(p.Pointer); err != nil {
				bad(field+"Pointer", strconv.Quote(p.Pointer), "must be an RFC 6901 pointer: %v", err)
			} else {
				part = fmt.Sprintf("pointer %q", tokens)
			}
		default:
			if err := attributeName(p.Attribute); err != nil {
				bad(field+"Attribute", strconv.Quote(p.Attribute), "%v", err)
			} else {
				part = "attribute " + p.Attribute
			}
		}
		if first, ok := parts[part]; ok && part != "" {
			bad(field+what, strconv.Quote(name), "must name another part of the message than partition #%d does: two partitions of one part would share each value's bucket and slots under two limits", first+1)
		} else if part != "" {
			parts[part] = i
		}
		limits(field, p.Rate, p.Burst, p.Concurrency)
		if p.Rate == 0 && p.Concurrency == 0 {
			bad(field+"Rate", "0", "or Concurrency must be set: a partition without a limit limits nothing")
		}
	}
}

// counts reports whether err, a retryable failure, counts towards a pause;
// a lease lost to another claim is not the downstream's.
func (f *FlowConfig) counts(err error) bool {
	var un *UnavailableError
	if errors.As(err, &un) {
		return true
	}
	var perm *PermanentError
	return !errors.As(err, &perm) && !errors.Is(err, errLeaseLost) && slices.Contains(f.PauseOn, FailureRetry)
}
