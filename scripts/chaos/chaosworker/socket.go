//go:build chaossocket

package main

import (
	"io"
	"log/slog"

	"github.com/sqsonce/sqsonce/ledger"
)

// The campaign builds this program with the tag chaossocket and
// cmd/sqsonce/ledgersocket.go added to the package (go build -overlay):
// the worker then serves its ledger with the socket server of `sqsonce
// run`.
func init() {
	serveSocket = func(db *ledger.DB, path string, log *slog.Logger) (io.Closer, error) {
		s, err := serveLedgerSocket(db, path, log)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}
