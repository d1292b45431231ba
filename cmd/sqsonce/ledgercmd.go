package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sqsonce/sqsonce/internal/textcut"
	"github.com/sqsonce/sqsonce/ledger"
)

const ledgerUsage = `Usage: sqsonce ledger <command> [--config FILE] [flags] [args]

Answer "what happened to operation X?" and manage the ledger, on any
backend (ledger.backend).

Commands:
  init           create the ledger's table (postgres, dynamodb) or file (bbolt) if missing;
                 safe to run again and from several hosts at once
  get KEY        the record of one operation (--json for JSON)
  list           records (in key order, but on dynamodb): --state S, --prefix P,
                 --limit N (default 100, 0 = all), --json
  stats          counts by state, oldest in-progress age; with bbolt also the file size and
                 the records expiring within 24h (--json)
  forget KEY     delete a record so that the operation runs again on its next delivery
                 (asks on a terminal; --yes otherwise)
  reset KEY      make a failed operation, permanent or not, run again on its next delivery
  export         every record as JSON lines, for audits and for moving to a shared ledger
  compact        bbolt: rewrite the file to reclaim the space of removed records (not while a worker runs)

With bbolt, get, list, stats, export, forget and reset work while a worker
runs: they reach its ledger through the socket it serves beside the file
(ledger.path + ".sock"). A shared ledger they reach directly.

SIGTERM or SIGINT stops init, get, list, stats, export, forget and reset at
once, also while their output is blocked (a pipe whose reader stopped
reading): they exit 1, a listing saying that its output was cut short. A
compaction that started runs to its end.
`

