// Package benchkit is what the Go contenders of the comparison benchmark
// (scripts/bench) share: their SQS client, the record of what they
// finished, and the JSON line each prints when it exits.
package benchkit

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Region is the region every client of the benchmark uses.
const Region = "us-east-1"

// Report is the last line a contender prints on stdout, as JSON. The driver
// reads it after the process exits. Times are Unix nanoseconds.
type Report struct {
	Contender string `json:"contender"`
	// Processed counts deliveries finished: deleted from the queue.
	Processed int64 `json:"processed"`
	// StartNS is when the contender issued its first receive.
	StartNS int64 `json:"start_ns"`
	// FirstNS and LastNS are when the first and the last delivery were
	// finished.
	FirstNS int64 `json:"first_ns"`
	LastNS  int64 `json:"last_ns"`
	// LatP50MS and LatP99MS are quantiles of finish time minus the body's
	// "sent" field, over LatCount deliveries, in milliseconds.
	LatP50MS float64 `json:"lat_p50_ms"`
	LatP99MS float64 `json:"lat_p99_ms"`
	LatCount int     `json:"lat_count"`

	// Requests counts the SQS requests the contender made, by action.
	Requests map[string]int64 `json:"requests,omitempty"`
	// Batches counts the receives that returned at least one message.
	Batches int64 `json:"batches,omitempty"`
	// LatMS holds every delivery's latency in milliseconds, when asked
	// for, so that the driver can take quantiles over several processes.
	LatMS []float64 `json:"lat_ms,omitempty"`

	// Mallocs is the heap allocations the process made, from start to
	// exit (runtime.MemStats.Mallocs); 0 when not counted.
	Mallocs uint64 `json:"mallocs,omitempty"`
	// WriteBytes is what the process sent to storage, from start to exit
	// (write_bytes of /proc/self/io: the ledger file's pages); 0 when not
	// known.
	WriteBytes int64 `json:"write_bytes,omitempty"`

	// Only the sqsonce contender fills these.
	Commits       *uint64          `json:"commits,omitempty"`
	HandlerRuns   int64            `json:"handler_runs,omitempty"`
	Operations    int64            `json:"operations,omitempty"`       // distinct keys the handler ran for (with -track-keys)
	MaxRunsPerKey int64            `json:"max_runs_per_key,omitempty"` // with -track-keys
	WorkerStats   map[string]int64 `json:"worker_stats,omitempty"`
	// LedgerWait: how long the worker's ClaimBatch and CompleteBatch calls
	// waited for their commits (calls, mean and median in ms).
	LedgerWait map[string]float64 `json:"ledger_wait,omitempty"`
	// Backend is the ledger's: bbolt, postgres or dynamodb.
	Backend string `json:"backend,omitempty"`
	// LedgerRequests counts a DynamoDB ledger's HTTP requests by the
	// ledger call that made them and the action ("claim UpdateItem");
	// LedgerInFlight is the requests in flight: the most at once, and the
	// mean seen by a request as it starts (itself included).
	LedgerRequests map[string]int64   `json:"ledger_requests,omitempty"`
	LedgerInFlight map[string]float64 `json:"ledger_in_flight,omitempty"`
	// Prefill: complete records written to the ledger before the first
	// receive (-prefill), the commits, CPU seconds (user+sys) and time
	// that took. Commits above leaves the prefill's commits out.
	PrefillRecords int64   `json:"prefill_records,omitempty"`
	PrefillCommits uint64  `json:"prefill_commits,omitempty"`
	PrefillCPU     float64 `json:"prefill_cpu_s,omitempty"`
	PrefillNS      int64   `json:"prefill_ns,omitempty"`
}

// Print writes r as one JSON line to stdout, with the process's heap
// allocations so far.
func (r *Report) Print() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.Mallocs = ms.Mallocs
	r.WriteBytes = writeBytes()
	b, err := json.Marshal(r)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	os.Stdout.Write(append(b, '\n'))
}

// writeBytes returns the bytes this process has sent to storage, from
// /proc/self/io, or 0.
func writeBytes() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// Flags are the flags every Go contender takes.
type Flags struct {
	Endpoint    string
	QueueURL    string
	Expect      int64
	Concurrency int
}

// Register adds the common flags to the default flag set.
func (f *Flags) Register() {
	flag.StringVar(&f.Endpoint, "endpoint", os.Getenv("SQSONCE_TEST_SQS_ENDPOINT"), "SQS endpoint (loopback only)")
	flag.StringVar(&f.QueueURL, "queue-url", "", "queue to consume")
	flag.Int64Var(&f.Expect, "expect", 0, "stop once this many deliveries are finished (0: run until SIGTERM)")
	flag.IntVar(&f.Concurrency, "concurrency", 16, "handlers running at once")
}

