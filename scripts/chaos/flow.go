package main

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sqsonce/sqsonce/worker"
)

// Flow is the flow-control campaign, in three parts that run at once, each
// on queues, a ledger and a downstream of its own: three workers on one
// PostgreSQL ledger and a standard queue; two on another and a FIFO queue;
// one on a bbolt file and a standard queue. Every queue redrives after 4
// receives, its visibility timeout is 5 s and the workers back off 1-4 s,
// so that each outage of the downstream, 80 s (5 x the longest back-off x
// maxReceiveCount), would burn every receive several times over without
// the pause: 503s and a hang past the handler timeout on the first, 429
// with Retry-After and refused connections on the FIFO one, refused
// connections on the bbolt one. The workers' flow control has
// its defaults (the trip, probes of up to 10 s) and limits: 30 operations
// a second across the fleet, and 5 a second for each tenant (the body's
// /tenant), with a hot tenant that sends bursts of 30 among 20 (or 10)
// quiet ones, and on the shared ledgers 6 running at once across the
// fleet; two poison operations fail (503) before, during and after the
// outages. Runs are killed (SIGKILL) and drained at random, some in the
// windows around a completion or in the handler, and stopped (SIGSTOP)
// past their leases, during outages or while limited; their SQS calls get
// no faults (the other campaigns have them). The PostgreSQL server's
// clock is 90 s ahead of the workers' in the first part and 90 s behind in
// the second (libfaketime), longer than every lease, pause and probe
// interval: the ledger's clock and the hosts' must never be mixed.
// The checks (DownstreamOutages, FlowControl) must find nothing dead-lettered
// because of an outage or a limit, no second above a limit at the
// downstream, no call begun above the concurrency limit but beside a
// stopped run, no call during an outage but those that found it and one
// probe at a time, nothing expired, no deferred copy run beside its
// original and no FIFO message sent again; the audit holds the rest.
func Flow(short bool) []*Campaign {
	limits := &worker.FlowConfig{Rate: 30, Burst: 1, Partitions: []worker.FlowPartition{{Pointer: "/tenant", Rate: 5, Burst: 1}}}
	// On the shared ledgers, at most 6 handlers at once across the fleet
	// (of the 24 or 16 the workers have): each of three workers holds
	// about 2, and calls that hang past the 10 s handler timeout still
	// trip its pause (see worker.Trip).
	shared := *limits
	shared.Concurrency = 6
	down := func(d time.Duration, kinds ...string) Fault {
		var list []Outage
		for _, k := range kinds {
			list = append(list, Outage{Kind: k, N: 1, For: d})
		}
		return Outages(list...)
	}
	out := pick(short, 80*time.Second, 20*time.Second)
	// A poison operation's own path, once the load is sent: each copy
	// of it (a lost send acknowledgement makes one) is received
	// maxReceiveCount times, 5 s out of sight and backing off up to 4 s
	// each time, and held on its last receive for the trip's window (30
	// s) in case an outage is found; a copy waits for the one at work.
	// Two copies take up to 2 x (4 x 9 s + 30 s), a little over 2
	// minutes.
	const quiesce = 3 * time.Minute
	return []*Campaign{{
		Name:  "flow",
		Title: "three workers on one PostgreSQL ledger and a standard queue (maxReceiveCount 4), flow control with a rate and a rate per tenant, the downstream down",
		Load:  flowLoad(pick(short, 1800, 300), 20, false),
		System: System{MaxReceive: 4, Postgres: true, Workers: 3, Concurrency: 8, SendLost: 0.03,
			Quiesce: quiesce, Flow: &shared, ClockOffset: 90 * time.Second},
		Runs:   Runs{Duration: pick(short, 330*time.Second, 100*time.Second), Ends: map[string]int{endKill: 3, endTerm: 2, endWindowA: 1, endInHandler: 1}},
		Faults: []Fault{down(out, down503, downHang), Pauses(3, false)},
		Checks: []Check{FlowControl, ClockOffset},
	}, {
		Name:  "flow-fifo",
		Title: "two workers on one PostgreSQL ledger and a FIFO queue (maxReceiveCount 4), a group per tenant, the same flow control, the downstream down",
		Load:  flowLoad(pick(short, 700, 150), 10, true),
		System: System{FIFO: true, MaxReceive: 4, Postgres: true, Workers: 2, Concurrency: 8, SendLost: 0.03,
			Quiesce: quiesce, Flow: &shared, ClockOffset: -90 * time.Second},
		Runs:   Runs{Duration: pick(short, 300*time.Second, 60*time.Second), Ends: map[string]int{endKill: 2, endTerm: 1}},
		Faults: []Fault{down(out, down429, downRefuse), Pauses(1, false)},
		Checks: []Check{FlowControl, GroupOrder, ClockOffset},
	}, {
		Name:   "flow-bbolt",
		Title:  "one worker on a bbolt ledger and a standard queue (maxReceiveCount 4), the same flow control, the downstream down",
		Load:   flowLoad(pick(short, 400, 100), 20, false),
		System: System{MaxReceive: 4, Workers: 1, Concurrency: 8, SendLost: 0.03, Quiesce: quiesce, Flow: limits},
		Runs:   Runs{Duration: pick(short, 200*time.Second, 40*time.Second), Ends: map[string]int{endKill: 1, endTerm: 1}},
		Faults: []Fault{down(out, downRefuse), Pauses(1, false)},
		Checks: []Check{FlowControl},
	}}
}

// flowLoad makes n operations of a hot tenant (a third of them, sent in
// bursts of 30) and of quiet ones (each sent alone, one in 20 twice), two
// of them poison ({"fail":1000000}: 503 on every execution); on a FIFO
// queue each tenant is a message group.
func flowLoad(n, quiet int, fifo bool) func(*rand.Rand) *workload {
	return func(rng *rand.Rand) *workload {
		w := newWorkloadOf(time.Second)
		var burst unit
		for i := range n {
			id, tenant, cls, fail := fmt.Sprintf("fl-%d", i), fmt.Sprintf("q%d", rng.IntN(quiet)), normal, ""
			if rng.IntN(3) == 0 {
				tenant = "hot"
			}
			if i == n/10 || i == n/2 {
				cls, fail = poison, `,"fail":1000000`
			}
			o := w.add(&op{id: id, class: cls, bodies: []string{fmt.Sprintf(`{"id":%q,"tenant":%q,"amount":%d%s}`, id, tenant, rng.IntN(1000), fail)}})
			if fifo {
				o.group = tenant
			}
			if tenant == "hot" {
				if burst.msgs = append(burst.msgs, w.newMsg(o, 0)); len(burst.msgs) == 30 {
					w.main, burst = append(w.main, burst), unit{}
				}
				continue
			}
			w.main = append(w.main, unit{msgs: []*msg{w.newMsg(o, 0)}})
			if rng.IntN(20) == 0 {
				w.main = append(w.main, unit{msgs: []*msg{w.newMsg(o, 0)}})
			}
		}
		if len(burst.msgs) > 0 {
			w.main = append(w.main, burst)
		}
		return w
	}
}
