package worker

import (
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"unicode"
	"unicode/utf8"
)

// Stats and logAttrs read the counters by position: each field of Stats
// must have its counter, of the same name but the first letter, in the same
// place.
func TestCounters_MatchStats(t *testing.T) {
	t.Parallel()
	st, ct := reflect.TypeFor[Stats](), reflect.TypeFor[counters]()
	if st.NumField() != ct.NumField() {
		t.Fatalf("Stats has %d fields, counters %d", st.NumField(), ct.NumField())
	}
	for i := range st.NumField() {
		sf, cf := st.Field(i), ct.Field(i)
		r, n := utf8.DecodeRuneInString(sf.Name)
		if want := string(unicode.ToLower(r)) + sf.Name[n:]; cf.Name != want {
			t.Errorf("field %d: Stats.%s, counters.%s; want counters.%s", i, sf.Name, cf.Name, want)
		}
		if sf.Type != reflect.TypeFor[int64]() || cf.Type != reflect.TypeFor[atomic.Int64]() {
			t.Errorf("field %d: Stats.%s is %v, counters.%s is %v; want int64 and atomic.Int64", i, sf.Name, sf.Type, cf.Name, cf.Type)
		}
	}
}

// Each counter shows in its field of Stats and under its key in the log
// line of a stopped worker.
func TestWorker_StatsReadsEachCounter(t *testing.T) {
	t.Parallel()
	w := &Worker{}
	c := reflect.ValueOf(&w.stats).Elem()
	for i := range c.NumField() {
		// Through the method set of each field, as the worker counts.
		ptr := reflect.NewAt(c.Field(i).Type(), c.Field(i).Addr().UnsafePointer()).Interface().(*atomic.Int64)
		ptr.Add(int64(100 + i))
	}
	s := w.Stats()
	v := reflect.ValueOf(s)
	for i := range v.NumField() {
		if got := v.Field(i).Int(); got != int64(100+i) {
			t.Errorf("Stats.%s = %d, want %d (its counter's)", v.Type().Field(i).Name, got, 100+i)
		}
	}
	if s.InProgressElsewhere != w.stats.inProgressElsewhere.Load() || s.ClaimFailures != w.stats.claimFailures.Load() {
		t.Errorf("Stats %+v does not read the counters by name", s)
	}

	// The keys of the "worker stopped" line.
	want := []string{"received", "claimed", "completed", "duplicates", "redelivered_failed",
		"in_progress_elsewhere", "retried", "failed_permanently", "dead_lettered", "keyless", "conflicts",
		"unreadable", "given_back", "takeovers", "lease_lost", "complete_failed", "deleted", "delete_failed",
		"heartbeats", "group_waited", "group_wait_beats", "stale_reclaimed", "receipt_lost", "claim_failures",
		"payloads_read", "payloads_retried", "payloads_rejected", "objects_deleted", "object_delete_failed",
		"flow_pauses", "probes", "probes_failed", "throttled", "deferred", "flow_would_pause", "flow_would_hold"}
	attrs := s.logAttrs()
	var keys []string
	for i := 0; i < len(attrs); i += 2 {
		keys = append(keys, attrs[i].(string))
		if got := attrs[i+1].(int64); got != int64(100+i/2) {
			t.Errorf("log attribute %s = %d, want %d", attrs[i], got, 100+i/2)
		}
	}
	if !slices.Equal(keys, want) {
		t.Errorf("log keys:\n%s\nwant\n%s", strings.Join(keys, " "), strings.Join(want, " "))
	}
}
