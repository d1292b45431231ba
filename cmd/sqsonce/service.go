package main

import (
	"context"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// service is what the long-running commands (run, ingest) share around
// their work: the admin listener, systemd's notifications, and the stop
// signals.
type service struct {
	// health and status say how the command is doing, for the admin
	// listener and for systemd.
	health func() healthState
	status func() string
	// stopping is systemd's STATUS= once a stop signal came.
	stopping string
	// stopMsg is logged at the first stop signal; hurry, when set, is
	// called at the second.
	stopMsg string
	hurry   func()
}

// serve starts the admin listener and systemd's notifications, and returns
// a context that ends at the first stop signal, and a function that ends
// them all (it may be called more than once). A second signal calls
// s.hurry.
func (m *Main) serve(ctx context.Context, s service, a adminListener, reg *prometheus.Registry, log *slog.Logger) (context.Context, func(), error) {
	admin, err := startAdmin(a, reg, s.health, log)
	if err != nil {
		return nil, nil, err
	}
	notify, err := newNotifier(m.LookupEnv)
	if err != nil {
		log.Warn("systemd notification socket unusable", "error", err)
	}
	ctx, stop := context.WithCancel(ctx)
	finished := make(chan struct{})
	notifyCtx, stopNotify := context.WithCancel(context.Background())
	var background sync.WaitGroup
	background.Go(func() { notify.run(notifyCtx, s.health, s.status) })
	background.Go(func() {
		select {
		case sig := <-m.Signals:
			log.Info(s.stopMsg, "signal", sig.String())
			notify.send("STOPPING=1\nSTATUS=" + s.stopping)
			stop()
		case <-finished:
			return
		}
		if s.hurry == nil {
			return
		}
		select {
		case sig := <-m.Signals:
			log.Warn("second stop signal: cutting the drain short", "signal", sig.String())
			s.hurry()
		case <-finished:
		}
	})
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			close(finished)
			stopNotify()
			background.Wait()
			stop()
			notify.close()
			admin.Close()
		})
	}, nil
}
