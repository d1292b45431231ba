package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	"golang.org/x/sys/unix"

	"github.com/sqsonce/sqsonce/ingest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// checker prints one line per check and remembers whether any failed, and
// whether a failure was of the configuration.
type checker struct {
	tw      *tabwriter.Writer
	failed  bool
	invalid bool // a failure that `sqsonce run` would refuse to start on (exit status 2)
}

func (c *checker) line(level, what, format string, args ...any) {
	if level == "fail" {
		c.failed = true
	}
	fmt.Fprintf(c.tw, "%s\t%s\t%s\n", level, what, fmt.Sprintf(format, args...))
}

// fail prints a failed check of what, err saying why; an err of the
// configuration (ErrInvalidConfig, errUsage) makes check exit with status 2,
// as `sqsonce run` would.
func (c *checker) fail(what string, err error) {
	if errors.Is(err, ErrInvalidConfig) || errors.Is(err, errUsage) {
		c.invalid = true
	}
	c.line("fail", what, "%v", err)
}

// result is check's error: nil when no check failed; one that exits with
// status 2 when the configuration is not valid, else one that exits 1.
func (c *checker) result() error {
	c.tw.Flush()
	switch {
	case c.invalid:
		return fmt.Errorf("some checks failed, the configuration among them: %w", ErrInvalidConfig)
	case c.failed:
		return errors.New("some checks failed")
	}
	return nil
}

