package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/sqsonce/sqsonce/ingest"
)

// ingestCommand is `sqsonce ingest`: the webhook receiver, until SIGTERM or
// SIGINT.
func (m *Main) ingestCommand(ctx context.Context, args []string) error {
	var c commonFlags
	fs := m.flagSet("ingest", "Usage: sqsonce ingest [--config FILE]\n\nReceive webhooks on ingest.listen, one [[ingest.source]] per sender: verify\neach request's signature, key the event by what the signature covers (the\nsender's event id, or for GitHub a SHA-256 of the body) after the source's\nname, send the event to SQS, and answer 200 only once SQS holds it (503\nwith Retry-After when it could not be sent, so that the sender tries\nagain). SIGTERM or SIGINT stops taking requests, finishes those in flight,\nand exits 0. Metrics and health checks are served on ingest.admin_listen\n(default 127.0.0.1:9466), apart from the worker's admin.listen.", &c)
	cfg, log, err := m.parse(fs, &c, args)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected arguments %q", fs.Args())
	}
	icfg, err := ingestConfig(cfg, m.LookupEnv, log)
	if err != nil {
		return err
	}
	warnExposedSecrets(log, ingestSecretFiles(cfg))
	tp, flush, err := m.newTracing(ctx, log)
	if err != nil {
		return err
	}
	defer flush()
	icfg.TracerProvider = tp
	client, err := newSQSClient(ctx, cfg.Queue)
	if err != nil {
		return err
	}
	reg := newRegistry()
	icfg.Registerer = reg
	srv, err := ingest.New(icfg, client)
	if err != nil {
		return fmt.Errorf("ingest.source: %w: %w", err, ErrInvalidConfig)
	}
	ln, err := net.Listen("tcp", cfg.Ingest.Listen)
	if err != nil {
		return fmt.Errorf("ingest.listen %s: %w", cfg.Ingest.Listen, err)
	}
	ctx, stopService, err := m.serve(ctx, service{
		health:   func() healthState { return ingestHealth(srv.Health()) },
		status:   func() string { return ingestStatus(srv) },
		stopping: "stopping",
		stopMsg:  "stop signal: finishing the requests in flight",
	}, cfg.ingestAdmin(), reg, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer stopService()
	return srv.Run(ctx, ln)
}

// ingestHealth is what the admin listener and systemd hear of a receiver.
func ingestHealth(h ingest.Health) healthState {
	return healthState{
		Alive: h.Ready || h.Draining,
		Ready: h.Ready,
		Fields: map[string]any{
			"ready": h.Ready, "draining": h.Draining, "in_flight": h.InFlight,
		},
	}
}

func ingestStatus(srv *ingest.Server) string {
	h, s := srv.Health(), srv.Stats()
	state := "receiving"
	if h.Draining {
		state = "stopping"
	}
	return fmt.Sprintf("%s; %d in flight; %d accepted, %d refused signatures, %d without an event id, %d sends failed",
		state, h.InFlight, s.Accepted, s.Unverified, s.Keyless, s.SendFailed)
}

// ingestConfig maps the file's [ingest] section onto the receiver's
// configuration, reading each source's secrets from its file or variable.
func ingestConfig(cfg Config, lookupEnv func(string) (string, bool), log *slog.Logger) (ingest.Config, error) {
	c := cfg.Ingest
	if len(c.Source) == 0 {
		return ingest.Config{}, fmt.Errorf("ingest.source: no [[ingest.source]]: at least one sender is required: %w", ErrInvalidConfig)
	}
	out := ingest.Config{
		MaxBody:        int64(c.MaxBody),
		MaxInFlight:    c.MaxInFlight,
		RequestTimeout: c.RequestTimeout.Duration,
		RetryAfter:     c.RetryAfter.Duration,
		Grace:          cfg.Shutdown.Grace.Duration,
		Logger:         log,
	}
	if out.Grace == 0 {
		out.Grace = time.Nanosecond // 0s in the file: no wait for requests in flight
	}
	var errs []error
	for _, src := range c.Source {
		secrets, err := readSecrets(src, lookupEnv)
		if err != nil {
			errs = append(errs, err)
		}
		out.Sources = append(out.Sources, ingestSource(cfg, src, secrets))
	}
	if err := errors.Join(errs...); err != nil {
		return ingest.Config{}, err
	}
	return out, nil
}

