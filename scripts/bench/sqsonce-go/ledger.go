package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsonce/sqsonce/internal/sqsclient"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/dynamodb"
	"github.com/sqsonce/sqsonce/ledger/postgres"
	"github.com/sqsonce/sqsonce/pgtx"
	"github.com/sqsonce/sqsonce/scripts/bench/internal/benchkit"
	"github.com/sqsonce/sqsonce/worker"
)

// ledgerFlags say which ledger the worker gets.
type ledgerFlags struct {
	backend        string
	path           string // bbolt
	postgresURL    string
	dynamoEndpoint string
	table          string
	pgHandler      string // postgres: "", write or tx
	effects        string // postgres, with pgHandler: the table written
}

func (lf *ledgerFlags) check() error {
	switch lf.backend {
	case "bbolt":
		if lf.path == "" {
			return errors.New("-ledger is required with -backend bbolt")
		}
	case "postgres":
		if lf.postgresURL == "" || lf.table == "" {
			return errors.New("-postgres-url and -table are required with -backend postgres")
		}
		switch {
		case lf.pgHandler != "" && lf.pgHandler != "write" && lf.pgHandler != "tx" && lf.pgHandler != "txbatch":
			return fmt.Errorf("-pg-handler %q: want write, tx or txbatch", lf.pgHandler)
		case lf.pgHandler != "" && lf.effects == "":
			return errors.New("-effects-table is required with -pg-handler")
		}
	case "dynamodb":
		if lf.dynamoEndpoint == "" || lf.table == "" {
			return errors.New("-dynamodb-endpoint and -table are required with -backend dynamodb")
		}
		if u, err := url.Parse(lf.dynamoEndpoint); err != nil || u.Scheme != "http" {
			return fmt.Errorf("-dynamodb-endpoint %q: want an http URL", lf.dynamoEndpoint)
		}
	default:
		return fmt.Errorf("-backend %q: want bbolt, postgres or dynamodb", lf.backend)
	}
	return nil
}

// openedLedger is the worker's ledger and what the report reads from it.
type openedLedger struct {
	store    worker.Ledger
	db       *ledger.DB               // bbolt only: for commits and the prefill
	pg       *postgres.Ledger         // postgres only: for the handlers that write
	requests *benchkit.LedgerRequests // dynamodb only
	close    func() error
}

// openLedger opens the ledger lf names. The shared ledgers' tables exist
// already: the driver creates one per run.
func openLedger(ctx context.Context, lf ledgerFlags) (*openedLedger, error) {
	switch lf.backend {
	case "postgres":
		octx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		l, err := postgres.Open(octx, postgres.Options{URL: lf.postgresURL, Table: lf.table})
		if err != nil {
			return nil, err
		}
		return &openedLedger{store: l, pg: l, close: l.Close}, nil
	case "dynamodb":
		// As the sqsonce binary builds its DynamoDB client, with a
		// counter of the requests in front of the transport.
		reqs := benchkit.NewLedgerRequests(awshttp.NewBuildableClient().WithTimeout(30 * time.Second))
		client := ddb.New(ddb.Options{
			Region:       benchkit.Region,
			BaseEndpoint: aws.String(lf.dynamoEndpoint),
			Credentials:  credentials.NewStaticCredentialsProvider("bench", "bench", ""),
			HTTPClient:   sqsclient.InMemory(reqs),
		})
		octx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		l, err := dynamodb.Open(octx, client, dynamodb.Options{Table: lf.table})
		if err != nil {
			return nil, err
		}
		return &openedLedger{store: l, requests: reqs, close: l.Close}, nil
	}
	db, err := ledger.Open(lf.path, ledger.Options{})
	if err != nil {
		return nil, err
	}
	return &openedLedger{store: db, db: db, close: db.Close}, nil
}

// writingHandler returns h, made to write a row of the effects table per
// message as -pg-handler says: on its own connection (write), or in the
// transaction of the operation's completion (tx: a pgtx.Func; txbatch:
// pgtx.Writes, sent with the completion in one round trip).
func (lg *openedLedger) writingHandler(ctx context.Context, lf ledgerFlags, h worker.Handler) (worker.Handler, error) {
	insert := `INSERT INTO ` + pgx.Identifier{lf.effects}.Sanitize() + ` (key) VALUES ($1)`
	switch lf.pgHandler {
	case "write":
		pool, err := pgxpool.New(ctx, lf.postgresURL)
		if err != nil {
			return nil, err
		}
		return worker.HandlerFunc(func(ctx context.Context, m *worker.Message) error {
			if err := h.Handle(ctx, m); err != nil {
				return err
			}
			_, err := pool.Exec(ctx, insert, m.Key)
			return err
		}), nil
	case "tx":
		return pgtx.New(lg.pg, func(ctx context.Context, tx pgx.Tx, m *worker.Message) error {
			if err := h.Handle(ctx, m); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, insert, m.Key)
			return err
		}), nil
	case "txbatch":
		return pgtx.NewWrites(lg.pg, func(ctx context.Context, m *worker.Message, b *pgx.Batch) error {
			if err := h.Handle(ctx, m); err != nil {
				return err
			}
			b.Queue(insert, m.Key)
			return nil
		}), nil
	}
	return h, nil
}