// checkCommand is `sqsonce check`: configuration and reachability before a
// deployment.
func (m *Main) checkCommand(ctx context.Context, args []string) error {
	var cf commonFlags
	fs := m.flagSet("check", "Usage: sqsonce check [--config FILE] [--sample FILE [--sample-attribute NAME=VALUE]...]\n\nCheck the configuration and everything the worker will need: the region\nand where it comes from, credentials, the queue and its dead-letter queue,\ntimeouts, retention, the ledger, the handler and which of sqsonce's own\nsecrets an exec command gets, where payloads in S3 are read from (endpoint,\nregion, payload.buckets) and payload.bucket's permissions, the OTEL_\ntracing variables, where run and ingest serve their admin listeners\n(admin.listen, ingest.admin_listen), the console's exposure (its address,\nwrites and credential), files of secrets open to other users, with\n[[ingest.source]] tables each source's secrets, keys and queue, and flow\ncontrol: its scope, pause, limits and partitions, a rate too low for a\nfull receive, what deferring needs, a pause in the ledger (its age\nagainst the queue's retention) and, on a shared ledger, the limits its\nrate bucket holds against flow.rate and flow.burst. Prints one line per check (ok, warn or\nfail) and exits 2 if the configuration is not valid (as `sqsonce run`\nwould refuse it: the file, the environment, the region, the OTEL_\nvariables, the console's credential), 1 if another check fails. It creates\nnothing: neither the ledger nor its directory (the check of payload.bucket\nputs an empty object there and deletes it at once).\n\nWith --sample FILE (\"-\": stdin) it checks the configuration alone and\nprints what the worker would make of a message with that body (and the\nstring attributes of --sample-attribute): its key, and each partition's\nvalue or why it has none. Nothing is received or sent.", &cf)
	sample := fs.String("sample", "", "a message body to read as the worker would: its key and partition values (\"-\": stdin)")
	attrs := attrFlags{}
	fs.Var(attrs, "sample-attribute", "with --sample: a string attribute of the message, NAME=VALUE (repeat for more)")
	c := &checker{tw: tabwriter.NewWriter(m.Stdout, 0, 0, 2, ' ', 0)}
	defer c.tw.Flush()
	cfg, _, err := m.parse(fs, &cf, args)
	if errors.Is(err, ErrInvalidConfig) {
		c.fail("config", err)
		return c.result()
	}
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected arguments %q", fs.Args())
	}
	if given := false; *sample == "" {
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == "sample" })
		if given {
			return usageErrorf("--sample needs a file (or - for stdin), got \"\"")
		}
	}
	if *sample == "" && len(attrs) > 0 {
		return usageErrorf("--sample-attribute needs --sample")
	}
	c.line("ok", "config", "parsed and valid")
	checkFlowSettings(c, cfg)
	if *sample != "" {
		body, err := readSample(*sample, m.Stdin, max(int64(cfg.Payload.MaxSize), 1<<20))
		if err != nil {
			return fmt.Errorf("--sample: %w", err)
		}
		checkSample(c, cfg, *sample, body, attrs)
		return c.result()
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	// Without a region, or without credentials, nothing of AWS can be
	// asked; the rest is checked. check reports what it finds itself: the
	// AWS SDK's own warnings (falling back to IMDSv1, say) would only
	// interleave with its lines.
	quiet := awsconfig.WithLogger(logging.Nop{})
	region, from := cfg.Queue.region()
	awsCfg, err := loadAWSConfig(ctx, region, quiet)
	var client *sqs.Client
	var queue worker.QueueInfo
	var queueOK bool
	switch {
	case errors.Is(err, ErrInvalidConfig):
		c.fail("region", err)
	case err != nil:
		c.fail("credentials", err)
	default:
		c.line("ok", "region", "%s (from %s)", awsCfg.Region, from)
		if _, err := awsCfg.Credentials.Retrieve(ctx); err != nil {
			c.fail("credentials", err)
			break
		}
		c.line("ok", "credentials", "found in the AWS default chain")
		if client, err = newSQSClient(ctx, cfg.Queue, quiet); err != nil {
			return err
		}
		queue, queueOK = checkQueue(ctx, c, cfg, client)
	}
	if queueOK {
		checkFlowQueue(c, cfg, queue)
	}

	vis, timeout, grace := cfg.Queue.VisibilityTimeout.Duration, cfg.Handler.Timeout.Duration, cfg.Shutdown.Grace.Duration
	switch {
	case vis < 6*time.Second:
		c.line("warn", "timeouts", "queue.visibility_timeout %v: the heartbeat extends it every %v, little margin for a slow SQS call", vis, vis/3)
	default:
		c.line("ok", "timeouts", "visibility %v, extended every %v while a handler runs (handler.timeout %v)", vis, vis/3, timeout)
	}
	// An exec command that outlasts handler.timeout gets SIGTERM, and
	// SIGKILL worker.DefaultKillGrace later: a stop lets it end by itself
	// only when the grace covers both.
	switch {
	case grace < timeout:
		c.line("warn", "shutdown", "shutdown.grace %v is shorter than handler.timeout %v: a stop may cut running work short (it is retried, not lost)", grace, timeout)
	case cfg.Handler.Type == HandlerExec && grace < timeout+worker.DefaultKillGrace:
		c.line("warn", "shutdown", "shutdown.grace %v is shorter than handler.timeout %v plus the %v an exec command has between SIGTERM and SIGKILL: a stop may kill a command that overran (it is retried, not lost)", grace, timeout, worker.DefaultKillGrace)
	}

	if cfg.Ledger.Backend == BackendBbolt {
		checkLedgerPath(c, cfg.Ledger.Path)
	} else {
		checkSharedLedger(ctx, c, cfg)
	}
	checkFlowPauses(ctx, c, cfg, queue.Retention)

	checkAdmin(c, cfg)

	level, exposure := consoleExposure(cfg.Console)
	c.line(level, "console", "%s", exposure)
	if cfg.Console.Auth != ConsoleAuthNone {
		if _, err := consoleAuth(cfg.Console, m.LookupEnv); err != nil {
			c.fail("console", err)
		}
	}
	for _, e := range exposedSecrets(slices.Concat(consoleSecretFiles(cfg), ingestSecretFiles(cfg))) {
		c.line("warn", "secret file", "%s", e)
	}

	switch cfg.Handler.Type {
	case HandlerExec:
		if p, err := exec.LookPath(cfg.Handler.Command[0]); err != nil {
			c.line("fail", "handler", "%v", err)
		} else {
			c.line("ok", "handler", "%s is executable", p)
		}
		checkHandlerEnv(c, cfg, m.LookupEnv)
	case HandlerHTTP:
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, cfg.Handler.URL, nil)
		if err == nil {
			var resp *http.Response
			if resp, err = (&http.Client{Timeout: 5 * time.Second}).Do(req); err == nil {
				resp.Body.Close()
				c.line("ok", "handler", "%s answers (HEAD: %s)", cfg.Handler.URL, resp.Status)
			}
		}
		if err != nil {
			c.line("fail", "handler", "%s does not answer: %v", cfg.Handler.URL, err)
		}
	}

	checkTracing(c, m.LookupEnv)
	if client != nil {
		checkPayload(ctx, c, cfg, awsCfg.Region)
		if len(cfg.Ingest.Source) > 0 {
			checkIngest(ctx, c, cfg, client, m.LookupEnv)
		}
	}
	return c.result()
}