func ingestSource(cfg Config, src IngestSource, secrets [][]byte) ingest.Source {
	queue := src.QueueURL
	if queue == "" {
		queue = cfg.Queue.URL
	}
	return ingest.Source{
		Name:         src.Name,
		Path:         src.Path,
		QueueURL:     queue,
		KeyHeader:    src.KeyHeader,
		KeyPointer:   src.KeyPointer,
		KeyPrefix:    src.KeyPrefix,
		GroupPointer: src.GroupPointer,
		HashMissing:  src.OnMissing == OnMissingHash,
		Verify: ingest.VerifyConfig{
			Scheme:          src.Verify,
			Secrets:         secrets,
			SignatureHeader: src.SignatureHeader,
			Tolerance:       src.Tolerance.Duration,
		},
	}
}

// readSecrets reads a source's secrets from its secret_file or the
// variable its secret_env names.
func readSecrets(src IngestSource, lookupEnv func(string) (string, bool)) ([][]byte, error) {
	switch {
	case src.SecretFile != "":
		data, err := os.ReadFile(src.SecretFile)
		if err != nil {
			return nil, fmt.Errorf("ingest.source %q: secret_file: %w", src.Name, err)
		}
		s, err := ingest.SecretsFromFile(data)
		if err != nil {
			return nil, fmt.Errorf("ingest.source %q: secret_file %s: %w: %w", src.Name, src.SecretFile, err, ErrInvalidConfig)
		}
		return s, nil
	case src.SecretEnv != "":
		v, ok := lookupEnv(src.SecretEnv)
		if !ok {
			return nil, fmt.Errorf("ingest.source %q: secret_env: the variable %s is not set: %w", src.Name, src.SecretEnv, ErrInvalidConfig)
		}
		s, err := ingest.SecretsFromEnv(v)
		if err != nil {
			return nil, fmt.Errorf("ingest.source %q: secret_env %s: %w: %w", src.Name, src.SecretEnv, err, ErrInvalidConfig)
		}
		return s, nil
	}
	return nil, nil
}

// placeholderSecret stands in for a source's secrets where the file's
// rules are checked without reading them: valid under every scheme.
var placeholderSecret = [][]byte{[]byte("c2VjcmV0")}

// checkIngestSources checks the [[ingest.source]] tables as far as the
// file tells: the keys the command owns here, the rest by the receiver's
// own validation (with a placeholder for the secrets, which are read when
// the receiver starts).
func checkIngestSources(c *Config) error {
	var errs []error
	schemes := []string{ingest.SchemeStripe, ingest.SchemeGitHub, ingest.SchemeStandard, ingest.SchemeHMACSHA256, ingest.SchemeNone}
	icfg := ingest.Config{MaxInFlight: c.Ingest.MaxInFlight, RequestTimeout: c.Ingest.RequestTimeout.Duration, RetryAfter: c.Ingest.RetryAfter.Duration}
	for i, src := range c.Ingest.Source {
		name := src.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i+1)
		}
		bad := func(key string, err error) { errs = append(errs, fmt.Errorf("source %q: %s: %w", name, key, err)) }
		if err := oneOf(src.Verify, schemes...); err != nil {
			bad("verify", err)
			continue
		}
		if err := oneOf(src.OnMissing, "", OnMissingReject, OnMissingHash); err != nil {
			bad("on_missing", err)
		}
		secrets := placeholderSecret
		switch {
		case src.Verify == ingest.SchemeNone && (src.SecretFile != "" || src.SecretEnv != ""):
			bad("secret_file, secret_env", errors.New(`verify = "none" takes no secret`))
		case src.Verify == ingest.SchemeNone:
			secrets = nil
		case src.SecretFile != "" && src.SecretEnv != "":
			bad("secret_file, secret_env", errors.New("set one, not both"))
		case src.SecretFile == "" && src.SecretEnv == "":
			bad("secret_file, secret_env", fmt.Errorf("verify = %q needs its secrets from a file or a variable (never in the configuration)", src.Verify))
		}
		if src.Tolerance.Duration < 0 {
			bad("tolerance", fmt.Errorf("must not be negative, got %v", src.Tolerance))
		}
		icfg.Sources = append(icfg.Sources, ingestSource(*c, src, secrets))
	}
	if len(errs) == 0 {
		if err := icfg.Validate(); err != nil {
			for _, line := range plainIngestErrors(err) {
				errs = append(errs, errors.New(line))
			}
		}
	}
	return errors.Join(errs...)
}

// plainIngestErrors are the problems of an error of the receiver's
// validation, a line each, without its sentinel's words, which the
// configuration's own replace.
func plainIngestErrors(err error) []string {
	sentinel := ingest.ErrInvalidConfig.Error()
	var lines []string
	for line := range strings.SplitSeq(err.Error(), "\n") {
		line = strings.TrimSuffix(line, ": "+sentinel)
		lines = append(lines, strings.ReplaceAll(line, sentinel+": ", ""))
	}
	return lines
}
