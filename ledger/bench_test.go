// Benchmarks of the bbolt ledger on real files: every write is a durable,
// fsynced commit. Run them all with
//
//	go test -run '^$' -bench . -benchmem -benchtime=2s -timeout 30m ./ledger/
//
// One iteration of BenchmarkSweep1M sweeps 1,000,000 records; run it alone
// with
//
//	go test -run '^$' -bench Sweep1M -benchmem -benchtime=1x -timeout 30m ./ledger/
//
// BenchmarkGet1M and BenchmarkSweep1M share a ledger of 1,000,000 complete
// records, filled once per process through the public API (ClaimBatch and
// CompleteBatch of 1000 records; about a minute) in a temporary directory
// that TestMain removes; each benchmark works on a copy, and neither the fill
// nor the copy is timed.
package ledger_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/ledgertest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if bigDir != "" {
		os.RemoveAll(bigDir)
	}
	os.Exit(code)
}

const (
	benchRetention = 24 * time.Hour
	benchLease     = time.Minute
	bigRecords     = 1_000_000
	fillBatch      = 1000
)

var benchResult = []byte(`{"status":"ok","id":"r-000000"}`)

// mix scrambles i (splitmix64) so that benchmark keys arrive in no
// particular key order, as keys taken from message bodies do.
func mix(i uint64) uint64 {
	i += 0x9e3779b97f4a7c15
	i = (i ^ (i >> 30)) * 0xbf58476d1ce4e5b9
	i = (i ^ (i >> 27)) * 0x94d049bb133111eb
	return i ^ (i >> 31)
}

// benchKey is the i-th key of a set named by prefix: the prefix and 16 hex
// digits, unique per i.
func benchKey(prefix string, i int) string {
	var b [8]byte
	v := mix(uint64(i))
	for j := range b {
		b[j] = byte(v >> (56 - 8*j))
	}
	return prefix + hex.EncodeToString(b[:])
}

// claimReq is a claim of key with a payload fingerprint (a 32-byte hash in
// real use) and a message id the size of an SQS one.
func claimReq(key, owner string, i int) ledger.ClaimRequest {
	var fp [32]byte
	v := mix(uint64(i) ^ 0x5bd1e995)
	for j := range fp {
		fp[j] = byte(v >> (8 * (j % 8)))
	}
	id := hex.EncodeToString(fp[:18])
	return ledger.ClaimRequest{
		Key:         key,
		Fingerprint: fp[:],
		Owner:       owner,
		Lease:       benchLease,
		MessageID:   id[:8] + "-" + id[8:12] + "-" + id[12:16] + "-" + id[16:20] + "-" + id[20:32],
	}
}

func openBench(b *testing.B, path string, now func() time.Time) *ledger.DB {
	return openBenchOpts(b, path, ledger.Options{Now: now})
}

func openBenchOpts(b *testing.B, path string, opts ledger.Options) *ledger.DB {
	b.Helper()
	opts.Retention = benchRetention
	db, err := ledger.Open(path, opts)
	if err != nil {
		b.Fatal(err)
	}
	return db
}

// reportRate reports ops per second of timed work and, when commits is not
// negative, the commits each op cost.
func reportRate(b *testing.B, ops int, commits int64) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(ops)/s, "ops/s")
	}
	if commits >= 0 && ops > 0 {
		b.ReportMetric(float64(commits)/float64(ops), "commits/op")
	}
}