// checkAdmin says where `sqsonce run` and `sqsonce ingest` serve their
// admin listeners, and warns when both would take one address, where the
// second to start would fail.
func checkAdmin(c *checker, cfg Config) {
	run, ing := cfg.runAdmin(), cfg.ingestAdmin()
	if sameAddress(run.listen, ing.listen) {
		c.line("warn", "admin", "%s %s and %s %s take one address: sqsonce run and sqsonce ingest cannot both run with this configuration; give each its own port",
			run.key, run.listen, ing.key, ing.listen)
		return
	}
	where := func(a adminListener) string {
		if a.listen == "" {
			return "nowhere (" + a.key + " is empty)"
		}
		return a.listen + " (" + a.key + ")"
	}
	c.line("ok", "admin", "sqsonce run serves /metrics, /healthz and /readyz on %s, sqsonce ingest on %s", where(run), where(ing))
}

// sameAddress reports whether listeners on a and b (host:port) would take
// one address: the same port, not 0, and the same host or a host of all
// interfaces on either side.
func sameAddress(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false
	}
	wildcard := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	local := func(h string) string {
		if h == "localhost" {
			return "127.0.0.1"
		}
		return h
	}
	return wildcard(ha) || wildcard(hb) || local(ha) == local(hb)
}

// checkHandlerEnv says which of sqsonce's own secrets that are set the
// exec handler's command gets (those handler.env names one by one: a
// warning) and which it does not.
func checkHandlerEnv(c *checker, cfg Config, lookupEnv func(string) (string, bool)) {
	var passed, withheld []string
	for _, name := range ownSecrets(cfg) {
		if v, ok := lookupEnv(name); !ok || v == "" {
			continue
		}
		if worker.EnvInherits(cfg.Handler.envPatterns(), ownSecrets(cfg), name) {
			passed = append(passed, name)
		} else {
			withheld = append(withheld, name)
		}
	}
	if len(passed) > 0 {
		c.line("warn", "handler env", "the command gets sqsonce's own secrets %s, which handler.env names: remove those it does not need", strings.Join(passed, ", "))
	}
	if len(withheld) > 0 {
		c.line("ok", "handler env", "the command does not get sqsonce's own secrets %s (name one in handler.env to pass it)", strings.Join(withheld, ", "))
	}
}

