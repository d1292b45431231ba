package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/internal/sqstest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/replay"
	"github.com/sqsonce/sqsonce/worker"
)

var (
	_ replay.Ledger    = (*ledger.DB)(nil)
	_ replay.SQSClient = (*sqs.Client)(nil)
)

func TestConfig_Validate(t *testing.T) {
	t.Parallel()
	keyOf := func(types.Message) (string, []byte, error) { return "", nil, nil }
	valid := replay.DefaultConfig()
	valid.From, valid.To, valid.KeyOf = "http://q/dlq", "http://q/main", keyOf
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	cases := []struct {
		field string
		edit  func(c *replay.Config)
		want  string
	}{
		{"From", func(c *replay.Config) { c.From = "" }, "From is empty"},
		{"To", func(c *replay.Config) { c.To = "" }, "To is empty"},
		{"From", func(c *replay.Config) { c.To = c.From }, "the same queue"},
		{"KeyOf", func(c *replay.Config) { c.KeyOf = nil }, "KeyOf is nil"},
		{"Max", func(c *replay.Config) { c.Max = -1 }, "Max -1"},
		{"MaxReplays", func(c *replay.Config) { c.MaxReplays = 0 }, "MaxReplays 0"},
		{"Rate", func(c *replay.Config) { c.Rate = -1 }, "Rate -1"},
		{"KeyGlob", func(c *replay.Config) { c.KeyGlob = "[" }, `KeyGlob "["`},
		{"Since", func(c *replay.Config) { c.Since, c.Until = time.Now(), time.Now().Add(-time.Hour) }, "not before the end of the window"},
		{"Hold", func(c *replay.Config) { c.Hold = 0 }, "Hold 0s: want 1s to 12h"},
		{"Hold", func(c *replay.Config) { c.Hold = 13 * time.Hour }, "Hold 13h0m0s"},
		{"Concurrency", func(c *replay.Config) { c.Concurrency = 65 }, "Concurrency 65"},
	}
	for _, tc := range cases {
		c := valid
		tc.edit(&c)
		err := c.Validate()
		var fe *replay.FieldError
		if !errors.Is(err, replay.ErrInvalidConfig) || !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want a FieldError for %s containing %q", tc.field, err, tc.field, tc.want)
		}
		if _, err := replay.New(c, sqs.New(sqs.Options{}), nil); !errors.Is(err, replay.ErrInvalidConfig) {
			t.Errorf("New with a bad %s: %v", tc.field, err)
		}
	}
	// Every problem is named, not only the first.
	var c replay.Config
	if err := c.Validate(); strings.Count(err.Error(), "\n") < 5 {
		t.Errorf("a zero config: %v", err)
	}
	if _, err := replay.New(valid, nil, nil); !errors.Is(err, replay.ErrInvalidConfig) {
		t.Errorf("New without a client or ledger: %v", err)
	}
}

