package main

import (
	"context"

	"github.com/sqsonce/sqsonce/ledger"
)

// The console's flow calls: the registry of processes and the flow
// documents, through the file or a running worker's socket.

func (f *fileOrSocket) Processes(ctx context.Context) (ps []ledger.Process, err error) {
	err = f.with(ctx, func(a access) error { ps, err = a.Processes(ctx); return err })
	return ps, err
}

func (f *fileOrSocket) ListFlows(ctx context.Context) (docs []ledger.FlowDoc, err error) {
	err = f.with(ctx, func(a access) error { docs, err = a.ListFlows(ctx); return err })
	return docs, err
}

func (f *fileOrSocket) GetFlow(ctx context.Context, scope string) (fr ledger.FlowRead, err error) {
	err = f.with(ctx, func(a access) error { fr, err = a.GetFlow(ctx, scope); return err })
	return fr, err
}

func (f *fileOrSocket) PutFlow(ctx context.Context, doc ledger.FlowDoc, ifVersion int64) (fr ledger.FlowRead, err error) {
	err = f.with(ctx, func(a access) error { fr, err = a.PutFlow(ctx, doc, ifVersion); return err })
	return fr, err
}

func (f *fileOrSocket) DeleteFlow(ctx context.Context, scope string, ifVersion int64) error {
	return f.with(ctx, func(a access) error { return a.DeleteFlow(ctx, scope, ifVersion) })
}
