package worker_test

import (
	"strings"
	"testing"

	"github.com/sqsonce/sqsonce/worker"
)

func TestParseS3Pointer(t *testing.T) {
	t.Parallel()
	p, err := worker.ParseS3Pointer([]byte(`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"k/1"}]`))
	if err != nil || p != (worker.S3Pointer{Bucket: "b", Key: "k/1"}) {
		t.Fatalf("%+v, %v", p, err)
	}
	if back, err := worker.ParseS3Pointer([]byte(p.Body())); err != nil || back != p {
		t.Fatalf("Body does not read back: %s: %+v, %v", p.Body(), back, err)
	}
	for body, want := range map[string]string{
		`{"id":"x"}`: "not a JSON array",
		`["software.amazon.payloadoffloading.PayloadS3Pointer"]`:                                    "of 1 elements, not 2",
		`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"k"},1]`: "of 3 elements",
		`["com.example.Other",{"s3BucketName":"b","s3Key":"k"}]`:                                    "first element is not",
		`[1,{"s3BucketName":"b","s3Key":"k"}]`:                                                      "first element is not",
		`["software.amazon.payloadoffloading.PayloadS3Pointer","b/k"]`:                              "second element is not an object",
		`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":1,"s3Key":"k"}]`:     "second element is not an object",
		`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3Key":"k"}]`:                      "no s3BucketName",
		`["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":""}]`:    "no s3Key",
		`["software.amazon.payloadoffloading.PayloadS3Pointer",null]`:                               "second element is not an object",
	} {
		if _, err := worker.ParseS3Pointer([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}