func TestReplayer_Run(t *testing.T) {
	t.Parallel()

	// Body and attributes travel; SqsonceReplays counts; MaxReplays stops.
	t.Run("MovesAndCounts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		full := map[string]types.MessageAttributeValue{
			worker.AttrReason: str("conflict"), worker.AttrSourceMessageID: str("src-full"),
		}
		for i := range 8 {
			full[fmt.Sprintf("a%d", i)] = str(strconv.Itoa(i))
		}
		b.put(b.queue.DLQURL, []seed{
			{body: `{"id":"a","n":[1,2,{"x":"y"}]}`, attrs: map[string]types.MessageAttributeValue{
				"tenant": str("t1"), "prio": num(5),
				"blob":            {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2, 255}},
				worker.AttrReason: str("handler failed permanently"), worker.AttrSourceMessageID: str("src-a"),
			}},
			{body: `{"id":"b"}`, attrs: map[string]types.MessageAttributeValue{replay.AttrReplays: num(2)}},
			{body: `{"id":"c"}`, attrs: map[string]types.MessageAttributeValue{replay.AttrReplays: num(3)}},
			{body: `{"id":"full"}`, attrs: full},
		})

		sum, err := b.run(b.config())
		if err != nil {
			t.Fatalf("%v\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 3, SkippedMaxReplays: 1})
		if !b.logged("left in the source queue: replayed too often") {
			t.Errorf("the message left for MaxReplays was not reported:\n%s", b.log)
		}
		if left := b.visible(b.queue.DLQURL, "the DLQ"); len(left) != 1 || left["c"].Body == nil {
			t.Fatalf("left in the DLQ: %v, want c, visible", ids(left))
		}
		got := b.visible(b.queue.URL, "the queue")
		if moved := ids(got); !slices.Equal(moved, []string{"a", "b", "full"}) {
			t.Fatalf("moved %v", moved)
		}
		a := got["a"]
		if aws.ToString(a.Body) != `{"id":"a","n":[1,2,{"x":"y"}]}` {
			t.Errorf("body %q", aws.ToString(a.Body))
		}
		if attr(a, "tenant") != "t1" || attr(a, "prio") != "5" || aws.ToString(a.MessageAttributes["prio"].DataType) != "Number" ||
			!bytes.Equal(a.MessageAttributes["blob"].BinaryValue, []byte{0, 1, 2, 255}) ||
			attr(a, worker.AttrReason) != "handler failed permanently" || attr(a, worker.AttrSourceMessageID) != "src-a" {
			t.Errorf("attributes of a: %+v", a.MessageAttributes)
		}
		if attr(a, replay.AttrReplays) != "1" || aws.ToString(a.MessageAttributes[replay.AttrReplays].DataType) != "Number" || attr(got["b"], replay.AttrReplays) != "3" {
			t.Errorf("SqsonceReplays: a %q, b %q", attr(a, replay.AttrReplays), attr(got["b"], replay.AttrReplays))
		}
		f := got["full"].MessageAttributes
		if _, ok := f[worker.AttrReason]; len(f) != 10 || ok || attr(got["full"], replay.AttrReplays) != "1" ||
			attr(got["full"], worker.AttrSourceMessageID) != "src-full" || attr(got["full"], "a7") != "7" {
			t.Errorf("a message with 10 attributes: %d attributes, want its own 8, SqsonceSourceMessageId and SqsonceReplays: %v", len(f), f)
		}

		// A higher limit lets c go.
		cfg := b.config()
		cfg.MaxReplays = 5
		sum, err = b.run(cfg)
		if err != nil {
			t.Fatalf("%v\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 1})
		got = b.visible(b.queue.URL, "the queue")
		if moved := ids(got); !slices.Equal(moved, []string{"a", "b", "c", "full"}) || attr(got["c"], replay.AttrReplays) != "4" {
			t.Fatalf("after the second replay the queue holds %v; c has SqsonceReplays %q, want 4", moved, attr(got["c"], replay.AttrReplays))
		}
	})

	// A message with ten attributes of its own has no room for
	// SqsonceReplays: it is left, counted and reported, and its failed
	// record is not reset. One that carries SqsonceReplays among its ten
	// moves with the count raised.
	t.Run("NoRoom", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		b.prepare(map[string]string{"full": "permanent"})
		full := map[string]types.MessageAttributeValue{}
		counted := map[string]types.MessageAttributeValue{replay.AttrReplays: num(1)}
		for i := range 10 {
			full[fmt.Sprintf("a%d", i)] = str(strconv.Itoa(i))
			if i < 9 {
				counted[fmt.Sprintf("a%d", i)] = str(strconv.Itoa(i))
			}
		}
		b.put(b.queue.DLQURL, []seed{
			{body: `{"id":"full"}`, attrs: full},
			{body: `{"id":"counted"}`, attrs: counted},
			{body: `{"id":"plain"}`},
		})
		sum, err := b.run(b.config())
		if !errors.Is(err, replay.ErrNotMoved) || !strings.Contains(err.Error(), "1 messages could not be moved") {
			t.Fatalf("%v, want ErrNotMoved for one message\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 2, NoRoom: 1})
		if !b.logged("left in the source queue: too many message attributes of its own: no room for SqsonceReplays, which bounds replays (and on a FIFO target SqsonceDeduplicationId); move it by hand") {
			t.Errorf("the message without room was not reported:\n%s", b.log)
		}
		if left := b.visible(b.queue.DLQURL, "the DLQ"); !slices.Equal(ids(left), []string{"full"}) || len(left["full"].MessageAttributes) != 10 {
			t.Fatalf("left in the DLQ: %v, want full, as it was", ids(left))
		}
		got := b.visible(b.queue.URL, "the queue")
		if !slices.Equal(ids(got), []string{"counted", "plain"}) || attr(got["counted"], replay.AttrReplays) != "2" ||
			len(got["counted"].MessageAttributes) != 10 || attr(got["plain"], replay.AttrReplays) != "1" {
			t.Fatalf("moved %v: %+v", ids(got), got)
		}
		if rec, err := b.db.Get(context.Background(), "full"); err != nil || !rec.Permanent {
			t.Fatalf("the record of the message left was reset: %+v, %v", rec, err)
		}

		// A dry run says the same.
		cfg := b.config()
		cfg.DryRun = true
		sum, err = b.run(cfg)
		if !errors.Is(err, replay.ErrNotMoved) {
			t.Fatalf("dry run: %v, want ErrNotMoved", err)
		}
		b.want(sum, replay.Summary{NoRoom: 1, DryRun: true})
	})

	// On a FIFO target the group stays and the deduplication id names the
	// message copied: a message dead-lettered moments after its operation
	// was sent (with the key as deduplication id) moves all the same.
	t.Run("FIFO", func(t *testing.T) {
		t.Parallel()
		b := setup(t, true)
		b.put(b.queue.URL, []seed{{body: `{"id":"k9"}`, group: "g9", dedup: "k9"}})
		if orig := b.take(b.queue.URL); len(orig) != 1 {
			t.Fatalf("%d originals", len(orig))
		}
		dlq := b.put(b.queue.DLQURL, []seed{
			{body: `{"id":"k1","n":1}`, group: "g1", dedup: "d1"},
			{body: `{"id":"k2","n":2}`, group: "g1", dedup: "d2"},
			{body: `{"id":"k3"}`, group: "g2", dedup: "d3", attrs: map[string]types.MessageAttributeValue{"x": str("y")}},
			{body: `{"id":"k9"}`, group: "g9", dedup: "d9"},
		})
		copyOf := map[string]string{"k1": dlq[0], "k2": dlq[1], "k3": dlq[2], "k9": dlq[3]}

		sum, err := b.run(b.config())
		if err != nil {
			t.Fatalf("%v\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 4})
		var order []string
		for _, m := range b.take(b.queue.URL) {
			k := id(m)
			order = append(order, k)
			group, dedup := m.Attributes["MessageGroupId"], m.Attributes["MessageDeduplicationId"]
			if want := map[string]string{"k1": "g1", "k2": "g1", "k3": "g2", "k9": "g9"}[k]; group != want || dedup != worker.CopyDeduplicationID(copyOf[k]) {
				t.Errorf("%s: group %q, deduplication id %q; want %q and the copy id of %s", k, group, dedup, want, copyOf[k])
			}
		}
		if len(order) != 4 || slices.Index(order, "k1") > slices.Index(order, "k2") {
			t.Fatalf("target received %v, want k1 before k2, k3 and k9", order)
		}
		if left := b.take(b.queue.DLQURL); len(left) != 0 {
			t.Fatalf("left in the DLQ: %d messages", len(left))
		}
	})

	// Two dead letters of one operation with different bodies (a conflict,
	// or a second failure after a replay) both arrive: SQS must not take the
	// second copy for a duplicate of the first.
	t.Run("FIFOOneKeyTwoMessages", func(t *testing.T) {
		t.Parallel()
		b := setup(t, true)
		b.prepare(map[string]string{"k": "failed"})
		b.put(b.queue.DLQURL, []seed{
			{body: `{"id":"k","v":1}`, group: "g", dedup: "d1"},
			{body: `{"id":"k","v":2}`, group: "g", dedup: "d2"},
		})
		sum, err := b.run(b.config())
		if err != nil {
			t.Fatalf("%v\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 2, Reset: 2})
		var got []string
		for _, m := range b.take(b.queue.URL) {
			got = append(got, aws.ToString(m.Body))
		}
		if want := []string{`{"id":"k","v":1}`, `{"id":"k","v":2}`}; !slices.Equal(got, want) {
			t.Fatalf("the target received %q, want %q", got, want)
		}
		if left := b.take(b.queue.DLQURL); len(left) != 0 {
			t.Fatalf("left in the DLQ: %d messages", len(left))
		}
	})

	// A second copy of one dead letter, after a run whose delete from the
	// source failed, is dropped by SQS as a duplicate of the first: the
	// target holds one copy, and the dead letter is deleted.
	t.Run("FIFOCopyAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, true)
		b.put(b.queue.DLQURL, []seed{{body: `{"id":"k"}`, group: "g", dedup: "d"}})
		faults := sqstest.NewFaults(1, nil)
		faults.Set("DeleteMessageBatch", sqstest.Rates{ServerError: 1})
		cfg := b.config()
		cfg.Hold = time.Second
		r, err := replay.New(cfg, sqstest.NewClient(t, faults), b.db)
		if err != nil {
			t.Fatal(err)
		}
		sum, err := r.Run(t.Context())
		if !errors.Is(err, replay.ErrNotDeleted) {
			t.Fatalf("%v, want ErrNotDeleted\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 1, DeleteFailed: 1})

		// The dead letter comes back once its hold runs out; the next run
		// sends it again.
		b.unhideAll(b.queue.DLQURL, 1)
		faults.SetEnabled(false)
		r, err = replay.New(cfg, sqstest.NewClient(t, faults), b.db)
		if err != nil {
			t.Fatal(err)
		}
		sum, err = r.Run(t.Context())
		if err != nil {
			t.Fatalf("%v\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 1})
		if got := b.take(b.queue.URL); len(got) != 1 || id(got[0]) != "k" {
			t.Fatalf("the target received %d copies, want 1", len(got))
		}
		if left := b.take(b.queue.DLQURL); len(left) != 0 {
			t.Fatalf("left in the DLQ: %d messages", len(left))
		}
	})

	// The ledger decides: complete stays (or is dropped), failed is reset
	// and moved, in progress and absent move, keyless stays unless asked.
	t.Run("Ledger", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		b.prepare(map[string]string{"done": "complete", "retry": "failed", "perm": "permanent", "busy": "in_progress"})
		b.put(b.queue.DLQURL, append(bodies("done", "retry", "perm", "busy", "new"), seed{body: `{"no_id":1}`}))

		sum, err := b.run(b.config())
		if err != nil {
			t.Fatalf("%v\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 4, SkippedComplete: 1, SkippedKeyless: 1, Reset: 2})
		if left := b.visible(b.queue.DLQURL, "the DLQ"); !slices.Equal(ids(left), []string{"", "done"}) {
			t.Fatalf("left in the DLQ: %v, want the keyless message and done", ids(left))
		}
		if got := b.visible(b.queue.URL, "the queue"); !slices.Equal(ids(got), []string{"busy", "new", "perm", "retry"}) {
			t.Fatalf("moved %v", ids(got))
		}

		cfg := b.config()
		cfg.DropComplete, cfg.IncludeKeyless = true, true
		sum, err = b.run(cfg)
		if err != nil {
			t.Fatalf("%v\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 1, DroppedComplete: 1})
		if left := b.visible(b.queue.DLQURL, "the DLQ"); len(left) != 0 {
			t.Fatalf("left in the DLQ: %v", ids(left))
		}
		if got := b.visible(b.queue.URL, "the queue"); !slices.Equal(ids(got), []string{"", "busy", "new", "perm", "retry"}) {
			t.Fatalf("in the queue: %v", ids(got))
		}
		for key, want := range map[string]ledger.State{"done": ledger.StateComplete, "retry": ledger.StateFailed, "perm": ledger.StateFailed, "busy": ledger.StateInProgress} {
			rec, err := b.db.Get(context.Background(), key)
			if err != nil || rec.State != want || rec.Permanent {
				t.Errorf("%s: %+v, %v; want %s, not permanent", key, rec, err, want)
			}
		}
	})

	// A dead letter that points to its payload in S3 is decided by the
	// object's key and moves as it is: the pointer body and its
	// ExtendedPayloadSize attribute.
	t.Run("S3Pointer", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		s3c := sqstest.NewS3Client(t, nil)
		bucket := sqstest.CreateBucket(t, s3c)
		sqstest.PutObject(t, s3c, bucket, "big", []byte(`{"id":"big"}`))
		sqstest.PutObject(t, s3c, bucket, "done", []byte(`{"id":"done"}`))
		b.prepare(map[string]string{"big": "permanent", "done": "complete"})
		pointer := func(key string) seed {
			return seed{body: worker.S3Pointer{Bucket: bucket, Key: key}.Body(), attrs: map[string]types.MessageAttributeValue{
				worker.AttrExtendedPayloadSize: num(12), worker.AttrReason: str("failed permanently: x"),
			}}
		}
		b.put(b.queue.DLQURL, []seed{pointer("big"), pointer("done")})
		cfg := b.config()
		var err error
		if cfg.KeyOf, err = worker.MessageKeyFuncS3(worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"}, s3c, 0); err != nil {
			t.Fatal(err)
		}
		sum, err := b.run(cfg)
		if err != nil {
			t.Fatalf("%v\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 1, SkippedComplete: 1, Reset: 1})
		got := b.visible(b.queue.URL, "the queue")
		m, ok := got[""]
		if len(got) != 1 || !ok {
			t.Fatalf("moved %v", ids(got))
		}
		if aws.ToString(m.Body) != pointer("big").body {
			t.Errorf("body %q, want %q", aws.ToString(m.Body), pointer("big").body)
		}
		if a := m.MessageAttributes[worker.AttrExtendedPayloadSize]; aws.ToString(a.DataType) != "Number" || aws.ToString(a.StringValue) != "12" {
			t.Errorf("ExtendedPayloadSize %+v", a)
		}
		left := b.visible(b.queue.DLQURL, "the DLQ")
		if m, ok := left[""]; len(left) != 1 || !ok || aws.ToString(m.Body) != pointer("done").body {
			t.Fatalf("left in the DLQ: %v", left)
		}
		if rec, err := b.db.Get(context.Background(), "big"); err != nil || rec.State != ledger.StateFailed || rec.Permanent {
			t.Errorf("big: %+v, %v", rec, err)
		}
	})

	// A dead letter whose payload differs from the one its key's record
	// was claimed with is a different operation under the same key: it is
	// neither dropped as complete (it would be lost) nor sent (it would
	// only be dead-lettered again as a conflict).
	t.Run("Conflicts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		keyOf := b.config().KeyOf
		for key, fate := range map[string]string{"paid": "complete", "declined": "failed"} {
			body := fmt.Sprintf(`{"id":%q,"amount":10}`, key)
			_, fp, err := keyOf(types.Message{Body: &body})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.db.Claim(context.Background(), ledger.ClaimRequest{Key: key, Owner: "test", Lease: time.Hour, Fingerprint: fp}); err != nil {
				t.Fatal(err)
			}
			if fate == "complete" {
				err = b.db.Complete(context.Background(), ledger.Completion{Key: key, Owner: "test"})
			} else {
				err = b.db.Fail(context.Background(), ledger.Failure{Key: key, Owner: "test", Err: "boom"})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		b.put(b.queue.DLQURL, []seed{
			{body: `{"id":"paid","amount":99}`},     // a conflict with the completed payload
			{body: `{"id":"paid","amount":10}`},     // the completed payload itself
			{body: `{"id":"declined","amount":99}`}, // a conflict with the failed payload
			{body: `{"id":"declined","amount":10}`}, // the failed payload itself
		})
		cfg := b.config()
		cfg.DropComplete = true
		sum, err := b.run(cfg)
		if err != nil {
			t.Fatalf("%v\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 1, DroppedComplete: 1, SkippedConflict: 2, Reset: 1})
		var left []string
		for _, m := range b.visible(b.queue.DLQURL, "the DLQ") {
			left = append(left, aws.ToString(m.Body))
		}
		slices.Sort(left)
		if want := []string{`{"id":"declined","amount":99}`, `{"id":"paid","amount":99}`}; !slices.Equal(left, want) {
			t.Fatalf("left in the DLQ: %q, want the two conflicts", left)
		}
	})

	t.Run("KeyGlob", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		b.put(b.queue.DLQURL, append(bodies("order-1", "order-2", "refund-1"), seed{body: `{}`}))
		cfg := b.config()
		cfg.KeyGlob, cfg.IncludeKeyless = "order-*", true
		sum, err := b.run(cfg)
		if err != nil {
			t.Fatalf("%v\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 2, SkippedFiltered: 2})
		if left := b.visible(b.queue.DLQURL, "the DLQ"); !slices.Equal(ids(left), []string{"", "refund-1"}) {
			t.Fatalf("left in the DLQ: %v", ids(left))
		}
		if got := b.visible(b.queue.URL, "the queue"); !slices.Equal(ids(got), []string{"order-1", "order-2"}) {
			t.Fatalf("moved %v", ids(got))
		}
	})

	// A reason group moves exactly the dead letters of that group: the
	// reasons that name their operation are one group.
	t.Run("ReasonGroup", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		reason := func(id, r string) seed {
			return seed{body: fmt.Sprintf(`{"id":%q}`, id), attrs: map[string]types.MessageAttributeValue{worker.AttrReason: str(r)}}
		}
		b.put(b.queue.DLQURL, []seed{
			reason("bad-0", "failed permanently: card processor said no for bad-0"),
			reason("bad-1", "failed permanently: card processor said no for bad-1"),
			reason("slow-1", "failed on receive 5 of 5: timeout after 30s"),
			{body: `{"id":"moved-by-sqs"}`},
		})
		cfg := b.config()
		cfg.ReasonGroup = "failed permanently: card processor said no for #"
		sum, err := b.run(cfg)
		if err != nil {
			t.Fatalf("%v\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 2, SkippedFiltered: 2})
		if got := b.visible(b.queue.URL, "the queue"); !slices.Equal(ids(got), []string{"bad-0", "bad-1"}) {
			t.Fatalf("moved %v", ids(got))
		}
		cfg.ReasonGroup = replay.NoReasonGroup
		sum, err = b.run(cfg)
		if err != nil {
			t.Fatalf("%v\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 1, SkippedFiltered: 1})
		if left := b.visible(b.queue.DLQURL, "the DLQ"); !slices.Equal(ids(left), []string{"slow-1"}) {
			t.Fatalf("left in the DLQ: %v", ids(left))
		}
	})

	// A state moves the dead letters whose operation is in it.
	t.Run("State", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		b.prepare(map[string]string{"f1": "failed", "f2": "permanent", "c1": "complete"})
		b.put(b.queue.DLQURL, bodies("f1", "f2", "c1", "none"))
		cfg := b.config()
		cfg.State = ledger.StateFailed
		sum, err := b.run(cfg)
		if err != nil {
			t.Fatalf("%v\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 2, Reset: 2, SkippedFiltered: 2})
		if got := b.visible(b.queue.URL, "the queue"); !slices.Equal(ids(got), []string{"f1", "f2"}) {
			t.Fatalf("moved %v", ids(got))
		}
	})

	// The dead letters outside a run's filters are visible again within
	// FilteredHold while it runs, not at its end.
	t.Run("FilteredNotHidden", func(t *testing.T) {
		t.Parallel()
		// The run's own decisions name the messages it left (by message
		// id), so that a receive of the run itself also shows one visible.
		var mu sync.Mutex
		others := map[string]string{} // message id → body id
		b, _, r, out := slowFiltered(t, 300, func(d replay.Decision) {
			if d.Action == replay.ActionLeave && strings.HasPrefix(d.Key, "other-") {
				mu.Lock()
				others[d.MessageID] = d.Key
				mu.Unlock()
			}
		})
		// Once the run has received the ten it leaves…
		for deadline := time.Now().Add(time.Minute); r.Progress().SkippedFiltered < 10; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the run did not receive the ten messages outside its filter in a minute:\n%s", b.log)
			}
		}
		// …they are visible again within FilteredHold, the run going on:
		// each is seen by a receive of the test's, or received again by
		// the run itself (a server that hands out the oldest first gives
		// them back to the run's next receive before the test's).
		start := time.Now()
		seenIDs := map[string]bool{}
		for time.Since(start) < replay.FilteredHold+5*time.Second && r.Progress().Moved < 300 && len(seenIDs) < 10 {
			maps.Copy(seenIDs, b.peek(b.queue.DLQURL, "other-"))
			mu.Lock()
			maps.Copy(seenIDs, receivedAgain(b.log.String(), others))
			mu.Unlock()
			time.Sleep(200 * time.Millisecond)
		}
		seen := len(seenIDs)
		if r.Progress().Moved >= 300 {
			t.Skip("the run ended before the check: nothing to tell")
		}
		if seen != 10 {
			t.Fatalf("while the run went on, %d of the 10 messages outside its filter were visible within %v\n%s", seen, replay.FilteredHold+5*time.Second, b.log)
		}
		r.Stop()
		<-out
	})

	t.Run("SinceUntil", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		b.put(b.queue.DLQURL, bodies("old-1", "old-2"))
		time.Sleep(1200 * time.Millisecond)
		mid := time.Now()
		time.Sleep(1200 * time.Millisecond)
		b.put(b.queue.DLQURL, bodies("new-1"))

		cfg := b.config()
		cfg.Until = time.Now().Add(-time.Hour) // sent more than an hour ago: none
		sum, err := b.run(cfg)
		if err != nil {
			t.Fatalf("%v\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{SkippedFiltered: 3})
		cfg = b.config()
		cfg.Since = mid
		sum, err = b.run(cfg)
		if err != nil {
			t.Fatalf("%v\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 1, SkippedFiltered: 2})
		cfg = b.config()
		cfg.Since, cfg.Until = time.Now().Add(-time.Hour), mid
		sum, err = b.run(cfg)
		if err != nil {
			t.Fatalf("%v\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 2})
		if got := b.visible(b.queue.URL, "the queue"); !slices.Equal(ids(got), []string{"new-1", "old-1", "old-2"}) {
			t.Fatalf("moved %v", ids(got))
		}
	})

	t.Run("Max", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		var names []string
		for i := range 25 {
			names = append(names, fmt.Sprintf("m-%02d", i))
		}
		b.put(b.queue.DLQURL, bodies(names...))
		cfg := b.config()
		cfg.Max = 7
		sum, err := b.run(cfg)
		if err != nil {
			t.Fatalf("%v\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 7})
		got := b.visible(b.queue.URL, "the queue")
		left := b.visible(b.queue.DLQURL, "the DLQ")
		if len(got) != 7 || len(left) != 18 {
			t.Fatalf("%d moved and %d visible in the DLQ, want 7 and 18", len(got), len(left))
		}
	})

	t.Run("DryRun", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		b.prepare(map[string]string{"done": "complete", "perm": "permanent"})
		b.put(b.queue.DLQURL, append(bodies("done", "perm", "n1", "n2"), seed{body: `{}`}))
		cfg := b.config()
		cfg.DryRun, cfg.DropComplete = true, true
		var mu sync.Mutex
		var decided []string
		cfg.Observe = func(d replay.Decision) {
			mu.Lock()
			defer mu.Unlock()
			decided = append(decided, fmt.Sprintf("%s:%s:%s", d.Key, d.Action, d.Why))
		}
		sum, err := b.run(cfg)
		if err != nil {
			t.Fatalf("%v\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 3, DroppedComplete: 1, SkippedKeyless: 1, Reset: 1, DryRun: true})
		slices.Sort(decided)
		if fmt.Sprint(decided) != "[:leave:no operation key done:drop: n1:move: n2:move: perm:move:]" {
			t.Errorf("decisions observed: %q", decided)
		}
		if !b.logged("would move") {
			t.Errorf("no report of what would move:\n%s", b.log)
		}
		// Every message is visible again at once, none moved.
		if left := b.visible(b.queue.DLQURL, "the DLQ"); len(left) != 5 {
			t.Fatalf("%d messages visible in the DLQ after a dry run, want 5", len(left))
		}
		if got := b.visible(b.queue.URL, "the queue"); len(got) != 0 {
			t.Fatalf("a dry run moved %v", ids(got))
		}
		if rec, err := b.db.Get(context.Background(), "perm"); err != nil || !rec.Permanent {
			t.Fatalf("a dry run reset the record: %+v, %v", rec, err)
		}
	})

	// A message left in the source whose hold runs out during the run comes
	// back: it is recognised, held again and counted once.
	t.Run("HeldMessagesComeBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		done := map[string]string{}
		var names []string
		for i := range 25 {
			name := fmt.Sprintf("h-%02d", i)
			names = append(names, name)
			if i < 5 {
				done[name] = "complete"
			}
		}
		b.prepare(done)
		b.put(b.queue.DLQURL, bodies(names...))
		// 20 messages at 5 a second outlast the 2 s hold of the 5 left.
		cfg := b.config()
		cfg.Hold, cfg.Rate = 2*time.Second, 5
		sum, err := b.run(cfg)
		if err != nil || !b.logged("received again after its hold ran out") {
			t.Fatalf("%v, or no message came back:\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{Moved: 20, SkippedComplete: 5})
		if left := b.visible(b.queue.DLQURL, "the DLQ"); len(left) != 5 {
			t.Fatalf("%d messages visible in the DLQ, want the 5 complete ones", len(left))
		}
		if got := b.visible(b.queue.URL, "the queue"); len(got) != 20 {
			t.Fatalf("%d messages in the queue, want 20", len(got))
		}
	})

	// Stop: the moves in hand finish and the rest is made visible again at
	// once; every message is in exactly one queue.
	t.Run("Stop", func(t *testing.T) {
		t.Parallel()
		b, names, r, result := slow(t, 200)
		r.Stop()
		r.Stop() // more than once is fine
		res := <-result
		if !errors.Is(res.err, replay.ErrInterrupted) || !res.sum.Interrupted || res.sum.Moved == 0 || res.sum.Moved >= 200 ||
			res.sum.Failed != 0 || res.sum.DeleteFailed != 0 {
			t.Fatalf("%+v, %v", res.sum, res.err)
		}
		left := b.visible(b.queue.DLQURL, "the DLQ") // visible at once: nothing held back
		got := b.visible(b.queue.URL, "the queue")
		if int64(len(got)) != res.sum.Moved {
			t.Errorf("%d in the queue, the summary says %d moved", len(got), res.sum.Moved)
		}
		for _, name := range names {
			_, inLeft := left[name]
			_, inGot := got[name]
			if inLeft == inGot {
				t.Errorf("%s: in the DLQ %v, in the queue %v; want exactly one", name, inLeft, inGot)
			}
		}
		if p := r.Progress(); p != res.sum {
			t.Errorf("Progress after Run: %+v, want the summary %+v", p, res.sum)
		}
		if _, err := r.Run(context.Background()); err == nil {
			t.Error("a second Run did not fail")
		}
	})

	// A receive that keeps failing ends the run with its error; the
	// messages stay in the source.
	t.Run("ReceiveFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		b.put(b.queue.DLQURL, bodies("r1", "r2"))
		faults := sqstest.NewFaults(1, nil)
		faults.Set("ReceiveMessage", sqstest.Rates{ServerError: 1})
		r, err := replay.New(b.config(), sqstest.NewClient(t, faults, func(o *sqs.Options) { o.RetryMaxAttempts = 1 }), b.db)
		if err != nil {
			t.Fatal(err)
		}
		sum, err := r.Run(t.Context())
		if err == nil || !strings.Contains(err.Error(), "receive from "+b.queue.DLQURL) || errors.Is(err, replay.ErrInterrupted) {
			t.Fatalf("%v, want the receive's error\n%s", err, b.log)
		}
		b.want(sum, replay.Summary{})
		if left := b.visible(b.queue.DLQURL, "the DLQ"); len(left) != 2 {
			t.Fatalf("%d messages visible in the DLQ, want 2", len(left))
		}
	})

	// A cancelled context stops at once: the run says it was interrupted,
	// and no message is lost.
	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		b, names, _, result := slow(t, 200, func(cancel context.CancelFunc) { cancel() })
		res := <-result
		if !errors.Is(res.err, replay.ErrInterrupted) || !res.sum.Interrupted || res.sum.Moved == 0 {
			t.Fatalf("%+v, %v", res.sum, res.err)
		}
		// Messages in hand come back after the hold (2 s).
		left := b.settled(b.queue.DLQURL, 200-int(res.sum.Moved))
		got := b.visible(b.queue.URL, "the queue")
		for _, name := range names {
			if _, inLeft := left[name]; !inLeft {
				if _, inGot := got[name]; !inGot {
					t.Errorf("%s is in neither queue", name)
				}
			}
		}
	})
}

// result is what Run returned.
type result struct {
	sum replay.Summary
	err error
}

// slow seeds n messages and starts a replay of them at 50 messages a
// second with a 2 s hold, returning once some have moved. With then, it
// calls then with the cancel function of Run's context at that point.
func slow(t *testing.T, n int, then ...func(context.CancelFunc)) (*bundle, []string, *replay.Replayer, <-chan result) {
	t.Helper()
	b := setup(t, false)
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("s-%03d", i))
	}
	b.put(b.queue.DLQURL, bodies(names...))
	cfg := b.config()
	cfg.Rate, cfg.Hold = 50, 2*time.Second
	r, err := replay.New(cfg, sqstest.NewClient(t, nil), b.db)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	out := make(chan result, 1)
	go func() {
		s, err := r.Run(ctx)
		out <- result{s, err}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for r.Progress().Moved < 30 {
		if time.Now().After(deadline) {
			t.Fatalf("nothing moved in 30s:\n%s", b.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, f := range then {
		f(cancel)
	}
	return b, names, r, out
}

// slowFiltered seeds 10 messages "other-…" and then n "s-…", and starts a
// replay of the s- ones at 5 messages a second with one mover, returning
// at once.
func slowFiltered(t *testing.T, n int, observe func(replay.Decision)) (*bundle, []string, *replay.Replayer, <-chan result) {
	t.Helper()
	b := setup(t, false)
	var names []string
	for i := range 10 {
		names = append(names, fmt.Sprintf("other-%d", i))
	}
	for i := range n {
		names = append(names, fmt.Sprintf("s-%03d", i))
	}
	b.put(b.queue.DLQURL, bodies(names...))
	cfg := b.config()
	cfg.Rate, cfg.KeyGlob, cfg.Concurrency, cfg.Observe = 5, "s-*", 1, observe
	r, err := replay.New(cfg, sqstest.NewClient(t, nil), b.db)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	out := make(chan result, 1)
	go func() {
		s, err := r.Run(ctx)
		out <- result{s, err}
	}()
	return b, names, r, out
}

// receivedAgain returns the body ids of the messages in ids (message id →
// body id) that the run's log says it received again.
func receivedAgain(log string, ids map[string]string) map[string]bool {
	got := map[string]bool{}
	for _, line := range strings.Split(log, "\n") {
		var e struct {
			Msg       string `json:"msg"`
			MessageID string `json:"message_id"`
		}
		if json.Unmarshal([]byte(line), &e) != nil || !strings.HasPrefix(e.Msg, "received again after its hold ran out") {
			continue
		}
		if body, ok := ids[e.MessageID]; ok {
			got[body] = true
		}
	}
	return got
}

// peek receives what is visible in a queue with a visibility timeout of
// 1 s, up to 5 receives, and returns the body ids that start with prefix.
func (b *bundle) peek(url, prefix string) map[string]bool {
	b.t.Helper()
	c := sqstest.NewClient(b.t, nil)
	got := map[string]bool{}
	for range 5 {
		o, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, VisibilityTimeout: 1})
		if err != nil {
			b.t.Fatal(err)
		}
		for _, m := range o.Messages {
			if strings.HasPrefix(id(m), prefix) {
				got[id(m)] = true
			}
		}
	}
	return got
}

// settled receives from a queue until want distinct messages have come
// (messages held by a run that stopped at once come back after its hold),
// or 15 s have passed, and returns them by body id, visible again.
func (b *bundle) settled(url string, want int) map[string]types.Message {
	b.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := b.visible(url, url)
		if len(got) >= want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// The replay rate against the local server, for the log (SQS's own message
// move task moves at most 500 messages a second).
func TestReplayer_Throughput(t *testing.T) {
	t.Parallel()
	const n = 1000
	b := setup(t, false)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("t-%04d", i)
	}
	b.put(b.queue.DLQURL, bodies(names...))
	cfg := b.config()
	cfg.Concurrency = 8
	sum, err := b.run(cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, b.log)
	}
	b.want(sum, replay.Summary{Moved: n})
	if got := b.visible(b.queue.URL, "the queue"); len(got) != n {
		t.Fatalf("%d messages in the queue, want %d", len(got), n)
	}
	if left := b.visible(b.queue.DLQURL, "the DLQ"); len(left) != 0 {
		t.Fatalf("%d messages left in the DLQ", len(left))
	}
	t.Logf("replayed %d messages at %.0f messages/s (%.2fs with the final empty receives)", n, sum.Rate, sum.Seconds)
}