// Check validates the common flags.
func (f *Flags) Check() error {
	u, err := url.Parse(f.Endpoint)
	if err != nil || u.Scheme != "http" || (u.Hostname() != "127.0.0.1" && u.Hostname() != "localhost" && u.Hostname() != "::1") {
		return fmt.Errorf("-endpoint %q: want http on a loopback address", f.Endpoint)
	}
	if f.QueueURL == "" {
		return fmt.Errorf("-queue-url is required")
	}
	if f.Concurrency < 1 {
		return fmt.Errorf("-concurrency %d: want at least 1", f.Concurrency)
	}
	return nil
}

// NewClient returns an SQS client for a local endpoint: static
// credentials, the SDK's default HTTP client and retryer, and BaseEndpoint
// set (the server's queue URLs name a host that does not resolve). The
// returned Requests counts what it sends.
func NewClient(endpoint string) (*sqs.Client, *Requests) {
	reqs := &Requests{n: map[string]int64{}}
	c := sqs.New(sqs.Options{
		Region:       Region,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("bench", "bench", ""),
		HTTPClient:   &countingClient{next: awshttp.NewBuildableClient(), reqs: reqs},
	})
	return c, reqs
}

// Requests counts SQS requests by action.
type Requests struct {
	mu sync.Mutex
	n  map[string]int64
}

// Counts returns a copy of the counts.
func (r *Requests) Counts() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.n)
}

// countingClient counts each request by its X-Amz-Target action (AWS JSON
// protocol, "AmazonSQS.ReceiveMessage") before passing it on.
type countingClient struct {
	next sqs.HTTPClient
	reqs *Requests
}

func (c *countingClient) Do(req *http.Request) (*http.Response, error) {
	action := req.Header.Get("X-Amz-Target")
	if _, a, ok := strings.Cut(action, "."); ok {
		action = a
	}
	c.reqs.mu.Lock()
	c.reqs.n[action]++
	c.reqs.mu.Unlock()
	return c.next.Do(req)
}

// SentMillis returns the "sent" field of a body such as
// {"id":"op-1-2","sent":1700000000000}, or false. It scans instead of
// decoding so that the measurement costs little next to what is measured.
func SentMillis(body string) (int64, bool) {
	b := []byte(body)
	i := bytes.Index(b, []byte(`"sent":`))
	if i < 0 {
		return 0, false
	}
	j := i + len(`"sent":`)
	k := j
	for k < len(b) && b[k] >= '0' && b[k] <= '9' {
		k++
	}
	n, err := strconv.ParseInt(string(b[j:k]), 10, 64)
	return n, err == nil
}

// Recorder records finished deliveries from many goroutines. Done is
// closed once Expect deliveries are recorded.
type Recorder struct {
	expect int64

	mu        sync.Mutex
	processed int64
	first     int64
	last      int64
	lat       []float64 // milliseconds
	done      chan struct{}
	closed    bool
}

// NewRecorder returns a Recorder that closes Done after expect deliveries
// (never, when expect is 0).
func NewRecorder(expect int64) *Recorder {
	return &Recorder{expect: expect, done: make(chan struct{}), lat: make([]float64, 0, max(expect, 0))}
}

// Finish records deliveries finished now; sent holds each one's "sent"
// field in Unix milliseconds, or -1 when it had none.
func (r *Recorder) Finish(sent ...int64) {
	now := time.Now()
	ns := now.UnixNano()
	ms := float64(ns) / 1e6
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first == 0 {
		r.first = ns
	}
	r.last = ns
	r.processed += int64(len(sent))
	for _, s := range sent {
		if s >= 0 {
			r.lat = append(r.lat, ms-float64(s))
		}
	}
	if r.expect > 0 && r.processed >= r.expect && !r.closed {
		r.closed = true
		close(r.done)
	}
}

// Done is closed once the expected number of deliveries is recorded.
func (r *Recorder) Done() <-chan struct{} { return r.done }

// Latencies returns a copy of the latencies recorded, in milliseconds.
func (r *Recorder) Latencies() []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lat)
}

// Fill copies what was recorded into rep.
func (r *Recorder) Fill(rep *Report) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep.Processed = r.processed
	rep.FirstNS, rep.LastNS = r.first, r.last
	rep.LatCount = len(r.lat)
	rep.LatP50MS = Quantile(r.lat, 0.50)
	rep.LatP99MS = Quantile(r.lat, 0.99)
}

// Quantile returns the q-quantile of xs by the nearest-rank method, 0 for
// none. It sorts xs.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}
