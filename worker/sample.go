package worker

import (
	"cmp"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// PartitionValue is what one message gives one of Config.Flow.Partitions.
type PartitionValue struct {
	Partition FlowPartition
	// Value is the message's value of the partition, as flow control
	// reads it (cut to 256 bytes); "" when it has none: the message is
	// then in the "(none)" partition, under the handler's scope's limits
	// only.
	Value string
	// Scope names the value's pause scope, rate bucket and concurrency
	// pool in the ledger; "" when there is no value.
	Scope string
	// Missing says why there is no value; nil when there is one.
	Missing error
}

// PartitionValues returns the value of each of cfg.Flow.Partitions for a
// message with body and attrs, as the worker of cfg reads them when it
// receives it (an SNS envelope is opened when cfg.Key.SNS is on), without
// receiving anything: to test a partition's pointer or attribute against
// a sample. A body that points to a payload in S3 is read as it is: the
// object is not fetched. It fails only when cfg.Key is not valid.
func PartitionValues(cfg Config, body []byte, attrs map[string]types.MessageAttributeValue) ([]PartitionValue, error) {
	cfg.setDefaults()
	k, err := newKeyer(cfg.Key)
	if err != nil {
		return nil, err
	}
	f := &flowCtl{cfg: cfg.Flow}
	j := &job{opened: k.open(body, attrs)}
	out := make([]PartitionValue, len(cfg.Flow.Partitions))
	for i, p := range cfg.Flow.Partitions {
		out[i] = PartitionValue{Partition: p, Value: f.partValue(j, i)}
		if out[i].Value != "" {
			out[i].Scope = f.partName(i, out[i].Value)
			continue
		}
		switch a, ok := j.opened.attrs[p.Attribute]; {
		case p.Attribute != "" && !ok:
			out[i].Missing = fmt.Errorf("the message has no attribute %q", p.Attribute)
		case p.Attribute != "" && (a.StringValue == nil || *a.StringValue == ""):
			out[i].Missing = fmt.Errorf("the attribute %q has no string value", p.Attribute)
		case p.Attribute != "":
			out[i].Missing = errors.New("no value")
		default:
			tokens, err := parsePointer(p.Pointer)
			if err == nil {
				_, err = lookupPointer(j.opened.payload, tokens, p.Pointer)
			}
			out[i].Missing = cmp.Or(err, errors.New("no value"))
		}
	}
	return out, nil
}
