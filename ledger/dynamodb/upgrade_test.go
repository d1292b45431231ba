package dynamodb_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsonce/sqsonce/internal/dynamotest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/dynamodb"
	"github.com/sqsonce/sqsonce/ledger/ledgertest"
)

// v1Ledger is a worker of the sqsonce before flow control on a table, with
// its requests kept as they were: the schema item its Init wrote and its
// Open read, its claim, failure and completion, and the scan filter and
// decoder of its reads.
type v1Ledger struct {
	t     *testing.T
	c     *ddb.Client
	table string
	now   time.Time
}

func (o *v1Ledger) ns() types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(o.now.UnixNano(), 10)}
}

func v1N(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func v1S(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

// init writes the schema item as its Init did.
func (o *v1Ledger) init() {
	o.t.Helper()
	_, err := o.c.PutItem(context.Background(), &ddb.PutItemInput{TableName: aws.String(o.table), Item: map[string]types.AttributeValue{
		"pk": v1S("meta#schema"), "schema_version": v1N(1), "written": o.ns(),
	}})
	if err != nil {
		o.t.Fatal(err)
	}
}

// open checks the schema item as its Open did.
func (o *v1Ledger) open() {
	o.t.Helper()
	out, err := o.c.GetItem(context.Background(), &ddb.GetItemInput{TableName: aws.String(o.table),
		Key: map[string]types.AttributeValue{"pk": v1S("meta#schema")}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		o.t.Fatal(err)
	}
	v, ok := out.Item["schema_version"].(*types.AttributeValueMemberN)
	if !ok || v.Value != "1" {
		o.t.Fatalf("the older worker refuses the schema item %v", out.Item)
	}
}

// update runs one of its conditional UpdateItems and reports whether the
// condition held.
func (o *v1Ledger) update(key, upd, cond string, names map[string]string, vals map[string]types.AttributeValue) bool {
	o.t.Helper()
	_, err := o.c.UpdateItem(context.Background(), &ddb.UpdateItemInput{
		TableName: aws.String(o.table), Key: map[string]types.AttributeValue{"pk": v1S("op#" + key)},
		UpdateExpression: aws.String(upd), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: names, ExpressionAttributeValues: vals,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false
	}
	if err != nil {
		o.t.Fatal(err)
	}
	return true
}

var v1Names = map[string]string{"#v": "v", "#state": "state", "#permanent": "permanent", "#attempts": "attempts", "#owner": "owner",
	"#lease_expiry": "lease_expiry", "#claimed": "claimed", "#first_seen": "first_seen", "#updated": "updated",
	"#expires": "expires", "#ttl": "ttl", "#write_id": "write_id"}

func (o *v1Ledger) claim(key, owner string) bool {
	exp := o.now.Add(24 * time.Hour)
	vals := map[string]types.AttributeValue{":v": v1N(1), ":inprog": v1S("in_progress"), ":false": &types.AttributeValueMemberBOOL{Value: false},
		":zero": v1N(0), ":one": v1N(1), ":owner": v1S(owner), ":lease": v1N(o.now.Add(time.Minute).UnixNano()), ":now": o.ns(),
		":exp": v1N(exp.UnixNano()), ":ttl": v1N(exp.Unix() + 1), ":wid": v1S("w"), ":failed": v1S("failed")}
	return o.update(key, "SET #v = :v, #state = :inprog, #permanent = :false, #attempts = if_not_exists(#attempts, :zero) + :one, #owner = :owner, "+
		"#lease_expiry = :lease, #claimed = :now, #first_seen = if_not_exists(#first_seen, :now), #updated = :now, #expires = :exp, #ttl = :ttl, #write_id = :wid",
		"attribute_not_exists(#pk) OR (#expires > :now AND ((#state = :failed AND #permanent = :false) OR (#state = :inprog AND #lease_expiry <= :now)))",
		withPK(v1Names), vals)
}

func (o *v1Ledger) fail(key, owner, text string) bool {
	exp := o.now.Add(24 * time.Hour)
	names := map[string]string{"#state": "state", "#permanent": "permanent", "#lease_expiry": "lease_expiry", "#last_error": "last_error",
		"#owner": "owner", "#expires": "expires", "#updated": "updated", "#ttl": "ttl", "#write_id": "write_id"}
	vals := map[string]types.AttributeValue{":failed": v1S("failed"), ":perm": &types.AttributeValueMemberBOOL{Value: false}, ":err": v1S(text),
		":now": o.ns(), ":owner": v1S(owner), ":inprog": v1S("in_progress"), ":exp": v1N(exp.UnixNano()), ":ttl": v1N(exp.Unix() + 1), ":wid": v1S("w2")}
	return o.update(key, "SET #state = :failed, #permanent = :perm, #last_error = :err, #updated = :now, #expires = :exp, #ttl = :ttl, #write_id = :wid REMOVE #lease_expiry",
		"#expires > :now AND #owner = :owner AND #state = :inprog", names, vals)
}

func (o *v1Ledger) complete(key, owner string) bool {
	exp := o.now.Add(24 * time.Hour)
	names := map[string]string{"#state": "state", "#completed": "completed", "#lease_expiry": "lease_expiry", "#last_error": "last_error",
		"#result": "result", "#owner": "owner", "#expires": "expires", "#updated": "updated", "#ttl": "ttl", "#write_id": "write_id"}
	vals := map[string]types.AttributeValue{":complete": v1S("complete"), ":now": o.ns(), ":owner": v1S(owner), ":inprog": v1S("in_progress"),
		":exp": v1N(exp.UnixNano()), ":ttl": v1N(exp.Unix() + 1), ":wid": v1S("w3")}
	return o.update(key, "SET #state = :complete, #completed = :now, #updated = :now, #expires = :exp, #ttl = :ttl, #write_id = :wid REMOVE #lease_expiry, #last_error, #result",
		"#expires > :now AND #owner = :owner AND #state = :inprog", names, vals)
}

func withPK(m map[string]string) map[string]string {
	m2 := map[string]string{"#pk": "pk"}
	for k, v := range m {
		m2[k] = v
	}
	return m2
}

// records scans the table as its ForEach did (its filter), decodes every
// item with its decoder (v1RecordOf), and returns the keys by state.
func (o *v1Ledger) records() map[string]string {
	o.t.Helper()
	out, err := o.c.Scan(context.Background(), &ddb.ScanInput{
		TableName:                 aws.String(o.table),
		ConsistentRead:            aws.Bool(true),
		FilterExpression:          aws.String("begins_with(#pk, :prefix) AND ((#expires > :now) OR attribute_not_exists(#expires) OR attribute_not_exists(#state) OR attribute_not_exists(#v) OR #v <> :v)"),
		ExpressionAttributeNames:  map[string]string{"#pk": "pk", "#expires": "expires", "#state": "state", "#v": "v"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":prefix": v1S("op#"), ":now": o.ns(), ":v": v1N(1)},
	})
	if err != nil {
		o.t.Fatal(err)
	}
	got := map[string]string{}
	for _, item := range out.Items {
		key, state, err := v1RecordOf(item)
		if err != nil {
			o.t.Fatalf("the older worker cannot read an item: %v", err)
		}
		got[key] = state
	}
	return got
}

// v1RecordOf is what the older decoder checked of an item: the attributes it
// names, each of its type, a layout version 1 and a known state. It names
// no other attribute.
func v1RecordOf(item map[string]types.AttributeValue) (key, state string, err error) {
	str := func(name string, required bool) string {
		v, ok := item[name]
		if !ok {
			if required && err == nil {
				err = fmt.Errorf("attribute %s missing", name)
			}
			return ""
		}
		s, ok := v.(*types.AttributeValueMemberS)
		if !ok && err == nil {
			err = fmt.Errorf("attribute %s of type %T", name, v)
		}
		if !ok {
			return ""
		}
		return s.Value
	}
	num := func(name string, required bool) {
		v, ok := item[name]
		if !ok {
			if required && err == nil {
				err = fmt.Errorf("attribute %s missing", name)
			}
			return
		}
		if _, ok := v.(*types.AttributeValueMemberN); !ok && err == nil {
			err = fmt.Errorf("attribute %s of type %T", name, v)
		}
	}
	bin := func(name string) {
		if v, ok := item[name]; ok {
			if _, ok := v.(*types.AttributeValueMemberB); !ok && err == nil {
				err = fmt.Errorf("attribute %s of type %T", name, v)
			}
		}
	}
	pk := str("pk", true)
	key, ok := strings.CutPrefix(pk, "op#")
	if !ok && err == nil {
		err = fmt.Errorf("partition key %q is not an operation's", pk)
	}
	if v, ok := item["v"].(*types.AttributeValueMemberN); !ok || v.Value != "1" {
		return key, "", fmt.Errorf("%q: layout version %v", key, item["v"])
	}
	state = str("state", true)
	if state != "in_progress" && state != "complete" && state != "failed" && err == nil {
		err = fmt.Errorf("state %q", state)
	}
	if _, ok := item["permanent"].(*types.AttributeValueMemberBOOL); !ok && err == nil {
		err = fmt.Errorf("attribute permanent of type %T", item["permanent"])
	}
	num("attempts", true)
	bin("fingerprint")
	str("owner", false)
	num("lease_expiry", false)
	num("first_seen", true)
	num("claimed", true)
	num("updated", true)
	num("completed", false)
	num("expires", true)
	str("last_error", false)
	str("message_id", false)
	bin("result")
	if err != nil {
		return key, "", fmt.Errorf("%q: %w", key, err)
	}
	return key, state, nil
}

// TestUpgrade_V1Table: a table made by the sqsonce before flow control is
// refused by this one until `ledger init` upgrades it; then both work on
// it: the older worker's requests (kept above as they were) run on the
// upgraded table, its scans leave the flow items out and its decoder reads
// every record this version wrote; and this version reads what it wrote.
func TestUpgrade_V1Table(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := dynamotest.NewClient(t, nil)
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	table := dynamotest.Table(t, c)
	createRaw(t, c, table, "pk")
	old := &v1Ledger{t: t, c: c, table: table, now: clock}
	old.init()
	old.open()
	for _, key := range []string{"done", "failed", "running"} {
		if !old.claim(key, "a") {
			t.Fatalf("the older worker's claim of %q", key)
		}
	}
	if !old.complete("done", "a") || !old.fail("failed", "a", "timeout") {
		t.Fatal("the older worker's transitions")
	}

	opts := dynamodb.Options{Table: table, Retention: 24 * time.Hour, Now: func() time.Time { return clock }}
	_, err := dynamodb.Open(ctx, c, opts)
	if !errors.Is(err, ledger.ErrNoSchema) || !strings.Contains(err.Error(), "sqsonce ledger init") {
		t.Fatalf("open of a table without flow control: %v", err)
	}
	if _, err := dynamodb.Init(ctx, c, opts); err != nil {
		t.Fatal(err)
	}
	l := open(t, c, opts)
	if v, err := l.FlowSchema(ctx); err != nil || v != ledger.FlowSchemaVersion {
		t.Fatalf("flow schema after init: %d, %v", v, err)
	}
	for key, state := range map[string]ledger.State{"done": ledger.StateComplete, "failed": ledger.StateFailed, "running": ledger.StateInProgress} {
		r, err := l.Get(ctx, key)
		if err != nil || r.State != state || r.OwnFailures != 0 || !r.DeadLettered.IsZero() {
			t.Fatalf("%s written by the older worker: %+v, %v", key, r, err)
		}
	}
	mustClaim(t, l, "failed", "b", ledger.Claimed)
	if err := l.Fail(ctx, ledger.Failure{Key: "failed", Owner: "b", Err: "503", Outage: true}); err != nil {
		t.Fatal(err)
	}
	if err := l.MarkDeadLettered(ctx, []ledger.DeadLetter{{Key: "done", Owner: "b", Reason: "sent twice 17", CopyID: "copy-1"}})[0]; err != nil {
		t.Fatal(err)
	}
	for _, step := range []error{
		second(l.PutFlow(ctx, ledger.FlowDoc{Scope: "q", Data: []byte("paused")}, 0)),
		second(ledgertest.ReserveEach(ctx, l, []ledgertest.Ask{{Bucket: "b", Rate: 10, Burst: 1, N: 2}})),
		second(l.TakeSlots(ctx, []ledger.SlotRequest{{Pool: "p", Limit: 2, N: 1, Owner: "b", Lease: time.Minute}})),
		l.PutProcess(ctx, ledger.Process{ID: "h/1/x", TTL: time.Minute}),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}

	// The older worker on the upgraded table.
	old.open()
	if got := fmt.Sprint(old.records()); got != "map[done:complete failed:failed running:in_progress]" {
		t.Fatalf("the older worker reads %s", got)
	}
	old.now = clock.Add(time.Second)
	if !old.claim("failed", "old") || !old.fail("failed", "old", "again") || !old.claim("new", "old") || !old.complete("new", "old") {
		t.Fatal("the older worker's requests on the upgraded table")
	}
	if got := fmt.Sprint(old.records()); got != "map[done:complete failed:failed new:complete running:in_progress]" {
		t.Fatalf("the older worker reads %s", got)
	}
	r, err := l.Get(ctx, "failed")
	if err != nil || r.OutageFailures != 1 || r.OwnFailures != 0 || r.LastError != "again" || r.Attempts != 3 {
		t.Fatalf("failed after the older worker: %+v, %v", r, err)
	}
	if r, err := l.Get(ctx, "done"); err != nil || r.DeadLetterCopyID != "copy-1" {
		t.Fatalf("a mark after the older worker's writes: %+v, %v", r, err)
	}
}

// TestUpgrade_FlowSchema1: a table whose schema item records flow schema 1
// (the sqsonce before the history) is refused by Open, naming `sqsonce
// ledger init`, which records this version's; the older worker's requests
// leave the history this version writes in place.
func TestUpgrade_FlowSchema1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := dynamotest.NewClient(t, nil)
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	table := dynamotest.Table(t, c)
	opts := dynamodb.Options{Table: table, Retention: 24 * time.Hour, Now: func() time.Time { return clock }}
	if _, err := dynamodb.Init(ctx, c, opts); err != nil {
		t.Fatal(err)
	}
	_, err := c.UpdateItem(ctx, &ddb.UpdateItemInput{TableName: aws.String(table),
		Key:              map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "meta#schema"}},
		UpdateExpression: aws.String("SET flow_schema = :one"), ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = dynamodb.Open(ctx, c, opts)
	if !errors.Is(err, ledger.ErrNoSchema) || !strings.Contains(err.Error(), "sqsonce ledger init") || !strings.Contains(err.Error(), "flow schema 1") {
		t.Fatalf("open of a table of flow schema 1: %v", err)
	}
	if _, err := dynamodb.Init(ctx, c, opts); err != nil {
		t.Fatal(err)
	}
	l := open(t, c, opts)
	mustClaim(t, l, "k", "b", ledger.Claimed)
	if err := l.Fail(ctx, ledger.Failure{Key: "k", Owner: "b", Err: "timeout"}); err != nil {
		t.Fatal(err)
	}
	old := &v1Ledger{t: t, c: c, table: table, now: clock}
	if !old.claim("k", "a") || !old.complete("k", "a") {
		t.Fatal("the older worker's claim and completion on the upgraded table")
	}
	r, err := l.Get(ctx, "k")
	if err != nil || r.State != ledger.StateComplete || len(r.History) != 1 || r.History[0].Owner != "b" || r.History[0].Error != "timeout" {
		t.Fatalf("after this version's failure and the older worker's completion: %+v, %v", r, err)
	}
}
