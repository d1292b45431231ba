package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
)

// runTx is the demo of transactional handlers: scripts/demo/orders, a
// worker whose handler inserts each order into an orders table in the
// transaction that records the operation complete, is SIGKILLed while it
// works and started again; at the end the table holds every order once.
func runTx(ctx context.Context, client *sqs.Client, bin, endpoint, dir string, ops, copies int) error {
	pgURL := os.Getenv("SQSONCE_TEST_POSTGRES_URL")
	if pgURL == "" {
		return errors.New("SQSONCE_TEST_POSTGRES_URL is not set: run the demo with `make demo-tx`")
	}
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	// A schema of the demo's own holds the ledger's table and the orders.
	schema := "demo_" + suffix
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	for _, sql := range []string{
		"CREATE SCHEMA " + schema,
		"CREATE TABLE " + schema + ".orders (order_id text NOT NULL, amount_cents int NOT NULL, inserted_at timestamptz NOT NULL DEFAULT now())",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	defer conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
	dbURL, err := withParams(pgURL, map[string]string{"search_path": schema, "pool_max_conns": "24"})
	if err != nil {
		return err
	}

	dlqURL, dlqARN, err := createQueue(ctx, client, "orders-dlq-"+suffix, nil)
	if err != nil {
		return err
	}
	queueURL, _, err := createQueue(ctx, client, "orders-"+suffix, map[string]string{
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":10}`, dlqARN),
	})
	if err != nil {
		return err
	}
	fmt.Printf("queue            %s\ndead-letter queue %s\nledger and orders PostgreSQL, schema %s\n", queueURL, dlqURL, schema)

	config := filepath.Join(dir, "sqsonce.toml")
	if err := os.WriteFile(config, fmt.Appendf(nil, "[queue]\nurl = %q\nendpoint = %q\n\n[ledger]\nbackend = \"postgres\"\nurl = %q\n",
		queueURL, endpoint, dbURL), 0o600); err != nil {
		return err
	}
	env := append(os.Environ(), "AWS_ACCESS_KEY_ID=demo", "AWS_SECRET_ACCESS_KEY=demo", "AWS_EC2_METADATA_DISABLED=true")
	sqsonce := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append(args, "--config", config)...)
		cmd.Env, cmd.Stderr = env, os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("sqsonce %s: %w", args[0], err)
		}
		return string(out), nil
	}
	out, err := sqsonce("ledger", "init")
	if err != nil {
		return err
	}
	fmt.Printf("sqsonce ledger init: %s", out)

	var lines []string
	for i := range ops {
		b, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("ord_%04d", i), "amount_cents": 100 + i})
		for range 1 + rand.IntN(2*copies-1) {
			lines = append(lines, string(b))
		}
	}
	rand.Shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
	input := filepath.Join(dir, "orders.jsonl")
	if err := os.WriteFile(input, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	if out, err = sqsonce("send", input); err != nil {
		return err
	}
	fmt.Printf("sqsonce send: %s", out)

	ordersBin := filepath.Join(dir, "orders")
	build := exec.Command("go", "build", "-o", ordersBin, "./scripts/demo/orders")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build scripts/demo/orders: %w", err)
	}
	start := func(n int) (*exec.Cmd, string, error) {
		logPath := filepath.Join(dir, fmt.Sprintf("orders-%d.log", n))
		logFile, err := os.Create(logPath)
		if err != nil {
			return nil, "", err
		}
		defer logFile.Close()
		cmd := exec.Command(ordersBin, "-queue-url", queueURL, "-endpoint", endpoint, "-postgres-url", dbURL)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			return nil, "", err
		}
		fmt.Printf("orders worker %d: started (pid %d)\n", n, cmd.Process.Pid)
		return cmd, logPath, nil
	}
	rows := func() (all, distinct, most int) {
		conn.QueryRow(ctx, "SELECT count(*) FROM "+schema+".orders").Scan(&all)
		conn.QueryRow(ctx, "SELECT count(*), coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM "+schema+".orders GROUP BY order_id) g").Scan(&distinct, &most)
		return all, distinct, most
	}

	// The first worker is killed while it works: its open transactions
	// (each holds its insert a moment before it commits) roll back.
	first, _, err := start(1)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if n, _, _ := rows(); n >= ops/3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	first.Process.Kill()
	first.Wait()
	before, _, _ := rows()
	var atKill struct {
		InProgress int `json:"in_progress"`
	}
	if stats, err := sqsonce("ledger", "stats", "--json"); err == nil {
		json.Unmarshal([]byte(stats), &atKill)
	}
	fmt.Printf("orders worker 1: SIGKILL while it worked, with %d orders inserted and %d in progress (their transactions rolled back)\n", before, atKill.InProgress)

	second, secondLog, err := start(2)
	if err != nil {
		return err
	}
	defer func() {
		if second.ProcessState == nil {
			second.Process.Kill()
			second.Wait()
		}
	}()
	deadline = time.Now().Add(90 * time.Second)
	for {
		q, _ := approx(ctx, client, queueURL)
		if _, d, _ := rows(); (q == 0 && d == ops) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	second.Process.Signal(syscall.SIGTERM)
	if err := second.Wait(); err != nil {
		return fmt.Errorf("orders worker 2 exited with %v; its log is:\n%s", err, readFile(secondLog))
	}
	fmt.Printf("orders worker 2: drained the queue, SIGTERM, exited 0\n\n")
	s1, _ := lastLogLine(secondLog, "worker stopped")

	all, distinct, most := rows()
	stats, err := sqsonce("ledger", "stats", "--json")
	if err != nil {
		return err
	}
	var st struct {
		Complete int `json:"complete"`
	}
	json.Unmarshal([]byte(stats), &st)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("deliveries sent", len(lines))
	row("orders", ops)
	row("workers killed in the middle (SIGKILL)", 1)
	row("operations claimed at the kill (open transactions rolled back)", atKill.InProgress)
	row("duplicates suppressed by the second worker", s1["duplicates"])
	row("operations complete in the ledger", st.Complete)
	row("rows in the orders table", all)
	row("orders in the table", distinct)
	row("most rows of one order", most)
	tw.Flush()
	if all != ops || distinct != ops || st.Complete != ops {
		return fmt.Errorf("the orders table holds %d rows of %d orders, the ledger %d complete, want %d each", all, distinct, st.Complete, ops)
	}
	fmt.Println("\nEvery order was inserted exactly once, although a worker was killed in the middle of its transactions.")
	return nil
}

// withParams returns the connection string raw with the parameters set.
func withParams(raw string, params map[string]string) (string, error) {
	if !strings.Contains(raw, "://") {
		for k, v := range params {
			raw += " " + k + "=" + v
		}
		return raw, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}
