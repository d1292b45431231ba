package worker

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/textcut"
	"github.com/sqsonce/sqsonce/ledger"
)

// FlowLedger is what flow control needs of a ledger beside Ledger: small
// documents written with a compare-and-set (the pause, probe and ramp of a
// scope), rate buckets, concurrency slots and the registry of processes,
// all on the ledger's clock. Every ledger of this module implements it. On
// a ledger that does not, flow control holds in this process alone.
type FlowLedger interface {
	GetFlow(ctx context.Context, scope string) (ledger.FlowRead, error)
	PutFlow(ctx context.Context, doc ledger.FlowDoc, ifVersion int64) (ledger.FlowRead, error)
	DeleteFlow(ctx context.Context, scope string, ifVersion int64) error
	Reserve(ctx context.Context, r ledger.Reservation) (ledger.Grant, error)
	TakeSlots(ctx context.Context, rs []ledger.SlotRequest) ([][]ledger.Slot, error)
	ExtendSlots(ctx context.Context, ss []ledger.Slot, lease time.Duration) []error
	ReleaseSlots(ctx context.Context, ss []ledger.Slot) []error
	PutProcess(ctx context.Context, p ledger.Process) error
	RemoveProcess(ctx context.Context, id string) error
	MarkDeadLettered(ctx context.Context, ds []ledger.DeadLetter) []error
}

// PauseDoc is the state of a paused scope that the workers sharing a
// ledger keep in its flow document (JSON), and that `sqsonce flow` shows
// and writes. Times are the ledger's.
type PauseDoc struct {
	State    string        `json:"state"` // PausePaused or PauseRamping
	Since    time.Time     `json:"since"`
	Reason   string        `json:"reason"`
	By       string        `json:"by"`               // "auto" (a worker found the outage), or who paused by hand
	Manual   bool          `json:"manual,omitempty"` // paused by hand: no probes; it ends at the document's expiry or a resume
	Next     time.Time     `json:"next"`             // the next probe, not before
	Interval time.Duration `json:"interval"`         // between probes now
	Prober   string        `json:"prober,omitempty"` // the process whose probe runs
	ProbeEnd time.Time     `json:"probe_end,omitempty"`
	Cap      int           `json:"cap,omitempty"` // ramping: messages of the scope each worker runs at once
	Probes   int           `json:"probes"`        // probes that failed since the pause began
}

// The states of a PauseDoc.
const (
	PausePaused  = "paused"
	PauseRamping = "ramping"
)

// firstProbe is the wait before the first probe of a pause that no
// Retry-After sets.
const firstProbe = time.Second

// flowCtl is a worker's flow control: its view of each pause scope, the
// messages held for a pause or a limit, and what runs.
type flowCtl struct {
	w   *Worker
	cfg FlowConfig
	l   FlowLedger
	act bool // FlowOn: act on the decisions; FlowObserve reports them only

	// live counts the scopes whose pause document is live (found), so
	// that a start looks at the pauses under mu only while one is.
	live atomic.Int32

	mu      sync.Mutex
	changed chan struct{}     // closed, and replaced, when a held message may start
	watched bool              // changed was handed out since it was last replaced
	scopes  map[string]*scope // by name: the handler's scope, and each partition value's
	scope   []string          // the handler's scope alone
	held    []*job            // messages held for a pause or a limit, oldest first
	// rateFree is when the handler's rate bucket had its next token
	// free, fleet-wide, as the last reservation found it.
	rateFree time.Time
	// lead is how long a reservation is expected to take to answer (see
	// reserve): its tokens start no sooner, so that they are not due
	// before the answer comes. It is known once one has answered (or
	// failed); until then the reservations take turns (first).
	lead  time.Duration
	known bool
	first chan struct{}
	// asking holds when each reservation in flight began, oldest first.
	asking []time.Time
	// budget is the time of rate tokens the worker may yet waste by
	// asking again, as of budgetAt (see spend).
	budget   time.Duration
	budgetAt time.Time
	// tickAt is when tick last ran (at first, when the worker made
	// f): the time scopeOf stamps as a scope's last use, which tick
	// looks at to forget idle partition values, a second late at most.
	tickAt time.Time
}

// scope is one pause scope as this worker sees it.
type scope struct {
	name     string
	det      detector
	doc      PauseDoc
	found    bool      // a pause document is live
	version  int64     // of the document, for the next write
	readAt   time.Time // when it was read, on this host's monotonic clock
	now      time.Time // the ledger's clock at the read
	probe    *job      // this worker's probe, chosen
	tripping bool      // this worker is writing its pause
	running  int       // messages of the scope running here
	done     int       // attempts that succeeded since the ramp's cap last grew
	used     time.Time // last use, for forgetting idle partition values
}

func newFlowCtl(w *Worker, l Ledger) *flowCtl {
	f := &flowCtl{w: w, cfg: w.cfg.Flow, act: w.cfg.Flow.Mode == FlowOn, changed: make(chan struct{}), scopes: map[string]*scope{},
		scope: []string{w.cfg.Flow.Scope}, tickAt: time.Now(), first: make(chan struct{}, 1),
		budget: time.Second, budgetAt: time.Now()}
	if fl, ok := l.(FlowLedger); ok {
		f.l = fl
	} else {
		f.l = newLocalFlow()
	}
	return f
}

// off reports whether flow control does nothing at all.
func (f *flowCtl) off() bool { return f.cfg.Mode == FlowOff }

// scopeOf returns the scope named name, made when new. Call with f.mu held.
func (f *flowCtl) scopeOf(name string) *scope {
	s := f.scopes[name]
	if s == nil {
		s = &scope{name: name, det: detector{trip: f.cfg.Trip}}
		f.scopes[name] = s
	}
	s.used = f.tickAt
	return s
}

// ledgerNow is the ledger's clock now, as s last read it.
func (s *scope) ledgerNow() time.Time { return s.now.Add(time.Since(s.readAt)) }

// paused reports whether s holds its messages: paused, or ramping with its
// cap reached.
func (s *scope) paused() bool {
	switch {
	case !s.found:
		return false
	case s.doc.State == PauseRamping:
		return s.running >= max(s.doc.Cap, 1)
	}
	return true
}

