package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsonce/sqsonce/internal/dynamotest"
	"github.com/sqsonce/sqsonce/internal/pgtest"
	"github.com/sqsonce/sqsonce/ledger"
)

// olderTable takes from a table made by `ledger init` what the sqsonce
// before flow control did not make, so that it is the table that version
// made: on PostgreSQL the flow columns, index and tables and the version
// table's flow_version; on DynamoDB the schema item's flow_schema.
func olderTable(t *testing.T, backend string, st *sharedTable) {
	t.Helper()
	ctx := context.Background()
	var ledgerURL string
	for _, v := range st.vars("") {
		if u, ok := strings.CutPrefix(v, "SQSONCE_LEDGER_URL="); ok {
			ledgerURL = u
		}
	}
	switch backend {
	case BackendPostgres:
		conn := pgtest.Connect(t, ledgerURL)
		for _, stmt := range []string{
			`ALTER TABLE ` + st.table + ` DROP COLUMN own_failures, DROP COLUMN outage_failures, DROP COLUMN dead_lettered,
				DROP COLUMN dead_letter_reason, DROP COLUMN dead_letter_group, DROP COLUMN dead_letter_copy_id`,
			`DROP TABLE ` + st.table + `_flow, ` + st.table + `_rate, ` + st.table + `_slots, ` + st.table + `_procs`,
			`ALTER TABLE ` + st.table + `_version DROP COLUMN flow_version`,
		} {
			if _, err := conn.Exec(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
	case BackendDynamoDB:
		_, err := dynamotest.NewClient(t, nil).UpdateItem(ctx, &ddb.UpdateItemInput{
			TableName:                aws.String(st.table),
			Key:                      map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "meta#schema"}},
			UpdateExpression:         aws.String("REMOVE #f"),
			ExpressionAttributeNames: map[string]string{"#f": "flow_schema"},
		})
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("no older table for %s", backend)
	}
}

// TestMain_LedgerInitUpgrades: a ledger made by the sqsonce before flow
// control is refused by this one's commands, naming `sqsonce ledger init`,
// until that command upgrades it; the embedded file needs no command.
func TestMain_LedgerInitUpgrades(t *testing.T) {
	t.Parallel()
	for _, b := range sharedBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			st := b.new(t)
			e := newSharedEnv(t, st, "", "exit 0\n")
			e.initTable()
			olderTable(t, b.name, st)
			code, msg := e.run("ledger stats", "")
			if code != exitFailure || !strings.Contains(msg, "sqsonce ledger init") || !strings.Contains(msg, "older sqsonce") {
				t.Fatalf("ledger stats on an older table: exit %d:\n%s", code, msg)
			}
			if out := e.initTable(); !strings.Contains(out, st.table) {
				t.Fatalf("ledger init on an older table: %s", out)
			}
			if code, msg := e.run("ledger stats", ""); code != exitOK {
				t.Fatalf("ledger stats on the upgraded table: exit %d:\n%s", code, msg)
			}
			st.open(t) // opens only a table with flow control
		})
	}

	t.Run(BackendBbolt, func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, false, "exit 0\n")
		src, err := os.ReadFile("../../ledger/testdata/v1.db")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(e.dir, "ledger.db")
		if err := os.WriteFile(path, src, 0o600); err != nil {
			t.Fatal(err)
		}
		if code, msg := e.run("ledger stats", ""); code != exitOK || !strings.Contains(msg, "complete") {
			t.Fatalf("ledger stats on an older file: exit %d:\n%s", code, msg)
		}
		if code, msg := e.run("ledger init", ""); code != exitOK {
			t.Fatalf("ledger init on an older file: exit %d:\n%s", code, msg)
		}
		db, err := ledger.Open(path, ledger.Options{LockTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if st, err := db.Stats(context.Background()); err != nil || st.Complete != 1 || st.Failed != 1 || st.FailedPermanently != 1 || st.InProgress != 1 {
			t.Fatalf("the file's records after the upgrade: %+v, %v", st, err)
		}
	})
}