// checkQueue checks the queue, its dead-letter queue, and the ledger's
// retention against their message retention; it returns what it found of
// the queue, and false when it could not read it.
func checkQueue(ctx context.Context, c *checker, cfg Config, client *sqs.Client) (worker.QueueInfo, bool) {
	q, err := worker.InspectQueue(ctx, client, cfg.Queue.URL)
	if err != nil {
		c.line("fail", "queue", "%v", err)
		return worker.QueueInfo{}, false
	}
	kind := "standard"
	if q.FIFO {
		kind = "FIFO"
	}
	c.line("ok", "queue", "%s exists (%s, message retention %v)", q.URL, kind, q.Retention)
	if q.DLQURL == "" {
		c.line("warn", "dead-letter queue", "no redrive policy: failed work would be retried until the message retention ends, and permanent failures stay in the queue")
	} else {
		c.line("ok", "dead-letter queue", "%s after %d receives (retention %v)", q.DLQURL, q.MaxReceiveCount, q.DLQRetention)
	}
	if need := q.Retention + q.DLQRetention; cfg.Ledger.Retention.Duration < need {
		c.line("warn", "retention", "ledger.retention %v is shorter than the queue's plus the dead-letter queue's message retention (%v): a late delivery or replay could run an operation again", cfg.Ledger.Retention, need)
	} else {
		c.line("ok", "retention", "ledger.retention %v covers the queues' %v", cfg.Ledger.Retention, need)
	}
	return q, true
}

// checkIngest checks what `sqsonce ingest` will need: each source's
// secrets, its configuration with them, and its queue; and it says how each
// source makes its keys, and which sources share a key space.
func checkIngest(ctx context.Context, c *checker, cfg Config, client *sqs.Client, lookupEnv func(string) (string, bool)) {
	icfg, err := ingestConfig(cfg, lookupEnv, nil)
	if err != nil {
		c.fail("ingest", err)
		return
	}
	if err := icfg.Validate(); err != nil {
		for _, line := range plainIngestErrors(err) {
			c.line("fail", "ingest", "%s", line)
		}
		return
	}
	for _, src := range icfg.Sources {
		out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &src.QueueURL,
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameFifoQueue}})
		switch {
		case err != nil:
			c.line("fail", "ingest "+src.Name, "queue %s: %v", src.QueueURL, err)
		case src.GroupPointer != "" && out.Attributes[string(types.QueueAttributeNameFifoQueue)] != "true":
			c.line("fail", "ingest "+src.Name, "group_pointer is for FIFO queues, and %s is a standard queue", src.QueueURL)
		default:
			keys, _ := src.KeyFormat() // valid: Validate passed
			c.line("ok", "ingest "+src.Name, "POST %s, verify %s (%d secrets), key %s, to %s", src.Path, src.Verify.Scheme, len(src.Verify.Secrets), keys, src.QueueURL)
		}
	}
	for _, shared := range icfg.SharedKeySpaces() {
		c.line("warn", "ingest keys", "%s", shared)
	}
	if cfg.Key.From != KeyFromAttribute || cfg.Key.Attribute != ingest.AttrKey {
		c.line("warn", "ingest key", "the worker reads keys from the %s; the events ingest sends carry theirs in the attribute %s: set key.from = %q and key.attribute = %q so that both agree",
			cfg.Key.From, ingest.AttrKey, KeyFromAttribute, ingest.AttrKey)
	}
}

// checkPayload says where payloads in S3 are read from (the endpoint, the
// region and the buckets allowed), and warns when queue.endpoint names a
// server other than AWS while payloads would still be read from AWS's S3.
// Then it checks what reading payloads and `sqsonce send` will need in
// payload.bucket: s3:GetObject, by asking for an object that does not
// exist (S3 answers NoSuchKey to a reader that may read it, and
// AccessDenied to one that may not, even when the key exists); then
// s3:PutObject and s3:DeleteObject with a marker object that is deleted at
// once. Without a bucket, the producers' buckets are not known.
func checkPayload(ctx context.Context, c *checker, cfg Config, region string) {
	if cfg.Payload.S3 {
		checkPayloadSource(c, cfg, region)
	}
	if cfg.Payload.Bucket == "" {
		return
	}
	s3c, err := newS3Client(ctx, cfg)
	if err != nil {
		c.line("fail", "payload bucket", "%v", err)
		return
	}
	bucket := cfg.Payload.Bucket
	key := ".sqsonce-check-" + randomKey()
	_, err = s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	var noKey *s3types.NoSuchKey
	switch {
	case err == nil:
		c.line("fail", "payload bucket", "%s: reading %s, which should not exist, succeeded", bucket, key)
		return
	case errors.As(err, &noKey):
		c.line("ok", "payload bucket", "%s exists and this host may read it (s3:GetObject)", bucket)
	default:
		c.line("fail", "payload bucket", "%s: %s", bucket, s3Problem(err, "s3:GetObject"))
		return
	}
	_, err = s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: strings.NewReader(""), ContentLength: aws.Int64(0)})
	if err != nil {
		c.line("fail", "payload send", "%s: %s: `sqsonce send` cannot put a large body there", bucket, s3Problem(err, "s3:PutObject"))
		return
	}
	if _, err = s3c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &key}); err != nil {
		level := "warn"
		if cfg.Payload.DeleteObjects {
			level = "fail"
		}
		c.line(level, "payload delete", "%s: %s: the empty object %s is left behind; payload.delete_objects needs it", bucket, s3Problem(err, "s3:DeleteObject"), key)
	}
	c.line("ok", "payload send", "this host may put large bodies into %s (s3:PutObject)", bucket)
}

