package ingest_test

// The receiver against the least a receiver can do: a plain net/http
// handler that sends each body to SQS with no checks. Both serve real HTTP
// on loopback and send to the local SQS server, from 16 clients at once:
//
//	make bench-ingest
//
// Each reports requests per second and the p50 and p99 latency of a
// request, in milliseconds.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsonce/sqsonce/ingest"
	"github.com/sqsonce/sqsonce/internal/loopback"
	"github.com/sqsonce/sqsonce/internal/sqstest"
)

const benchClients = 16

func BenchmarkReceiver(b *testing.B) {
	client := sqstest.NewClient(b, nil)
	payload := bytes.Repeat([]byte(`{"action":"opened","pull_request":{"number":7,"title":"a title"}},`), 24) // ~1.6 KiB
	payload = append(append([]byte(`[`), payload[:len(payload)-1]...), ']')

	b.Run("plain", func(b *testing.B) {
		q := sqstest.CreateQueue(b, client, sqstest.QueueOptions{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err == nil {
				_, err = client.SendMessage(r.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(string(body))})
			}
			if err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		load(b, serve(b, h)+"/", payload, func(int) http.Header { return nil })
	})

	b.Run("ingest", func(b *testing.B) {
		q := sqstest.CreateQueue(b, client, sqstest.QueueOptions{})
		srv, err := ingest.New(ingest.Config{Sources: githubSource(q.URL), Logger: slog.New(slog.DiscardHandler)}, client)
		if err != nil {
			b.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx, ln) }()
		b.Cleanup(func() { cancel(); <-done })
		for !srv.Health().Ready {
			time.Sleep(time.Millisecond)
		}
		load(b, "http://"+ln.Addr().String()+"/hooks/github", payload, func(i int) http.Header {
			return githubHeader(fmt.Sprintf("d-%d", i), payload)
		})
	})
}

// serve serves h on loopback for the benchmark and returns its URL.
func serve(b *testing.B, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := &http.Server{Handler: h}
	go s.Serve(ln)
	b.Cleanup(func() { s.Close() })
	return "http://" + ln.Addr().String()
}

// load posts b.N requests from benchClients clients and reports their rate
// and latency.
func load(b *testing.B, url string, body []byte, header func(i int) http.Header) {
	hc := &http.Client{Transport: loopback.Transport()}
	// The signatures are computed before the clock starts: only the
	// receivers are measured.
	headers := make([]http.Header, b.N)
	for i := range headers {
		headers[i] = header(i)
	}
	lat := make([]time.Duration, b.N)
	next := make(chan int, b.N)
	for i := range b.N {
		next <- i
	}
	close(next)
	var failed sync.Once
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range benchClients {
		wg.Go(func() {
			for i := range next {
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
				for k, vs := range headers[i] {
					req.Header[k] = vs
				}
				t0 := time.Now()
				resp, err := hc.Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("answered %d", resp.StatusCode)
					}
				}
				lat[i] = time.Since(t0)
				if err != nil {
					failed.Do(func() { b.Error(err) })
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-ms")
	b.ReportMetric(0, "ns/op")
}
