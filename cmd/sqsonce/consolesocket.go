package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// The flow calls of a worker's ledger socket, for the console: the
// registry of processes and the flow documents, read and written. They are
// the ledger's own calls, carried as JSON.

// flowDocJSON is a flow document as the socket carries it.
type flowDocJSON struct {
	Scope   string    `json:"scope"`
	Version int64     `json:"version"`
	Data    []byte    `json:"data,omitempty"`
	Updated time.Time `json:"updated"`
	Expires time.Time `json:"expires"`
	TTL     int64     `json:"ttl_ns,omitempty"`
}

func toFlowDocJSON(d ledger.FlowDoc) flowDocJSON {
	return flowDocJSON{Scope: d.Scope, Version: d.Version, Data: d.Data, Updated: d.Updated, Expires: d.Expires, TTL: int64(d.TTL)}
}

func (j flowDocJSON) doc() ledger.FlowDoc {
	return ledger.FlowDoc{Scope: j.Scope, Version: j.Version, Data: j.Data, Updated: j.Updated, Expires: j.Expires, TTL: time.Duration(j.TTL)}
}

// flowReadJSON is a ledger.FlowRead as the socket carries it; with
// Conflict, the answer of a PutFlow refused with ledger.ErrConflict (and
// what is stored), whose error is Conflict.
type flowReadJSON struct {
	Doc      flowDocJSON `json:"doc"`
	Found    bool        `json:"found"`
	Now      time.Time   `json:"now"`
	Conflict string      `json:"conflict,omitempty"`
}

func toFlowReadJSON(r ledger.FlowRead) flowReadJSON {
	return flowReadJSON{Doc: toFlowDocJSON(r.Doc), Found: r.Found, Now: r.Now}
}

func (j flowReadJSON) read() ledger.FlowRead {
	return ledger.FlowRead{Doc: j.Doc.doc(), Found: j.Found, Now: j.Now}
}

// processJSON is a registered process as the socket carries it.
type processJSON struct {
	ID        string        `json:"id"`
	Host      string        `json:"host,omitempty"`
	PID       int           `json:"pid,omitempty"`
	Version   string        `json:"version,omitempty"`
	Queue     string        `json:"queue,omitempty"`
	Started   time.Time     `json:"started"`
	Beat      time.Time     `json:"beat"`
	BeatAge   time.Duration `json:"beat_age_ns"`
	InHand    int           `json:"in_hand"`
	Paused    bool          `json:"paused,omitempty"`
	PausedWhy string        `json:"paused_why,omitempty"`
	Expires   time.Time     `json:"expires"`
}

