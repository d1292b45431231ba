package ledger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The fuzz targets of this file run their seeds as ordinary tests. Run one
// of them with, for example,
//
//	go test -run '^$' -fuzz '^FuzzDecodeRecord$' -fuzztime 60s ./ledger/
//
// More seeds are in testdata/fuzz/<target>/.

// fuzzRecord is a record with every field set, as a completed one.
func fuzzRecord() Record {
	t0 := time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)
	return Record{
		Key:         "orders:evt_1",
		State:       StateComplete,
		Fingerprint: bytes.Repeat([]byte{0xab}, 32),
		Attempts:    2,
		Owner:       "host-1/4242/7",
		LeaseExpiry: t0.Add(time.Minute),
		FirstSeen:   t0.Add(-time.Hour),
		Claimed:     t0,
		Updated:     t0.Add(time.Second),
		Completed:   t0.Add(time.Second),
		Expires:     t0.Add(7 * 24 * time.Hour),
		LastError:   "exit status 75",
		MessageID:   "5a8e0bd4-1c1a-4b4f-9d35-6c2bd1b7a3f0",
		Result:      []byte(`{"status":"ok"}`),
	}
}

// fuzzSameTime reports whether a and b are the same instant, or both zero.
func fuzzSameTime(a, b time.Time) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero() && b.IsZero()
	}
	return a.UnixNano() == b.UnixNano()
}

// fuzzDiff returns the name of the first field in which a and b differ,
// or "". Times are compared by UnixNano, byte strings by content.
func fuzzDiff(a, b Record) string {
	switch {
	case a.Key != b.Key:
		return "Key"
	case a.State != b.State:
		return "State"
	case a.Permanent != b.Permanent:
		return "Permanent"
	case !bytes.Equal(a.Fingerprint, b.Fingerprint):
		return "Fingerprint"
	case a.Attempts != b.Attempts:
		return "Attempts"
	case a.Owner != b.Owner:
		return "Owner"
	case !fuzzSameTime(a.LeaseExpiry, b.LeaseExpiry):
		return "LeaseExpiry"
	case !fuzzSameTime(a.FirstSeen, b.FirstSeen):
		return "FirstSeen"
	case !fuzzSameTime(a.Claimed, b.Claimed):
		return "Claimed"
	case !fuzzSameTime(a.Updated, b.Updated):
		return "Updated"
	case !fuzzSameTime(a.Completed, b.Completed):
		return "Completed"
	case !fuzzSameTime(a.Expires, b.Expires):
		return "Expires"
	case a.LastError != b.LastError:
		return "LastError"
	case a.MessageID != b.MessageID:
		return "MessageID"
	case !bytes.Equal(a.Result, b.Result):
		return "Result"
	}
	return ""
}

// TestFuzzDiffCoversRecord keeps fuzzDiff in step with Record: a field
// added to Record must be compared there too, or be one of the flow fields,
// which are encoded apart from the record (recFlow) and compared by
// TestRecFlow_RoundTrip, or of its story (History and Payload), kept apart
// too and compared by TestStory_RoundTrip.
func TestFuzzDiffCoversRecord(t *testing.T) {
	if n := reflect.TypeFor[Record]().NumField(); n != 15+len(recFlowFields)+2 {
		t.Fatalf("Record has %d fields; fuzzDiff compares 15, recFlow holds %d, the story 2", n, len(recFlowFields))
	}
}

// fuzzAllocated returns the bytes f allocates on the heap.
func fuzzAllocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// fuzzAllocSlack is what decodeRecord may allocate beyond twice its input:
// error messages and their wrapping.
const fuzzAllocSlack = 1024

// fuzzUvarint and fuzzVarint encode one number.
func fuzzUvarint(v uint64) []byte { return binary.AppendUvarint(nil, v) }
func fuzzVarint(v int64) []byte   { return binary.AppendVarint(nil, v) }

// fuzzRecordBytes builds an encoded record by hand: the header, then the
// six times, then the five strings, each given already encoded.
func fuzzRecordBytes(version, state, flags byte, attempts []byte, times [][]byte, strs ...[]byte) []byte {
	b := append([]byte{version, state, flags}, attempts...)
	for _, t := range times {
		b = append(b, t...)
	}
	for _, s := range strs {
		b = append(b, s...)
	}
	return b
}

