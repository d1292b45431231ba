package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/ledger"
)

// The statements that end an operation's transaction refuse to go on with
// an error of sqsonce's own SQLSTATE, whose DETAIL carries what the caller
// needs: the outcome is data, not words to find in the server's message.
func TestRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, _ := pgtest.Schema(t)
	opts := Options{URL: url, Timeout: 5 * time.Second}
	if err := Init(ctx, opts); err != nil {
		t.Fatal(err)
	}
	l, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Claim(ctx, ledger.ClaimRequest{Key: "k", Owner: "a", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, set, owner   string
		wantCode, wantText string
	}{
		{"NotCompleted", "", "b", codeNotCompleted, "0"},
		{"Isolation", "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", "a", codeIsolation, "repeatable read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op, err := l.BeginOp(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer op.Rollback(ctx)
			if tc.set != "" {
				if _, err := op.Tx().Exec(ctx, tc.set); err != nil {
					t.Fatal(err)
				}
			}
			committed, err := l.sendCommit(ctx, op.conn, nil, ledger.Completion{Key: "k", Owner: tc.owner})
			var pgErr *pgconn.PgError
			if committed || !errors.As(err, &pgErr) || pgErr.Code != tc.wantCode || pgErr.Detail != tc.wantText {
				t.Fatalf("committed %v, %v (%#v); want SQLSTATE %s with the detail %q", committed, err, pgErr, tc.wantCode, tc.wantText)
			}
			if code, detail := refusal(err); code != tc.wantCode || detail != tc.wantText {
				t.Fatalf("refusal: %q, %q", code, detail)
			}
		})
	}
}
