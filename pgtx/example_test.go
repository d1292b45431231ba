package pgtx_test

import (
	"context"
	"encoding/json"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"

	"github.com/sqsonce/sqsonce/ledger/postgres"
	"github.com/sqsonce/sqsonce/pgtx"
	"github.com/sqsonce/sqsonce/worker"
)

// A worker whose handler inserts each order in the transaction that records
// the operation complete: the row and the completion commit together.
func Example() {
	ctx := context.Background()
	l, err := postgres.Open(ctx, postgres.Options{URL: "postgres://app@db.internal/orders?pool_max_conns=32"})
	if err != nil {
		return
	}
	defer l.Close()
	h := pgtx.New(l, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
		var o struct {
			ID          string `json:"id"`
			AmountCents int    `json:"amount_cents"`
		}
		if err := json.Unmarshal(m.Body, &o); err != nil {
			return worker.Permanent(err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO orders (order_id, amount_cents) VALUES ($1, $2)`, o.ID, o.AmountCents)
		return err // an error rolls the insert back
	})
	var sqsClient *sqs.Client // sqs.NewFromConfig(awsConfig)
	w, err := worker.New(worker.Config{
		QueueURL:       "https://sqs.eu-west-1.amazonaws.com/123456789012/orders",
		Key:            worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"},
		HandlerTimeout: 10 * time.Second, // bounds each transaction
		Concurrency:    16,
	}, sqsClient, l, h)
	if err != nil {
		return
	}
	_ = w.Run(ctx)
}

// The same orders as statements queued on a batch: the BEGIN, the insert,
// the completion and the COMMIT go to the server in one round trip.
func ExampleNewWrites() {
	ctx := context.Background()
	l, err := postgres.Open(ctx, postgres.Options{URL: "postgres://app@db.internal/orders?pool_max_conns=32"})
	if err != nil {
		return
	}
	defer l.Close()
	h := pgtx.NewWrites(l, func(ctx context.Context, m *worker.Message, b *pgx.Batch) error {
		var o struct {
			ID          string `json:"id"`
			AmountCents int    `json:"amount_cents"`
		}
		if err := json.Unmarshal(m.Body, &o); err != nil {
			return worker.Permanent(err) // nothing is sent
		}
		b.Queue(`INSERT INTO orders (order_id, amount_cents) VALUES ($1, $2)`, o.ID, o.AmountCents)
		return nil
	})
	_ = h // worker.New(cfg, sqsClient, l, h), as in the example of New
}
