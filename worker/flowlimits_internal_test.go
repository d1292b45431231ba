package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// TestLimits_LateTokenSlack: a message that starts late on its rate token,
// beside the next token's on time, must not put more starts in a second
// than the limit allows. At 0.1/s, burst 1, a message 9.5 s late started on
// its token, half a second before the next one's: two starts in a second
// where the limit allows one in ten. Now a token lapses after its
// interval less a second, for intervals over a second (so two starts stay
// a second apart), and after its interval, at least lateSlack, for the
// others (one start more in a second at most).
func TestLimits_LateTokenSlack(t *testing.T) {
	f := newFlowCtl(&Worker{cfg: Config{VisibilityTimeout: time.Minute, Flow: FlowConfig{Mode: FlowOn, Scope: "q", Rate: 0.1, Burst: 1}}}, nil)
	j1, j2 := &job{b: &batch{}}, &job{b: &batch{}}
	f.reserve(context.Background(), []*job{j1, j2}, false)
	if !j1.tokens || !j2.tokens {
		t.Fatalf("tokens not taken: %+v %+v", j1.tokens, j2.tokens)
	}
	// 9.5 s pass: j1 did not start on time (its handler was busy, its
	// slot taken); j2's token is due in half a second.
	shift := 9500 * time.Millisecond
	j1.notBefore, j2.notBefore = j1.notBefore.Add(-shift), j2.notBefore.Add(-shift)
	if !f.late(j1) && time.Until(j2.notBefore) < time.Second {
		t.Errorf("at 0.1/s burst 1: a token %v late is still good (late = false), and the next is due in %v: two starts within a second",
			time.Since(j1.notBefore).Round(time.Millisecond), time.Until(j2.notBefore).Round(time.Millisecond))
	}
	for _, c := range []struct {
		interval, good, lapsed time.Duration
	}{
		{10 * time.Second, 8900 * time.Millisecond, 9100 * time.Millisecond}, // 0.1/s
		{2 * time.Second, 900 * time.Millisecond, 1100 * time.Millisecond},   // 0.5/s
		{time.Second, 900 * time.Millisecond, 1100 * time.Millisecond},       // 1/s
		{200 * time.Millisecond, 150 * time.Millisecond, 250 * time.Millisecond},
		{25 * time.Millisecond, 40 * time.Millisecond, 70 * time.Millisecond}, // 40/s: lateSlack
	} {
		for _, late := range []time.Duration{c.good, c.lapsed} {
			j := &job{tokens: true, interval: c.interval, notBefore: time.Now().Add(-late)}
			if got := f.late(j); got != (late == c.lapsed) {
				t.Errorf("interval %v, %v late: late = %v", c.interval, late, got)
			}
		}
	}
}

// TestLimits_ConfigTheLedgerRefuses: the worker refuses a rate and burst
// exactly when the ledger would refuse its buckets (a burst that spans
// more than the longest a bucket is kept, measured in the ledger's
// interval, rounded to the nanosecond): a configuration the worker took
// and the ledger refused made every reservation fail, its messages waiting
// for tokens forever, one warning per try.
func TestLimits_ConfigTheLedgerRefuses(t *testing.T) {
	for _, burst := range []int{1, 2, 3653, MaxBurst} {
		for _, k := range []float64{0.999999, 1, 1.000001} {
			rate := k * float64(burst) / ledger.MaxRetention.Seconds()
			fc := FlowConfig{Mode: FlowOn, Scope: "q", Rate: rate, Burst: burst}
			fc.setDefaults()
			var problems []string
			fc.validate(func(field, got, want string, args ...any) {
				problems = append(problems, field+" "+got+": "+fmt.Sprintf(want, args...))
			})
			r := ledger.Reservation{Buckets: []ledger.Bucket{{Name: "q", Rate: rate, Burst: burst}}, Tokens: []ledger.Token{{Buckets: []int{0}}}}
			lerr := r.Validate()
			if (len(problems) > 0) != (lerr != nil) {
				t.Errorf("rate %v, burst %d: the worker's problems %q, the ledger's %v: they must agree", rate, burst, problems, lerr)
			}
			if len(problems) > 0 {
				continue
			}
			f := newFlowCtl(&Worker{cfg: Config{VisibilityTimeout: time.Minute, Flow: fc}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}, nil)
			j := &job{b: &batch{}}
			f.reserve(context.Background(), []*job{j}, false)
			if !j.tokens {
				t.Errorf("rate %v, burst %d: the message got no token", rate, burst)
			}
		}
	}
}

// slowReserve is a flow ledger whose reservations take their tokens at
// once and answer after took, as a DynamoDB table does when its
// conditional write is slow: the grant's clock is its start. It counts its
// calls.
type slowReserve struct {
	FlowLedger
	took  time.Duration
	calls *atomic.Int32
}

func (l slowReserve) Reserve(ctx context.Context, r ledger.Reservation) (ledger.Grant, error) {
	l.calls.Add(1)
	g, err := l.FlowLedger.Reserve(ctx, r)
	time.Sleep(l.took)
	return g, err
}