// kick wakes the held messages and the pollers that wait for the intake
// to open; call with f.mu held.
func (f *flowCtl) kick() {
	if f.watched {
		close(f.changed)
		f.changed, f.watched = make(chan struct{}), false
	}
}

// changes returns the channel that kick closes; call with f.mu held.
func (f *flowCtl) changes() <-chan struct{} {
	f.watched = true
	return f.changed
}

// names returns the pause scopes of j: the handler's, then one per
// partition value it has.
func (f *flowCtl) names(j *job) []string {
	if len(f.cfg.Partitions) == 0 {
		return f.scope // shared, never written
	}
	out := []string{f.cfg.Scope}
	for i := range f.cfg.Partitions {
		if v := f.partValue(j, i); v != "" {
			out = append(out, f.partName(i, v))
		}
	}
	return out
}

// partName names the scope, bucket and pool of partition i's value v.
func (f *flowCtl) partName(i int, v string) string {
	p := f.cfg.Partitions[i]
	part := "attribute " + p.Attribute
	if p.Pointer != "" {
		part = "pointer " + p.Pointer
	}
	return f.cfg.Scope + " | " + part + " = " + v
}

// partValue is j's value of partition i; "" when it has none.
func (f *flowCtl) partValue(j *job, i int) string {
	p := f.cfg.Partitions[i]
	if p.Attribute != "" {
		if a, ok := j.opened.attrs[p.Attribute]; ok && a.StringValue != nil {
			return textcut.Cut(*a.StringValue, 256)
		}
		return ""
	}
	tokens, _ := parsePointer(p.Pointer)
	v, err := lookupPointer(j.opened.payload, tokens, p.Pointer)
	if err != nil {
		return ""
	}
	return textcut.Cut(v, 256)
}

// admit decides whether j, waiting, may start now as far as flow control
// goes: no pause of its scopes holds it (unless it is the probe) and its
// rate tokens are due. When it may not, admit returns a channel closed
// when that may have changed, and the time its tokens are due (or it asks
// again for a concurrency slot).
func (f *flowCtl) admit(j *job) (ok bool, changed <-chan struct{}, due time.Time) {
	if f.off() {
		return true, nil, time.Time{}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	due = j.notBefore
	if j.slotWait.After(due) {
		due = j.slotWait
	}
	if !due.IsZero() && time.Now().Before(due) {
		f.hold(j)
		return false, f.changes(), due
	}
	if f.pausedFor(j) {
		if f.act {
			f.hold(j)
			return false, f.changes(), time.Time{}
		}
		f.w.stats.flowWouldHold.Add(1)
	}
	f.unhold(j)
	return true, nil, time.Time{}
}

// pausedFor reports whether a pause (or a ramp at its cap) of one of j's
// scopes holds it, j not being that scope's probe. Call with f.mu held.
func (f *flowCtl) pausedFor(j *job) bool {
	return slices.ContainsFunc(j.scopes, func(name string) bool {
		s := f.scopeOf(name)
		return s.paused() && s.probe != j
	})
}

// pauseHolds reports whether a pause of one of j's scopes holds it now,
// j not being the scope's probe, and lists it among the held if so: admit
// asked before j waited for a handler, and a pause may have come since.
func (f *flowCtl) pauseHolds(j *job) bool {
	if f.off() || !f.act || f.live.Load() == 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pausedFor(j) {
		f.hold(j)
		return true
	}
	return false
}

// pausing reports whether a pause of one of j's scopes holds it (not a
// ramp, not a limit) and j is neither that scope's probe nor the next one:
// the oldest message held for it.
func (f *flowCtl) pausing(j *job) bool {
	if !f.act {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.ContainsFunc(j.scopes, func(name string) bool {
		s := f.scopeOf(name)
		if !s.found || s.doc.State != PausePaused || s.probe == j {
			return false
		}
		i := slices.IndexFunc(f.held, func(h *job) bool { return slices.Contains(h.scopes, name) })
		return i >= 0 && f.held[i] != j
	})
}

// late reports whether j's rate tokens lapsed: it did not start within
// its slack after they were due. A message that starts late, beside others
// that start on time, would put more starts in a second than the rate
// allows; one whose tokens lapsed takes new ones. The slack is lateSlack,
// or one emission interval of the tightest of its buckets, or how long the
// tokens had been due when their reservation answered and lateSlack,
// whichever is longest; but for an interval over a second, that interval
// less a second rather than the interval (then a late start and the next
// token's are a second apart). The starts of a second thus stay within the
// burst plus one at the rates of one a second or more, and within the
// burst below 0.95 a second, while the ledger answers within its lead (see
// reserve).
func (f *flowCtl) late(j *job) bool {
	if !f.act || j.interval <= 0 {
		return false
	}
	return !j.tokens || time.Since(j.notBefore) > max(f.slack(j), j.slack)
}

// slack is how late j may start on its rate tokens whenever they came:
// lateSlack or an interval (see late).
func (f *flowCtl) slack(j *job) time.Duration {
	slack := j.interval
	if slack > time.Second {
		slack -= time.Second
	}
	return max(slack, lateSlack)
}

// lateSlack is the least lateness that voids a rate token.
const lateSlack = 50 * time.Millisecond

// throttle counts j as held for a limit, once until it starts.
func (f *flowCtl) throttle(j *job) {
	if !j.throttled {
		j.throttled = true
		f.w.stats.throttled.Add(1)
	}
}

// began counts j, which starts, as running in its scopes until ended.
func (f *flowCtl) began(j *job) {
	j.throttled = false
	if f.off() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	j.inScopes = true
	for _, name := range j.scopes {
		f.scopeOf(name).running++
	}
}

// hold lists j among the held messages, in the order they were received.
func (f *flowCtl) hold(j *job) {
	if slices.Contains(f.held, j) {
		return
	}
	i, _ := slices.BinarySearchFunc(f.held, j, func(a, b *job) int { return a.b.received.Compare(b.b.received) })
	f.held = slices.Insert(f.held, i, j)
}

// heldCount is how many messages are held for a pause or a limit.
func (f *flowCtl) heldCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.held)
}

// holds reports whether j is held for a pause or a limit.
func (f *flowCtl) holds(j *job) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.held, j)
}

func (f *flowCtl) unhold(j *job) {
	if i := slices.Index(f.held, j); i >= 0 {
		f.held = slices.Delete(f.held, i, i+1)
	}
}