// FuzzDecodeRecord decodes arbitrary bytes. decodeRecord must not panic,
// must fail with ErrCorrupt or ErrSchema, must not allocate more than its
// input can justify, and must copy what it keeps. A record it accepts is
// within the limits and survives encoding and decoding again.
func FuzzDecodeRecord(f *testing.F) {
	full := fuzzRecord()
	valid := full.encode(nil)
	f.Add(valid)
	f.Add((&Record{State: StateInProgress, Owner: "o", Attempts: 1}).encode(nil))
	f.Add((&Record{State: StateFailed, Permanent: true, LastError: "boom"}).encode(nil))
	limits := Record{
		State:       StateComplete,
		Fingerprint: bytes.Repeat([]byte{1}, MaxFingerprintLen),
		Attempts:    1 << 31,
		Owner:       strings.Repeat("o", MaxOwnerLen),
		LastError:   strings.Repeat("e", MaxErrorLen),
		MessageID:   strings.Repeat("m", MaxMessageIDLen),
		Result:      bytes.Repeat([]byte{'r'}, MaxResultLen),
	}
	f.Add(limits.encode(nil))
	f.Add(valid[:len(valid)-1])
	f.Add(append(bytes.Clone(valid), 0))
	f.Add([]byte{})
	f.Add([]byte{recordVersion + 1})
	zeros := [][]byte{{0}, {0}, {0}, {0}, {0}, {0}}
	empty := [][]byte{{0}, {0}, {0}, {0}, {0}}
	// A string length of 2^64-1 with nothing behind it.
	f.Add(fuzzRecordBytes(1, 2, 0, []byte{0}, zeros, fuzzUvarint(^uint64(0))))
	// Each string at its limit plus one, and claiming more than is there.
	for i, max := range []uint64{MaxFingerprintLen, MaxOwnerLen, MaxErrorLen, MaxMessageIDLen, MaxResultLen} {
		strs := bytes.Clone(bytes.Join(empty[:i], nil))
		f.Add(fuzzRecordBytes(1, 2, 0, []byte{0}, zeros, strs, fuzzUvarint(max+1), bytes.Repeat([]byte{'x'}, int(max+1))))
		f.Add(fuzzRecordBytes(1, 2, 0, []byte{0}, zeros, strs, fuzzUvarint(max)))
	}
	// Extreme times, and attempts one over the limit.
	extreme := [][]byte{fuzzVarint(-1 << 63), fuzzVarint(1<<63 - 1), fuzzVarint(-1), fuzzVarint(1), {0}, fuzzVarint(1 << 62)}
	f.Add(fuzzRecordBytes(1, 3, 1, fuzzUvarint(1<<31+1), extreme, empty...))
	f.Add(fuzzRecordBytes(1, 3, 0xff, fuzzUvarint(1<<31), extreme, empty...))
	// Overlong and overflowing varints.
	f.Add(fuzzRecordBytes(1, 1, 0, []byte{0x80, 0x80, 0x00}, zeros, empty...))
	f.Add(fuzzRecordBytes(1, 1, 0, bytes.Repeat([]byte{0xff}, 11), zeros, empty...))
	f.Fuzz(func(t *testing.T, data []byte) {
		const key = "k"
		var (
			r   Record
			err error
		)
		in := bytes.Clone(data)
		// Other goroutines of the process may allocate meanwhile: a
		// decoding is too greedy only if it is so three times in a row.
		limit := 2*uint64(len(data)) + fuzzAllocSlack
		for try := 1; ; try++ {
			n := fuzzAllocated(func() { r, err = decodeRecord(key, in) })
			if n <= limit {
				break
			}
			if try == 3 {
				t.Fatalf("decoding %d bytes allocated %d bytes", len(data), n)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrSchema) {
				t.Fatalf("error %q wraps neither ErrCorrupt nor ErrSchema", err)
			}
			if fuzzDiff(r, Record{}) != "" {
				t.Fatalf("decodeRecord returned %+v with its error", r)
			}
			return
		}
		if r.Key != key {
			t.Fatalf("key %q, want %q", r.Key, key)
		}
		// The sweep's shortcut reads the same expiry as the full decode.
		if exp, err := recordExpires(data); err != nil || !exp.Equal(r.Expires) {
			t.Fatalf("recordExpires = %v, %v; decodeRecord says %v", exp, err, r.Expires)
		}
		if r.State < StateInProgress || r.State > StateFailed {
			t.Fatalf("decoded state %d", r.State)
		}
		if r.Attempts < 0 || r.Attempts > 1<<31 {
			t.Fatalf("decoded %d attempts", r.Attempts)
		}
		for _, s := range []struct {
			name string
			n    int
			max  int
		}{
			{"fingerprint", len(r.Fingerprint), MaxFingerprintLen},
			{"owner", len(r.Owner), MaxOwnerLen},
			{"last error", len(r.LastError), MaxErrorLen},
			{"message id", len(r.MessageID), MaxMessageIDLen},
			{"result", len(r.Result), MaxResultLen},
		} {
			if s.n > s.max {
				t.Fatalf("decoded a %s of %d bytes, over %d", s.name, s.n, s.max)
			}
		}
		if n := len(r.Fingerprint) + len(r.Owner) + len(r.LastError) + len(r.MessageID) + len(r.Result); n > len(data) {
			t.Fatalf("decoded %d bytes of strings from %d bytes", n, len(data))
		}

		// What decodeRecord keeps is a copy.
		for i := range in {
			in[i] ^= 0xff
		}
		again, err := decodeRecord(key, data)
		if err != nil {
			t.Fatalf("decoded once, then: %v", err)
		}
		if field := fuzzDiff(r, again); field != "" {
			t.Fatalf("%s changed with the decoded bytes", field)
		}

		enc := r.encode(nil)
		back, err := decodeRecord(key, enc)
		if err != nil {
			t.Fatalf("encoding of a decoded record does not decode: %v", err)
		}
		if field := fuzzDiff(r, back); field != "" {
			t.Fatalf("%s differs after encoding and decoding: %+v, then %+v", field, r, back)
		}
		if len(enc) > len(data) {
			t.Fatalf("encoding of %d bytes from %d bytes", len(enc), len(data))
		}
		if enc2 := back.encode(nil); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable: %x, then %x", enc, enc2)
		}
	})
}

