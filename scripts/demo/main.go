// Command demo shows sqsonce at work on a local SQS-compatible server: it
// creates a queue with a dead-letter queue, sends a few hundred deliveries of
// fewer operations (duplicates, some that fail once, one that always fails),
// runs the sqsonce binary with an example handler until the queue is empty,
// stops it with SIGTERM and prints what happened.
//
// With -workers 3 -ledger postgres (or dynamodb) it runs three workers at
// once on one queue, sharing one ledger table, as several hosts would. With
// -ingest it shows webhooks instead: sqsonce ingest in front of a FIFO queue,
// sqsonce run behind it, and scripts/demo/webhooks.sh sending signed
// GitHub, Stripe and Standard Webhooks requests, each twice.
//
// Run it through `make demo` (one worker, the embedded ledger) or `make
// demo-shared` (three workers on PostgreSQL), which build the binary and
// start the servers.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func main() {
	bin := flag.String("bin", "bin/sqsonce", "the sqsonce binary")
	ops := flag.Int("operations", 120, "operations to send")
	copies := flag.Int("copies", 3, "average deliveries per operation")
	workers := flag.Int("workers", 1, "worker processes on the queue (more than one needs a shared -ledger)")
	backend := flag.String("ledger", "bbolt", "ledger backend: bbolt, postgres (SQSONCE_TEST_POSTGRES_URL) or dynamodb (SQSONCE_TEST_DYNAMODB_ENDPOINT)")
	tx := flag.Bool("tx", false, "the transactional demo instead: a Go handler's inserts and the completions in one PostgreSQL transaction, a worker killed in the middle (SQSONCE_TEST_POSTGRES_URL)")
	webhooks := flag.Bool("ingest", false, "the webhook demo instead: sqsonce ingest in front of a FIFO queue, scripts/demo/webhooks.sh sending signed webhooks")
	flag.Parse()
	if *workers > 1 && *backend == "bbolt" {
		fmt.Fprintln(os.Stderr, "demo: several workers need a shared ledger: -ledger postgres or dynamodb")
		os.Exit(2)
	}
	if err := run(*bin, *ops, *copies, *workers, *backend, *webhooks, *tx); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(bin string, ops, copies, workers int, backend string, webhooks, tx bool) error {
	endpoint := os.Getenv("SQSONCE_TEST_SQS_ENDPOINT")
	if endpoint == "" {
		return errors.New("SQSONCE_TEST_SQS_ENDPOINT is not set: run the demo with `make demo`")
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	handler, err := filepath.Abs("scripts/demo/handler.sh")
	if err != nil {
		return err
	}
	ctx := context.Background()
	client := sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("demo", "demo", ""),
	})
	dir, err := os.MkdirTemp("", "sqsonce-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if webhooks {
		return runIngest(ctx, client, bin, endpoint, dir)
	}
	if tx {
		return runTx(ctx, client, bin, endpoint, dir, 3*ops, copies)
	}

	// 1. A queue whose messages go to a dead-letter queue after 4 receives.
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	dlqURL, dlqARN, err := createQueue(ctx, client, "demo-dlq-"+suffix, nil)
	if err != nil {
		return err
	}
	queueURL, _, err := createQueue(ctx, client, "demo-"+suffix, map[string]string{
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":4}`, dlqARN),
	})
	if err != nil {
		return err
	}
	fmt.Printf("queue            %s\ndead-letter queue %s\n", queueURL, dlqURL)

	// 2. The deliveries: every operation once or more, shuffled, as webhook
	// senders, SNS and people clicking twice would deliver them.
	var lines []string
	failOnce := 0
	for i := range ops {
		op := map[string]any{"id": fmt.Sprintf("pay_%04d", i), "amount_cents": 100 + i}
		switch {
		case i == ops-1:
			op["always_fail"] = true
		case i%10 == 3:
			op["fail_once"] = true
			failOnce++
		}
		b, _ := json.Marshal(op)
		n := 1 + rand.IntN(2*copies-1) // 1..2*copies-1, copies on average
		for range n {
			lines = append(lines, string(b))
		}
	}
	rand.Shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
	input := filepath.Join(dir, "deliveries.jsonl")
	if err := os.WriteFile(input, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return err
	}

	// 3. A configuration for the local servers.
	ledgerSection := fmt.Sprintf("path = %q", filepath.Join(dir, "ledger.db"))
	switch backend {
	case "bbolt":
	case "postgres":
		url := os.Getenv("SQSONCE_TEST_POSTGRES_URL")
		if url == "" {
			return errors.New("SQSONCE_TEST_POSTGRES_URL is not set: run the demo with `make demo-shared`")
		}
		ledgerSection = fmt.Sprintf("backend = \"postgres\"\nurl = %q\ntable = \"demo_%s\"", url, suffix)
	case "dynamodb":
		ep := os.Getenv("SQSONCE_TEST_DYNAMODB_ENDPOINT")
		if ep == "" {
			return errors.New("SQSONCE_TEST_DYNAMODB_ENDPOINT is not set: run the demo through scripts/with-dynalite.sh")
		}
		ledgerSection = fmt.Sprintf("backend = \"dynamodb\"\nendpoint = %q\ntable = \"demo_%s\"", ep, suffix)
	default:
		return fmt.Errorf("-ledger %q: want bbolt, postgres or dynamodb", backend)
	}
	config := filepath.Join(dir, "sqsonce.toml")
	err = os.WriteFile(config, fmt.Appendf(nil, `[queue]
url = %q
endpoint = %q
wait_time = "1s"
visibility_timeout = "10s"
pollers = 2

[key]
pointer = "/id"

[ledger]
%s

[handler]
type = "exec"
command = [%q]
concurrency = 16

[retry]
min_backoff = "1s"
max_backoff = "2s"

[admin]
listen = "127.0.0.1:0"
`, queueURL, endpoint, ledgerSection, handler), 0o600)
	if err != nil {
		return err
	}
	env := append(os.Environ(),
		"AWS_ACCESS_KEY_ID=demo", "AWS_SECRET_ACCESS_KEY=demo", "AWS_EC2_METADATA_DISABLED=true",
		"DEMO_STATE_DIR="+dir)

	if backend != "bbolt" {
		init := exec.Command(bin, "ledger", "init", "--config", config)
		init.Env, init.Stderr = env, os.Stderr
		out, err := init.Output()
		if err != nil {
			return fmt.Errorf("sqsonce ledger init: %w", err)
		}
		fmt.Printf("sqsonce ledger init: %s", out)
	}
	send := exec.Command(bin, "send", "--config", config, input)
	send.Env, send.Stderr = env, os.Stderr
	out, err := send.Output()
	if err != nil {
		return fmt.Errorf("sqsonce send: %w", err)
	}
	fmt.Printf("sqsonce send: %s", out)

	// 4. The workers, until the queue is empty and the bad operation is in
	// the dead-letter queue.
	start := time.Now()
	type proc struct {
		cmd *exec.Cmd
		log string
	}
	var procs []proc
	defer func() {
		for _, p := range procs {
			if p.cmd.ProcessState == nil {
				p.cmd.Process.Kill()
				p.cmd.Wait()
			}
		}
	}()
	for i := range workers {
		logPath := filepath.Join(dir, fmt.Sprintf("worker-%d.log", i+1))
		logFile, err := os.Create(logPath)
		if err != nil {
			return err
		}
		defer logFile.Close()
		w := exec.Command(bin, "run", "--config", config, "--log-format", "json")
		w.Env, w.Stdout, w.Stderr = env, logFile, logFile
		if err := w.Start(); err != nil {
			return err
		}
		procs = append(procs, proc{w, logPath})
		fmt.Printf("sqsonce run: started worker %d (pid %d)\n", i+1, w.Process.Pid)
	}
	fmt.Printf("waiting for the queue to drain\n")
	drained := waitDrained(ctx, client, queueURL, dlqURL, 90*time.Second)
	for _, p := range procs {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			return err
		}
	}
	for i, p := range procs {
		if err := p.cmd.Wait(); err != nil {
			return fmt.Errorf("sqsonce run (worker %d) exited with %v; its log is:\n%s", i+1, err, readFile(p.log))
		}
	}
	elapsed := time.Since(start)
	if !drained {
		return fmt.Errorf("the queue did not drain in 90s; the first worker's log is:\n%s", readFile(procs[0].log))
	}
	fmt.Printf("sqsonce run: SIGTERM, drained and exited 0 after %v\n\n", elapsed.Round(100*time.Millisecond))

	// 5. What happened.
	summary := map[string]float64{}
	perWorker := make([]float64, len(procs))
	for i, p := range procs {
		s, err := lastSummary(p.log)
		if err != nil {
			return err
		}
		for k, v := range s {
			if f, ok := v.(float64); ok {
				summary[k] += f
			}
		}
		perWorker[i], _ = s["completed"].(float64)
	}
	effects, err := countLines(filepath.Join(dir, "effects.log"))
	if err != nil {
		return err
	}
	statsCmd := exec.Command(bin, "ledger", "stats", "--json", "--config", config)
	statsCmd.Env, statsCmd.Stderr = env, os.Stderr
	statsOut, err := statsCmd.Output()
	if err != nil {
		return fmt.Errorf("sqsonce ledger stats: %w", err)
	}
	var stats struct {
		Complete          int `json:"complete"`
		FailedPermanently int `json:"failed_permanently"`
	}
	if err := json.Unmarshal(statsOut, &stats); err != nil {
		return fmt.Errorf("sqsonce ledger stats: %w", err)
	}
	dlq, _ := approx(ctx, client, dlqURL)

	histogram := map[int]int{}
	for i := range ops {
		histogram[effects[fmt.Sprintf("pay_%04d", i)]]++
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("deliveries sent", len(lines))
	row("operations", ops)
	row("ledger", backend)
	if workers > 1 {
		row("workers", workers)
		row("operations completed, by worker", strings.Trim(fmt.Sprint(perWorker), "[]"))
	}
	row("operations done (ledger: complete)", stats.Complete)
	row("duplicates suppressed", summary["duplicates"])
	row("retries (failed attempts tried again)", summary["retried"])
	row("operations that failed once, by design", failOnce)
	row("messages dead-lettered", summary["dead_lettered"])
	row("operations failed permanently (ledger)", stats.FailedPermanently)
	row("messages now in the dead-letter queue", dlq)
	keys := make([]int, 0, len(histogram))
	for k := range histogram {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, k := range keys {
		row(fmt.Sprintf("operations whose effect ran %d time(s)", k), histogram[k])
	}
	tw.Flush()
	if histogram[1] != ops-1 || histogram[0] != 1 {
		return fmt.Errorf("some operation's effect did not run exactly once: %v", histogram)
	}
	fmt.Println("\nEvery operation took effect exactly once; the one that always fails is in the dead-letter queue.")
	return nil
}

func createQueue(ctx context.Context, c *sqs.Client, name string, attrs map[string]string) (url, arn string, err error) {
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &name, Attributes: attrs})
	if err != nil {
		return "", "", fmt.Errorf("create queue %s: %w", name, err)
	}
	a, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return "", "", err
	}
	return *out.QueueUrl, a.Attributes["QueueArn"], nil
}

// approx returns a queue's visible plus in-flight messages.
func approx(ctx context.Context, c *sqs.Client, url string) (int, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []types.QueueAttributeName{
		types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		return 0, err
	}
	v, _ := strconv.Atoi(out.Attributes["ApproximateNumberOfMessages"])
	n, _ := strconv.Atoi(out.Attributes["ApproximateNumberOfMessagesNotVisible"])
	return v + n, nil
}

func waitDrained(ctx context.Context, c *sqs.Client, queue, dlq string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		q, err1 := approx(ctx, c, queue)
		d, err2 := approx(ctx, c, dlq)
		if err1 == nil && err2 == nil && q == 0 && d >= 1 {
			return true
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false
}

// lastSummary reads the counters of the worker's "worker stopped" log line.
func lastSummary(path string) (map[string]any, error) {
	return lastLogLine(path, "worker stopped")
}

func countLines(path string) (map[string]int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		counts[l]++
	}
	return counts, nil
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