// ended records the end of j's attempt, which ran when started is true,
// with err, and reports whether a failure is the outage's: a failure that
// counts towards a pause of a scope that is paused, or that this failure
// pauses. A failure that is the outage's is not the operation's own: it
// neither backs off nor dead-letters it.
func (f *flowCtl) ended(ctx context.Context, j *job, started bool, err error) (outage bool) {
	if f.off() {
		return false
	}
	counted := err != nil && !f.cfg.NoPause && f.cfg.counts(err)
	var trip, grow []*scope
	f.mu.Lock()
	f.unhold(j)
	now := time.Now()
	if started {
		j.inScopes = false
	}
	// A probe's end changes its scope's document first, and the ramp
	// counts it after that; another attempt's success is counted here.
	probe := slices.ContainsFunc(j.scopes, func(name string) bool { s := f.scopes[name]; return s != nil && s.probe == j })
	for _, name := range j.scopes {
		s := f.scopeOf(name)
		if !started {
			continue
		}
		s.running--
		// A scope trips open or ramping: the failures of a ramp that
		// found the downstream down again pause it again.
		if s.det.add(now, j.key.key, counted, now.Sub(j.started), s.running+1) && (!s.found || s.doc.State == PauseRamping) && !s.tripping {
			s.tripping = true
			trip = append(trip, s)
		}
		outage = outage || counted && (s.found || s.det.tripped(now))
		if !probe {
			grow = f.rampOne(s, err, grow)
		}
	}
	f.kick()
	f.mu.Unlock()
	if started && probe {
		f.settleProbe(ctx, j, err, counted)
		f.ramp(ctx, j, err)
	} else {
		f.grow(ctx, grow)
	}
	for _, s := range trip {
		f.trip(ctx, s, err)
	}
	return outage
}

// countsAsDown reports whether flow control acts on err as an unavailable
// downstream's failure: before a pause trips, such a failure may be the
// operation's own or among the first of an outage.
func (f *flowCtl) countsAsDown(err error) bool {
	return f.act && !f.cfg.NoPause && f.cfg.counts(err)
}

// answeredSince reports whether an attempt in one of j's scopes ended
// after t other than as an unavailable downstream's failure.
func (f *flowCtl) answeredSince(j *job, t time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, name := range j.scopes {
		if f.scopeOf(name).det.lastOK.After(t) {
			return true
		}
	}
	return false
}

// retryAfterOf is the wait an outage's failure asked for, or zero.
func retryAfterOf(err error) time.Duration {
	var un *UnavailableError
	if errors.As(err, &un) {
		return un.After
	}
	return 0
}

// trip pauses s after err, on every worker of the scope: it writes the
// pause document unless one is live.
func (f *flowCtl) trip(ctx context.Context, s *scope, err error) {
	reason := "the downstream is down: " + textcut.Cut(err.Error(), 512)
	if !f.act {
		f.w.log.Warn("flow control would pause the intake (observe mode)", "scope", s.name, "reason", reason)
		f.w.stats.flowWouldPause.Add(1)
		return
	}
	first := max(min(retryAfterOf(err), f.cfg.ProbeMax), firstProbe)
	paused := f.update(ctx, s, func(d *PauseDoc, found bool, now time.Time) bool {
		if found && d.State == PausePaused {
			return false
		}
		*d = PauseDoc{State: PausePaused, Since: now, Reason: reason, By: "auto: " + f.w.ownerID, Next: now.Add(first), Interval: first}
		return true
	})
	f.mu.Lock()
	s.tripping = false
	f.mu.Unlock()
	if paused {
		f.w.stats.flowPauses.Add(1)
		f.w.log.Error("the handlers' downstream is down: intake paused; one probe at a time until it answers", "scope", s.name, "reason", reason, "first_probe_in", first)
	}
}

// update reads s's document, lets change edit it (reporting whether it
// changed it; the pause ends when it leaves State empty) and writes it
// with a compare-and-set, a few times over when another worker wrote in
// between. It keeps what it read or wrote as s's view.
func (f *flowCtl) update(ctx context.Context, s *scope, change func(d *PauseDoc, found bool, now time.Time) bool) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.w.claimTimeout())
	defer cancel()
	for range 4 {
		r, err := f.l.GetFlow(ctx, s.name)
		if err != nil {
			f.w.log.Warn("flow control: could not read the pause state", "scope", s.name, "error", err)
			return false
		}
		f.mu.Lock()
		f.apply(s, r)
		d, found := s.doc, s.found
		f.mu.Unlock()
		if !change(&d, found, r.Now) {
			return false
		}
		if d.State == "" {
			err = f.l.DeleteFlow(ctx, s.name, r.Doc.Version)
			if err == nil {
				f.mu.Lock()
				f.setFound(s, false)
				s.doc, s.version = PauseDoc{}, r.Doc.Version+1
				f.kick()
				f.mu.Unlock()
				return true
			}
		} else {
			data, _ := json.Marshal(d)
			var w ledger.FlowRead
			w, err = f.l.PutFlow(ctx, ledger.FlowDoc{Scope: s.name, Data: data, TTL: f.ttl(d)}, r.Doc.Version)
			if err == nil {
				f.mu.Lock()
				f.apply(s, w)
				f.mu.Unlock()
				return true
			}
		}
		if !errors.Is(err, ledger.ErrConflict) && !errors.Is(err, ledger.ErrNotFound) {
			f.w.log.Warn("flow control: could not write the pause state", "scope", s.name, "error", err)
			return false
		}
	}
	return false
}

// ttl bounds a pause document's life: an automatic pause that no worker
// tends any more (every one stopped) ends a while after its last probe was
// due; a manual one keeps the expiry it was given.
func (f *flowCtl) ttl(d PauseDoc) time.Duration {
	return max(time.Until(d.Next), 0) + 10*f.cfg.ProbeMax + time.Hour
}

// apply takes r as s's view; call with f.mu held.
func (f *flowCtl) apply(s *scope, r ledger.FlowRead) {
	was := s.paused()
	s.version, s.readAt, s.now = r.Doc.Version, time.Now(), r.Now
	s.doc = PauseDoc{}
	f.setFound(s, r.Found && json.Unmarshal(r.Doc.Data, &s.doc) == nil)
	if s.doc.State != PausePaused || s.doc.Manual {
		s.probe = nil // a pause by hand has no probes
	}
	if was != s.paused() {
		f.kick()
	}
}