// TestLimits_TokensNotDueBeforeTheAnswer: a ledger that answers a
// reservation 300 ms after it took the tokens handed over tokens already
// due for 300 ms, and their messages started on them beside the tokens of
// others on time (47 starts in a second at a rate of 40 with three workers
// on a loaded DynamoDB emulator). The worker now asks for tokens no sooner
// than it expects the answer: its first reservations take turns until one
// has answered, the tokens of an answer slower than expected are asked for
// once more, and none a message holds was due before its answer came.
func TestLimits_TokensNotDueBeforeTheAnswer(t *testing.T) {
	const took = 300 * time.Millisecond
	f := newFlowCtl(&Worker{cfg: Config{VisibilityTimeout: time.Minute, Flow: FlowConfig{Mode: FlowOn, Scope: "q", Rate: 40, Burst: 1}}}, nil)
	var calls atomic.Int32
	f.l = slowReserve{FlowLedger: f.l, took: took, calls: &calls}
	js := make([][]*job, 3)
	due := make([][]time.Duration, 3) // how long each token had been due when its answer came
	var wg sync.WaitGroup
	for c := range js { // at once, as a worker's first receives do
		js[c] = []*job{{b: &batch{}}, {b: &batch{}}, {b: &batch{}}}
		wg.Go(func() {
			f.reserve(context.Background(), js[c], false)
			for _, j := range js[c] {
				due[c] = append(due[c], time.Since(j.notBefore))
			}
		})
	}
	wg.Wait()
	for c := range js {
		for i, j := range js[c] {
			if !j.tokens {
				t.Fatalf("call %d, token %d not taken", c, i)
			}
			if due[c][i] > lateSlack {
				t.Errorf("call %d: token %d was due %v before its answer came", c, i, due[c][i].Round(time.Millisecond))
			}
		}
	}
	// The first call's tokens came due and were asked for again; the
	// others knew the lead.
	if n := calls.Load(); n != 4 {
		t.Errorf("%d reservations for three receives, want 4 (the first asked for again)", n)
	}
}

// TestLimits_LeadOfAStoreGrownSlow: while a reservation has waited 200 ms
// for its answer, the next is asked for at least that far ahead, although
// the answers before were quick.
func TestLimits_LeadOfAStoreGrownSlow(t *testing.T) {
	f := newFlowCtl(&Worker{cfg: Config{VisibilityTimeout: time.Minute, Flow: FlowConfig{Mode: FlowOn, Scope: "q", Rate: 40, Burst: 1}}}, nil)
	start, _ := f.asked()
	f.answered(start, time.Millisecond, true)
	waiting, lead := f.asked()
	if lead > 10*time.Millisecond {
		t.Fatalf("lead %v after an answer in 1 ms, want about that", lead)
	}
	time.Sleep(200 * time.Millisecond)
	next, lead := f.asked()
	if lead < 200*time.Millisecond {
		t.Errorf("lead %v while a call has waited 200 ms for its answer: want at least that", lead)
	}
	f.answered(waiting, time.Since(waiting), true)
	f.answered(next, time.Millisecond, true)
	if len(f.asking) != 0 {
		t.Errorf("%d calls still in flight after all answered", len(f.asking))
	}
}

// TestLimits_LateTokensKeptOnceTheBudgetIsSpent: tokens that came due
// before their answer are asked for once more only while the budget for
// asking again lasts (on a store whose answers are always late, asking
// again would cost a share of the rate each time); beyond it they are
// kept, and their messages may start as late as the tokens had been due
// when the answer came, without their tokens lapsing.
func TestLimits_LateTokensKeptOnceTheBudgetIsSpent(t *testing.T) {
	const took = 300 * time.Millisecond
	f := newFlowCtl(&Worker{cfg: Config{VisibilityTimeout: time.Minute, Flow: FlowConfig{Mode: FlowOn, Scope: "q", Rate: 40, Burst: 1}}}, nil)
	var calls atomic.Int32
	f.l = slowReserve{FlowLedger: f.l, took: took, calls: &calls}
	f.budget, f.budgetAt = 0, time.Now() // spent
	js := []*job{{b: &batch{}}, {b: &batch{}}, {b: &batch{}}}
	f.reserve(context.Background(), js, false)
	if n := calls.Load(); n != 1 {
		t.Errorf("%d reservations with the budget spent, want 1 (none asked for again)", n)
	}
	for i, j := range js {
		if !j.tokens {
			t.Fatalf("token %d not kept", i)
		}
		if due := time.Since(j.notBefore); due < took/2 {
			t.Errorf("token %d due %v before its answer came, want about %v (the first call knows no lead)", i, due.Round(time.Millisecond), took)
		}
		if f.late(j) {
			t.Errorf("token %d lapsed although kept: due %v, slack %v", i, time.Since(j.notBefore).Round(time.Millisecond), j.slack)
		}
	}
	// The budget refills by a tenth of the time that passes, up to a
	// second's worth.
	time.Sleep(100 * time.Millisecond)
	if !f.spend(5 * time.Millisecond) {
		t.Error("5 ms refused after 100 ms of refill")
	}
	if f.spend(500 * time.Millisecond) {
		t.Error("500 ms spent from a budget refilled for about 100 ms")
	}
}