// ledgerCommand is `sqsonce ledger`.
func (m *Main) ledgerCommand(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(m.Stdout, ledgerUsage)
		if len(args) == 0 {
			return usageErrorf("missing ledger command")
		}
		return nil
	}
	sub, rest := args[0], args[1:]
	var c commonFlags
	fs := m.flagSet("ledger "+sub, ledgerUsage, &c)
	asJSON := fs.Bool("json", false, "print JSON")
	state := fs.String("state", "", "list: only records in this state (in_progress, complete, failed)")
	prefix := fs.String("prefix", "", "list: only keys with this prefix")
	limit := fs.Int("limit", 100, "list: at most this many records (0 = all)")
	yes := fs.Bool("yes", false, "forget: do not ask for confirmation")
	cfg, _, err := m.parse(fs, &c, rest)
	if err != nil {
		return err
	}
	wantArgs := map[string]int{"init": 0, "get": 1, "forget": 1, "reset": 1, "list": 0, "stats": 0, "export": 0, "compact": 0}
	n, ok := wantArgs[sub]
	if !ok {
		return usageErrorf("unknown ledger command %q (want init, get, list, stats, forget, reset, export or compact)", sub)
	}
	if fs.NArg() != n {
		return usageErrorf("ledger %s takes %d argument(s), got %q", sub, n, fs.Args())
	}
	if *limit < 0 {
		return usageErrorf("--limit %d: want 0 or more", *limit)
	}
	var filter ledger.Filter
	if *state != "" {
		if filter.State, err = ledger.ParseState(*state); err != nil {
			return usageErrorf("--state: %v", err)
		}
	}
	filter.Prefix = *prefix

	// main catches SIGTERM and SIGINT for every command: here the first
	// ends the command, also while its output is blocked (a listing piped
	// to a reader that stopped reading). A compaction that started runs to
	// its end: stopped half way, it would leave its copy behind.
	ctx, cancel := context.WithCancel(ctx)
	var signaled os.Signal
	var watch sync.WaitGroup
	defer watch.Wait()
	defer cancel()
	watch.Go(func() {
		select {
		case signaled = <-m.Signals:
			cancel()
		case <-ctx.Done():
		}
	})

	if sub == "init" {
		done, err := initStore(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Fprintln(m.Stdout, done)
		return nil
	}
	if sub == "compact" {
		if cfg.Ledger.Backend != BackendBbolt {
			return usageErrorf("compact rewrites a bbolt file; ledger.backend is %q, whose store reclaims space itself", cfg.Ledger.Backend)
		}
		before, after, err := ledger.Compact(cfg.Ledger.Path, 300*time.Millisecond)
		if errors.Is(err, ledger.ErrLocked) {
			// Said once: ErrLocked's own words and Open's say it again.
			return fmt.Errorf("cannot compact %s while another sqsonce process (a running worker) has it open: stop the worker, then compact", cfg.Ledger.Path)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(m.Stdout, "compacted %s: %d -> %d bytes\n", cfg.Ledger.Path, before, after)
		return nil
	}
	if cfg.Ledger.Backend == BackendBbolt {
		if _, err := os.Stat(cfg.Ledger.Path); err != nil {
			return fmt.Errorf("ledger %s: %w", cfg.Ledger.Path, err)
		}
	}
	out := newCutWriter(m.Stdout, ctx.Done())
	defer out.Close()
	err = m.ledgerSub(ctx, sub, fs, cfg, filter, out, *asJSON, *limit, *yes)
	if ctx.Err() != nil {
		watch.Wait()
		switch {
		case signaled == nil:
		case sub == "forget" || sub == "reset":
			err = fmt.Errorf("%s stopped by a signal (%v): whether it was done, `sqsonce ledger get %s` tells", sub, signaled, fs.Arg(0))
		default:
			err = fmt.Errorf("%s cut short by a signal (%v): its output is incomplete", sub, signaled)
		}
	}
	return err
}

// ledgerSub runs the ledger command sub, writing to out, on a ledger that
// it opens.
func (m *Main) ledgerSub(ctx context.Context, sub string, fs *flag.FlagSet, cfg Config, filter ledger.Filter, out io.Writer, asJSON bool, limit int, yes bool) error {
	l, err := openLedgerAccess(ctx, cfg)
	if err != nil {
		return err
	}
	defer l.Close()

	switch sub {
	case "get":
		rec, err := l.Get(ctx, fs.Arg(0))
		if err != nil {
			return err
		}
		if asJSON {
			return json.NewEncoder(out).Encode(ledger.ToJSON(rec))
		}
		printRecord(out, rec)
	case "list":
		return m.listRecords(ctx, out, l, filter, limit, asJSON)
	case "export":
		enc := json.NewEncoder(out)
		return l.ForEach(ctx, ledger.Filter{}, func(r ledger.Record) error { return enc.Encode(ledger.ToJSON(r)) })
	case "stats":
		return m.printStats(ctx, out, l, asJSON)
	case "reset":
		key := fs.Arg(0)
		rec, err := l.Get(ctx, key)
		if err != nil {
			return err
		}
		if err := l.Reset(ctx, key); err != nil {
			return err
		}
		kind := "failed"
		if rec.Permanent {
			kind = "failed permanently"
		}
		fmt.Fprintf(out, "reset %q (was %s after %d attempt(s)) via the %s: its next delivery runs it\n", key, kind, rec.Attempts, l.Via())
	case "forget":
		key := fs.Arg(0)
		rec, err := l.Get(ctx, key)
		was := ""
		switch {
		case errors.Is(err, ledger.ErrCorrupt):
			// Forgetting is the way out for a damaged record.
			was = "unreadable"
		case err != nil:
			return err
		default:
			was = fmt.Sprintf("%s after %d attempt(s)", rec.State, rec.Attempts)
			if rec.State == ledger.StateInProgress {
				was = fmt.Sprintf("%s, claimed after %d attempt(s)", rec.State, rec.Attempts)
			}
		}
		if !yes {
			if !isTerminal(m.Stdin) {
				return usageErrorf("forget %q: not a terminal to ask on; pass --yes", key)
			}
			fmt.Fprintf(out, "%q is %s; forgetting it lets its next delivery run the work again. Forget it? [y/N] ", key, was)
			answer, _ := bufio.NewReader(m.Stdin).ReadString('\n')
			if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
				return errors.New("not forgotten")
			}
		}
		if err := l.Forget(ctx, key); err != nil {
			return err
		}
		fmt.Fprintf(out, "forgot %q (was %s) via the %s\n", key, was, l.Via())
	}
	return nil
}