// setFound sets whether s's pause document is live, keeping live's count;
// call with f.mu held.
func (f *flowCtl) setFound(s *scope, found bool) {
	switch {
	case found && !s.found:
		f.live.Add(1)
	case !found && s.found:
		f.live.Add(-1)
	}
	s.found = found
}

// settleProbe ends j's probe: a success ramps the intake up, a failure
// that counts puts the next probe off, another says nothing.
func (f *flowCtl) settleProbe(ctx context.Context, j *job, err error, counted bool) {
	f.mu.Lock()
	var probed []*scope
	for _, name := range j.scopes {
		if s := f.scopeOf(name); s.probe == j {
			s.probe = nil
			probed = append(probed, s)
		}
	}
	f.mu.Unlock()
	for _, s := range probed {
		f.w.stats.probes.Add(1)
		f.update(ctx, s, func(d *PauseDoc, found bool, now time.Time) bool {
			if !found || d.Prober != f.w.ownerID {
				return false
			}
			d.Prober, d.ProbeEnd = "", time.Time{}
			switch {
			case err == nil:
				d.State, d.Cap = PauseRamping, 1
				f.w.log.Info("flow control: the probe succeeded: ramping the intake up", "scope", s.name, "down_for", now.Sub(d.Since).Round(time.Second))
			case counted:
				d.Probes++
				d.Interval = min(2*d.Interval, f.cfg.ProbeMax)
				d.Next = now.Add(max(d.Interval, min(retryAfterOf(err), f.cfg.ProbeMax)))
				f.w.stats.probesFailed.Add(1)
				f.w.log.Warn("flow control: the probe failed: still paused", "scope", s.name, "next_probe_in", d.Next.Sub(now), "error", err)
			}
			return true
		})
	}
}

// ramp counts a success of a ramping scope; when as many succeeded as the
// cap, the cap doubles, and the pause ends once it reaches the handlers'
// concurrency. A failure that counts while ramping pauses again.
func (f *flowCtl) ramp(ctx context.Context, j *job, err error) {
	var grow []*scope
	f.mu.Lock()
	for _, name := range j.scopes {
		grow = f.rampOne(f.scopeOf(name), err, grow)
	}
	f.mu.Unlock()
	f.grow(ctx, grow)
}

// rampOne counts an attempt of s that ended with err, as ramp does, and
// appends s to grow when its cap is to double. Call with f.mu held.
func (f *flowCtl) rampOne(s *scope, err error, grow []*scope) []*scope {
	if !s.found || s.doc.State != PauseRamping || err != nil {
		return grow
	}
	if s.done++; s.done >= s.doc.Cap {
		s.done = 0
		grow = append(grow, s)
	}
	return grow
}

// grow doubles the cap of each ramping scope of grow, and ends its pause
// once the cap reaches the handlers' concurrency.
func (f *flowCtl) grow(ctx context.Context, grow []*scope) {
	for _, s := range grow {
		var since, now time.Time
		if f.update(ctx, s, func(d *PauseDoc, found bool, at time.Time) bool {
			if !found || d.State != PauseRamping {
				return false
			}
			if d.Cap *= 2; d.Cap >= f.w.cfg.Concurrency {
				since, now = d.Since, at
				*d = PauseDoc{}
			}
			return true
		}) && !since.IsZero() {
			f.w.log.Info("flow control: the intake is open again", "scope", s.name, "paused_for", now.Sub(since).Round(time.Second))
			f.mu.Lock()
			s.det.reset()
			f.mu.Unlock()
		}
	}
}

// intake is how many messages a poller may receive now, at most most:
// none while the handler's scope is paused, but one when its probe is due
// and no message is held to probe with; while ramping, its cap; with a
// rate, no more than start within half the visibility timeout, as far as
// this worker holds and as far as the fleet had reserved at this worker's
// last reservation.
func (f *flowCtl) intake(most int) int {
	if !f.act {
		return most
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.scopeOf(f.cfg.Scope)
	switch {
	case s.found && s.doc.State == PausePaused:
		if len(f.held) == 0 && !s.doc.Manual && !s.ledgerNow().Before(s.doc.Next) && f.w.inFlight() == 0 {
			return 1
		}
		return 0
	case s.found:
		most = min(most, max(s.doc.Cap-s.running, 0))
	}
	if r := f.cfg.Rate; r > 0 {
		// What this worker holds, and what the fleet has reserved: the
		// tokens free within the horizon since the last reservation.
		horizon := f.w.cfg.VisibilityTimeout / 2
		most = min(most, max(int(math.Ceil(r*horizon.Seconds()))-f.w.inFlight(), 0),
			max(int(math.Ceil(r*(horizon-max(time.Until(f.rateFree), 0)).Seconds())), 0))
	}
	return most
}

// pausedNow reports whether the handler's scope is paused (or ramping).
func (f *flowCtl) pausedNow() bool {
	if !f.act {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.scopes[f.cfg.Scope]
	return s != nil && s.found
}

// changedCh is the channel closed when the flow's state changes.
func (f *flowCtl) changedCh() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changes()
}

// start reads the pause state of the handler's scope, before the first
// receive: a worker that starts during a pause, on a ledger another worker
// or an operator paused, holds its intake from the start.
func (f *flowCtl) start(ctx context.Context) {
	if f.off() {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, f.w.claimTimeout())
	defer cancel()
	f.mu.Lock()
	s := f.scopeOf(f.cfg.Scope)
	f.mu.Unlock()
	if r, err := f.l.GetFlow(rctx, s.name); err == nil {
		f.mu.Lock()
		f.apply(s, r)
		f.mu.Unlock()
	}
}

// loop refreshes the pause state of the scopes in use every second, takes
// the probe of a paused scope whose probe is due when this worker holds a
// message of it, and keeps the process's registration, until ctx ends.
func (f *flowCtl) loop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	beat := 0
	for {
		f.tick(ctx)
		if beat%5 == 0 {
			f.register(ctx, false)
		}
		beat++
		select {
		case <-ctx.Done():
			f.register(ctx, true)
			return
		case <-t.C:
		}
	}
}

