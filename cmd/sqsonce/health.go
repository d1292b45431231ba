package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// healthCommand is `sqsonce health`: asks a running worker's admin listener
// for /healthz and exits 0 when it is alive, for container health checks in
// images without curl.
func (m *Main) healthCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	addr := fs.String("addr", "", "admin listener address (default: $SQSONCE_ADMIN_LISTEN, else 127.0.0.1:9464; with --ingest, $SQSONCE_INGEST_ADMIN_LISTEN, else 127.0.0.1:9466)")
	ingest := fs.Bool("ingest", false, "ask the webhook receiver (sqsonce ingest), whose admin listener is ingest.admin_listen, not the worker")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: sqsonce health [--addr HOST:PORT] [--ingest]\n\nAsk the running worker's admin listener (or with --ingest the webhook\nreceiver's) whether it is alive (/healthz). Exits 0 when alive, 1 otherwise.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErrorf("%v", err)
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected arguments %q", fs.Args())
	}
	target := *addr
	variable, fallback := envPrefix+"ADMIN_LISTEN", DefaultConfig().Admin.Listen
	if *ingest {
		variable, fallback = envPrefix+"INGEST_ADMIN_LISTEN", DefaultConfig().Ingest.AdminListen
	}
	if target == "" {
		target, _ = m.LookupEnv(variable)
	}
	if target == "" {
		target = fallback
	}
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return usageErrorf("admin address %q: %v", target, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("not healthy: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("not healthy: %s: %s", resp.Status, body)
	}
	fmt.Fprintf(m.Stdout, "%s", body)
	return nil
}
