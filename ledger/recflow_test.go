package ledger

import (
	"reflect"
	"testing"
	"time"
)

// recFlowFields are the fields of Record that recFlow holds.
var recFlowFields = []string{"OwnFailures", "OutageFailures", "DeadLettered", "DeadLetterReason", "DeadLetterCopyID"}

// TestRecFlow_RoundTrip: the flow fields of a record survive their encoding,
// and count only for the record they were written for (its FirstSeen).
func TestRecFlow_RoundTrip(t *testing.T) {
	seen := time.Unix(0, 1767323045000000001)
	r := Record{Key: "k", FirstSeen: seen, OwnFailures: 3, OutageFailures: 1 << 20,
		DeadLettered: seen.Add(time.Hour), DeadLetterReason: "boom 42", DeadLetterCopyID: "copy-1"}
	f := flowOf(&r)
	dec := decodeRecFlow(f.encode())
	var got Record
	got.FirstSeen = seen
	dec.apply(&got)
	for _, name := range recFlowFields {
		g, w := reflect.ValueOf(got).FieldByName(name), reflect.ValueOf(r).FieldByName(name)
		if g.Type() == reflect.TypeFor[time.Time]() {
			if !g.Interface().(time.Time).Equal(w.Interface().(time.Time)) {
				t.Errorf("%s: got %v, want %v", name, g, w)
			}
			continue
		}
		if !g.Equal(w) {
			t.Errorf("%s: got %v, want %v", name, g, w)
		}
	}
	// Another record under the key (made anew by a sqsonce that does not
	// know these fields) does not get them.
	other := Record{FirstSeen: seen.Add(time.Nanosecond)}
	dec.apply(&other)
	if other.OwnFailures != 0 || !other.DeadLettered.IsZero() {
		t.Fatalf("a stale entry applied to another record: %+v", other)
	}
	// Later versions append: a decoder ignores what follows.
	longer := decodeRecFlow(append(f.encode(), 1, 2, 3))
	if !longer.valid || longer.own != 3 {
		t.Fatalf("an entry with appended bytes: %+v", longer)
	}
	for _, b := range [][]byte{nil, {0}, {1, 2}} {
		if e := decodeRecFlow(b); e.valid {
			t.Fatalf("%v decoded as %+v", b, e)
		}
	}
}
