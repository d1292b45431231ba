// Command latencyproxy stands for the network between an SQS consumer and
// SQS in the realistic profile of the comparison benchmark
// (scripts/bench): an HTTP reverse proxy on loopback that holds each
// request for a delay drawn from a seeded distribution (see delays), then
// forwards it to the local SQS-compatible server over pooled keep-alive
// connections and passes the response back. The driver runs it as a child
// process, so that its CPU time is its own, and points every contender at
// it.
//
// It listens on two loopback ports: the proxy's, and a control port whose
// GET /stats answers the figures so far as JSON (Stats: requests, delays
// and round trips by action). It prints one JSON line on stdout,
// {"addr":"127.0.0.1:P","control":"127.0.0.1:Q"}, once both listen, and
// runs until SIGTERM, SIGINT or the end of its standard input (the driver
// gone).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	upstream := flag.String("upstream", "", "the SQS-compatible server, http://127.0.0.1:PORT")
	listen := flag.String("listen", "127.0.0.1:0", "the proxy's address (loopback)")
	median := flag.Duration("latency", 10*time.Millisecond, "the delay most requests get, give or take -jitter")
	jitter := flag.Float64("jitter", 0.2, "most requests' delay is uniform within ±this share of -latency")
	tail := flag.Duration("tail", 40*time.Millisecond, "the longest delay: -tail-share of the requests wait 75–100 % of it instead")
	tailShare := flag.Float64("tail-share", 0.01, "the share of requests in the tail")
	seed := flag.Uint64("seed", 1, "the seed of the delays' generator")
	flag.Parse()
	if err := run(*upstream, *listen, newDelays(*median, *jitter, *tail, *tailShare, *seed)); err != nil {
		fmt.Fprintln(os.Stderr, "latencyproxy:", err)
		os.Exit(1)
	}
}

func checkArgs(upstream string, d *delays) (*url.URL, error) {
	u, err := url.Parse(upstream)
	if err != nil || u.Scheme != "http" || !isLoopback(u.Hostname()) || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("-upstream %q: want http://127.0.0.1:PORT (a loopback address, no path)", upstream)
	}
	u.Path = ""
	if d.median < 0 || d.tail < 0 || d.jitter < 0 || d.jitter > 1 || d.tailShare < 0 || d.tailShare > 1 {
		return nil, errors.New("-latency and -tail must not be negative, -jitter and -tail-share between 0 and 1")
	}
	return u, nil
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

func run(upstream, listen string, d *delays) error {
	u, err := checkArgs(upstream, d)
	if err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil || !isLoopback(host) {
		return fmt.Errorf("-listen %q: want a loopback host:port", listen)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	ctl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	p := newProxy(u, d)
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(p.snapshot())
	})
	ctlSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errs := make(chan error, 2)
	go func() { errs <- srv.Serve(ln) }()
	go func() { errs <- ctlSrv.Serve(ctl) }()

	line, _ := json.Marshal(map[string]string{"addr": ln.Addr().String(), "control": ctl.Addr().String()})
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
	srv.Shutdown(sctx)
	ctlSrv.Shutdown(sctx)
	return nil
}