// tick is one round of loop.
func (f *flowCtl) tick(ctx context.Context) {
	f.mu.Lock()
	f.tickAt = time.Now()
	var todo []*scope
	for name, s := range f.scopes {
		switch {
		case name == f.cfg.Scope || s.found || s.running > 0 || slices.ContainsFunc(f.held, func(j *job) bool { return slices.Contains(j.scopes, name) }):
			todo = append(todo, s)
		case time.Since(s.used) > f.cfg.Trip.Window+time.Minute:
			delete(f.scopes, name) // an idle partition value
		}
	}
	f.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for _, s := range todo {
		r, err := f.l.GetFlow(rctx, s.name)
		if err != nil {
			continue
		}
		f.mu.Lock()
		f.apply(s, r)
		orphan := s.found && s.doc.Prober == f.w.ownerID && s.probe == nil
		due := f.act && s.found && s.doc.State == PausePaused && !s.doc.Manual && s.probe == nil &&
			!s.ledgerNow().Before(s.doc.Next) && (s.doc.Prober == "" || !s.ledgerNow().Before(s.doc.ProbeEnd)) &&
			slices.ContainsFunc(f.held, func(j *job) bool { return slices.Contains(j.scopes, s.name) })
		f.mu.Unlock()
		if orphan {
			// The message chosen ended before it started: the probe is
			// free for the next one.
			f.update(ctx, s, func(d *PauseDoc, found bool, now time.Time) bool {
				f.mu.Lock()
				chosen := s.probe != nil
				f.mu.Unlock()
				if !found || d.Prober != f.w.ownerID || chosen {
					return false
				}
				d.Prober, d.ProbeEnd = "", time.Time{}
				return true
			})
		}
		if due {
			f.takeProbe(ctx, s)
		}
	}
}

// takeProbe takes s's probe for this worker, fleet-wide, and picks the
// oldest message held for s that is due as the probe; but a message held
// for s that already probes another of its scopes probes s too, since
// each of a message's paused scopes holds it unless it is their probe.
func (f *flowCtl) takeProbe(ctx context.Context, s *scope) {
	lease := f.w.cfg.VisibilityTimeout + f.w.cfg.HandlerTimeout
	if !f.update(ctx, s, func(d *PauseDoc, found bool, now time.Time) bool {
		if !found || d.State != PausePaused || d.Manual || now.Before(d.Next) || d.Prober != "" && now.Before(d.ProbeEnd) {
			return false
		}
		d.Prober, d.ProbeEnd = f.w.ownerID, now.Add(lease)
		return true
	}) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var pick *job
	for _, j := range f.held {
		if !slices.Contains(j.scopes, s.name) {
			continue
		}
		if slices.ContainsFunc(j.scopes, func(name string) bool { return f.scopes[name] != nil && f.scopes[name].probe == j }) {
			pick = j
			break
		}
		if pick == nil && time.Now().After(j.notBefore) {
			pick = j
		}
	}
	if pick != nil {
		s.probe = pick
		f.kick()
		f.w.log.Info("flow control: probing the downstream with one message", "scope", s.name, "key", pick.key.key)
	}
}

// register writes this process into the ledger's registry, or removes it
// when gone is true.
func (f *flowCtl) register(ctx context.Context, gone bool) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if gone {
		f.l.RemoveProcess(rctx, f.w.ownerID)
		return
	}
	f.mu.Lock()
	s := f.scopeOf(f.cfg.Scope)
	paused, why := s.found, s.doc.Reason
	f.mu.Unlock()
	host, _ := os.Hostname()
	f.l.PutProcess(rctx, ledger.Process{ID: f.w.ownerID, Host: host, PID: os.Getpid(), Version: f.w.cfg.Version,
		Queue: f.w.cfg.QueueURL, Started: f.w.started, InHand: f.w.inFlight(), Paused: paused, PausedWhy: why, TTL: 15 * time.Second})
}

// reserve takes rate tokens for the claimed messages js of one receive, in
// one ledger call: each gets its start (notBefore) from the handler's
// scope's bucket and its partition value's, at once. When bounded, those
// that cannot start within half the visibility timeout because of a busy
// partition are returned, with their turns in their partitions' queues yet
// to take (see takeTurns), to be deferred (standard queues), and those held
// back by the handler's rate alone are held without tokens until theirs
// would be due; FIFO messages take their tokens whenever they start, and
// are held, as are messages that take new tokens for lapsed ones.
func (f *flowCtl) reserve(ctx context.Context, js []*job, bounded bool) (excess *turns) {
	if f.off() {
		return nil
	}
	// Tokens start no sooner than the answer is expected (lead): taken
	// for the ledger's now, they would be due before the worker learns
	// of them, and messages started late on their tokens beside others
	// on time put more starts in a second than the rate allows. The
	// tokens that come due by more than their slack anyway are asked for
	// once more in one further call, with the lead that this answer
	// taught, while the tokens so wasted stay within a budget (spend);
	// what that call brings, or an answer beyond the budget, is kept for
	// as long as it had been due when it came (see late), so that on a
	// store whose answers vary by seconds no message waits on lapse
	// after lapse.
	if f.act {
		f.mu.Lock()
		known := f.known
		f.mu.Unlock()
		if !known {
			select {
			case f.first <- struct{}{}:
				defer func() { <-f.first }()
			case <-ctx.Done():
			}
		}
	}
	all := js
	for again := f.act; len(js) > 0; again = false {
		var late []*job
		excess, late = f.reserveOnce(ctx, js, bounded, again, excess)
		js = late
	}
	if !f.act {
		return nil
	}
	for _, j := range all {
		if slices.Contains(excess.deferred(), j) || j.notBefore.After(time.Now()) {
			f.throttle(j)
		}
	}
	return excess
}

