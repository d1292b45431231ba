package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/worker"
)

// The flow calls of the ledger socket: what `sqsonce flow` needs of the
// embedded ledger while a worker holds its file. They answer as the
// ledger's own calls do, with its clock.

// flowDocJSON is a ledger.FlowDoc as the socket carries it.
type flowDocJSON struct {
	Scope   string        `json:"scope"`
	Version int64         `json:"version"`
	Data    []byte        `json:"data,omitempty"`
	Updated time.Time     `json:"updated"`
	Expires time.Time     `json:"expires"`
	TTL     time.Duration `json:"ttl,omitempty"`
}

func toFlowDocJSON(d ledger.FlowDoc) flowDocJSON {
	return flowDocJSON{Scope: d.Scope, Version: d.Version, Data: d.Data, Updated: d.Updated, Expires: d.Expires, TTL: d.TTL}
}

func (j flowDocJSON) doc() ledger.FlowDoc {
	return ledger.FlowDoc{Scope: j.Scope, Version: j.Version, Data: j.Data, Updated: j.Updated, Expires: j.Expires, TTL: j.TTL}
}

// flowReadJSON is a ledger.FlowRead as the socket carries it.
type flowReadJSON struct {
	Doc   flowDocJSON `json:"doc"`
	Found bool        `json:"found"`
	Now   time.Time   `json:"now"`
}

func toFlowReadJSON(r ledger.FlowRead) flowReadJSON {
	return flowReadJSON{Doc: toFlowDocJSON(r.Doc), Found: r.Found, Now: r.Now}
}

func (j flowReadJSON) read() ledger.FlowRead {
	return ledger.FlowRead{Doc: j.Doc.doc(), Found: j.Found, Now: j.Now}
}

// flowConflictJSON is the answer of a write that lost its compare-and-set:
// the error, and what is stored.
type flowConflictJSON struct {
	errorJSON
	Read flowReadJSON `json:"read"`
}

// processJSONWire is a ledger.Process as the socket carries it.
type processJSONWire struct {
	ID        string        `json:"id"`
	Host      string        `json:"host"`
	PID       int           `json:"pid"`
	Version   string        `json:"version"`
	Queue     string        `json:"queue"`
	Started   time.Time     `json:"started"`
	Beat      time.Time     `json:"beat"`
	BeatAge   time.Duration `json:"beat_age"`
	InHand    int           `json:"in_hand"`
	Paused    bool          `json:"paused"`
	PausedWhy string        `json:"paused_why,omitempty"`
	Expires   time.Time     `json:"expires"`
}

func toProcessJSON(p ledger.Process) processJSONWire {
	return processJSONWire{ID: p.ID, Host: p.Host, PID: p.PID, Version: p.Version, Queue: p.Queue, Started: p.Started,
		Beat: p.Beat, BeatAge: p.BeatAge, InHand: p.InHand, Paused: p.Paused, PausedWhy: p.PausedWhy, Expires: p.Expires}
}

func (j processJSONWire) process() ledger.Process {
	return ledger.Process{ID: j.ID, Host: j.Host, PID: j.PID, Version: j.Version, Queue: j.Queue, Started: j.Started,
		Beat: j.Beat, BeatAge: j.BeatAge, InHand: j.InHand, Paused: j.Paused, PausedWhy: j.PausedWhy, Expires: j.Expires}
}

