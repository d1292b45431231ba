package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// zeroVisibility makes a ReceiveMessage ask for a visibility timeout of 0,
// so that the messages it returns stay visible to everyone else.
//
// The SDK cannot say it by itself: ReceiveMessageInput.VisibilityTimeout is
// a plain int32, and its serializer leaves a 0 out of the request, as if it
// were unset; SQS then hides the messages for the queue's default
// visibility timeout (30 seconds unless set). So this puts the field into
// the request's JSON body after the SDK has written it, before the request
// is measured and signed.
func zeroVisibility(o *sqs.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
		return stack.Build.Add(middleware.BuildMiddlewareFunc("sqsonceZeroVisibility",
			func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
				req, ok := in.Request.(*smithyhttp.Request)
				if !ok {
					return middleware.BuildOutput{}, middleware.Metadata{}, fmt.Errorf("zero visibility: request of type %T", in.Request)
				}
				if err := setZeroVisibility(req); err != nil {
					return middleware.BuildOutput{}, middleware.Metadata{}, fmt.Errorf("zero visibility: %w", err)
				}
				return next.HandleBuild(ctx, in)
			}), middleware.Before)
	})
}

// setZeroVisibility sets "VisibilityTimeout": 0 in the JSON body of req.
func setZeroVisibility(req *smithyhttp.Request) error {
	var body []byte
	if s := req.GetStream(); s != nil {
		var err error
		if body, err = io.ReadAll(s); err != nil {
			return err
		}
	}
	fields := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &fields); err != nil {
			return fmt.Errorf("the request's body is not a JSON object (%v): the SQS client does not speak the JSON protocol", err)
		}
	}
	fields["VisibilityTimeout"] = json.RawMessage("0")
	out, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	req.ContentLength = int64(len(out))
	r, err := req.SetStream(bytes.NewReader(out))
	if err != nil {
		return err
	}
	*req = *r
	return nil
}