// reserveOnce makes one reservation for js, adding to excess those
// deferred for a busy partition. When again, it returns, without tokens
// (while the budget allows: spend), those whose tokens had been due for
// longer than their slack when the answer came, to be asked for once more.
func (f *flowCtl) reserveOnce(ctx context.Context, js []*job, bounded, again bool, excess *turns) (_ *turns, late []*job) {
	var r ledger.Reservation
	index := map[string]int{}
	add := func(t *ledger.Token, name string, rate float64, burst int) {
		if rate <= 0 {
			return
		}
		i, ok := index[name]
		if !ok {
			i = len(r.Buckets)
			index[name] = i
			r.Buckets = append(r.Buckets, ledger.Bucket{Name: name, Rate: rate, Burst: burst})
		}
		t.Buckets = append(t.Buckets, i)
	}
	start, lead := f.asked()
	if !f.act {
		lead = 0 // nothing waits for the tokens
	}
	var asked []*job
	for _, j := range js {
		j.scopes, j.notBefore, j.interval, j.tokens = f.names(j), time.Time{}, 0, false
		t := ledger.Token{NotBefore: lead}
		if bounded && !f.w.queue.fifo {
			t.Within = f.w.cfg.VisibilityTimeout / 2
		}
		add(&t, f.cfg.Scope, f.cfg.Rate, f.cfg.Burst)
		for i, p := range f.cfg.Partitions {
			if v := f.partValue(j, i); v != "" {
				add(&t, f.partName(i, v), p.Rate, p.Burst)
			}
		}
		if len(t.Buckets) > 0 {
			r.Tokens = append(r.Tokens, t)
			asked = append(asked, j)
		}
	}
	if len(asked) == 0 {
		return excess, nil
	}
	// The starts are offsets from the ledger's clock when it took the
	// tokens (Grant.Now): on the embedded ledger and on DynamoDB the
	// host's, so exactly when; on PostgreSQL the server's, taken as that
	// time during the call, or its start or end when the clocks disagree.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.w.claimTimeout())
	g, err := f.l.Reserve(rctx, r)
	cancel()
	took := time.Since(start)
	f.answered(start, took, err == nil)
	if err != nil {
		// Held without tokens for as long as the call took (at least
		// 100 ms, at most a second: a store that is contended answers
		// soon, one that is away takes its timeout), then they try
		// again as they start: none starts above the rate unmeasured.
		wait := min(max(took, 100*time.Millisecond), time.Second)
		f.w.log.Warn("flow control: could not reserve rate tokens: the messages wait", "wait", wait, "error", err)
		for _, j := range asked {
			j.notBefore, j.interval, j.slack = start.Add(took+wait), wait, 0
		}
		return excess, nil
	}
	for i, b := range r.Buckets {
		if g.Rates[i] != b.Rate || g.Bursts[i] != b.Burst {
			f.w.log.Warn("flow control: the workers sharing a rate bucket disagree on its limit", "bucket", b.Name,
				"rate", b.Rate, "burst", b.Burst, "others_rate", g.Rates[i], "others_burst", g.Bursts[i])
		}
	}
	at := start.Add(min(max(g.Now.Sub(start), 0), took))
	if i, ok := index[f.cfg.Scope]; ok {
		f.mu.Lock()
		f.rateFree = at.Add(g.Next[i])
		f.mu.Unlock()
	}
	short := map[*job]int{} // deferred for a busy partition: its token's index
	for k, j := range asked {
		for _, b := range r.Tokens[k].Buckets {
			if t := r.Buckets[b].Interval(); j.interval == 0 || t < j.interval {
				j.interval = t
			}
		}
		switch {
		case g.Taken[k]:
			j.tokens, j.notBefore = true, at.Add(g.Starts[k])
			due := time.Since(j.notBefore)
			if j.slack = max(due, 0) + lateSlack; again && due > f.slack(j) {
				late = append(late, j)
			}
		case slices.ContainsFunc(r.Tokens[k].Buckets, func(b int) bool { return r.Buckets[b].Name != f.cfg.Scope && g.Next[b] > r.Tokens[k].Within }):
			// A busy partition: deferred, so that quiet ones keep
			// flowing.
			short[j] = k
		default:
			// Only the handler's rate, which every message shares:
			// deferring it would let no other start sooner, and its
			// copy would find the bucket taken again by the receives
			// made meanwhile. It is held, and takes its tokens when
			// they would be due (for every bucket at once); the
			// messages in hand fill the worker, which then receives
			// no more.
			j.notBefore = at.Add(g.Starts[k])
		}
	}
	if !f.act {
		for _, j := range js {
			if j.notBefore.After(time.Now()) {
				f.w.stats.flowWouldHold.Add(1)
			}
			j.notBefore = time.Time{}
		}
		return excess, nil
	}
	for _, j := range js {
		if k, ok := short[j]; ok {
			excess = excess.add(f, &r, k, j, at.Add(g.Starts[k]))
		}
	}
	var waste time.Duration
	for _, j := range late {
		waste += j.interval
	}
	// Only an answer that came within the longest lead is worth asking
	// again after: the next, asked for with this one's lead, likely
	// comes in time. A store slower than that would answer late again.
	if len(late) == 0 || took > maxLead || !f.spend(waste) {
		return excess, nil
	}
	for _, j := range late {
		j.tokens = false
	}
	return excess, late
}

// spend takes d from the time of rate tokens that the worker may waste by
// asking again for those that came due (see reserve), and reports whether
// it had that much: a second's worth at first, refilled by a tenth of the
// time that passes, so that on a store whose answers are always later than
// the last (an emulator starved of CPU) asking again costs a tenth of the
// rate at most.
func (f *flowCtl) spend(d time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	f.budget, f.budgetAt = min(f.budget+now.Sub(f.budgetAt)/10, time.Second), now
	if d > f.budget {
		return false
	}
	f.budget -= d
	return true
}

// asked registers a reservation that begins now, and returns its start and
// lead: the lead learnt from the answers, or how long the oldest call in
// flight has waited for its answer when that is longer (the store became
// slower), up to maxLead and a quarter of the visibility timeout (well
// inside a bounded token's Within).
func (f *flowCtl) asked() (start time.Time, lead time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	start = time.Now()
	lead = f.lead
	if len(f.asking) > 0 {
		lead = max(lead, start.Sub(f.asking[0]))
	}
	f.asking = append(f.asking, start)
	return start, min(lead, maxLead, f.w.cfg.VisibilityTimeout/4)
}

// maxLead is the longest lead. Every message waits for its tokens at least
// the lead, which bounds what a worker's messages in hand can start in a
// second: a store slower to answer than this (an emulator starved of CPU)
// cannot carry rates in the tens a second anyway, and the tokens it hands
// over late are kept for as long as they were due (see late).
const maxLead = time.Second

