package worker_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/worker"
)

// A sample message's partition values, read as the worker reads them.
func TestPartitionValues(t *testing.T) {
	t.Parallel()
	cfg := worker.Config{QueueURL: "https://sqs.us-east-1.amazonaws.com/1/orders", Key: worker.KeyConfig{From: worker.KeyFromBody, Pointer: "/id"},
		Flow: worker.FlowConfig{Scope: "orders partner", Partitions: []worker.FlowPartition{
			{Pointer: "/tenant", Rate: 5}, {Pointer: "/account/n", Rate: 1}, {Attribute: "Region", Concurrency: 2},
		}}}
	attrs := map[string]types.MessageAttributeValue{"Region": {DataType: aws.String("String"), StringValue: aws.String("eu")}}
	got, err := worker.PartitionValues(cfg, []byte(`{"id":"p-1","tenant":"t-7","account":{"n":42}}`), attrs)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ value, scope string }{
		{"t-7", "orders partner | pointer /tenant = t-7"},
		{"42", "orders partner | pointer /account/n = 42"},
		{"eu", "orders partner | attribute Region = eu"},
	}
	for i, w := range want {
		if got[i].Value != w.value || got[i].Scope != w.scope || got[i].Missing != nil || got[i].Partition != cfg.Flow.Partitions[i] {
			t.Errorf("partition %d: %+v, want %q in %q", i, got[i], w.value, w.scope)
		}
	}

	// Without the values: why, in the "(none)" partition.
	bin := map[string]types.MessageAttributeValue{"Region": {DataType: aws.String("Binary"), BinaryValue: []byte{1}}}
	got, err = worker.PartitionValues(cfg, []byte(`{"id":"p-1","account":{"n":[1]}}`), bin)
	if err != nil {
		t.Fatal(err)
	}
	for i, why := range []string{`pointer /tenant: no field "tenant"`, "pointer /account/n: value is an array", `the attribute "Region" has no string value`} {
		if got[i].Value != "" || got[i].Scope != "" || got[i].Missing == nil || !strings.Contains(got[i].Missing.Error(), why) {
			t.Errorf("partition %d: %+v, want none because %q", i, got[i], why)
		}
	}
	got, _ = worker.PartitionValues(cfg, []byte(`{"id":"p-1"}`), nil)
	if got[2].Missing == nil || got[2].Missing.Error() != `the message has no attribute "Region"` {
		t.Errorf("an absent attribute: %+v", got[2])
	}

	// An SNS envelope is opened first, its attributes beside the message's.
	cfg.Key.SNS = true
	env := `{"Type":"Notification","MessageId":"m","TopicArn":"arn:aws:sns:us-east-1:1:t","Message":"{\"id\":\"p-2\",\"tenant\":\"t-9\"}",` +
		`"MessageAttributes":{"Region":{"Type":"String","Value":"us"}}}`
	got, err = worker.PartitionValues(cfg, []byte(env), nil)
	if err != nil || got[0].Value != "t-9" || got[2].Value != "us" {
		t.Errorf("an SNS envelope: %+v, %v", got, err)
	}

	cfg.Key.Pointer = "id"
	if _, err := worker.PartitionValues(cfg, []byte(`{}`), nil); err == nil {
		t.Error("an invalid key configuration was taken")
	}
}