// checkPayloadSource says where payloads are read from: see checkPayload.
func checkPayloadSource(c *checker, cfg Config, region string) {
	p := cfg.Payload
	where := fmt.Sprintf("AWS's S3 in %s", region)
	if p.Endpoint != "" {
		where = fmt.Sprintf("%s (payload.endpoint, path-style, region %s)", p.Endpoint, region)
	}
	buckets := p.allowedBuckets()
	switch {
	case len(buckets) == 0:
		c.line("ok", "payload", "no bucket is allowed: a message that points to its payload in S3 is dead-lettered (list the producers' buckets in payload.buckets)")
		return
	case slices.Equal(buckets, []string{worker.AnyBucket}):
		also := ""
		if p.DeleteObjects {
			also = ", and its object deleted (payload.delete_objects)"
		}
		c.line("warn", "payload", "read from %s, from any bucket a message names (payload.buckets = [\"*\"]) with this host's credentials%s: list the producers' buckets instead", where, also)
	default:
		c.line("ok", "payload", "read from %s, from %s only (payload.buckets)", where, strings.Join(buckets, ", "))
	}
	if cfg.Queue.Endpoint != "" && !awsHost(cfg.Queue.Endpoint) && p.Endpoint == "" {
		c.line("warn", "payload endpoint", "queue.endpoint sends the SQS calls to %s, but payload.endpoint is not set: payloads are read from AWS's S3 in %s, not from that server; set payload.endpoint to the S3-compatible server that holds them", cfg.Queue.Endpoint, region)
	}
	if p.Bucket != "" && !slices.Contains(buckets, p.Bucket) && !slices.Equal(buckets, []string{worker.AnyBucket}) {
		c.line("warn", "payload bucket", "payload.bucket %s, where `sqsonce send` puts large bodies, is not in payload.buckets: the worker dead-letters their messages", p.Bucket)
	}
}

// awsHost reports whether a URL's host is one of AWS's.
func awsHost(rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil {
		return false
	}
	host := strings.ToLower(u.Hostname())
	for _, domain := range []string{".amazonaws.com", ".amazonaws.com.cn", ".api.aws", ".amazonaws.eu"} {
		if strings.HasSuffix(host, domain) {
			return true
		}
	}
	return false
}

// s3Problem says what an S3 error means for check: a permission missing
// (403), a bucket missing, or S3 out of reach.
func s3Problem(err error, permission string) string {
	var status interface{ HTTPStatusCode() int }
	var api smithy.APIError
	switch {
	case errors.As(err, &api) && api.ErrorCode() == "NoSuchBucket":
		return "no such bucket"
	case errors.As(err, &status) && status.HTTPStatusCode() == http.StatusForbidden:
		return "access denied: this host's credentials lack " + permission + " on the bucket"
	case errors.As(err, &status) && status.HTTPStatusCode() > 0:
		return fmt.Sprintf("S3 answered %d: %v", status.HTTPStatusCode(), err)
	}
	return fmt.Sprintf("S3 is unreachable: %v", err)
}