// answered records that the reservation begun at start answered after
// took: the lead becomes the longest of this call and the lead before it,
// decayed, so that a slower answer is expected at once and a quicker one
// over some calls.
func (f *flowCtl) answered(start time.Time, took time.Duration, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asking = slices.Delete(f.asking, slices.Index(f.asking, start), slices.Index(f.asking, start)+1)
	f.known = true
	if ok {
		f.lead = min(max(took, f.lead-(f.lead-took)/8), maxLead)
	}
}

// turns are the turns of messages deferred for their busy partitions in
// those partitions' queues: each partition value's deferred copies queue
// in a rate bucket of their own in the ledger, at its rate, shared by the
// workers sharing the ledger. A copy comes back at its turn, no sooner than
// its partitions' tokens would be due, so that the copies of a fleet come
// back an interval apart, as their buckets can take them, rather than all
// at once, where all but the first few would be deferred again.
type turns struct {
	jobs []*job
	due  []time.Time // when each job's tokens would be due
	r    ledger.Reservation
	idx  map[string]int // r's bucket of each name
}

// deferredQueue comes before a partition's bucket name in the name of its
// deferred copies' queue: before it, since a partition value, which ends a
// partition bucket's name, could end with anything.
const deferredQueue = "deferred | "

// deferred are t's messages; none when t is nil.
func (t *turns) deferred() []*job {
	if t == nil {
		return nil
	}
	return t.jobs
}

// add adds j, whose token k of r would start at due, to t (made when nil).
func (t *turns) add(f *flowCtl, r *ledger.Reservation, k int, j *job, due time.Time) *turns {
	if t == nil {
		t = &turns{idx: map[string]int{}}
	}
	var tok ledger.Token
	for _, b := range r.Tokens[k].Buckets {
		if r.Buckets[b].Name == f.cfg.Scope {
			continue
		}
		name := deferredQueue + r.Buckets[b].Name
		i, ok := t.idx[name]
		if !ok {
			i = len(t.r.Buckets)
			t.idx[name] = i
			t.r.Buckets = append(t.r.Buckets, ledger.Bucket{Name: name, Rate: r.Buckets[b].Rate, Burst: 1})
		}
		tok.Buckets = append(tok.Buckets, i)
	}
	t.jobs, t.due, t.r.Tokens = append(t.jobs, j), append(t.due, due), append(t.r.Tokens, tok)
	return t
}

// takeTurns takes t's turns in one ledger call and sets how long each of
// its messages is deferred for. A queue longer than SQS's longest delay
// is not lengthened: the copy comes back then, and is deferred again.
// Without the ledger's answer, each copy comes back when its tokens would
// be due.
func (f *flowCtl) takeTurns(ctx context.Context, t *turns) {
	if t == nil {
		return
	}
	now := time.Now()
	for k := range t.r.Tokens {
		t.r.Tokens[k].Within, t.r.Tokens[k].NotBefore = maxDelay, min(max(t.due[k].Sub(now), 0), maxDelay+time.Second)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.w.claimTimeout())
	g, err := f.l.Reserve(rctx, t.r)
	cancel()
	if err != nil {
		f.w.log.Warn("flow control: could not queue the deferred copies of busy partitions: each comes back when its tokens would be due", "error", err)
	}
	for k, j := range t.jobs {
		wait := t.due[k].Sub(now)
		if err == nil {
			wait = g.Starts[k]
		}
		j.deferFor = min(max(wait, time.Second), maxDelay)
	}
}

// deferMsg sends a copy of j to its queue with a delay of d (SQS's limit:
// 15 minutes), exactly as it was received (its body, its message
// attributes, its AWSTraceHeader), and deletes the original once SQS took
// the copy: its receive count starts again, and nothing of it is lost. j
// is waiting (claimed, held by flow control: its claim is released), or
// received (unclaimed, a copy of an operation in progress elsewhere, which
// given back towards the redrive would dead-letter a copy of an operation
// that is alive). It reports false, j untouched, when the copy could not
// be sent or j ended meanwhile: a waiting j stays held, a received one is
// given back by its caller.
func (w *Worker) deferMsg(j *job, d time.Duration, why string) bool {
	st, _ := j.b.state(j)
	if st != waiting && st != received {
		return false // ended meanwhile (its claim lost, given back): nothing to defer
	}
	in := &sqsSendCopy{w: w, j: j, delay: d}
	if err := in.send(); err != nil {
		w.log.Warn("could not defer the message (send its copy)", "message_id", j.id(), "key", j.key.key, "error", err)
		return false
	}
	w.endDeferred(j, d, why, st == waiting)
	return true
}

// endDeferred ends j, whose copy SQS took with a delay of d, as deferred:
// the original deleted, its claim released unless release is false (its
// failure was recorded, which ended the claim).
func (w *Worker) endDeferred(j *job, d time.Duration, why string, release bool) {
	if !j.b.end(j, deferred) {
		return // given back meanwhile: the copy and the original both come back, one key
	}
	w.stats.deferred.Add(1)
	w.log.Info("deferred the message: sent again with a delay, the original deleted", "message_id", j.id(), "key", j.key.key, "delay", d, "why", why)
	w.delete(j.msg)
	if release {
		w.giveBack(nil, []ledger.ClaimRef{{Key: j.key.key, Owner: j.owner}}, 0)
	}
}

// systemTraceHeader is the system attribute a copy carries on, as the
// original's.
var systemTraceHeader = string(types.MessageSystemAttributeNameAWSTraceHeader)

// sqsSendCopy sends a deferred copy of a job's message.
type sqsSendCopy struct {
	w     *Worker
	j     *job
	delay time.Duration
}

func (c *sqsSendCopy) send() error {
	m := c.j.msg
	in := &sqs.SendMessageInput{
		QueueUrl:          &c.w.cfg.QueueURL,
		MessageBody:       m.Body,
		MessageAttributes: m.MessageAttributes,
		DelaySeconds:      int32(min(max((c.delay+time.Second-1)/time.Second, 0), maxDelay/time.Second)),
	}
	if h := m.Attributes[systemTraceHeader]; h != "" {
		in.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{
			systemTraceHeader: {DataType: aws.String("String"), StringValue: aws.String(h)},
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), sqsCallTimeout)
	defer cancel()
	_, err := c.w.sqs.SendMessage(ctx, in)
	return err
}

// maxDelay is SQS's longest delay of a message.
const maxDelay = 15 * time.Minute

