package main

import (
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

// delays draws each request's delay: most requests wait a time drawn
// uniformly within ±jitter of median; a share tailShare of them (at
// random) waits instead a time drawn uniformly between 75 % and 100 % of
// tail. With the defaults (10 ms, ±20 %, 1 % in a 40 ms tail) 99 % of the
// requests wait 8–12 ms and 1 % wait 30–40 ms: a median of 10.0 ms and a
// mean of 10.25 ms. The draws come from a PCG generator seeded with seed,
// so a given sequence of requests gets the same sequence of delays. It is
// safe for concurrent use.
type delays struct {
	median    time.Duration
	jitter    float64
	tail      time.Duration
	tailShare float64

	mu  sync.Mutex
	rng *rand.Rand
}

func newDelays(median time.Duration, jitter float64, tail time.Duration, tailShare float64, seed uint64) *delays {
	return &delays{median: median, jitter: jitter, tail: tail, tailShare: tailShare,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// next returns the next delay.
func (d *delays) next() time.Duration {
	d.mu.Lock()
	inTail := d.tailShare > 0 && d.rng.Float64() < d.tailShare
	u := d.rng.Float64()
	d.mu.Unlock()
	if inTail {
		return time.Duration(float64(d.tail) * (0.75 + 0.25*u))
	}
	return time.Duration(float64(d.median) * (1 - d.jitter + 2*d.jitter*u))
}

// The histograms' buckets: histStep wide, histBuckets of them; the last
// one also holds everything longer.
const (
	histStep    = 250 * time.Microsecond
	histBuckets = 800 // 200 ms
)

// quickUpstream is the longest the upstream may take for a request to
// count in the round-trip figures: a receive that waits longer is a long
// poll on an empty queue, not a round trip.
const quickUpstream = time.Second

// actionStats are the figures of one SQS action (the X-Amz-Target's
// "ReceiveMessage", "DeleteMessageBatch", …; "other" without one).
type actionStats struct {
	// Requests counts the requests forwarded (or cut short during their
	// delay), Errors those the upstream did not answer.
	Requests int64 `json:"requests"`
	Errors   int64 `json:"errors"`
	// DelayNS sums the delays applied, as measured around the wait.
	DelayNS int64 `json:"delay_ns"`
	// QuickRequests counts the requests whose upstream answered within
	// quickUpstream; QuickNS sums their round trips, from the request's
	// arrival to the response's last byte written.
	QuickRequests int64 `json:"quick_requests"`
	QuickNS       int64 `json:"quick_ns"`
	// RoundTrips is the histogram of those round trips.
	RoundTrips []int64 `json:"round_trips"`
}

// Stats are the proxy's figures since it started, what its /stats answers.
type Stats struct {
	Actions map[string]*actionStats `json:"actions"`
	// Delays is the histogram of the delays applied, over all requests.
	Delays []int64 `json:"delays"`
	// StepNS is the histograms' bucket width.
	StepNS int64 `json:"step_ns"`
}

func newStats() *Stats {
	return &Stats{Actions: map[string]*actionStats{}, Delays: make([]int64, histBuckets), StepNS: int64(histStep)}
}

func bucket(d time.Duration) int { return min(max(int(d/histStep), 0), histBuckets-1) }

// proxy is an HTTP reverse proxy that delays each request before
// forwarding it. Every request waits on its own (a keep-alive connection's
// requests each wait; concurrent requests wait at the same time), and the
// request and the response pass unchanged: method, path, headers (Host
// included; hop-by-hop headers such as Connection are the connection's,
// not the request's) and body. A request whose client gives up during its
// wait is not forwarded.
type proxy struct {
	delays *delays
	rp     *httputil.ReverseProxy

	mu    sync.Mutex
	stats *Stats
}

// sleep waits d in a blocking nanosleep, which holds its OS thread: a Go
// timer, in a process this idle, wakes on whole milliseconds (the runtime
// waits for the network with a timeout in milliseconds), so that a delay
// drawn as 10.3 ms would take 11.2; nanosleep overshoots by about 0.1 ms.
func sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}

// bufferPool lends the reverse proxy its copy buffers.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte  { return *(b.p.Get().(*[]byte)) }
func (b *bufferPool) Put(x []byte) { b.p.Put(&x) }

func newProxy(upstream *url.URL, d *delays) *proxy {
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // pass Accept-Encoding and the bodies as they are
	}
	pool := &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
	p := &proxy{delays: d, stats: newStats()}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream) // upstream has no path: the request's stays as it is
			r.Out.Host = r.In.Host
		},
		Transport:  transport,
		BufferPool: pool,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// The client gave up (a consumer stopping cuts its long poll
			// short), or the upstream did not answer.
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	return p
}

// actionOf returns the AWS JSON protocol's action of r ("AmazonSQS.ReceiveMessage"
// → "ReceiveMessage"), "other" without one.
func actionOf(r *http.Request) string {
	a := r.Header.Get("X-Amz-Target")
	if a == "" {
		return "other"
	}
	if _, after, ok := strings.Cut(a, "."); ok {
		return after
	}
	return a
}

// statusWriter notes whether the upstream answered.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	action := actionOf(r)
	sleep(p.delays.next())
	cut := r.Context().Err() != nil // the client gave up meanwhile
	forwarded := time.Now()
	delay := forwarded.Sub(arrived)
	sw := &statusWriter{ResponseWriter: w}
	if !cut {
		p.rp.ServeHTTP(sw, r)
	}
	done := time.Now()

	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats.Actions[action]
	if s == nil {
		s = &actionStats{RoundTrips: make([]int64, histBuckets)}
		p.stats.Actions[action] = s
	}
	s.Requests++
	s.DelayNS += int64(delay)
	p.stats.Delays[bucket(delay)]++
	if cut || sw.code == http.StatusBadGateway {
		s.Errors++
		return
	}
	if done.Sub(forwarded) <= quickUpstream {
		rt := done.Sub(arrived)
		s.QuickRequests++
		s.QuickNS += int64(rt)
		s.RoundTrips[bucket(rt)]++
	}
}

// snapshot returns a copy of the figures so far.
func (p *proxy) snapshot() *Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := newStats()
	copy(s.Delays, p.stats.Delays)
	for k, v := range p.stats.Actions {
		c := *v
		c.RoundTrips = append([]int64(nil), v.RoundTrips...)
		s.Actions[k] = &c
	}
	return s
}