func (m *Main) listRecords(ctx context.Context, out io.Writer, l ledgerAccess, f ledger.Filter, limit int, asJSON bool) error {
	errLimit := errors.New("limit")
	var tw *tabwriter.Writer
	enc := json.NewEncoder(out)
	if !asJSON {
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tSTATE\tATTEMPTS\tUPDATED\tLAST ERROR")
	}
	n := 0
	err := l.ForEach(ctx, f, func(r ledger.Record) error {
		if limit > 0 && n == limit {
			return errLimit
		}
		n++
		if asJSON {
			return enc.Encode(ledger.ToJSON(r))
		}
		state := r.State.String()
		if r.Permanent {
			state += " (permanent)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.Key, state, r.Attempts, r.Updated.UTC().Format(time.RFC3339), oneLine(r.LastError, 60))
		return nil
	})
	if tw != nil {
		if ferr := tw.Flush(); ferr != nil {
			return ferr
		}
	}
	if errors.Is(err, errLimit) {
		fmt.Fprintf(m.Stderr, "(first %d shown; --limit 0 for all)\n", limit)
		return nil
	}
	return err
}

func (m *Main) printStats(ctx context.Context, out io.Writer, l ledgerAccess, asJSON bool) error {
	st, err := l.Stats(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	// The embedded ledger is a file of this host: walking it is cheap. A
	// shared table is not walked for a count (a scan of every record).
	local := l.Via() == "file" || l.Via() == "worker socket"
	soon := 0
	if local {
		if err := l.ForEach(ctx, ledger.Filter{}, func(r ledger.Record) error {
			if r.Expires.Before(now.Add(24 * time.Hour)) {
				soon++
			}
			return nil
		}); err != nil {
			return err
		}
	}
	var oldest time.Duration
	if !st.OldestInProgress.IsZero() {
		oldest = now.Sub(st.OldestInProgress).Round(time.Second)
	}
	if asJSON {
		fields := map[string]any{
			"in_progress": st.InProgress, "complete": st.Complete, "failed": st.Failed,
			"failed_permanently": st.FailedPermanently, "oldest_in_progress_seconds": oldest.Seconds(), "via": l.Via(),
		}
		if local {
			fields["file_size"], fields["expiring_24h"] = st.FileSize, soon
		}
		return json.NewEncoder(out).Encode(fields)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "in_progress\t%d\n", st.InProgress)
	fmt.Fprintf(tw, "complete\t%d\n", st.Complete)
	fmt.Fprintf(tw, "failed\t%d\n", st.Failed)
	fmt.Fprintf(tw, "failed permanently\t%d\n", st.FailedPermanently)
	fmt.Fprintf(tw, "oldest in progress\t%v\n", oldest)
	if local {
		fmt.Fprintf(tw, "expiring within 24h\t%d\n", soon)
		fmt.Fprintf(tw, "file size\t%d bytes\n", st.FileSize)
	}
	fmt.Fprintf(tw, "read via\t%s\n", l.Via())
	return tw.Flush()
}

func printRecord(w io.Writer, r ledger.Record) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	state := r.State.String()
	if r.Permanent {
		state += " (permanent: replays and redeliveries are not run until it is reset)"
	}
	row("key", r.Key)
	row("state", state)
	if r.State == ledger.StateInProgress {
		row("attempts", fmt.Sprintf("%d before the current claim's (counted when it ends)", r.Attempts))
	} else {
		row("attempts", r.Attempts)
	}
	if r.State == ledger.StateInProgress {
		row("owner", r.Owner)
		row("lease expires", ts(r.LeaseExpiry))
	}
	row("first seen", ts(r.FirstSeen))
	row("last attempt", ts(r.Claimed))
	row("completed", ts(r.Completed))
	row("updated", ts(r.Updated))
	row("expires", ts(r.Expires))
	row("last message id", r.MessageID)
	if r.LastError != "" {
		row("last error", oneLine(r.LastError, 500))
	}
	if len(r.Result) > 0 {
		row("result", oneLine(string(r.Result), 500))
	}
	row("payload fingerprint", fmt.Sprintf("%x", r.Fingerprint))
	tw.Flush()
}

// oneLine puts s on one line and cuts it to n bytes, marking the cut.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(strings.ToValidUTF8(s, "\uFFFD")), " ")
	if strings.ContainsFunc(s, notPrint) {
		// Text from the ledger goes to a terminal: a control or format
		// character (an escape sequence, a bidirectional override) is
		// shown as Go writes it, not acted on.
		var b strings.Builder
		for _, r := range s {
			if notPrint(r) {
				b.WriteString(strings.Trim(strconv.QuoteRune(r), "'"))
			} else {
				b.WriteRune(r)
			}
		}
		s = b.String()
	}
	return textcut.Mark(s, n, "…")
}

// notPrint reports whether r is not printable: a control or format
// character, or one Go would escape.
func notPrint(r rune) bool { return !strconv.IsPrint(r) }

// isTerminal reports whether the reader or writer v is a terminal.
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
