package dynamodb_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsonce/sqsonce/internal/dynamotest"
	"github.com/sqsonce/sqsonce/ledger"
	"github.com/sqsonce/sqsonce/ledger/dynamodb"
)

// createRaw creates a table with the given partition key, without Init.
func createRaw(t *testing.T, c *ddb.Client, name, pk string) {
	t.Helper()
	ctx := context.Background()
	_, err := c.CreateTable(ctx, &ddb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(pk), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(pk), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	w := ddb.NewTableExistsWaiter(c, func(o *ddb.TableExistsWaiterOptions) {
		o.MinDelay = 20 * time.Millisecond
		o.MaxDelay = 200 * time.Millisecond
	})
	if err := w.Wait(ctx, &ddb.DescribeTableInput{TableName: aws.String(name)}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestInit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// A second Init changes nothing and succeeds. Where the service has
	// TTL deletion (DynamoDB, moto) Init turns it on for the ttl
	// attribute; dynalite has none, which the report says and which does
	// not fail Init.
	t.Run("Idempotent", func(t *testing.T) {
		t.Parallel()
		c := dynamotest.NewClient(t, nil)
		opts := dynamodb.Options{Table: dynamotest.Table(t, c)}
		hasTTL := dynamotest.Server(t) != dynamotest.Dynalite
		first, err := dynamodb.Init(ctx, c, opts)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case !first.Created:
			t.Fatalf("first init: %+v, want the table created", first)
		case hasTTL && (!first.TTL || first.TTLNote != ""):
			t.Fatalf("first init: %+v, want TTL deletion turned on", first)
		case !hasTTL && (first.TTL || !strings.Contains(first.TTLNote, "does not have TTL")):
			t.Fatalf("first init: %+v, want no TTL, saying why", first)
		}
		if hasTTL {
			out, err := c.DescribeTimeToLive(ctx, &ddb.DescribeTimeToLiveInput{TableName: aws.String(opts.Table)})
			if err != nil {
				t.Fatal(err)
			}
			if d := out.TimeToLiveDescription; d == nil || aws.ToString(d.AttributeName) != "ttl" ||
				(d.TimeToLiveStatus != types.TimeToLiveStatusEnabled && d.TimeToLiveStatus != types.TimeToLiveStatusEnabling) {
				t.Fatalf("after init the table's TTL is %+v, want on for attribute ttl", d)
			}
		}
		l := open(t, c, opts)
		mustClaim(t, l, "k", "a", ledger.Claimed)
		second, err := dynamodb.Init(ctx, c, opts)
		if err != nil {
			t.Fatal(err)
		}
		if second.Created || second.TTL != hasTTL {
			t.Fatalf("second init: %+v, want the table found as it was (TTL %v)", second, hasTTL)
		}
		mustClaim(t, l, "k", "b", ledger.InProgress)
	})

	// Hosts starting together all run Init: one creates the table, the
	// others wait for it, and all succeed.
	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		c := dynamotest.NewClient(t, nil)
		opts := dynamodb.Options{Table: dynamotest.Table(t, c)}
		const hosts = 4
		reports := make([]dynamodb.InitReport, hosts)
		errs := make([]error, hosts)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for h := range hosts {
			wg.Go(func() {
				<-start
				reports[h], errs[h] = dynamodb.Init(ctx, dynamotest.NewClient(t, nil), opts)
			})
		}
		close(start)
		wg.Wait()
		created := 0
		for h := range hosts {
			if errs[h] != nil {
				t.Fatalf("host %d: %v", h, errs[h])
			}
			if reports[h].Created {
				created++
			}
		}
		if created != 1 {
			t.Fatalf("%d hosts created the table, want 1: %+v", created, reports)
		}
		mustClaim(t, open(t, c, opts), "k", "a", ledger.Claimed)
	})

	t.Run("InvalidOptions", func(t *testing.T) {
		t.Parallel()
		c := dynamotest.NewClient(t, nil)
		for _, opts := range []dynamodb.Options{
			{Table: "a b"},
			{Table: "ab"},
			{Retention: ledger.MaxRetention + time.Hour},
			{Retention: -time.Hour},
			{Concurrency: dynamodb.MaxConcurrency + 1},
			{Timeout: -time.Second},
		} {
			if _, err := dynamodb.Init(ctx, c, opts); !errors.Is(err, ledger.ErrInvalidArgument) {
				t.Errorf("init with %+v: err %v, want ErrInvalidArgument", opts, err)
			}
			if _, err := dynamodb.Open(ctx, c, opts); !errors.Is(err, ledger.ErrInvalidArgument) {
				t.Errorf("open with %+v: err %v, want ErrInvalidArgument", opts, err)
			}
		}
		if _, err := dynamodb.Open(ctx, nil, dynamodb.Options{}); !errors.Is(err, ledger.ErrInvalidArgument) {
			t.Errorf("open without a client: err %v, want ErrInvalidArgument", err)
		}
	})
}

