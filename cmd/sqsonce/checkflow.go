package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// checkFlowSettings prints what flow control will do with cfg: the mode,
// the scope, the trip and the probes, the limits and the partitions; and
// warns of a rate that cannot start a full receive within the visibility
// timeout.
func checkFlowSettings(c *checker, cfg Config) {
	f := cfg.Flow
	scope := flowScope(cfg)
	switch f.Mode {
	case string(worker.FlowOff):
		c.line("ok", "flow", "off (flow.mode): no pause and no limits; every failure goes the back-off's way to the dead-letter queue")
		return
	case string(worker.FlowObserve):
		c.line("ok", "flow", "observe (flow.mode): what the pause and the limits would do is logged and counted (sqsonce_flow_observed_total), not done; scope %q", scope)
	default:
		c.line("ok", "flow", "on; scope %q (its pause and limits hold for every worker sharing the ledger)", scope)
	}
	if f.Pause {
		c.line("ok", "flow pause", "after %d counted errors (%s) within %v from %d keys, %s of the attempts that ended, and no success; then one probe at a time, at most %v apart",
			f.TripFailures, strings.Join(f.PauseOn, ", "), f.TripWindow, f.TripKeys, percent(f.TripRatio), f.ProbeMax)
	} else {
		c.line("ok", "flow pause", "none (flow.pause = false): during an outage every failure goes the back-off's way to the dead-letter queue")
	}
	shared := cfg.Ledger.Backend != BackendBbolt
	limits := limitText(f.Rate, f.Burst, f.Concurrency, shared)
	if limits == "" {
		limits = "none (flow.rate, flow.concurrency)"
	}
	c.line("ok", "flow limits", "%s", limits)
	for i, p := range f.Partition {
		c.line("ok", "flow partition", "#%d %s: %s for each value; a message without one is under the scope's limits only",
			i+1, partText(p), limitText(p.Rate, max(p.Burst, 1), p.Concurrency, shared))
	}
	vis, batch := cfg.Queue.VisibilityTimeout.Duration, cfg.Queue.MaxMessages
	if f.Rate > 0 && f.Rate*vis.Seconds() < float64(batch) {
		fit := int(math.Floor(f.Rate * vis.Seconds()))
		c.line("warn", "flow rate", "flow.rate %s/s starts %d of a full receive (queue.max_messages %d) within the visibility timeout (%v): "+
			"the rest of each receive waits, held or deferred; raise queue.visibility_timeout to %v, or lower queue.max_messages to %d",
			num(f.Rate), fit, batch, cfg.Queue.VisibilityTimeout, Duration{time.Duration(math.Ceil(float64(batch)/f.Rate)) * time.Second}, max(fit, 1))
	}
}

// checkFlowQueue says what deferring needs of the queue q.
func checkFlowQueue(c *checker, cfg Config, q worker.QueueInfo) {
	if cfg.Flow.Mode == string(worker.FlowOff) || !cfg.Flow.Pause && cfg.Flow.Rate == 0 && len(cfg.Flow.Partition) == 0 {
		return
	}
	if q.FIFO {
		c.line("ok", "flow deferral", "none on a FIFO queue: its messages are never sent again; a group held for a pause or a limit waits, its visibility kept")
		return
	}
	c.line("ok", "flow deferral", "a message that cannot be held any longer (its receives near maxReceiveCount during an outage, a hot partition's excess) is sent again to %s with a delay, "+
		"the original deleted once SQS took the copy: this host needs sqs:SendMessage on that queue (without it, the message stays held and is never deleted)", q.URL)
}

// checkFlowPauses reads the pauses of the scope and its partition values
// in the ledger, and says of each how old it is, warning where its age
// approaches the queue's message retention (retention 0: unknown).
func checkFlowPauses(ctx context.Context, c *checker, cfg Config, retention time.Duration) {
	if cfg.Flow.Mode == string(worker.FlowOff) {
		return
	}
	if cfg.Ledger.Backend == BackendBbolt {
		if _, err := os.Stat(cfg.Ledger.Path); err != nil {
			return // check creates no ledger; a new one has no pause
		}
	}
	l, err := openLedgerAccess(ctx, cfg)
	if err != nil {
		c.line("warn", "flow paused", "cannot read the pauses in the ledger: %v", err)
		return
	}
	defer l.Close()
	scope := flowScope(cfg)
	if sl, ok := l.(sharedLedger); ok && cfg.Flow.Rate > 0 {
		checkRateAgreement(ctx, c, sl, scope, cfg.Flow.Rate, max(cfg.Flow.Burst, 1))
	}
	st, err := readFlowStatus(ctx, l, scope)
	if err != nil {
		c.line("warn", "flow paused", "cannot read the pauses in the ledger: %v", err)
		return
	}
	for _, sp := range st.pauses {
		if sp.doc.Scope != scope && !strings.HasPrefix(sp.doc.Scope, scope+" | ") || !sp.ok {
			continue
		}
		p := sp.pause
		// To the minute once it is one: a pause's age is read in hours.
		age := st.now.Sub(p.Since).Round(time.Second)
		if age >= time.Minute {
			age = age.Round(time.Minute)
		}
		r := describeState(ledger.FlowRead{Doc: sp.doc, Found: true}, p)
		switch {
		case retention > 0 && age >= retention/2:
			c.line("warn", "flow paused", "%q is %s: %v old, approaching the queue's message retention (%v): messages expire in SQS after it, paused or not; "+
				"fix the cause, or `sqsonce flow resume` (`sqsonce flow status` shows it)", sp.doc.Scope, r, age, retention)
		default:
			c.line("warn", "flow paused", "%q is %s: %v old; `sqsonce flow status` shows it, `sqsonce flow resume` ends it", sp.doc.Scope, r, age)
		}
	}
}

