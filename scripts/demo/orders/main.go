// Command orders is the demo's transactional worker: sqsonce's worker as a
// library, on a PostgreSQL ledger, whose Go handler inserts each order into
// an orders table in the same transaction as the operation's completion
// (package pgtx). Killed at any moment, it leaves each order's row and its
// completion together or neither: the table never holds an order twice.
//
// scripts/demo runs it with -tx (`make demo-tx`); it stops on SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"

	"github.com/sqsonce/sqsonce/internal/sqsclient"
	"github.com/sqsonce/sqsonce/ledger/postgres"
	"github.com/sqsonce/sqsonce/pgtx"
	"github.com/sqsonce/sqsonce/worker"
)

func main() {
	queueURL := flag.String("queue-url", "", "the queue")
	endpoint := flag.String("endpoint", "", "the SQS-compatible server")
	pgURL := flag.String("postgres-url", "", "the database of the ledger and of the orders table")
	table := flag.String("table", postgres.DefaultTable, "the ledger's table")
	hold := flag.Duration("hold", 20*time.Millisecond, "how long each transaction stays open after its insert (a window for a kill to land in)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, *queueURL, *endpoint, *pgURL, *table, *hold); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

// order is what a message of the demo says.
type order struct {
	ID          string `json:"id"`
	AmountCents int    `json:"amount_cents"`
}

func run(ctx context.Context, queueURL, endpoint, pgURL, table string, hold time.Duration) error {
	if queueURL == "" || endpoint == "" || pgURL == "" {
		return errors.New("-queue-url, -endpoint and -postgres-url are required")
	}
	l, err := postgres.Open(ctx, postgres.Options{URL: pgURL, Table: table})
	if err != nil {
		return err
	}
	defer l.Close()

	// The handler: the order's row, in the transaction that also records
	// the operation complete. No unique constraint guards the table: what
	// keeps an order from being inserted twice is that the insert and the
	// completion commit together.
	handler := pgtx.New(l, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
		var o order
		if err := json.Unmarshal(m.Body, &o); err != nil {
			return worker.Permanent(fmt.Errorf("not an order: %w", err))
		}
		if _, err := tx.Exec(ctx, `INSERT INTO orders (order_id, amount_cents) VALUES ($1, $2)`, o.ID, o.AmountCents); err != nil {
			return err
		}
		time.Sleep(hold)
		m.Result = fmt.Appendf(nil, "order %s inserted", o.ID)
		return nil
	})

	client := sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("demo", "demo", ""),
	}, sqsclient.InMemoryBodies)
	w, err := worker.New(worker.Config{
		QueueURL:          queueURL,
		WaitTime:          time.Second,
		VisibilityTimeout: 5 * time.Second,
		HandlerTimeout:    4 * time.Second, // the longest a transaction stays open
		Concurrency:       16,
		Pollers:           2,
		Key:               worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"},
		MinBackoff:        500 * time.Millisecond,
		MaxBackoff:        2 * time.Second,
		Logger:            slog.New(slog.NewJSONHandler(os.Stderr, nil)),
	}, client, l, handler)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}
