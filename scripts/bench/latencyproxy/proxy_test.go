package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// echo answers each request with its method, path, Host and body, and
// its headers (and its length) as response headers prefixed "Echo-".
func echo(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	for k, vs := range r.Header {
		for _, v := range vs {
			w.Header().Add("Echo-"+k, v)
		}
	}
	w.Header().Set("Echo-Content-Length", strconv.FormatInt(r.ContentLength, 10))
	w.Header().Set("X-Upstream", "yes")
	w.WriteHeader(http.StatusTeapot)
	fmt.Fprintf(w, "%s %s %s\n", r.Method, r.URL.RequestURI(), r.Host)
	w.Write(body)
}

// front is a proxy under test.
type front struct {
	url   string
	p     *proxy
	conns atomic.Int64 // connections clients opened to it
}

// start runs a proxy with a fixed delay (no jitter, no tail) in front of
// handler.
func start(t *testing.T, delay time.Duration, handler http.HandlerFunc) *front {
	t.Helper()
	up := httptest.NewServer(handler)
	t.Cleanup(up.Close)
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	f := &front{p: newProxy(u, newDelays(delay, 0, 0, 0, 1))}
	srv := httptest.NewUnstartedServer(f.p)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			f.conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func TestProxyPassesRequestsAndResponsesUnchanged(t *testing.T) {
	t.Parallel()
	f := start(t, time.Millisecond, echo)
	body := bytes.Repeat([]byte("body\x00\xff-"), 20000) // 160 kB, more than one copy buffer
	req, err := http.NewRequest(http.MethodPost, f.url+"/queue/x?Action=y", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "sqs.example:4566"
	req.Header.Set("X-Amz-Target", "AmazonSQS.ReceiveMessage")
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=bench/…")
	req.Header.Add("X-Many", "a")
	req.Header.Add("X-Many", "b")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTeapot || resp.Header.Get("X-Upstream") != "yes" {
		t.Errorf("status %d, X-Upstream %q: want the upstream's 418 and its header", resp.StatusCode, resp.Header.Get("X-Upstream"))
	}
	want := append([]byte("POST /queue/x?Action=y sqs.example:4566\n"), body...)
	if !bytes.Equal(got, want) {
		t.Errorf("body: got %d bytes starting %q, want %d starting %q", len(got), got[:min(len(got), 60)], len(want), want[:60])
	}
	for _, h := range []string{"X-Amz-Target", "Content-Type", "Authorization"} {
		if g, w := resp.Header.Get("Echo-"+h), req.Header.Get(h); g != w {
			t.Errorf("header %s reached the upstream as %q, want %q", h, g, w)
		}
	}
	if g := resp.Header.Values("Echo-X-Many"); !slices.Equal(g, []string{"a", "b"}) {
		t.Errorf("X-Many reached the upstream as %q, want [a b]", g)
	}
	if g := resp.Header.Get("Echo-Content-Length"); g != strconv.Itoa(len(body)) {
		t.Errorf("Content-Length %s, want %d", g, len(body))
	}
	for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Host", "Forwarded"} {
		if g := resp.Header.Get("Echo-" + h); g != "" {
			t.Errorf("the proxy added %s: %q", h, g)
		}
	}
	s := f.p.snapshot().Actions["ReceiveMessage"]
	if s == nil || s.Requests != 1 || s.QuickRequests != 1 || s.Errors != 0 {
		t.Errorf("stats for ReceiveMessage: %+v, want one quick request", s)
	}
}

// TestProxyDelaysEachRequest sends requests one after another on one
// keep-alive connection: each waits the delay, not just the connection's
// first.
func TestProxyDelaysEachRequest(t *testing.T) {
	t.Parallel()
	const delay = 30 * time.Millisecond
	var upConns sync.Map
	f := start(t, delay, func(w http.ResponseWriter, r *http.Request) {
		upConns.Store(r.RemoteAddr, true)
		io.WriteString(w, "ok")
	})
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for i := range 5 {
		t0 := time.Now()
		req, _ := http.NewRequest(http.MethodPost, f.url, strings.NewReader("x"))
		req.Header.Set("X-Amz-Target", "AmazonSQS.DeleteMessageBatch")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if took := time.Since(t0); took < delay {
			t.Errorf("request %d took %v, less than the delay %v", i, took, delay)
		}
	}
	if n := f.conns.Load(); n != 1 {
		t.Errorf("the client opened %d connections to the proxy, want 1 (keep-alive)", n)
	}
	n := 0
	upConns.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Errorf("the upstream saw %d connections from the proxy, want 1 (pooled keep-alive)", n)
	}
	s := f.p.snapshot()
	a := s.Actions["DeleteMessageBatch"]
	if a == nil || a.Requests != 5 || a.DelayNS < int64(5*delay) {
		t.Fatalf("stats %+v: want 5 requests delayed %v each", a, delay)
	}
	if mean := time.Duration(a.QuickNS / a.QuickRequests); mean < delay {
		t.Errorf("mean round trip %v, less than the delay", mean)
	}
	var d int64
	for _, c := range s.Delays {
		d += c
	}
	if d != 5 {
		t.Errorf("delay histogram holds %d requests, want 5", d)
	}
}

// TestProxyDelaysConcurrentRequestsTogether sends many requests at once:
// they wait their delays at the same time, so all of them take about one
// delay, not one after another.
func TestProxyDelaysConcurrentRequestsTogether(t *testing.T) {
	t.Parallel()
	const delay, n = 100 * time.Millisecond, 40
	f := start(t, delay, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	t0 := time.Now()
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			resp, err := client.Post(f.url, "text/plain", strings.NewReader("x"))
			if err != nil {
				errs <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	took := time.Since(t0)
	// In turn they would take n delays; together, about one. The bound
	// between is half of n delays, so that a loaded machine's slowness
	// does not read as requests waiting for each other.
	if took < delay || took > n*delay/2 {
		t.Errorf("%d concurrent requests took %v together, want about one delay (%v), far less than %v in turn", n, took, delay, n*delay)
	}
}

func TestDelaysDistribution(t *testing.T) {
	t.Parallel()
	const n = 200000
	d := newDelays(10*time.Millisecond, 0.2, 40*time.Millisecond, 0.01, 7)
	xs := make([]time.Duration, n)
	tail := 0
	var sum time.Duration
	for i := range xs {
		x := d.next()
		xs[i] = x
		sum += x
		switch {
		case x >= 30*time.Millisecond && x <= 40*time.Millisecond:
			tail++
		case x < 8*time.Millisecond || x > 12*time.Millisecond:
			t.Fatalf("delay %v is neither within 8–12 ms nor within 30–40 ms", x)
		}
	}
	if share := float64(tail) / n; share < 0.008 || share > 0.012 {
		t.Errorf("%.4f of the delays in the tail, want about 0.01", share)
	}
	slices.Sort(xs)
	if med := xs[n/2]; med < 9800*time.Microsecond || med > 10200*time.Microsecond {
		t.Errorf("median %v, want about 10 ms", med)
	}
	if mean := sum / n; mean < 10100*time.Microsecond || mean > 10400*time.Microsecond {
		t.Errorf("mean %v, want about 10.25 ms", mean)
	}
	// Seeded: the same seed gives the same sequence.
	a, b := newDelays(10*time.Millisecond, 0.2, 40*time.Millisecond, 0.01, 3), newDelays(10*time.Millisecond, 0.2, 40*time.Millisecond, 0.01, 3)
	for range 1000 {
		if x, y := a.next(), b.next(); x != y {
			t.Fatalf("same seed, different delays: %v and %v", x, y)
		}
	}
}
