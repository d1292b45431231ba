package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/postgres"
)

// msg frames one typed message of the client's side of the protocol.
func msg(typ byte, parts ...string) []byte {
	var body []byte
	for _, p := range parts {
		body = append(body, p...)
		body = append(body, 0)
	}
	out := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(4+len(body)))
	return append(out, body...)
}

func startup() []byte {
	b := make([]byte, 8, 16)
	binary.BigEndian.PutUint32(b, 8)
	binary.BigEndian.PutUint32(b[4:], pgProtocol3)
	return b
}

func TestPGWire(t *testing.T) {
	t.Parallel()
	claimSQL := "INSERT INTO t AS o (key) SELECT 1 ON CONFLICT (key) DO UPDATE SET state = 1"
	var stream []byte
	stream = append(stream, startup()...)
	stream = append(stream, msg('P', "s1", claimSQL)...)
	stream = append(stream, msg('B', "", "s1")...)
	stream = append(stream, msg('P', "", "UPDATE t AS o SET state = 2, completed = now()")...)
	stream = append(stream, msg('B', "", "")...)
	stream = append(stream, msg('Q', "-- ping")...)
	stream = append(stream, msg('C', "Ss1")...)
	stream = append(stream, msg('B', "", "s1")...)
	want := []pgMessage{{rtClaim, true}, {kind: rtClaim}, {rtComplete, true}, {kind: rtComplete}, {kind: rtOther}, {kind: rtOther}}

	// Whole, and cut into pieces of every size: the same messages.
	for size := 1; size <= len(stream); size++ {
		w := newPGWire()
		var got []pgMessage
		for i := 0; i < len(stream); i += size {
			got = append(got, w.feed(stream[i:min(i+size, len(stream))])...)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("pieces of %d bytes: got %v, want %v", size, got, want)
		}
		if !w.started {
			t.Fatalf("pieces of %d bytes: the start-up message was not seen", size)
		}
	}

	// A message longer than the frame limit is skipped, and what follows
	// is read.
	w := newPGWire()
	w.maxFrame = 64
	long := msg('B', "", string(make([]byte, 200)))
	in := append(append(startup(), long...), msg('Q', "SELECT 1")...)
	got := append(w.feed(in[:100]), w.feed(in[100:])...)
	if fmt.Sprint(got) != fmt.Sprint([]pgMessage{{kind: rtOther}}) {
		t.Fatalf("after a long message: got %v", got)
	}
}

// TestPGProxy_LedgerStatements checks that the proxy tells the shared
// ledger's own statements apart, on the local PostgreSQL server: a claim
// batch of ten and a completion batch are one round trip each, after one
// that prepares their statements; each other call is counted as its own.
func TestPGProxy_LedgerStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, _ := pgtest.Schema(t)
	if err := postgres.Init(ctx, postgres.Options{URL: url}); err != nil {
		t.Fatal(err)
	}
	p, err := newPGProxy(pgtest.Addr(t, url))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	l, err := postgres.Open(ctx, postgres.Options{URL: pgtest.WithParam(t, pgtest.ReplaceAddr(t, url, p.Addr()), "pool_max_conns", "1")})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	claims := func(prefix string) []ledger.ClaimRequest {
		reqs := make([]ledger.ClaimRequest, 10)
		for i := range reqs {
			reqs[i] = ledger.ClaimRequest{Key: fmt.Sprintf("%s-%d", prefix, i), Owner: "o", Lease: time.Minute}
		}
		return reqs
	}
	completions := func(reqs []ledger.ClaimRequest) []ledger.Completion {
		cs := make([]ledger.Completion, len(reqs))
		for i, r := range reqs {
			cs[i] = ledger.Completion{Key: r.Key, Owner: r.Owner}
		}
		return cs
	}
	step := func(name string, want map[string]int64, call func() error) {
		t.Helper()
		before := p.Counts()
		if err := call(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// The answer has been read: the round trip has ended.
		got := p.Counts()
		for k, v := range before {
			got[k] -= v
			if got[k] == 0 {
				delete(got, k)
			}
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: round trips %v, want %v", name, got, want)
		}
	}
	first, second := claims("a"), claims("b")
	step("first claim batch", map[string]int64{rtPrepare: 1, rtClaim: 1}, func() error { _, err := l.ClaimBatch(ctx, first); return err })
	step("second claim batch", map[string]int64{rtClaim: 1}, func() error { _, err := l.ClaimBatch(ctx, second); return err })
	step("first completion batch", map[string]int64{rtPrepare: 1, rtComplete: 1}, func() error { return joined(l.CompleteBatch(ctx, completions(first))) })
	step("one completion", map[string]int64{rtComplete: 1}, func() error { return l.Complete(ctx, completions(second)[0]) })
	step("extend", map[string]int64{rtPrepare: 1, rtExtend: 1}, func() error {
		_, err := l.Extend(ctx, second[1].Key, "o", time.Minute)
		return err
	})
	step("fail", map[string]int64{rtPrepare: 1, rtFail: 1}, func() error {
		return l.Fail(ctx, ledger.Failure{Key: second[2].Key, Owner: "o", Err: "no"})
	})
	step("release", map[string]int64{rtPrepare: 1, rtRelease: 1}, func() error { return l.Release(ctx, second[3].Key, "o") })
}

func joined(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