func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("MissingTable", func(t *testing.T) {
		t.Parallel()
		c := dynamotest.NewClient(t, nil)
		_, err := dynamodb.Open(ctx, c, dynamodb.Options{Table: dynamotest.Table(t, c)})
		if !errors.Is(err, ledger.ErrNoSchema) || !strings.Contains(err.Error(), "sqsonce ledger init") {
			t.Fatalf("open of a missing table: err %v, want ErrNoSchema naming `sqsonce ledger init`", err)
		}
	})

	// A table whose Init was cut short before the schema item.
	t.Run("MissingSchemaItem", func(t *testing.T) {
		t.Parallel()
		c := dynamotest.NewClient(t, nil)
		name := dynamotest.Table(t, c)
		createRaw(t, c, name, "pk")
		_, err := dynamodb.Open(ctx, c, dynamodb.Options{Table: name})
		if !errors.Is(err, ledger.ErrNoSchema) || !strings.Contains(err.Error(), "sqsonce ledger init") {
			t.Fatalf("open of a table without a schema item: err %v, want ErrNoSchema naming `sqsonce ledger init`", err)
		}
		if _, err := dynamodb.Init(ctx, c, dynamodb.Options{Table: name}); err != nil {
			t.Fatal(err)
		}
		open(t, c, dynamodb.Options{Table: name})
	})

	t.Run("NewerSchema", func(t *testing.T) {
		t.Parallel()
		c := dynamotest.NewClient(t, nil)
		opts := newTable(t, c, nil)
		_, err := c.PutItem(ctx, &ddb.PutItemInput{
			TableName: aws.String(opts.Table),
			Item: map[string]types.AttributeValue{
				"pk":             &types.AttributeValueMemberS{Value: "meta#schema"},
				"schema_version": &types.AttributeValueMemberN{Value: fmt.Sprint(dynamodb.SchemaVersion + 1)},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dynamodb.Open(ctx, c, opts); !errors.Is(err, ledger.ErrSchema) {
			t.Fatalf("open of a newer schema: err %v, want ErrSchema", err)
		}
		if _, err := dynamodb.Init(ctx, c, opts); !errors.Is(err, ledger.ErrSchema) {
			t.Fatalf("init on a newer schema: err %v, want ErrSchema", err)
		}
	})

	t.Run("ForeignTable", func(t *testing.T) {
		t.Parallel()
		c := dynamotest.NewClient(t, nil)
		name := dynamotest.Table(t, c)
		createRaw(t, c, name, "id")
		for what, err := range map[string]error{
			"open": second(dynamodb.Open(ctx, c, dynamodb.Options{Table: name})),
			"init": second(dynamodb.Init(ctx, c, dynamodb.Options{Table: name})),
		} {
			if !errors.Is(err, ledger.ErrCorrupt) || !strings.Contains(err.Error(), "not a ledger table") {
				t.Errorf("%s of a table with another key: err %v, want ErrCorrupt", what, err)
			}
		}
	})

	// Nothing listens: the SDK's retries give up, and Open says the
	// store is unavailable.
	t.Run("ConnectionRefused", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		c := dynamotest.NewClientAt(t, "http://"+addr, nil)
		err = returnsWithin(t, func() error { return second(dynamodb.Open(ctx, c, dynamodb.Options{})) })
		if !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("open with nothing listening: err %v, want ErrUnavailable", err)
		}
	})

	// Something accepts connections and never answers: Open gives up
	// after Options.Timeout.
	t.Run("NoAnswer", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		var mu sync.Mutex
		var conns []net.Conn
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, conn) // held open, never answered
				mu.Unlock()
			}
		}()
		t.Cleanup(func() {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				c.Close()
			}
		})
		c := dynamotest.NewClientAt(t, "http://"+ln.Addr().String(), nil)
		err = returnsWithin(t, func() error {
			return second(dynamodb.Open(ctx, c, dynamodb.Options{Timeout: 300 * time.Millisecond}))
		})
		if !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("open of a server that does not answer: err %v, want ErrUnavailable", err)
		}
	})
}

// returnsWithin runs fn and fails the test if it has not returned within a
// minute (far longer than it should take: this is not a measurement, only
// a guard against hanging).
func returnsWithin(t *testing.T, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("did not return within a minute")
		return nil
	}
}

func second[T any](_ T, err error) error { return err }