// checkLedgerPath checks that the ledger can be opened for writing and is
// not held by another process, creating nothing: for a file that does not
// exist yet, that its directory, or the nearest of its parents that exists
// (where `sqsonce run` will create the rest), is writable.
func checkLedgerPath(c *checker, path string) {
	// A missing file, or a parent that is a file (ENOTDIR).
	missing := func(err error) bool { return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) }
	if _, err := os.Stat(path); missing(err) {
		dir := filepath.Dir(path)
		parent := dir
		for {
			fi, err := os.Stat(parent)
			if err == nil {
				if !fi.IsDir() {
					c.line("fail", "ledger", "cannot create %s: %s is not a directory", path, parent)
					return
				}
				break
			}
			if !missing(err) || filepath.Dir(parent) == parent {
				c.line("fail", "ledger", "cannot create %s: %v", path, err)
				return
			}
			parent = filepath.Dir(parent)
		}
		if err := unix.Access(parent, unix.W_OK|unix.X_OK); err != nil {
			c.line("fail", "ledger", "cannot create %s: %s is not writable: %v", path, parent, err)
			return
		}
		if parent == dir {
			c.line("ok", "ledger", "%s will be created (its directory is writable)", path)
		} else {
			c.line("ok", "ledger", "%s will be created, with its directory %s (%s is writable)", path, dir, parent)
		}
		return
	}
	db, err := ledger.Open(path, ledger.Options{LockTimeout: 300 * time.Millisecond})
	if err != nil {
		c.line("fail", "ledger", "%v", err)
		return
	}
	st, err := db.Stats(context.Background())
	db.Close()
	if err != nil {
		c.line("fail", "ledger", "%v", err)
		return
	}
	c.line("ok", "ledger", "%s is writable and free (%d records)", path, st.InProgress+st.Complete+st.Failed+st.FailedPermanently)
}

// checkSharedLedger checks that the shared store answers, that its table
// exists with a schema this sqsonce knows, and that this host can read it.
func checkSharedLedger(ctx context.Context, c *checker, cfg Config) {
	st, err := openStore(ctx, cfg, nil)
	if err != nil {
		c.line("fail", "ledger", "%v", err)
		return
	}
	defer st.Close()
	stats, err := st.Stats(ctx)
	if err != nil {
		c.line("fail", "ledger", "%s table %s: %v", cfg.Ledger.Backend, cfg.Ledger.Table, err)
		return
	}
	c.line("ok", "ledger", "%s table %s answers (%d records)", cfg.Ledger.Backend, cfg.Ledger.Table,
		stats.InProgress+stats.Complete+stats.Failed+stats.FailedPermanently)
	if p, ok := st.(worker.Pinger); ok {
		if err := p.Ping(ctx); err != nil {
			c.line("fail", "ledger writes", "%v", err)
		} else {
			c.line("ok", "ledger writes", "this host may write the table (checked without writing)")
		}
	}
	if cfg.Ledger.Backend == BackendDynamoDB {
		checkDynamoDBTTL(ctx, c, cfg)
	}
}

// checkTracing reports what the OTEL_ variables make of tracing: off, on
// (and where spans go), or a variable that would stop sqsonce from
// starting.
func checkTracing(c *checker, lookupEnv func(string) (string, bool)) {
	on, err := tracingOn(lookupEnv)
	switch {
	case err != nil:
		c.fail("tracing", err)
	case !on:
		c.line("ok", "tracing", "off (on with %s=otlp or an OTLP endpoint)", envTracesExporter)
	default:
		to := "the default endpoint, http://localhost:4318"
		for _, name := range []string{envTracesEndpoint, envEndpoint} {
			if v, ok := lookupEnv(name); ok && v != "" {
				to = v + " (" + name + ")"
				break
			}
		}
		c.line("ok", "tracing", "spans exported by OTLP over HTTP to %s", to)
	}
}
