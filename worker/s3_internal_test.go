package worker

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sqsonce/sqsonce/internal/awsfault"
	"github.com/sqsonce/sqsonce/internal/loopback"
	"github.com/sqsonce/sqsonce/internal/sqstest"
)

func TestReadS3Payload(t *testing.T) {
	t.Parallel()
	clean := sqstest.NewS3Client(t, nil)
	bucket := sqstest.CreateBucket(t, clean)
	sqstest.PutObject(t, clean, bucket, "ten", []byte("0123456789"))
	ctx := context.Background()
	permanent := func(err error) bool {
		var pe *payloadError
		return errors.As(err, &pe) && pe.permanent
	}

	t.Run("Read", func(t *testing.T) {
		t.Parallel()
		for _, max := range []int64{10, 11, 1 << 20} {
			b, err := readS3Payload(ctx, clean, S3Pointer{bucket, "ten"}, max)
			if err != nil || string(b) != "0123456789" {
				t.Fatalf("max %d: %q, %v", max, b, err)
			}
		}
	})
	t.Run("TooLarge", func(t *testing.T) {
		t.Parallel()
		_, err := readS3Payload(ctx, clean, S3Pointer{bucket, "ten"}, 9)
		if !permanent(err) || !strings.Contains(err.Error(), "is 10 bytes, more than the limit of 9 bytes") {
			t.Fatalf("%v", err)
		}
	})
	t.Run("Gone", func(t *testing.T) {
		t.Parallel()
		_, err := readS3Payload(ctx, clean, S3Pointer{bucket, "nope"}, 100)
		if !permanent(err) || !strings.Contains(err.Error(), "s3://"+bucket+"/nope is gone: no such key") {
			t.Fatalf("missing key: %v", err)
		}
		_, err = readS3Payload(ctx, clean, S3Pointer{bucket + "-no", "k"}, 100)
		if !permanent(err) || !strings.Contains(err.Error(), "is gone: no such bucket") {
			t.Fatalf("missing bucket: %v", err)
		}
	})
	t.Run("Faults", func(t *testing.T) {
		t.Parallel()
		var kind atomic.Value
		tr := awsfault.New(loopback.Transport(), sqstest.S3Errors, func(string) awsfault.Kind {
			k, _ := kind.Load().(awsfault.Kind)
			return k
		})
		c := sqstest.NewS3Client(t, tr, func(o *s3.Options) { o.RetryMaxAttempts = 1 })
		for _, tc := range []struct {
			kind      awsfault.Kind
			permanent bool
			want      string
		}{
			{awsfault.Denied, true, "access denied (403): s3:GetObject"},
			{awsfault.ServerError, false, "InternalError"},
			{awsfault.Throttle, false, "SlowDown"},
		} {
			kind.Store(tc.kind)
			_, err := readS3Payload(ctx, c, S3Pointer{bucket, "ten"}, 100)
			if err == nil || permanent(err) != tc.permanent || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%s: %v", tc.kind, err)
			}
		}
		kind.Store(awsfault.Timeout)
		tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := readS3Payload(tctx, c, S3Pointer{bucket, "ten"}, 100)
		if err == nil || permanent(err) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("timeout: %v", err)
		}
	})
}
