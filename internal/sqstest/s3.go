package sqstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sqsonce/sqsonce/internal/awsfault"
)

// S3Errors is how S3 answers the faults of an [awsfault.Transport]
// (REST-XML): Throttle is 503 SlowDown, ServerError 500 InternalError and
// Denied 403 AccessDenied. The SDK's retryer retries the first two and not
// the third.
var S3Errors = awsfault.Service{
	XML:         true,
	Throttle:    awsfault.Answer{Status: http.StatusServiceUnavailable, Code: "SlowDown", Message: "Please reduce your request rate."},
	ServerError: awsfault.Answer{Status: http.StatusInternalServerError, Code: "InternalError", Message: "We encountered an internal error. Please try again."},
	Denied:      awsfault.Answer{Status: http.StatusForbidden, Code: "AccessDenied", Message: "Access Denied"},
}

// NewS3Client returns an S3 client for the S3 API that the local server at
// [Endpoint] also serves: region [Region], static credentials "test"/"test",
// path-style addressing (http://host/bucket/key), the SDK's default
// retryer, and an HTTP client with [HTTPTimeout]. If rt is non-nil it
// carries the requests (e.g. an [awsfault.Transport] built with
// [S3Errors]); otherwise a clone of [http.DefaultTransport] without proxy
// does. optFns adjust the options last.
func NewS3Client(t testing.TB, rt http.RoundTripper, optFns ...func(*s3.Options)) *s3.Client {
	t.Helper()
	endpoint, hc := clientParts(t, rt)
	return s3.New(s3.Options{
		Region:       Region,
		Credentials:  testCredentials,
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		HTTPClient:   hc,
		// The local server keeps no checksums: do not log each read.
		DisableLogOutputChecksumValidationSkipped: true,
	}, optFns...)
}

// CreateBucket creates a bucket with a unique name derived from t.Name(),
// and empties and deletes it when the test ends. Failures are fatal.
func CreateBucket(t testing.TB, c *s3.Client) string {
	t.Helper()
	// Bucket names: 3 to 63 lower-case letters, digits and hyphens.
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, t.Name())
	suffix := fmt.Sprintf("-%d-%08x", queueSeq.Add(1), rand.Uint32())
	if n := 63 - len(suffix); len(name) > n {
		name = name[:n]
	}
	name = strings.Trim(name, "-")
	if name == "" {
		name = "b"
	}
	name += suffix
	ctx, cancel := opContext(t)
	defer cancel()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &name}); err != nil {
		t.Fatalf("sqstest: create bucket %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &name})
		if err != nil {
			t.Errorf("sqstest: list bucket %s: %v", name, err)
			return
		}
		for _, o := range out.Contents {
			if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &name, Key: o.Key}); err != nil {
				t.Errorf("sqstest: delete %s/%s: %v", name, aws.ToString(o.Key), err)
			}
		}
		if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &name}); err != nil {
			t.Errorf("sqstest: delete bucket %s: %v", name, err)
		}
	})
	return name
}

// PutObject stores body under bucket/key. Failures are fatal.
func PutObject(t testing.TB, c *s3.Client, bucket, key string, body []byte) {
	t.Helper()
	ctx, cancel := opContext(t)
	defer cancel()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(body)}); err != nil {
		t.Fatalf("sqstest: put %s/%s: %v", bucket, key, err)
	}
}

// GetObject returns the bytes stored under bucket/key, and false when there
// is no such object. Other failures are fatal.
func GetObject(t testing.TB, c *s3.Client, bucket, key string) ([]byte, bool) {
	t.Helper()
	ctx, cancel := opContext(t)
	defer cancel()
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		var re interface{ HTTPStatusCode() int }
		if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound {
			return nil, false
		}
		t.Fatalf("sqstest: get %s/%s: %v", bucket, key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("sqstest: read %s/%s: %v", bucket, key, err)
	}
	return b, true
}