// consoleRoutes adds the flow calls to a worker's ledger socket.
func consoleRoutes(mux *http.ServeMux, db *ledger.DB, fail func(http.ResponseWriter, error)) {
	mux.HandleFunc("GET /v1/processes", func(w http.ResponseWriter, r *http.Request) {
		ps, err := db.Processes(r.Context())
		if err != nil {
			fail(w, err)
			return
		}
		out := make([]processJSON, len(ps))
		for i, p := range ps {
			out[i] = processJSON{ID: p.ID, Host: p.Host, PID: p.PID, Version: p.Version, Queue: p.Queue, Started: p.Started,
				Beat: p.Beat, BeatAge: p.BeatAge, InHand: p.InHand, Paused: p.Paused, PausedWhy: p.PausedWhy, Expires: p.Expires}
		}
		json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("GET /v1/flows", func(w http.ResponseWriter, r *http.Request) {
		docs, err := db.ListFlows(r.Context())
		if err != nil {
			fail(w, err)
			return
		}
		out := make([]flowDocJSON, len(docs))
		for i, d := range docs {
			out[i] = toFlowDocJSON(d)
		}
		json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("GET /v1/flow", func(w http.ResponseWriter, r *http.Request) {
		fr, err := db.GetFlow(r.Context(), r.URL.Query().Get("scope"))
		if err != nil {
			fail(w, err)
			return
		}
		json.NewEncoder(w).Encode(toFlowReadJSON(fr))
	})
	mux.HandleFunc("POST /v1/flow/put", func(w http.ResponseWriter, r *http.Request) {
		var j flowDocJSON
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&j); err != nil {
			fail(w, fmt.Errorf("flow document: %v: %w", err, ledger.ErrInvalidArgument))
			return
		}
		ifVersion, err := strconv.ParseInt(r.URL.Query().Get("if_version"), 10, 64)
		if err != nil {
			fail(w, fmt.Errorf("if_version: %v: %w", err, ledger.ErrInvalidArgument))
			return
		}
		fr, err := db.PutFlow(r.Context(), j.doc(), ifVersion)
		out := toFlowReadJSON(fr)
		switch {
		case errors.Is(err, ledger.ErrConflict):
			out.Conflict = err.Error()
		case err != nil:
			fail(w, err)
			return
		}
		json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("POST /v1/flow/delete", func(w http.ResponseWriter, r *http.Request) {
		ifVersion, err := strconv.ParseInt(r.URL.Query().Get("if_version"), 10, 64)
		if err != nil {
			fail(w, fmt.Errorf("if_version: %v: %w", err, ledger.ErrInvalidArgument))
			return
		}
		if err := db.DeleteFlow(r.Context(), r.URL.Query().Get("scope"), ifVersion); err != nil {
			fail(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// Processes reads the worker's ledger's registry through the worker.
func (c *socketLedger) Processes(ctx context.Context) ([]ledger.Process, error) {
	resp, err := c.do(ctx, http.MethodGet, "processes", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var js []processJSON
	if err := json.NewDecoder(resp.Body).Decode(&js); err != nil {
		return nil, fmt.Errorf("worker socket: %w", err)
	}
	out := make([]ledger.Process, len(js))
	for i, p := range js {
		out[i] = ledger.Process{ID: p.ID, Host: p.Host, PID: p.PID, Version: p.Version, Queue: p.Queue, Started: p.Started,
			Beat: p.Beat, BeatAge: p.BeatAge, InHand: p.InHand, Paused: p.Paused, PausedWhy: p.PausedWhy, Expires: p.Expires}
	}
	return out, nil
}

// ListFlows reads the worker's ledger's flow documents through the worker.
func (c *socketLedger) ListFlows(ctx context.Context) ([]ledger.FlowDoc, error) {
	resp, err := c.do(ctx, http.MethodGet, "flows", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var js []flowDocJSON
	if err := json.NewDecoder(resp.Body).Decode(&js); err != nil {
		return nil, fmt.Errorf("worker socket: %w", err)
	}
	out := make([]ledger.FlowDoc, len(js))
	for i, j := range js {
		out[i] = j.doc()
	}
	return out, nil
}

// GetFlow reads a scope's flow document through the worker.
func (c *socketLedger) GetFlow(ctx context.Context, scope string) (ledger.FlowRead, error) {
	resp, err := c.do(ctx, http.MethodGet, "flow", url.Values{"scope": {scope}})
	if err != nil {
		return ledger.FlowRead{}, err
	}
	defer resp.Body.Close()
	var j flowReadJSON
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		return ledger.FlowRead{}, fmt.Errorf("worker socket: %w", err)
	}
	return j.read(), nil
}

// PutFlow writes a scope's flow document through the worker.
func (c *socketLedger) PutFlow(ctx context.Context, doc ledger.FlowDoc, ifVersion int64) (ledger.FlowRead, error) {
	body, err := json.Marshal(toFlowDocJSON(doc))
	if err != nil {
		return ledger.FlowRead{}, err
	}
	resp, err := c.send(ctx, "flow/put", url.Values{"if_version": {strconv.FormatInt(ifVersion, 10)}}, body)
	if err != nil {
		return ledger.FlowRead{}, err
	}
	defer resp.Body.Close()
	var j flowReadJSON
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		return ledger.FlowRead{}, fmt.Errorf("worker socket: %w", err)
	}
	if j.Conflict != "" {
		return j.read(), fmt.Errorf("%s: %w", j.Conflict, ledger.ErrConflict)
	}
	return j.read(), nil
}

// DeleteFlow deletes a scope's flow document through the worker.
func (c *socketLedger) DeleteFlow(ctx context.Context, scope string, ifVersion int64) error {
	resp, err := c.send(ctx, "flow/delete", url.Values{"scope": {scope}, "if_version": {strconv.FormatInt(ifVersion, 10)}}, nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

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
