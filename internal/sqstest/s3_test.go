package sqstest_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/sqsonce/sqsonce/internal/awsfault"
	"github.com/sqsonce/sqsonce/internal/loopback"
	"github.com/sqsonce/sqsonce/internal/sqstest"
)

func TestS3(t *testing.T) {
	t.Parallel()

	t.Run("PutGetDelete", func(t *testing.T) {
		t.Parallel()
		c := sqstest.NewS3Client(t, nil)
		bucket := sqstest.CreateBucket(t, c)
		sqstest.PutObject(t, c, bucket, "a/b.json", []byte(`{"id":"x"}`))
		got, ok := sqstest.GetObject(t, c, bucket, "a/b.json")
		if !ok || string(got) != `{"id":"x"}` {
			t.Fatalf("got %q, %v", got, ok)
		}
		if _, err := c.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &bucket, Key: new("a/b.json")}); err != nil {
			t.Fatal(err)
		}
		if _, ok := sqstest.GetObject(t, c, bucket, "a/b.json"); ok {
			t.Fatal("the object is still there")
		}
	})

	t.Run("MissingKeyAndBucket", func(t *testing.T) {
		t.Parallel()
		c := sqstest.NewS3Client(t, nil)
		bucket := sqstest.CreateBucket(t, c)
		_, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: new("nope")})
		if _, ok := errors.AsType[*types.NoSuchKey](err); !ok {
			t.Fatalf("missing key: %T %v", err, err)
		}
		_, err = c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: new(bucket + "-gone"), Key: new("nope")})
		if ae, ok := errors.AsType[smithy.APIError](err); !ok || ae.ErrorCode() != "NoSuchBucket" {
			t.Fatalf("missing bucket: %T %v", err, err)
		}
	})

	// The SDK reads the XML answers of an awsfault.Transport built with
	// S3Errors as S3's: a 5xx is retried, a 403 is not.
	t.Run("Faults", func(t *testing.T) {
		t.Parallel()
		var kind atomic.Value
		kind.Store(awsfault.Kind(""))
		var left atomic.Int64
		tr := awsfault.New(loopback.Transport(), sqstest.S3Errors, func(string) awsfault.Kind {
			if left.Add(-1) >= 0 {
				return kind.Load().(awsfault.Kind)
			}
			return ""
		})
		clean := sqstest.NewS3Client(t, nil)
		bucket := sqstest.CreateBucket(t, clean)
		sqstest.PutObject(t, clean, bucket, "k", []byte("v"))
		c := sqstest.NewS3Client(t, tr)
		get := func() error {
			out, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: new("k")})
			if err == nil {
				out.Body.Close()
			}
			return err
		}
		kind.Store(awsfault.ServerError)
		left.Store(2)
		if err := get(); err != nil {
			t.Fatalf("two 500s then success: %v", err)
		}
		kind.Store(awsfault.Throttle)
		left.Store(1)
		if err := get(); err != nil {
			t.Fatalf("a 503 then success: %v", err)
		}
		kind.Store(awsfault.Denied)
		left.Store(1)
		before := tr.Requests("")
		err := get()
		var re interface{ HTTPStatusCode() int }
		ae, ok := errors.AsType[smithy.APIError](err)
		if !ok || ae.ErrorCode() != "AccessDenied" || !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusForbidden {
			t.Fatalf("denied: %T %v", err, err)
		}
		if n := tr.Requests("") - before; n != 1 {
			t.Fatalf("a 403 was sent %d times", n)
		}
	})
}
