package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/replay"
	"github.com/sqsonce/sqsonce/worker"
)

const replaySynopsis = `Usage: sqsonce replay [--config FILE] [flags]

Move messages from the dead-letter queue back to the queue, so that the
worker runs their operations again. Each message is received, sent to the
target, and deleted from the source only after the send succeeded. Its body
and message attributes are kept, and the numeric attribute SqsonceReplays
counts its replays (SQS allows 10 message attributes: to make room for it,
SqsonceReason is dropped first, then SqsonceSourceMessageId). A message
with 10 attributes of its own besides those is left in the source and
counted as no_room: without the count, --max-replays could not stop it
going round for ever. Move it by hand.

The ledger decides what moves; while a worker runs, replay reaches the
ledger through the worker's socket (otherwise it opens the file, and a
worker that starts meanwhile cannot until replay ends):
  complete     left in the source: the work was done (--drop-complete deletes it)
  failed       reset, permanent or not, so that the worker takes it again; moved
  in_progress  moved: the worker waits for the running claim's lease
  absent       moved
A message whose payload differs from the one its key was claimed with (a
conflict) is left, whatever the ledger says: it is another operation.
Messages without an operation key are left unless --include-keyless.

Messages that are not moved stay in the source. They are held invisible
while replay runs (--hold), so that none is received twice, and made
visible again at the end. On a FIFO source such a message holds back the
rest of its message group until then.

On a FIFO target, MessageGroupId is kept, and MessageDeduplicationId names
the message copied (its MessageId in the source), never the operation: SQS
drops a send whose deduplication id it saw on that queue in the last 5
minutes, and answers it with success all the same, so two dead letters of
one key must not share one. A copy is dropped only when an earlier copy of
the same message was accepted (its delete failed, or the answer to its
send was lost), and that copy is in the target. The original
deduplication id travels in the attribute SqsonceDeduplicationId, so a key
taken from it (key.from = "deduplication_id") stays the same.

The first SIGINT or SIGTERM stops receiving, finishes the moves in hand,
makes every other message visible again, prints the summary and exits 1. A
second signal stops at once; messages in hand come back after --hold.
Delivery stays at least once: if replay dies between a send and its delete,
the message is in both queues, and the ledger answers the second copy as a
duplicate.

The summary ("rate" is measured up to the last move) goes to standard
output; a progress line is drawn on standard error when it is a terminal.
Exit status: 0 when every message was moved or deliberately left, 1 when
some could not be moved, on an error or an interruption, 2 on bad usage.`

// replayTime is a --since or --until flag: an RFC 3339 time, or a duration
// meaning that long before now.
type replayTime struct{ t *time.Time }

func (v replayTime) String() string {
	if v.t == nil || v.t.IsZero() {
		return ""
	}
	return v.t.Format(time.RFC3339)
}

func (v replayTime) Set(s string) error {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		*v.t = t
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("want an RFC 3339 time such as 2026-01-02T15:04:05Z or a duration ago such as 36h")
	}
	*v.t = time.Now().Add(-d)
	return nil
}

// replayFlags names the flag of each replay.Config field, for messages.
var replayFlags = map[string]string{
	"From": "--from", "To": "--to", "Max": "--max", "MaxReplays": "--max-replays", "Rate": "--rate",
	"KeyGlob": "--key", "Since": "--since", "Until": "--until", "Hold": "--hold", "Concurrency": "--concurrency",
}