// claimComplete claims then completes the n keys of prefix from first on:
// one Claim and one Complete per key, or with batch one ClaimBatch and one
// CompleteBatch for all of them.
func claimComplete(ctx context.Context, db *ledger.DB, prefix string, first, n int, owner string, batch bool) error {
	if !batch {
		for i := first; i < first+n; i++ {
			key := benchKey(prefix, i)
			c, err := db.Claim(ctx, claimReq(key, owner, i))
			if err != nil {
				return err
			}
			if c.Outcome != ledger.Claimed {
				return fmt.Errorf("claim %q: %v", key, c.Outcome)
			}
			if err := db.Complete(ctx, ledger.Completion{Key: key, Owner: owner, Result: benchResult}); err != nil {
				return err
			}
		}
		return nil
	}
	reqs := make([]ledger.ClaimRequest, n)
	comps := make([]ledger.Completion, n)
	for j := range n {
		key := benchKey(prefix, first+j)
		reqs[j] = claimReq(key, owner, first+j)
		comps[j] = ledger.Completion{Key: key, Owner: owner, Result: benchResult}
	}
	cs, err := db.ClaimBatch(ctx, reqs)
	if err != nil {
		return err
	}
	for j, c := range cs {
		if c.Outcome != ledger.Claimed {
			return fmt.Errorf("claim %q: %v", reqs[j].Key, c.Outcome)
		}
	}
	for _, err := range db.CompleteBatch(ctx, comps) {
		if err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkClaimComplete claims then completes new keys, one op being one
// key taken through both writes: one at a time (two commits per op), in
// batches of 10, and from 64 goroutines whose writes share commits. A lone
// completion commits at once here (no CompleteDelay): these measure what a
// commit costs; BenchmarkPipeline measures the worker's way.
func BenchmarkClaimComplete(b *testing.B) {
	ctx := context.Background()
	openBench := func(b *testing.B, path string, now func() time.Time) *ledger.DB {
		return openBenchOpts(b, path, ledger.Options{Now: now, CompleteDelay: -1})
	}

	b.Run("Serial", func(b *testing.B) {
		db := openBench(b, filepath.Join(b.TempDir(), "ledger.db"), nil)
		defer db.Close()
		before := db.Commits()
		b.ResetTimer()
		for i := range b.N {
			if err := claimComplete(ctx, db, "serial:", i, 1, "owner-"+strconv.Itoa(i), false); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		reportRate(b, b.N, int64(db.Commits()-before))
	})

	b.Run("Batch10", func(b *testing.B) {
		db := openBench(b, filepath.Join(b.TempDir(), "ledger.db"), nil)
		defer db.Close()
		before := db.Commits()
		b.ResetTimer()
		for i := 0; i < b.N; i += 10 {
			if err := claimComplete(ctx, db, "batch:", i, min(10, b.N-i), "owner-"+strconv.Itoa(i), true); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		reportRate(b, b.N, int64(db.Commits()-before))
	})

	for _, batch := range []int{1, 10} {
		name := "Concurrent64"
		if batch > 1 {
			name += "Batch" + strconv.Itoa(batch)
		}
		b.Run(name, func(b *testing.B) {
			db := openBench(b, filepath.Join(b.TempDir(), "ledger.db"), nil)
			defer db.Close()
			before := db.Commits()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for g := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					owner := "worker-" + strconv.Itoa(g)
					for {
						first := int(next.Add(int64(batch))) - batch
						if first >= b.N {
							return
						}
						if err := claimComplete(ctx, db, "conc:", first, min(batch, b.N-first), owner, batch > 1); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			reportRate(b, b.N, int64(db.Commits()-before))
		})
	}
}

// BenchmarkPipeline drives the ledger the way the worker does, with the
// default options: 16 slots; each batch of 10 new keys takes 10 free slots
// and is claimed in one durable ClaimBatch; then each key's work (none) runs
// in its own goroutine, gives its slot back at once and completes the key,
// while the next batch is claimed. One op is one key claimed and
// completed; claim-ms is the mean wait for a batch's claims.
func BenchmarkPipeline(b *testing.B) {
	ctx := context.Background()
	db := openBench(b, filepath.Join(b.TempDir(), "ledger.db"), nil)
	defer db.Close()
	const slots, batch = 16, 10
	free := make(chan struct{}, slots)
	for range slots {
		free <- struct{}{}
	}
	before := db.Commits()
	var wg sync.WaitGroup
	var claimNS time.Duration
	var batches int
	b.ResetTimer()
	for first := 0; first < b.N; first += batch {
		n := min(batch, b.N-first)
		reqs := make([]ledger.ClaimRequest, n)
		for j := range n {
			<-free
			reqs[j] = claimReq(benchKey("pipe:", first+j), "owner-"+strconv.Itoa(first), first+j)
		}
		t := time.Now()
		claims, err := db.ClaimBatch(ctx, reqs)
		if err != nil {
			b.Fatal(err)
		}
		claimNS += time.Since(t)
		batches++
		for j := range n {
			if claims[j].Outcome != ledger.Claimed {
				b.Fatalf("claim %s: %v", reqs[j].Key, claims[j].Outcome)
			}
			wg.Go(func() {
				free <- struct{}{} // the work is done: its slot is free
				if err := db.Complete(ctx, ledger.Completion{Key: reqs[j].Key, Owner: reqs[j].Owner, Result: benchResult}); err != nil {
					b.Error(err)
				}
			})
		}
	}
	wg.Wait()
	b.StopTimer()
	reportRate(b, b.N, int64(db.Commits()-before))
	if batches > 0 {
		b.ReportMetric(float64(claimNS)/float64(batches)/1e6, "claim-ms")
	}
}

// The shared ledger of bigRecords complete records, filled once per process.
var (
	bigOnce sync.Once
	bigDir  string
	bigPath string
	bigErr  error
	bigEnd  time.Time // the fill clock at the end of the fill
)

func bigKey(i int) string { return benchKey("orders:", i) }

// bigLedger returns the path of the shared ledger, filling it on first use.
// The file must not be written: copy it first.
func bigLedger(b *testing.B) string {
	b.Helper()
	bigOnce.Do(func() {
		bigDir, bigErr = os.MkdirTemp("", "ledger-bench-")
		if bigErr != nil {
			return
		}
		bigPath = filepath.Join(bigDir, "ledger-1m.db")
		start := time.Now()
		bigEnd, bigErr = fillBig(bigPath)
		if bigErr != nil {
			return
		}
		fi, err := os.Stat(bigPath)
		if err != nil {
			bigErr = err
			return
		}
		b.Logf("filled %d records in %v: %d MiB", bigRecords, time.Since(start).Round(time.Millisecond), fi.Size()>>20)
	})
	if bigErr != nil {
		b.Fatal(bigErr)
	}
	return bigPath
}

// fillBig writes bigRecords claimed-then-completed records through the public
// API, advancing the clock a millisecond per batch so that the expiry index
// holds many instants, and returns the clock at the end.
func fillBig(path string) (time.Time, error) {
	ctx := context.Background()
	clock := ledgertest.NewClock()
	db, err := ledger.Open(path, ledger.Options{Retention: benchRetention, Now: clock.Now})
	if err != nil {
		return time.Time{}, err
	}
	defer db.Close()
	reqs := make([]ledger.ClaimRequest, fillBatch)
	comps := make([]ledger.Completion, fillBatch)
	for first := 0; first < bigRecords; first += fillBatch {
		n := min(fillBatch, bigRecords-first)
		owner := "filler-" + strconv.Itoa(first)
		for j := range n {
			key := bigKey(first + j)
			reqs[j] = claimReq(key, owner, first+j)
			comps[j] = ledger.Completion{Key: key, Owner: owner, Result: benchResult}
		}
		cs, err := db.ClaimBatch(ctx, reqs[:n])
		if err != nil {
			return time.Time{}, err
		}
		for j, c := range cs {
			if c.Outcome != ledger.Claimed {
				return time.Time{}, fmt.Errorf("fill: claim %q: %v", reqs[j].Key, c.Outcome)
			}
		}
		for _, err := range db.CompleteBatch(ctx, comps[:n]) {
			if err != nil {
				return time.Time{}, fmt.Errorf("fill: %w", err)
			}
		}
		clock.Advance(time.Millisecond)
	}
	st, err := db.Stats(ctx)
	if err != nil {
		return time.Time{}, err
	}
	if st.Complete != bigRecords {
		return time.Time{}, fmt.Errorf("fill: %d complete records, want %d", st.Complete, bigRecords)
	}
	return clock.Now(), db.Close()
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// BenchmarkGet1M reads random keys of a ledger of 1,000,000 records.
func BenchmarkGet1M(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "ledger.db")
	if err := copyFile(path, bigLedger(b)); err != nil {
		b.Fatal(err)
	}
	clock := ledgertest.NewClock()
	clock.Advance(bigEnd.Sub(clock.Now()))
	db := openBench(b, path, clock.Now)
	defer db.Close()
	// Keys picked at random beforehand, so that the loop times Get alone.
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = bigKey(rng.IntN(bigRecords))
	}
	b.ResetTimer()
	for i := range b.N {
		rec, err := db.Get(ctx, keys[i%len(keys)])
		if err != nil {
			b.Fatal(err)
		}
		if rec.State != ledger.StateComplete {
			b.Fatalf("get %q: %v", rec.Key, rec.State)
		}
	}
	b.StopTimer()
	reportRate(b, b.N, -1)
}

// BenchmarkSweep1M sweeps 1,000,000 expired records per iteration while four
// goroutines claim and complete new keys. Its ops/s are records removed per
// second; claim-p50-ms, claim-p99-ms and claim-max-ms are the latencies of
// the claims made during the sweeps, claims/s their rate.
func BenchmarkSweep1M(b *testing.B) {
	ctx := context.Background()
	src := bigLedger(b)
	b.ResetTimer()
	b.StopTimer()
	var swept int
	var lat []time.Duration
	var claims int
	var claimTime time.Duration
	for iter := range b.N {
		path := filepath.Join(b.TempDir(), "ledger.db")
		if err := copyFile(path, src); err != nil {
			b.Fatal(err)
		}
		// Every filled record expired a second ago.
		clock := ledgertest.NewClock()
		clock.Advance(bigEnd.Add(benchRetention + time.Second).Sub(clock.Now()))
		db := openBench(b, path, clock.Now)

		// Four workers claim and complete new keys for as long as the sweep
		// runs; their claim latencies are what a sweep costs live traffic.
		begin, stop := make(chan struct{}), make(chan struct{})
		var next atomic.Int64
		perWorker := make([][]time.Duration, 4)
		var wg sync.WaitGroup
		for w := range perWorker {
			wg.Add(1)
			go func() {
				defer wg.Done()
				owner := fmt.Sprintf("sweep-worker-%d-%d", iter, w)
				<-begin
				for {
					select {
					case <-stop:
						return
					default:
					}
					i := int(next.Add(1))
					key := benchKey("live:", i)
					t0 := time.Now()
					c, err := db.Claim(ctx, claimReq(key, owner, i))
					perWorker[w] = append(perWorker[w], time.Since(t0))
					if err != nil {
						b.Error(err)
						return
					}
					if c.Outcome != ledger.Claimed {
						b.Errorf("claim %q: %v", key, c.Outcome)
						return
					}
					if err := db.Complete(ctx, ledger.Completion{Key: key, Owner: owner, Result: benchResult}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}

		start := time.Now()
		close(begin)
		b.StartTimer()
		n, err := db.Sweep(ctx)
		b.StopTimer()
		elapsed := time.Since(start)
		close(stop)
		wg.Wait()
		if err != nil {
			b.Fatal(err)
		}
		if n != bigRecords {
			b.Fatalf("swept %d records, want %d", n, bigRecords)
		}
		swept += n
		claimTime += elapsed
		for _, l := range perWorker {
			claims += len(l)
			lat = append(lat, l...)
		}
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
		os.Remove(path)
	}
	reportRate(b, swept, -1)
	if len(lat) > 0 {
		slices.Sort(lat)
		p := func(q float64) float64 {
			return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))]) / float64(time.Millisecond)
		}
		b.ReportMetric(p(0.50), "claim-p50-ms")
		b.ReportMetric(p(0.99), "claim-p99-ms")
		b.ReportMetric(float64(lat[len(lat)-1])/float64(time.Millisecond), "claim-max-ms")
		b.ReportMetric(float64(claims)/claimTime.Seconds(), "claims/s")
	}
}

// BenchmarkList1M reads the first page (50 records) of a ledger of
// 1,000,000 records: unfiltered, by key prefix (one key in 16 has it), and
// by a state and by a reason that no record has (so that the page is read
// up to List's bound). records and scanned are the first page's.
func BenchmarkList1M(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "ledger.db")
	if err := copyFile(path, bigLedger(b)); err != nil {
		b.Fatal(err)
	}
	clock := ledgertest.NewClock()
	clock.Advance(bigEnd.Sub(clock.Now()))
	db := openBench(b, path, clock.Now)
	defer db.Close()
	for _, bc := range []struct {
		name string
		f    ledger.Filter
	}{
		{"first-page", ledger.Filter{}},
		{"prefix", ledger.Filter{Prefix: "orders:0"}},
		{"sparse-failed", ledger.Filter{State: ledger.StateFailed}},
		{"sparse-reason", ledger.Filter{Reason: "card declined"}},
		{"newest", ledger.Filter{Newest: true}},
		{"newest-failed", ledger.Filter{State: ledger.StateFailed, Newest: true}},
		{"newest-to-retry", ledger.Filter{State: ledger.StateFailed, Permanent: ledger.FlagUnset, DeadLettered: ledger.FlagUnset, Newest: true}},
		{"newest-last-hour", ledger.Filter{Since: bigEnd.Add(-time.Hour), Newest: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var p ledger.Page
			for b.Loop() {
				var err error
				if p, err = db.List(ctx, bc.f, "", 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(p.Records)), "records")
			b.ReportMetric(float64(p.Scanned), "scanned")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
		})
	}
}

// BenchmarkOverview1M reads the console's overview of a ledger of
// 1,000,000 records: its counters and indexes, none of the records.
func BenchmarkOverview1M(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "ledger.db")
	if err := copyFile(path, bigLedger(b)); err != nil {
		b.Fatal(err)
	}
	clock := ledgertest.NewClock()
	clock.Advance(bigEnd.Sub(clock.Now()))
	db := openBench(b, path, clock.Now)
	defer db.Close()
	for b.Loop() {
		o, err := db.Overview(ctx, clock.Now().Add(-time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		if o.Complete != bigRecords || o.Partial {
			b.Fatalf("overview: %+v", o.Stats)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
}