// fuzzTime is a time from Unix nanoseconds, 0 being the zero time as in
// the encoding.
func fuzzTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// FuzzRecordRoundTrip encodes arbitrary records. A record within the
// limits decodes to an equal record; one outside them (a state other than
// 1 to 3, more than 2^31 attempts, a string over its limit) does not
// decode.
func FuzzRecordRoundTrip(f *testing.F) {
	r := fuzzRecord()
	f.Add(r.Key, uint8(r.State), r.Permanent, uint64(r.Attempts), r.Fingerprint, r.Owner, r.LastError, r.MessageID, r.Result,
		r.LeaseExpiry.UnixNano(), r.FirstSeen.UnixNano(), r.Claimed.UnixNano(), r.Updated.UnixNano(), r.Completed.UnixNano(), r.Expires.UnixNano())
	f.Add("", uint8(0), false, uint64(0), []byte(nil), "", "", "", []byte(nil), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0))
	f.Add("k\x00ey", uint8(1), true, uint64(1<<31), bytes.Repeat([]byte{0xff}, MaxFingerprintLen), strings.Repeat("o", MaxOwnerLen),
		strings.Repeat("é", MaxErrorLen/2), strings.Repeat("m", MaxMessageIDLen), bytes.Repeat([]byte{0}, MaxResultLen),
		int64(-1<<63), int64(1<<63-1), int64(-1), int64(1), int64(0), int64(1<<62))
	f.Add(strings.Repeat("k", 10<<10), uint8(4), false, uint64(1<<31+1), bytes.Repeat([]byte{1}, MaxFingerprintLen+1),
		strings.Repeat("o", MaxOwnerLen+1), strings.Repeat("e", MaxErrorLen+1), strings.Repeat("m", MaxMessageIDLen+1),
		bytes.Repeat([]byte{'r'}, MaxResultLen+1), int64(1), int64(2), int64(3), int64(4), int64(5), int64(6))
	f.Add("\xff\xfe", uint8(3), true, ^uint64(0), []byte("\xff"), "\xc3", "\xed\xa0\x80", "\x00", []byte("\xef\xbb\xbf{}"),
		int64(-62135596800000000), int64(253402300799999999), int64(0), int64(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, key string, state uint8, permanent bool, attempts uint64,
		fingerprint []byte, owner, lastError, messageID string, result []byte,
		lease, firstSeen, claimed, updated, completed, expires int64,
	) {
		r := Record{
			Key:         key,
			State:       State(state),
			Permanent:   permanent,
			Fingerprint: fingerprint,
			Attempts:    int(attempts),
			Owner:       owner,
			LeaseExpiry: fuzzTime(lease),
			FirstSeen:   fuzzTime(firstSeen),
			Claimed:     fuzzTime(claimed),
			Updated:     fuzzTime(updated),
			Completed:   fuzzTime(completed),
			Expires:     fuzzTime(expires),
			LastError:   lastError,
			MessageID:   messageID,
			Result:      result,
		}
		within := r.State >= StateInProgress && r.State <= StateFailed && attempts <= 1<<31 &&
			len(fingerprint) <= MaxFingerprintLen && len(owner) <= MaxOwnerLen && len(lastError) <= MaxErrorLen &&
			len(messageID) <= MaxMessageIDLen && len(result) <= MaxResultLen
		before := r
		before.Fingerprint, before.Result = bytes.Clone(fingerprint), bytes.Clone(result)
		enc := r.encode(nil)
		if field := fuzzDiff(r, before); field != "" {
			t.Fatalf("encode changed the record's %s", field)
		}
		prefix := []byte("prefix")
		if got := r.encode(bytes.Clone(prefix)); !bytes.Equal(got, append(prefix, enc...)) {
			t.Fatal("encode does not append to its argument")
		}
		back, err := decodeRecord(key, enc)
		if !within {
			if err == nil || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("record outside the limits decoded: %v", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if field := fuzzDiff(r, back); field != "" {
			t.Fatalf("%s differs after encoding and decoding: %+v, then %+v", field, r, back)
		}
		if again := back.encode(nil); !bytes.Equal(again, enc) {
			t.Fatalf("encoding of the decoded record differs: %x, then %x", enc, again)
		}
	})
}