// replayCommand is `sqsonce replay`: dead letters back to the queue.
func (m *Main) replayCommand(ctx context.Context, args []string) error {
	var c commonFlags
	rc := replay.DefaultConfig()
	var asJSON bool
	fs := m.flagSet("replay", replaySynopsis, &c)
	fs.StringVar(&rc.From, "from", "", "source queue `URL` (default: the dead-letter queue named by the redrive policy of queue.url)")
	fs.StringVar(&rc.To, "to", "", "target queue `URL` (default: queue.url)")
	fs.IntVar(&rc.Max, "max", 0, "move at most `N` messages (0: no limit)")
	fs.IntVar(&rc.MaxReplays, "max-replays", rc.MaxReplays, "leave a message already replayed `N` times (its SqsonceReplays attribute)")
	fs.Float64Var(&rc.Rate, "rate", 0, "move at most `N` messages a second (0: no limit)")
	fs.StringVar(&rc.KeyGlob, "key", "", "move only messages whose operation key matches `GLOB` (path.Match: * and ? do not match /); keyless messages never match")
	fs.Var(replayTime{&rc.Since}, "since", "move only messages sent at or after `TIME`: RFC 3339, or a duration ago such as 24h (SentTimestamp: when the message entered the queue it is in)")
	fs.Var(replayTime{&rc.Until}, "until", "move only messages sent before `TIME`: RFC 3339, or a duration ago")
	fs.BoolVar(&rc.DropComplete, "drop-complete", false, "delete messages whose operation is complete instead of leaving them")
	fs.BoolVar(&rc.IncludeKeyless, "include-keyless", false, "move messages without an operation key as they are (the worker dead-letters them again unless its key configuration changed)")
	fs.BoolVar(&rc.DryRun, "dry-run", false, "report what would move; send, delete and reset nothing")
	fs.DurationVar(&rc.Hold, "hold", rc.Hold, "how long received messages stay invisible while replay runs: longer than the run (1s to 12h)")
	fs.IntVar(&rc.Concurrency, "concurrency", rc.Concurrency, "movers working at once, each receiving, sending and deleting 10 messages at a time (1 to 64)")
	fs.BoolVar(&asJSON, "json", false, "print the summary as one JSON object")
	cfg, log, err := m.parse(fs, &c, args)
	if err != nil {
		return err
	}
	rc.Logger = log
	rc.KeyOf, err = worker.MessageKeyFunc(keyConfig(cfg.Key))
	if err != nil {
		return fmt.Errorf("key: %v: %w", err, ErrInvalidConfig)
	}
	if rc.To == "" {
		rc.To = cfg.Queue.URL
	}
	// The flags are checked before anything of AWS is set up; without
	// --from, the source is found below.
	check := rc
	if check.From == "" {
		check.From = "the dead-letter queue of " + rc.To
	}
	if err := replayUsage(fs.Args(), check.Validate()); err != nil {
		return err
	}
	// A message that points to its payload in S3 is keyed by the object,
	// as the worker keys it; the pointer itself moves unchanged.
	if cfg.Payload.S3 {
		s3c, err := newS3Client(ctx, cfg)
		if err != nil {
			return err
		}
		if rc.KeyOf, err = worker.MessageKeyFuncS3Buckets(keyConfig(cfg.Key), s3c, int64(cfg.Payload.MaxSize), cfg.Payload.allowedBuckets()); err != nil {
			return fmt.Errorf("key: %v: %w", err, ErrInvalidConfig)
		}
	}

	client, err := newSQSClient(ctx, cfg.Queue)
	if err != nil {
		return err
	}
	if rc.From == "" {
		q, err := worker.InspectQueue(ctx, client, cfg.Queue.URL)
		if err != nil {
			return err
		}
		if q.DLQURL == "" {
			return fmt.Errorf("queue %s has no redrive policy, so no dead-letter queue to replay from: give --from", cfg.Queue.URL)
		}
		rc.From = q.DLQURL
	}
	source, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       &rc.From,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		return fmt.Errorf("source queue %s: %w", rc.From, err)
	}
	backlog, _ := strconv.Atoi(source.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	target, err := worker.InspectQueue(ctx, client, rc.To)
	if err != nil {
		return fmt.Errorf("target queue: %w", err)
	}
	rc.ToFIFO = target.FIFO
	led, err := openLedgerAccess(ctx, cfg)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	defer led.Close()
	r, err := replay.New(rc, client, led)
	if err != nil {
		return replayUsage(nil, err)
	}

	log.Info("replay starting", "from", rc.From, "to", rc.To, "messages", backlog, "ledger", led.Via(), "dry_run", rc.DryRun)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case sig := <-m.Signals:
			log.Warn("stop signal: finishing the moves in hand and giving the other messages back", "signal", sig.String())
			r.Stop()
		case <-done:
			return
		}
		select {
		case sig := <-m.Signals:
			log.Warn("second stop signal: stopping at once; messages in hand come back after --hold", "signal", sig.String())
			cancel()
		case <-done:
		}
	})
	if isTerminal(m.Stderr) {
		wg.Go(func() { replayProgress(m.Stderr, r, backlog, done) })
	}
	sum, err := r.Run(ctx)
	close(done)
	wg.Wait()
	if perr := m.printReplaySummary(sum, rc, asJSON); perr != nil && err == nil {
		err = perr
	}
	return err
}

// replayUsage is the usage error for unexpected arguments and for what
// replay.Config.Validate found wrong, in the words of the flags; nil when
// both are fine. Other errors are returned as they are.
func replayUsage(rest []string, invalid error) error {
	var problems []string
	if len(rest) > 0 {
		problems = append(problems, fmt.Sprintf("unexpected arguments %q", rest))
	}
	if invalid != nil {
		errs := []error{invalid}
		if joined, ok := invalid.(interface{ Unwrap() []error }); ok {
			errs = joined.Unwrap()
		}
		for _, err := range errs {
			var fe *replay.FieldError
			if !errors.As(err, &fe) {
				return err
			}
			name := fe.Field
			if flag, ok := replayFlags[name]; ok {
				name = flag
			}
			problems = append(problems, name+" "+fe.Problem)
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return usageErrorf("%s", strings.Join(problems, "; "))
}

func (m *Main) printReplaySummary(s replay.Summary, rc replay.Config, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(m.Stdout).Encode(s)
	}
	line := s.Line(rc.From, rc.To)
	_, err := fmt.Fprintln(m.Stdout, line)
	return err
}

// replayProgress redraws one status line on a terminal a few times a
// second until done closes, then clears it.
func replayProgress(w io.Writer, r *replay.Replayer, backlog int, done <-chan struct{}) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			fmt.Fprint(w, "\r\x1b[K")
			return
		case <-t.C:
		}
		s := r.Progress()
		eta := "?"
		if left := int64(backlog) - s.Handled(); left <= 0 {
			eta = "0s"
		} else if per := float64(s.Handled()) / max(s.Seconds, 1e-9); per > 0 {
			eta = time.Duration(float64(left) / per * float64(time.Second)).Round(time.Second).String()
		}
		verb := "moved"
		if s.DryRun {
			verb = "would move"
		}
		fmt.Fprintf(w, "\rreplay: %s %d, left %d (complete %d, keyless %d, max replays %d, filtered %d, conflicts %d), dropped %d, failed %d, no room %d, %.0f/s, ETA %s\x1b[K",
			verb, s.Moved, s.Skipped(), s.SkippedComplete, s.SkippedKeyless, s.SkippedMaxReplays, s.SkippedFiltered, s.SkippedConflict,
			s.DroppedComplete, s.Failed, s.NoRoom, s.Rate, eta)
	}
}
