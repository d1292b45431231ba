package main

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestCeiling(t *testing.T) {
	t.Parallel()
	b := &bench{o: options{pollers: 1, latency: 10 * time.Millisecond, latencyTail: 40 * time.Millisecond, latencyTailShare: 0.01}}
	cases := []struct {
		contender string
		cfg       runConfig
		rtt       float64 // measured, ms; NaN: not measured
		want      float64
	}{
		// One poller, 10 messages per 12.5 ms: 800/s; 16 handlers of 5 ms: 3,200/s.
		{cSqsonceGo, runConfig{pRealistic, 16, 5 * time.Millisecond}, 12.5, 800},
		// Handlers bound: 4 handlers of 10 ms, 400/s.
		{cBaseline, runConfig{pRealistic, 4, 10 * time.Millisecond}, 10, 400},
		// Not measured: the configured mean delay, 0.99 × 10 + 0.01 × 35 = 10.25 ms.
		{cSqsonceGo, runConfig{pRealistic, 64, 5 * time.Millisecond}, math.NaN(), 10 / 0.01025},
		// sqs-consumer at 64 handlers: 7 Consumers, 70 handlers.
		{cSQSConsumer, runConfig{pRealistic, 64, 5 * time.Millisecond}, 10, 7000},
		{cSQSConsumer, runConfig{pRealistic, 64, 50 * time.Millisecond}, 10, 1400},
	}
	for _, c := range cases {
		r := &result{contender: c.contender, cfg: c.cfg, rxRTT: c.rtt}
		got, _ := b.ceilingOf(r)
		if math.Abs(got-c.want) > 0.01 {
			t.Errorf("%s %v, round trip %v ms: ceiling %.2f, want %.2f", c.contender, c.cfg, c.rtt, got, c.want)
		}
	}
}

func TestHistQuantile(t *testing.T) {
	t.Parallel()
	step := int64(250 * time.Microsecond)
	h := make([]int64, 100)
	h[40] = 98 // 10.0–10.25 ms
	h[80] = 2  // 20.0–20.25 ms
	if got := histQuantile(h, step, 0.5); got != 10.125 {
		t.Errorf("p50 %v, want 10.125", got)
	}
	if got := histQuantile(h, step, 0.99); got != 20.125 {
		t.Errorf("p99 %v, want 20.125", got)
	}
	if got := histQuantile(make([]int64, 10), step, 0.5); !math.IsNaN(got) {
		t.Errorf("empty: %v, want NaN", got)
	}
}

func TestProxyStatsMinus(t *testing.T) {
	t.Parallel()
	before := &proxyStats{StepNS: 1, Delays: []int64{1, 2}, Actions: map[string]*proxyAction{
		"ReceiveMessage": {Requests: 3, DelayNS: 30, QuickRequests: 2, QuickNS: 24, RoundTrips: []int64{0, 2}},
	}}
	after := &proxyStats{StepNS: 1, Delays: []int64{1, 7}, Actions: map[string]*proxyAction{
		"ReceiveMessage":     {Requests: 8, DelayNS: 80, QuickRequests: 6, QuickNS: 72, RoundTrips: []int64{1, 5}},
		"DeleteMessageBatch": {Requests: 4, DelayNS: 40, QuickRequests: 4, QuickNS: 44, RoundTrips: []int64{0, 4}},
	}}
	d := after.minus(before)
	rx := d.Actions["ReceiveMessage"]
	if rx.Requests != 5 || rx.QuickRequests != 4 || rx.QuickNS != 48 || rx.RoundTrips[0] != 1 || rx.RoundTrips[1] != 3 {
		t.Errorf("ReceiveMessage: %+v", rx)
	}
	if del := d.Actions["DeleteMessageBatch"]; del == nil || del.Requests != 4 {
		t.Errorf("DeleteMessageBatch: %+v, want all of it", del)
	}
	if d.Delays[0] != 0 || d.Delays[1] != 5 {
		t.Errorf("delays %v, want [0 5]", d.Delays)
	}
}

func TestExecCommand(t *testing.T) {
	t.Parallel()
	for work, want := range map[time.Duration]string{
		0:                       `["/bin/true"]`,
		5 * time.Millisecond:    `["/bin/sleep", "0.005"]`,
		1500 * time.Microsecond: `["/bin/sleep", "0.0015"]`,
	} {
		if got := execCommand(work); got != want {
			t.Errorf("execCommand(%v) = %s, want %s", work, got, want)
		}
	}
}

func TestScrapeSQSRequests(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Join([]string{
			`# HELP sqsonce_sqs_requests_total SQS API calls made, by operation.`,
			`# TYPE sqsonce_sqs_requests_total counter`,
			`sqsonce_sqs_requests_total{operation="DeleteMessageBatch"} 102`,
			`sqsonce_sqs_requests_total{operation="ReceiveMessage"} 1.5e+03`,
			`sqsonce_sqs_request_errors_total{operation="ReceiveMessage"} 1`,
		}, "\n")))
	}))
	defer srv.Close()
	got := scrapeSQSRequests(strings.TrimPrefix(srv.URL, "http://"))
	if len(got) != 2 || got["DeleteMessageBatch"] != 102 || got["ReceiveMessage"] != 1500 {
		t.Errorf("got %v", got)
	}
}
