package sqstest

import (
	"math"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

func TestQueueName(t *testing.T) {
	t.Parallel()
	valid := regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	seen := make(map[string]bool)
	for _, name := range []string{"", "TestX", "TestX/sub case.with/dots", strings.Repeat("Ω/x ", 60)} {
		for range 100 {
			n := queueName(name)
			if !valid.MatchString(n) {
				t.Fatalf("queueName(%q) = %q: characters SQS does not allow", name, n)
			}
			if full := n + dlqSuffix + fifoSuffix; len(full) > maxQueueName {
				t.Fatalf("queueName(%q): %q is %d characters, over %d", name, full, len(full), maxQueueName)
			}
			if seen[n] {
				t.Fatalf("queueName(%q) repeated %q", name, n)
			}
			seen[n] = true
		}
	}
	if n := queueName("TestAbc/def"); !strings.HasPrefix(n, "TestAbc-def-") {
		t.Errorf("queueName(TestAbc/def) = %q, want the test name as prefix", n)
	}
}

func TestFaultsPickIsReproducible(t *testing.T) {
	t.Parallel()
	rates := Rates{Throttle: 0.1, ServerError: 0.1, Timeout: 0.1, Reset: 0.1, LostAck: 0.1}
	draw := func(seed uint64) []Kind {
		f := NewFaults(seed, http.DefaultTransport)
		f.Set("ReceiveMessage", rates)
		var out []Kind
		for i := range 2000 {
			out = append(out, f.pick("ReceiveMessage"))
			if i%3 == 0 {
				// Operations without rates draw nothing and do not
				// disturb the sequence.
				if k := f.pick("DeleteMessage"); k != "" {
					t.Fatalf("DeleteMessage without rates got fault %s", k)
				}
			}
		}
		return out
	}
	a, b, other := draw(42), draw(42), draw(43)
	if strings.Join(kindStrings(a), ",") != strings.Join(kindStrings(b), ",") {
		t.Fatal("the same seed gave different fault sequences")
	}
	if strings.Join(kindStrings(a), ",") == strings.Join(kindStrings(other), ",") {
		t.Error("different seeds gave the same fault sequence")
	}
	freq := make(map[Kind]int)
	for _, k := range a {
		freq[k]++
	}
	for _, k := range kinds {
		if got := float64(freq[k]) / float64(len(a)); math.Abs(got-0.1) > 0.03 {
			t.Errorf("%s frequency %.3f, want about 0.1", k, got)
		}
	}
	if got := float64(freq[""]) / float64(len(a)); math.Abs(got-0.5) > 0.05 {
		t.Errorf("no-fault frequency %.3f, want about 0.5", got)
	}
}

func TestFaultsDisabledDrawsNothing(t *testing.T) {
	t.Parallel()
	rates := Rates{Reset: 0.5}
	ref := NewFaults(7, http.DefaultTransport)
	ref.Set("SendMessage", rates)
	f := NewFaults(7, http.DefaultTransport)
	f.Set("SendMessage", rates)
	for i := range 200 {
		if i%10 == 0 {
			f.SetEnabled(false)
			if k := f.pick("SendMessage"); k != "" {
				t.Fatalf("disabled Faults injected %s", k)
			}
			f.SetEnabled(true)
		}
		if got, want := f.pick("SendMessage"), ref.pick("SendMessage"); got != want {
			t.Fatalf("pick %d: %q, want %q: disabling changed the sequence", i, got, want)
		}
	}
}

func TestFaultsSetValidates(t *testing.T) {
	t.Parallel()
	f := NewFaults(1, nil)
	for _, r := range []Rates{
		{Throttle: -0.1},
		{Reset: 1.5},
		{LostAck: math.NaN()},
		{Throttle: 0.6, ServerError: 0.5},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Set(%+v) did not panic", r)
				}
			}()
			f.Set("SendMessage", r)
		}()
	}
	f.Set("SendMessage", Rates{Throttle: 0.5, LostAck: 0.5}) // sum 1 is fine
	f.Set("SendMessage", Rates{})                            // removes the entry
	if len(f.rates) != 0 {
		t.Errorf("zero Rates left %v", f.rates)
	}
}

func kindStrings(ks []Kind) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}
