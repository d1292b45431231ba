// Package console is a web console for one queue's ledger: an http.Handler
// of server-rendered pages that shows what the ledger knows of each
// operation and, when writes are enabled, replays dead letters and forgets
// operations.
//
// Mount it in any server:
//
//	h, err := console.New(console.Config{
//		Ledger: l, SQS: client, QueueURL: queue, DLQURL: dlq, KeyOf: keyOf,
//	})
//	if err != nil { ... }
//	defer h.Close()
//	mux.Handle("/console/", http.StripPrefix("/console", h))
//
// with Config.Prefix set to "/console" so that its links lead back to it.
//
// # Pages
//
// Every number a page shows is the ledger's count, or says what it is
// (SQS's approximation, a sample, an estimate). The overview (/) shows the
// operations by what will become of them (in progress, complete, failed and
// to be retried, failed and dead-lettered, failed permanently), the lapsed
// leases, the workers up and down, each paused scope with a pause and a
// resume by hand, the completions and failures of the last three hours as
// a chart drawn on the server, the queues' depths beside what the ledger
// knows, the processes holding claims and the failures by reason group
// (ledger.ReasonGroup). /workers lists the ledger's registry of processes,
// one whose last beat is more than two beats old marked down.
// /operations lists the operations filtered by state, key prefix, reason,
// reason group and time of the last write, the newest first, a bounded
// page at a time (ledger List), the filters in the query string, with the
// filter's count where the ledger counts it; /operation?key=K shows one
// record, its attempts, its message and its dead letters, with the sqsonce
// command lines that do the same from a shell. /dead-letters shows the
// ledger's dead letters by reason group beside SQS's count, and a sample
// of the dead-letter queue read with a visibility timeout of 0 (nothing is
// hidden or deleted), grouped by reason and by operation; ?key=K shows one
// operation's. The pages of live state refresh themselves; the reads they
// share are kept for Config.Refresh.
//
// # Writes
//
// With Config.Writes, /replay replays dead letters with the filters of
// `sqsonce replay` (package replay) and by reason group or the operation's
// state: a dry run first, which counts and samples what would move, then
// the move at a rate the operator sets, with live progress and the summary
// `sqsonce replay` prints. /operation offers to forget the operation once
// the operator has typed its key; /forget forgets every operation a filter
// matches, after a dry run that counts them; the overview pauses and
// resumes the intake of a scope (its flow document, worker.PauseDoc); and
// /export streams the filtered list as JSON Lines. /actions lists each
// change with its actor, its filter and how many it touched (in memory: a
// restart starts it anew). Nothing edits a payload, purges a queue or
// sends a message of its own.
//
// # Safety
//
// Writes need a credential (Config.Auth), which then guards every page
// and /metrics (Config.Metrics): a bearer token (an Authorization header,
// or a cookie that the sign-in form sets) or HTTP basic authentication,
// compared in constant time. A request without it is shown the sign-in
// form or a refusal, and nothing of the installation. A sign-in with
// the token starts a session of its own, which sign-out ends and which
// expires (Config.SessionLifetime). The console answers only to its own
// names (localhost, IP addresses, Config.AllowedHosts), so that a page of
// another site whose DNS name was rebound to its address cannot read it.
// Every change is a POST behind net/http's CrossOriginProtection; every
// page is an html/template page with a Content-Security-Policy that allows
// no inline script, X-Content-Type-Options: nosniff and Cache-Control:
// no-store; the bidirectional controls of what messages and handlers
// wrote (keys, reasons) are shown as their code points, not applied, so
// that an operator reads what is stored. Each change is logged with its
// actor and counted in sqsonce_console_actions_total. Which addresses the
// console listens on is its server's business: sqsonce console refuses to
// listen beyond the loopback interface without a credential.
package console