// serveFlow adds the flow calls to the socket's mux. A pause document
// written or deleted through the socket is logged in the worker's log,
// with who paused and why.
func serveFlow(mux *http.ServeMux, db *ledger.DB, fail func(http.ResponseWriter, error), log *slog.Logger) {
	version := func(q url.Values) (int64, error) {
		v, err := strconv.ParseInt(q.Get("if_version"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("if_version %q: %w", q.Get("if_version"), ledger.ErrInvalidArgument)
		}
		return v, nil
	}
	mux.HandleFunc("GET /v1/flow", func(w http.ResponseWriter, r *http.Request) {
		fr, err := db.GetFlow(r.Context(), r.URL.Query().Get("scope"))
		if err != nil {
			fail(w, err)
			return
		}
		json.NewEncoder(w).Encode(toFlowReadJSON(fr))
	})
	mux.HandleFunc("PUT /v1/flow", func(w http.ResponseWriter, r *http.Request) {
		ifVersion, err := version(r.URL.Query())
		if err != nil {
			fail(w, err)
			return
		}
		var j flowDocJSON
		if err := json.NewDecoder(io.LimitReader(r.Body, 4*ledger.MaxFlowData)).Decode(&j); err != nil {
			fail(w, fmt.Errorf("flow document: %v: %w", err, ledger.ErrInvalidArgument))
			return
		}
		fr, err := db.PutFlow(r.Context(), j.doc(), ifVersion)
		if errors.Is(err, ledger.ErrConflict) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			json.NewEncoder(w).Encode(flowConflictJSON{errorJSON: errorJSON{Error: err.Error(), Kind: "conflict"}, Read: toFlowReadJSON(fr)})
			return
		}
		if err != nil {
			fail(w, err)
			return
		}
		var d worker.PauseDoc
		if json.Unmarshal(fr.Doc.Data, &d) == nil && d.Manual {
			log.Info("flow: intake paused by hand through the worker socket", "scope", fr.Doc.Scope, "by", d.By, "reason", d.Reason,
				"until", fr.Doc.Expires)
		}
		json.NewEncoder(w).Encode(toFlowReadJSON(fr))
	})
	mux.HandleFunc("DELETE /v1/flow", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		ifVersion, err := version(q)
		if err != nil {
			fail(w, err)
			return
		}
		scope := q.Get("scope")
		if err := db.DeleteFlow(r.Context(), scope, ifVersion); err != nil {
			fail(w, err)
			return
		}
		log.Info("flow: pause lifted through the worker socket", "scope", scope, "by", r.Header.Get(actorHeader))
		w.WriteHeader(http.StatusNoContent)
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
	mux.HandleFunc("GET /v1/processes", func(w http.ResponseWriter, r *http.Request) {
		ps, err := db.Processes(r.Context())
		if err != nil {
			fail(w, err)
			return
		}
		out := make([]processJSONWire, len(ps))
		for i, p := range ps {
			out[i] = toProcessJSON(p)
		}
		json.NewEncoder(w).Encode(out)
	})
}

// getJSON decodes the answer of a GET through the socket into v.
func (c *socketLedger) getJSON(ctx context.Context, op string, q url.Values, v any) error {
	resp, err := c.do(ctx, http.MethodGet, op, q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("worker socket: %w", err)
	}
	return nil
}

// GetFlow reads a flow document through the worker, with its ledger's clock.
func (c *socketLedger) GetFlow(ctx context.Context, scope string) (ledger.FlowRead, error) {
	var j flowReadJSON
	if err := c.getJSON(ctx, "flow", url.Values{"scope": {scope}}, &j); err != nil {
		return ledger.FlowRead{}, err
	}
	return j.read(), nil
}

// PutFlow writes a flow document through the worker, with the ledger's
// compare-and-set: on ErrConflict the answer holds what is stored.
func (c *socketLedger) PutFlow(ctx context.Context, doc ledger.FlowDoc, ifVersion int64) (ledger.FlowRead, error) {
	body, err := json.Marshal(toFlowDocJSON(doc))
	if err != nil {
		return ledger.FlowRead{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut,
		"http://ledger/v1/flow?"+url.Values{"if_version": {strconv.FormatInt(ifVersion, 10)}}.Encode(), bytes.NewReader(body))
	if err != nil {
		return ledger.FlowRead{}, err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return ledger.FlowRead{}, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		var j flowReadJSON
		if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
			return ledger.FlowRead{}, fmt.Errorf("worker socket: %w", err)
		}
		return j.read(), nil
	case http.StatusConflict:
		var j flowConflictJSON
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&j); err != nil {
			return ledger.FlowRead{}, fmt.Errorf("worker socket: %s: %w", resp.Status, ledger.ErrConflict)
		}
		return j.Read.read(), fmt.Errorf("%s: %w", j.Error, ledger.ErrConflict)
	}
	return ledger.FlowRead{}, socketError(resp)
}

// DeleteFlow deletes a flow document through the worker, with the ledger's
// compare-and-set.
func (c *socketLedger) DeleteFlow(ctx context.Context, scope string, ifVersion int64) error {
	resp, err := c.do(ctx, http.MethodDelete, "flow", url.Values{"scope": {scope}, "if_version": {strconv.FormatInt(ifVersion, 10)}})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// ListFlows lists the live flow documents through the worker.
func (c *socketLedger) ListFlows(ctx context.Context) ([]ledger.FlowDoc, error) {
	var js []flowDocJSON
	if err := c.getJSON(ctx, "flows", nil, &js); err != nil {
		return nil, err
	}
	var out []ledger.FlowDoc
	for _, j := range js {
		out = append(out, j.doc())
	}
	return out, nil
}

// Processes lists the ledger's registry of processes through the worker.
func (c *socketLedger) Processes(ctx context.Context) ([]ledger.Process, error) {
	var js []processJSONWire
	if err := c.getJSON(ctx, "processes", nil, &js); err != nil {
		return nil, err
	}
	var out []ledger.Process
	for _, j := range js {
		out = append(out, j.process())
	}
	return out, nil
}
