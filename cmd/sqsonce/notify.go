package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sqsonce/sqsonce/worker"
)

// notifier speaks systemd's service notification protocol: datagrams of
// "KEY=value" lines on the unix socket named by $NOTIFY_SOCKET. It needs no
// library; a nil *notifier (not under systemd) does nothing.
type notifier struct {
	conn     *net.UnixConn
	watchdog time.Duration // $WATCHDOG_USEC, 0 when the watchdog is off
}

// newNotifier connects to $NOTIFY_SOCKET. It returns nil, nil when the
// variable is unset.
func newNotifier(lookupEnv func(string) (string, bool)) (*notifier, error) {
	path, ok := lookupEnv("NOTIFY_SOCKET")
	if !ok || path == "" {
		return nil, nil
	}
	if strings.HasPrefix(path, "@") { // abstract socket
		path = "\x00" + path[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("NOTIFY_SOCKET: %w", err)
	}
	n := &notifier{conn: conn}
	if usec, ok := lookupEnv("WATCHDOG_USEC"); ok {
		pid, hasPID := lookupEnv("WATCHDOG_PID")
		if v, err := strconv.ParseInt(usec, 10, 64); err == nil && v > 0 && (!hasPID || pid == strconv.Itoa(os.Getpid())) {
			n.watchdog = time.Duration(v) * time.Microsecond
		}
	}
	return n, nil
}

// send sends one notification. Errors are ignored: the supervisor may be
// gone, and the worker must not stop for that.
func (n *notifier) send(state string) {
	if n == nil {
		return
	}
	n.conn.Write([]byte(state))
}

// close closes the socket.
func (n *notifier) close() {
	if n != nil {
		n.conn.Close()
	}
}

// run tells systemd READY=1 once the worker is ready (the ledger is open and
// a receive succeeded), then keeps STATUS= current and, with a watchdog,
// sends WATCHDOG=1 at half its interval, but only while the worker reports
// itself alive: a stuck receive loop stops the pings and systemd restarts
// the service. run returns when ctx ends.
func (n *notifier) run(ctx context.Context, health func() healthState, status func() string) {
	if n == nil {
		return
	}
	tick := 250 * time.Millisecond
	if n.watchdog > 0 {
		tick = min(tick, n.watchdog/4)
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	ready := false
	var lastStatus, lastPing time.Time
	for {
		now := time.Now()
		h := health()
		if !ready && h.Ready {
			ready = true
			n.send("READY=1\nSTATUS=" + status())
			lastStatus = now
		}
		if ready && now.Sub(lastStatus) >= 5*time.Second {
			n.send("STATUS=" + status())
			lastStatus = now
		}
		if n.watchdog > 0 && h.Alive && now.Sub(lastPing) >= n.watchdog/2 {
			n.send("WATCHDOG=1")
			lastPing = now
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// workerStatus is systemd's STATUS= of a worker.
func workerStatus(h worker.Health, s worker.Stats) string {
	state := "consuming"
	switch {
	case h.Draining:
		state = "draining"
	case !h.Alive:
		state = "receive loop stalled"
	case h.LedgerDown:
		state = "waiting for the ledger"
	case h.Paused:
		state = "intake paused (sqsonce flow status)"
	}
	return fmt.Sprintf("%s; %d in flight; %d completed, %d duplicates, %d retried, %d dead-lettered",
		state, h.InFlight, s.Completed, s.Duplicates, s.Retried, s.DeadLettered)
}
