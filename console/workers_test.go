package console

import (
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// TestWorkersOf_DownAgreesWithTheAge: the workers page shows a beat's age in
// whole milliseconds, and a worker is down by the age it shows: a beat
// 10.0004 s old shows as 10,000 ms and up, one 10.001 s old as down.
func TestWorkersOf_DownAgreesWithTheAge(t *testing.T) {
	t.Parallel()
	read := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		age  time.Duration
		ms   int64
		down bool
	}{
		{downAfter - time.Millisecond, 9999, false},
		{downAfter + 400*time.Microsecond, 10000, false},
		{downAfter + time.Millisecond, 10001, true},
	} {
		s := &snapshot{Processes: []ledger.Process{{ID: "p", BeatAge: tc.age - time.Second}}, ReadAt: read}
		listed, _ := workersOf(s, read.Add(time.Second))
		if len(listed) != 1 || listed[0].Age.Milliseconds() != tc.ms || listed[0].Down != tc.down {
			t.Errorf("beat %v old: got %+v, want %d ms shown, down %v", tc.age, listed, tc.ms, tc.down)
		}
	}
}

func TestFilterText(t *testing.T) {
	for _, c := range []struct {
		filters [][2]string
		want    string
	}{
		{nil, "every dead letter"},
		{[][2]string{{"key", ""}, {"state", ""}}, "every dead letter"},
		{[][2]string{{"key", "orders/*"}, {"state", "permanent"}}, "key \u201corders/*\u201d, state \u201cpermanent\u201d"},
		// A reason group holding an error's own quotes shows them as
		// they are, not escaped.
		{[][2]string{{"reason group", `exit status #; last stderr line: "card processor said no for #"`}},
			"reason group \u201cexit status #; last stderr line: \"card processor said no for #\"\u201d"},
		// What cannot be shown as it is keeps Go's escapes.
		{[][2]string{{"key", "a\nb"}}, `key "a\nb"`},
		{[][2]string{{"key", "a\u202eb"}}, `key "a\u202eb"`},
		{[][2]string{{"key", "a\xffb"}}, `key "a\xffb"`},
	} {
		if got := filterText(c.filters, "every dead letter"); got != c.want {
			t.Errorf("filterText(%q) = %q, want %q", c.filters, got, c.want)
		}
	}
}
