package main

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// A batch holds at most ten messages, and no more bytes than SQS takes in
// one request, counting the traceparent each message will carry.
func TestBatchEnd(t *testing.T) {
	t.Parallel()
	entries := func(sizes ...int) []types.SendMessageBatchRequestEntry {
		var es []types.SendMessageBatchRequestEntry
		for _, n := range sizes {
			es = append(es, types.SendMessageBatchRequestEntry{MessageBody: aws.String(strings.Repeat("x", n))})
		}
		return es
	}
	small := make([]int, 25)
	for i := range small {
		small[i] = 10
	}
	for _, tc := range []struct {
		name  string
		es    []types.SendMessageBatchRequestEntry
		start int
		want  int
	}{
		{"ten at most", entries(small...), 0, 10},
		{"the rest", entries(small...), 20, 25},
		{"two that fit", entries(100<<10, 100<<10, 100<<10), 0, 2},
		{"one at the limit alone", entries(maxInline, 1), 0, 1},
		{"then the next", entries(maxInline, 1), 1, 2},
	} {
		if got := batchEnd(tc.es, tc.start); got != tc.want {
			t.Errorf("%s: batchEnd = %d, want %d", tc.name, got, tc.want)
		}
	}
	// Every batch of a mix stays within the limit.
	es := entries(200<<10, 50<<10, 60<<10, 10, maxInline, 3, 4)
	for start, end := 0, 0; start < len(es); start = end {
		end = batchEnd(es, start)
		size := 0
		for _, e := range es[start:end] {
			size += len(aws.ToString(e.MessageBody)) + maxBody - maxInline
		}
		if end <= start || (end-start > 1 && size > maxBody) {
			t.Fatalf("batch [%d, %d) of %d bytes", start, end, size)
		}
	}
}
