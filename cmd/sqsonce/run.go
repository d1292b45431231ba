package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// runCommand is `sqsonce run`: the worker, until SIGTERM or SIGINT.
func (m *Main) runCommand(ctx context.Context, args []string) error {
	var c commonFlags
	fs := m.flagSet("run", "Usage: sqsonce run [--config FILE]\n\nConsume the queue until SIGTERM or SIGINT, then drain and exit 0.\nA second signal cuts the drain short.", &c)
	cfg, log, err := m.parse(fs, &c, args)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected arguments %q", fs.Args())
	}
	tp, flush, err := m.newTracing(ctx, log)
	if err != nil {
		return err
	}
	defer flush()
	handler, err := newHandler(cfg, log)
	if err != nil {
		return err
	}
	client, err := newSQSClient(ctx, cfg.Queue)
	if err != nil {
		return err
	}
	reg := newRegistry()
	lm := newLedgerMetrics(reg)
	st, err := openStore(ctx, cfg, lm.onCommit)
	if err != nil {
		return err
	}
	defer st.Close()
	stopStats := lm.observe(st)
	defer stopStats()
	if db, ok := st.(*ledger.DB); ok {
		// Admin commands reach the ledger through this socket while we
		// hold the file; shared stores they reach directly.
		sock, err := serveLedgerSocket(db, socketPath(cfg.Ledger.Path), log)
		if err != nil {
			log.Warn("ledger socket unavailable: `sqsonce ledger` cannot reach this worker's ledger while it runs", "error", err)
		}
		defer sock.Close()
	}

	if cfg.Payload.S3 && len(cfg.Payload.allowedBuckets()) > 0 && cfg.Queue.Endpoint != "" && !awsHost(cfg.Queue.Endpoint) && cfg.Payload.Endpoint == "" {
		log.Warn("payloads in S3 are read from AWS's S3, while queue.endpoint names another server: set payload.endpoint to the server that holds them",
			"queue_endpoint", cfg.Queue.Endpoint)
	}
	wcfg := workerConfig(cfg, log)
	wcfg.Registerer = reg
	if cfg.Admin.Listen == "" {
		wcfg.QueueStatsInterval = -1 // no one reads the metrics: no GetQueueAttributes calls for them
	}
	wcfg.TracerProvider = tp
	if cfg.Payload.S3 {
		if wcfg.S3, err = newS3Client(ctx, cfg); err != nil {
			return err
		}
		wcfg.DeleteObjects = cfg.Payload.DeleteObjects
		wcfg.Buckets = cfg.Payload.allowedBuckets()
	}
	w, err := worker.New(wcfg, client, st, handler)
	if err != nil {
		return err
	}
	ctx, stopService, err := m.serve(ctx, service{
		health:   func() healthState { return workerHealth(w.Health()) },
		status:   func() string { return workerStatus(w.Health(), w.Stats()) },
		stopping: "draining",
		stopMsg:  "stop signal: draining",
		hurry:    w.StopNow,
	}, cfg.runAdmin(), reg, log)
	if err != nil {
		return err
	}
	defer stopService()
	if err := w.Run(ctx); err != nil {
		return err
	}
	stopService()
	stopStats()
	return st.Close()
}

// workerConfig maps the file's configuration onto the worker's. A value in
// the file is always a value: in worker.Config a zero picks the default, so
// a 0s that means zero (short polling, a retry at once, no grace) goes on
// as worker.NoDelay, and a 0 that the worker does not take as a value (no
// handlers, no visibility) goes on as -1, which it refuses by name.
func workerConfig(cfg Config, log *slog.Logger) worker.Config {
	return worker.Config{
		QueueURL:          cfg.Queue.URL,
		WaitTime:          explicit(cfg.Queue.WaitTime),
		MaxMessages:       refusedZero(cfg.Queue.MaxMessages),
		VisibilityTimeout: refusedZeroDuration(cfg.Queue.VisibilityTimeout),
		Pollers:           refusedZero(cfg.Queue.Pollers),
		Key:               keyConfig(cfg.Key),
		Body:              worker.BodyMode(cfg.Handler.Body),
		Concurrency:       refusedZero(cfg.Handler.Concurrency),
		HandlerTimeout:    refusedZeroDuration(cfg.Handler.Timeout),
		MinBackoff:        explicit(cfg.Retry.MinBackoff),
		MaxBackoff:        explicit(cfg.Retry.MaxBackoff),
		Grace:             explicit(cfg.Shutdown.Grace),
		Retention:         cfg.Ledger.Retention.Duration,
		MaxPayload:        int64(refusedZero(cfg.Payload.MaxSize)),
		SweepInterval:     sweepInterval(cfg.Ledger),
		Flow:              workerFlow(cfg),
		Version:           version,
		KeepBody:          cfg.Ledger.KeepBody,
		Logger:            log,
	}
}

// explicit is a duration of the file for the worker: 0s is zero
// (worker.NoDelay), not the worker's default.
func explicit(d Duration) time.Duration {
	if d.Duration == 0 {
		return worker.NoDelay
	}
	return d.Duration
}

// refusedZero is a number of the file for the worker where 0 is not a
// value: -1, which the worker refuses by name, instead of its default.
func refusedZero(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// refusedZeroDuration is refusedZero for durations.
func refusedZeroDuration(d Duration) time.Duration {
	if d.Duration == 0 {
		return -time.Second
	}
	return d.Duration
}

// sweepInterval is how often each worker sweeps expired records. On
// DynamoDB a sweep scans the whole table and TTL deletion does the work
// where it is on, so a tenth of the retention, at most a day, is enough;
// bbolt and PostgreSQL sweep by an index, every 10 minutes (zero: the
// worker's default).
func sweepInterval(l LedgerConfig) time.Duration {
	if l.Backend == BackendDynamoDB {
		return min(l.Retention.Duration/10, 24*time.Hour)
	}
	return 0
}

func keyConfig(k KeyConfig) worker.KeyConfig {
	return worker.KeyConfig{
		From:        worker.KeySource(k.From),
		Pointer:     k.Pointer,
		Attribute:   k.Attribute,
		SNS:         k.SNS,
		HashMissing: k.OnMissing == OnMissingHash,
		Prefix:      k.Prefix,
	}
}

// newHandler makes the handler of cfg.Handler. An exec handler's command
// does not inherit sqsonce's own secrets (ownSecrets) unless handler.env
// names them.
func newHandler(cfg Config, log *slog.Logger) (worker.Handler, error) {
	switch h := cfg.Handler; h.Type {
	case HandlerExec:
		return worker.NewExecHandler(worker.ExecConfig{Command: h.Command, RetryExitCodes: h.RetryExitCodes,
			Env: h.envPatterns(), Withhold: ownSecrets(cfg), Logger: log})
	case HandlerHTTP:
		return worker.NewHTTPHandler(worker.HTTPConfig{URL: h.URL, Logger: log})
	}
	return nil, fmt.Errorf("handler.type %q: %w", cfg.Handler.Type, ErrInvalidConfig)
}

// envPatterns is handler.env for worker.ExecConfig.Env: an empty list in the
// file passes nothing, where a nil ExecConfig.Env would pass everything.
func (h HandlerConfig) envPatterns() []string {
	if h.Env == nil {
		return []string{}
	}
	return h.Env
}