// localFlow keeps flow state in this process, for a ledger that keeps none.
type localFlow struct {
	mu      sync.Mutex
	docs    map[string]ledger.FlowDoc
	tats    map[string]int64
	slots   map[string][]string // pool: owner of each index, "" free
	version int64
}

func newLocalFlow() *localFlow {
	return &localFlow{docs: map[string]ledger.FlowDoc{}, tats: map[string]int64{}, slots: map[string][]string{}}
}

func (l *localFlow) GetFlow(_ context.Context, scope string) (ledger.FlowRead, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	d, ok := l.docs[scope]
	if ok && !d.Live(now) {
		delete(l.docs, scope)
		ok = false
	}
	if !ok {
		d = ledger.FlowDoc{Scope: scope, Version: l.version}
	}
	return ledger.FlowRead{Doc: d, Found: ok, Now: now}, nil
}

func (l *localFlow) PutFlow(ctx context.Context, doc ledger.FlowDoc, ifVersion int64) (ledger.FlowRead, error) {
	r, _ := l.GetFlow(ctx, doc.Scope)
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.Doc.Version != ifVersion {
		return r, ledger.ErrConflict
	}
	l.version++
	doc.Version, doc.Updated = l.version, r.Now
	if doc.TTL > 0 {
		doc.Expires = r.Now.Add(doc.TTL)
	}
	l.docs[doc.Scope] = doc
	return ledger.FlowRead{Doc: doc, Found: true, Now: r.Now}, nil
}

func (l *localFlow) DeleteFlow(ctx context.Context, scope string, ifVersion int64) error {
	r, _ := l.GetFlow(ctx, scope)
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.Doc.Version != ifVersion {
		return ledger.ErrConflict
	}
	delete(l.docs, scope)
	return nil
}

func (l *localFlow) Reserve(_ context.Context, r ledger.Reservation) (ledger.Grant, error) {
	if err := r.Validate(); err != nil {
		return ledger.Grant{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(r.Buckets)
	tats, rates, bursts := make([]int64, n), make([]float64, n), make([]int, n)
	for i, b := range r.Buckets {
		tats[i] = l.tats[b.Name]
	}
	g := r.Plan(tats, rates, bursts, time.Now().UnixNano())
	for i, b := range r.Buckets {
		l.tats[b.Name] = tats[i]
	}
	return g, nil
}

func (l *localFlow) TakeSlots(_ context.Context, rs []ledger.SlotRequest) ([][]ledger.Slot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([][]ledger.Slot, len(rs))
	for i, r := range rs {
		pool := l.slots[r.Pool]
		for len(pool) < r.Limit {
			pool = append(pool, "")
		}
		for k := 0; k < r.Limit && len(out[i]) < r.N; k++ {
			if pool[k] == "" {
				pool[k] = r.Owner
				out[i] = append(out[i], ledger.Slot{Pool: r.Pool, Index: k, Owner: r.Owner})
			}
		}
		l.slots[r.Pool] = pool
	}
	return out, nil
}

func (l *localFlow) ExtendSlots(_ context.Context, ss []ledger.Slot, _ time.Duration) []error {
	return make([]error, len(ss))
}

func (l *localFlow) ReleaseSlots(_ context.Context, ss []ledger.Slot) []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range ss {
		if pool := l.slots[s.Pool]; s.Index < len(pool) && pool[s.Index] == s.Owner {
			pool[s.Index] = ""
		}
	}
	return make([]error, len(ss))
}

func (l *localFlow) PutProcess(context.Context, ledger.Process) error { return nil }
func (l *localFlow) RemoveProcess(context.Context, string) error      { return nil }
func (l *localFlow) MarkDeadLettered(_ context.Context, ds []ledger.DeadLetter) []error {
	return make([]error, len(ds))
}

// slotsWhile is how long, at most, the new rate token of a message holding
// its concurrency slots may be due after now for the message to keep them
// while it waits: a quarter of VisibilityTimeout, their lease, which no
// beat renews while the message waits.
func (f *flowCtl) slotsWhile() time.Duration { return f.w.cfg.VisibilityTimeout / 4 }

// takeSlots takes j's concurrency slots, fleet-wide: one of the handler
// scope's pool and one of its partition value's, where they have a bound.
// It reports false, holding none, when one of them has none free. Slots j
// kept while it waited for a new rate token (see slotsWhile) are kept once
// more if it took them within twice that; older ones, held on by a pause
// meanwhile, are given back first.
func (f *flowCtl) takeSlots(ctx context.Context, j *job) (bool, error) {
	if len(j.slots) > 0 && time.Since(j.slotsAt) < 2*f.slotsWhile() {
		return true, nil
	}
	f.releaseSlots(j)
	var rs []ledger.SlotRequest
	add := func(name string, limit int) {
		if limit > 0 {
			rs = append(rs, ledger.SlotRequest{Pool: name, Limit: limit, N: 1, Owner: j.owner, Lease: f.w.cfg.VisibilityTimeout})
		}
	}
	if f.act {
		add(f.cfg.Scope, f.cfg.Concurrency)
		for i, p := range f.cfg.Partitions {
			if v := f.partValue(j, i); v != "" {
				add(f.partName(i, v), p.Concurrency)
			}
		}
	}
	if len(rs) == 0 {
		return true, nil
	}
	took := time.Now()
	got, err := f.l.TakeSlots(ctx, rs)
	if err != nil {
		return false, err
	}
	all := true
	for i := range rs {
		j.slots = append(j.slots, got[i]...)
		all = all && len(got[i]) > 0
	}
	if !all {
		f.releaseSlots(j)
		return false, nil
	}
	j.slotsAt, j.slotWait = took, time.Time{}
	return true, nil
}

// releaseSlots gives back j's concurrency slots.
func (f *flowCtl) releaseSlots(j *job) {
	if len(j.slots) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.w.claimTimeout())
	defer cancel()
	f.l.ReleaseSlots(ctx, j.slots)
	j.slots = nil
}

// forget drops j, which ended, from the held messages and from the probes
// it was chosen for without starting: a probe that started (and ended,
// its lease lost, while its handler still runs) is settled when its
// attempt ends.
func (f *flowCtl) forget(j *job) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unhold(j)
	for _, name := range j.scopes {
		if s := f.scopes[name]; s != nil && s.probe == j && !j.inScopes {
			s.probe = nil
		}
	}
}
