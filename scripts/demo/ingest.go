package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// runIngest is the webhook demo: `sqsonce ingest` in front of a FIFO queue
// and `sqsonce run` behind it, and scripts/demo/webhooks.sh sending signed
// webhooks as GitHub, Stripe and a Standard Webhooks sender do, each twice,
// and the GitHub one once more under another delivery id.
func runIngest(ctx context.Context, client *sqs.Client, bin, endpoint, dir string) error {
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	queueURL, _, err := createQueue(ctx, client, "hooks-"+suffix+".fifo", map[string]string{"FifoQueue": "true"})
	if err != nil {
		return err
	}
	fmt.Printf("queue            %s\n", queueURL)

	// The senders' secrets: in files, or in a variable, never in the
	// configuration.
	secrets := map[string]string{
		"GITHUB_WEBHOOK_SECRET":   randomHex(20),
		"STRIPE_WEBHOOK_SECRET":   "whsec_" + randomHex(16),
		"STANDARD_WEBHOOK_SECRET": "whsec_" + base64.StdEncoding.EncodeToString(randomBytes(24)),
	}
	for _, name := range []string{"GITHUB_WEBHOOK_SECRET", "STRIPE_WEBHOOK_SECRET"} {
		if err := os.WriteFile(filepath.Join(dir, strings.ToLower(name)), []byte(secrets[name]+"\n"), 0o600); err != nil {
			return err
		}
	}
	handler, err := filepath.Abs("scripts/demo/handler.sh")
	if err != nil {
		return err
	}
	config := filepath.Join(dir, "sqsonce.toml")
	err = os.WriteFile(config, fmt.Appendf(nil, `[queue]
url = %q
endpoint = %q
wait_time = "1s"

# The key ingest puts on every event it sends.
[key]
from = "attribute"
attribute = "SqsonceKey"

[ledger]
path = %q

[handler]
type = "exec"
command = [%q]

[admin]
listen = ""

[ingest]
listen = "127.0.0.1:0"
admin_listen = ""

[[ingest.source]]
name = "github"
path = "/hooks/github"
verify = "github"
secret_file = %q

[[ingest.source]]
name = "stripe"
path = "/hooks/stripe"
verify = "stripe"
secret_file = %q
group_pointer = "/data/object/customer"

[[ingest.source]]
name = "standard"
path = "/hooks/standard"
verify = "standard"
secret_env = "STANDARD_WEBHOOK_SECRET"
`, queueURL, endpoint, filepath.Join(dir, "ledger.db"), handler,
		filepath.Join(dir, "github_webhook_secret"), filepath.Join(dir, "stripe_webhook_secret")), 0o600)
	if err != nil {
		return err
	}
	env := append(os.Environ(), "AWS_ACCESS_KEY_ID=demo", "AWS_SECRET_ACCESS_KEY=demo", "AWS_EC2_METADATA_DISABLED=true",
		"DEMO_STATE_DIR="+dir, "STANDARD_WEBHOOK_SECRET="+secrets["STANDARD_WEBHOOK_SECRET"])

	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			if p.ProcessState == nil {
				p.Process.Kill()
				p.Wait()
			}
		}
	}()
	start := func(name string) (*exec.Cmd, string, error) {
		logPath := filepath.Join(dir, name+".log")
		logFile, err := os.Create(logPath)
		if err != nil {
			return nil, "", err
		}
		defer logFile.Close()
		cmd := exec.Command(bin, name, "--config", config, "--log-format", "json")
		cmd.Env, cmd.Stdout, cmd.Stderr = env, logFile, logFile
		if err := cmd.Start(); err != nil {
			return nil, "", err
		}
		procs = append(procs, cmd)
		fmt.Printf("sqsonce %s: started (pid %d)\n", name, cmd.Process.Pid)
		return cmd, logPath, nil
	}
	ingest, ingestLog, err := start("ingest")
	if err != nil {
		return err
	}
	addr, err := waitLogField(ingestLog, "receiving webhooks", "address", 20*time.Second)
	if err != nil {
		return fmt.Errorf("sqsonce ingest: %w; its log is:\n%s", err, readFile(ingestLog))
	}
	worker, workerLog, err := start("run")
	if err != nil {
		return err
	}

	fmt.Printf("\nscripts/demo/webhooks.sh http://%s\n", addr)
	hooks := exec.Command("scripts/demo/webhooks.sh", "http://"+addr)
	hooks.Env = append(os.Environ(), "GITHUB_WEBHOOK_SECRET="+secrets["GITHUB_WEBHOOK_SECRET"],
		"STRIPE_WEBHOOK_SECRET="+secrets["STRIPE_WEBHOOK_SECRET"], "STANDARD_WEBHOOK_SECRET="+secrets["STANDARD_WEBHOOK_SECRET"])
	hooks.Stdout, hooks.Stderr = os.Stdout, os.Stderr
	if err := hooks.Run(); err != nil {
		return fmt.Errorf("webhooks.sh: %w", err)
	}

	// The three events, sent seven times, are three messages (the FIFO
	// queue deduplicates by the key) and three runs of the handler.
	deadline := time.Now().Add(30 * time.Second)
	var effects map[string]int
	for time.Now().Before(deadline) {
		effects, _ = countLines(filepath.Join(dir, "effects.log"))
		if n, _ := approx(ctx, client, queueURL); n == 0 && len(effects) == 3 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, p := range []*exec.Cmd{ingest, worker} {
		p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range []struct {
		cmd *exec.Cmd
		log string
	}{{ingest, ingestLog}, {worker, workerLog}} {
		if err := p.cmd.Wait(); err != nil {
			return fmt.Errorf("%s exited with %v; its log is:\n%s", p.cmd.Args[1], err, readFile(p.log))
		}
	}
	fmt.Println()
	stopped, err := lastLogLine(ingestLog, "stopped")
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("requests sent (3 events, each twice; the GitHub one replayed under another delivery id; 1 forged)", 8)
	row("answered 200: the event is in SQS", stopped["accepted"])
	row("answered 401: the signature did not verify", stopped["unverified"])
	keys := slices.Sorted(maps.Keys(effects))
	for _, k := range keys {
		row("handler runs for "+k, effects[k])
	}
	tw.Flush()
	// The keys: GitHub's from the body it signs, each under its source's
	// name.
	if len(keys) != 3 || !strings.HasPrefix(keys[0], "github:sha256:") || keys[1] != "standard:msg_2KWPBgLlAfxdpx2AI54pPJ85f4W" || keys[2] != "stripe:evt_1NG8Du2eZvKYlo2CUI79vXWy" {
		return fmt.Errorf("events took effect under the keys %v, want github:sha256:…, standard:msg_… and stripe:evt_…; the worker's log is:\n%s", keys, readFile(workerLog))
	}
	for k, n := range effects {
		if n != 1 {
			return fmt.Errorf("event %s took effect %d times", k, n)
		}
	}
	fmt.Println("\nEvery event SQS accepted took effect exactly once, the replayed one too; the forged one was refused.")
	return nil
}

// waitLogField waits for a JSON log line with msg and returns its field.
func waitLogField(path, msg, field string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if rec, err := lastLogLine(path, msg); err == nil {
			if v, ok := rec[field].(string); ok {
				return v, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "", fmt.Errorf("no %q in its log within %v", msg, timeout)
}

// lastLogLine returns the last JSON log line of path with msg.
func lastLogLine(path, msg string) (map[string]any, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var last map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == msg {
			last = rec
		}
	}
	if last == nil {
		return nil, fmt.Errorf("no %q line in %s", msg, path)
	}
	return last, nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func randomHex(n int) string { return hex.EncodeToString(randomBytes(n)) }
