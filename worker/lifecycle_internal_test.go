package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// The transitions the code makes are the ones the package doc draws, one
// for one, by the same names.
func TestLifecycle_MatchesPackageDoc(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]state{}
	for s := received; s <= deferred; s++ {
		byName[s.String()] = s
	}
	documented := map[state][]state{}
	for line := range strings.Lines(string(doc)) {
		from, to, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "//")), " → ")
		if !ok {
			continue
		}
		s, known := byName[strings.TrimSpace(from)]
		if !known {
			t.Fatalf("the doc draws a transition from %q, which is no state", from)
		}
		for name := range strings.SplitSeq(to, ",") {
			next, known := byName[strings.TrimSpace(name)]
			if !known {
				t.Fatalf("the doc draws a transition from %s to %q, which is no state", s, name)
			}
			documented[s] = append(documented[s], next)
		}
	}
	if len(documented) != len(transitions) {
		t.Errorf("the doc lists transitions from %d states, the code from %d", len(documented), len(transitions))
	}
	for s, next := range transitions {
		if !slices.Equal(documented[s], next) {
			t.Errorf("from %s: the doc draws %v, the code makes %v", s, documented[s], next)
		}
	}
	for s := received; s <= deferred; s++ {
		if _, ok := transitions[s]; ok == s.ended() {
			t.Errorf("%s: an end has no transitions, every other state has some", s)
		}
	}
}

// hookLedger is the real ledger with a function called inside each lease
// extension, before it answers.
type hookLedger struct {
	*ledger.DB
	onExtend func()
}

func (l *hookLedger) ExtendBatch(ctx context.Context, refs []ledger.ClaimRef, lease time.Duration) []error {
	l.onExtend()
	return l.DB.ExtendBatch(ctx, refs, lease)
}

// A message about to start whose own lease extension succeeds while a beat
// learns that its claim is lost does not start: the start and the beat
// move it under one lock, so the start reads the beat's answer (not "the
// lease could not be confirmed"), and nothing releases a claim that is no
// longer this worker's.
func TestBatch_StartAfterBeatLostTheClaim(t *testing.T) {
	db, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.Claim(ctx, ledger.ClaimRequest{Key: "k", Owner: "o", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	var b *batch
	var j *job
	l := &hookLedger{DB: db, onExtend: func() {
		b.mu.Lock()
		b.loseLocked(j, errLeaseLost) // the beat's answer lands meanwhile
		b.mu.Unlock()
	}}
	w := &Worker{ledger: l, slots: make(chan struct{}, 1), active: map[string]*job{}, cfg: Config{VisibilityTimeout: time.Minute, Flow: FlowConfig{Mode: FlowOff}}}
	w.flow = newFlowCtl(w, l)
	b = &batch{w: w, every: time.Second, kick: make(chan struct{}), t: time.NewTimer(time.Hour)}
	j = &job{key: derived{key: "k"}, owner: "o", b: b, st: waiting, leaseUntil: time.Now()} // its lease may lapse: extended first
	b.jobs = []*job{j}
	if !b.move(j, starting, waiting) {
		t.Fatal("could not move to starting")
	}
	cancelled := false
	err = b.start(ctx, j, func(error) { cancelled = true })
	if !errors.Is(err, errLeaseLost) {
		t.Fatalf("start: %v, want %v", err, errLeaseLost)
	}
	if st := b.ended(j); st != lost || j.cancel != nil || cancelled || b.active != 0 {
		t.Fatalf("after start: %s, cancel registered %v, active %d", st, j.cancel != nil, b.active)
	}
}