// checkRateAgreement compares flow.rate and flow.burst with the limits the
// scope's rate bucket in a shared ledger holds, those of the worker that
// last took its tokens: workers that disagree take turns at setting it.
func checkRateAgreement(ctx context.Context, c *checker, l sharedLedger, scope string, rate float64, burst int) {
	held, heldBurst, found, err := l.BucketLimits(ctx, scope)
	switch {
	case err != nil:
		c.line("warn", "flow rate bucket", "cannot read the rate bucket %q in the ledger: %v", scope, err)
	case !found:
		c.line("ok", "flow rate bucket", "%q: no worker has taken its tokens yet (or it was idle long enough to be swept)", scope)
	case held != rate || heldBurst != burst:
		c.line("warn", "flow rate bucket", "%q holds rate %s/s (burst %d), from the worker that last took its tokens; this configuration says %s/s (burst %d): "+
			"workers that share the scope with different limits take turns at setting it, and the fleet follows neither; give every worker of the scope the same flow.rate and flow.burst",
			scope, num(held), heldBurst, num(rate), burst)
	default:
		c.line("ok", "flow rate bucket", "%q holds rate %s/s (burst %d), as configured", scope, num(held), heldBurst)
	}
}

// checkSample prints the key and the partition values of a sample
// message: body, with attrs, read as the worker would read it on receipt.
// A sample without a key fails; a partition without a value warns.
func checkSample(c *checker, cfg Config, name string, body []byte, attrs map[string]types.MessageAttributeValue) {
	wcfg := workerConfig(cfg, nil)
	keyOf, err := worker.MessageKeyFunc(wcfg.Key)
	if err != nil {
		c.line("fail", "sample", "%v", err)
		return
	}
	key, _, err := keyOf(types.Message{Body: aws.String(string(body)), MessageAttributes: attrs})
	switch {
	case err != nil:
		c.line("fail", "sample key", "%s: %v: the worker would dead-letter it (key.on_missing = %q)", name, err, cfg.Key.OnMissing)
	default:
		c.line("ok", "sample key", "%s: %q", name, key)
	}
	values, err := worker.PartitionValues(wcfg, body, attrs)
	if err != nil {
		c.line("fail", "sample", "%v", err)
		return
	}
	for i, v := range values {
		if v.Missing != nil {
			c.line("warn", "sample partition", "#%d %s: none (%v): under the scope's limits only, in the \"(none)\" partition", i+1, partText(cfg.Flow.Partition[i]), v.Missing)
			continue
		}
		c.line("ok", "sample partition", "#%d %s = %q: limited on its own, as %q", i+1, partText(cfg.Flow.Partition[i]), v.Value, v.Scope)
	}
	if len(values) == 0 {
		c.line("ok", "sample partition", "none configured ([[flow.partition]])")
	}
}

// readSample reads a sample body from path ("-": in), of at most limit
// bytes: a larger one is refused, never cut.
func readSample(path string, in io.Reader, limit int64) ([]byte, error) {
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in = f
	}
	body, err := io.ReadAll(io.LimitReader(in, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > limit {
		name := path
		if path == "-" {
			name = "stdin"
		}
		return nil, fmt.Errorf("%s holds more than %d bytes, more than any body or payload the worker reads (payload.max_size)", name, limit)
	}
	return body, nil
}

// attrFlags is --sample-attribute NAME=VALUE, repeated: string attributes
// of the sample.
type attrFlags map[string]types.MessageAttributeValue

func (a attrFlags) String() string { return "" }

func (a attrFlags) Set(s string) error {
	name, value, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("want NAME=VALUE, got %q", s)
	}
	a[name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(value)}
	return nil
}

// limitText says a rate, burst and concurrency in a few words; "" when
// there is no limit. A concurrency holds across the workers on a shared
// ledger, and in the one process that holds the embedded one.
func limitText(rate float64, burst, conc int, shared bool) string {
	var parts []string
	if rate > 0 {
		parts = append(parts, fmt.Sprintf("rate %s/s (burst %d)", num(rate), burst))
	}
	if conc > 0 && shared {
		parts = append(parts, fmt.Sprintf("concurrency %d across the workers", conc))
	} else if conc > 0 {
		parts = append(parts, fmt.Sprintf("concurrency %d in this worker", conc))
	}
	return strings.Join(parts, ", ")
}

// partText names a partition's part: "pointer /tenant", "attribute Region".
func partText(p FlowPartition) string {
	if p.Pointer != "" {
		return "pointer " + p.Pointer
	}
	return "attribute " + p.Attribute
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func percent(f float64) string { return strconv.FormatFloat(f*100, 'g', 4, 64) + " %" }
