// Command workserver is the endpoint of the sqsonce-http contender of the
// comparison benchmark (scripts/bench): an HTTP server on loopback that
// answers every POST 200, with an empty body, after reading the request
// body and waiting the time in its query's delay parameter (a Go duration,
// "5ms"; none: at once). The driver runs it as a child process, so that
// its CPU time is its own, and gives sqsonce `handler.url =
// "http://ADDR/?delay=W"`.
//
// GET /stats answers {"requests":N}, the POSTs answered so far. It prints
// one JSON line on stdout, {"addr":"127.0.0.1:P"}, once it listens, and
// runs until SIGTERM, SIGINT or the end of its standard input (the driver
// gone).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address (loopback)")
	flag.Parse()
	if err := run(*listen); err != nil {
		fmt.Fprintln(os.Stderr, "workserver:", err)
		os.Exit(1)
	}
}

func run(listen string) error {
	host, _, err := net.SplitHostPort(listen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-listen %q: want a loopback IP:port", listen)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	var requests atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if s := r.URL.Query().Get("delay"); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				http.Error(w, "delay: "+err.Error(), http.StatusBadRequest)
				return
			}
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		requests.Add(1)
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"requests\":%d}\n", requests.Load())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errs := make(chan error, 1)
	go func() { errs <- srv.Serve(ln) }()

	line, _ := json.Marshal(map[string]string{"addr": ln.Addr().String()})
	os.Stdout.Write(append(line, '\n'))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	select {
	case <-ctx.Done():
	case err := <-errs:
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
