package ingest

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/worker"
)

// Source is one sender's endpoint: where its requests arrive, how they are
// verified, where their event id is, and which queue they go to.
type Source struct {
	// Name names the source in logs, metrics and the attribute
	// AttrSource. Required, unique; letters, digits, '-', '_' and '.'.
	Name string

	// Path is the URL path the sender posts to, such as /hooks/stripe.
	// Required, unique, starting with "/".
	Path string

	// Verify is how a request's signature is checked (see NewVerifier).
	Verify VerifyConfig

	// QueueURL is the queue the events go to. Required.
	QueueURL string

	// KeyHeader names the request header holding the sender's event id;
	// KeyPointer is an RFC 6901 pointer to it in the JSON body. At most
	// one may be set. With neither, the scheme's own is used: the
	// X-GitHub-Delivery header for github, webhook-id (or svix-id) for
	// standard, /id in the body for stripe; hmac-sha256 and none need
	// one of them.
	KeyHeader  string
	KeyPointer string

	// GroupPointer is an RFC 6901 pointer to the value of the body that
	// is the MessageGroupId on a FIFO queue (a customer, an order), so
	// that the events of one group are handled in order. Empty: the key,
	// so that events are not held behind one another. Not for standard
	// queues.
	GroupPointer string

	// HashMissing keys a request without an event id by a SHA-256 of its
	// body instead of refusing it with 400. Only for senders that never
	// vary a body between retries.
	HashMissing bool
}

// Default event id places of the schemes.
const (
	headerGitHubDelivery = "X-GitHub-Delivery"
	pointerStripeID      = "/id"
)

// source is a Source made ready to serve.
type source struct {
	Source
	verifier *Verifier
	key      func(h http.Header, body []byte) (string, error)
	group    func(body []byte) (string, error) // nil: the key
	queue    queueInfo                         // read when Run starts
}

// keyAttribute is the message attribute a header's value is put in to
// derive a key from it as the worker would.
const keyAttribute = "header"

// prepare validates s and returns it ready to serve.
func (s Source) prepare() (*source, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case s.Name == "":
		bad("a name is required")
	case strings.IndexFunc(s.Name, func(r rune) bool { return !nameRune(r) }) >= 0:
		bad("name %q: only letters, digits, '-', '_' and '.'", s.Name)
	}
	if !strings.HasPrefix(s.Path, "/") {
		bad("path %q: must start with /", s.Path)
	}
	if s.QueueURL == "" {
		bad("a queue URL is required")
	}
	if s.KeyHeader != "" && s.KeyPointer != "" {
		bad("key_header and key_pointer: set one, not both")
	}
	v, err := NewVerifier(s.Verify)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		for i, err := range errs {
			errs[i] = fmt.Errorf("source %q: %w", s.Name, err)
		}
		return nil, fmt.Errorf("%w: %w", errors.Join(errs...), ErrInvalidConfig)
	}
	src := &source{Source: s, verifier: v}
	if err := src.keyFuncs(); err != nil {
		return nil, fmt.Errorf("source %q: %w: %w", s.Name, err, ErrInvalidConfig)
	}
	return src, nil
}

func nameRune(r rune) bool {
	return r == '-' || r == '_' || r == '.' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
}

// keyFuncs sets how keys and groups are found. Keys are derived by the
// worker's own rules (valid text, the ledger's limits, the hash when
// missing), so that a key accepted here is the key the worker reads back.
func (s *source) keyFuncs() error {
	header, pointer := s.KeyHeader, s.KeyPointer
	if header == "" && pointer == "" {
		switch s.Verify.Scheme {
		case SchemeGitHub:
			header = headerGitHubDelivery
		case SchemeStandard:
			header = headerWebhookID
		case SchemeStripe:
			pointer = pointerStripeID
		default:
			return fmt.Errorf("verify %s has no event id of its own: set key_header or key_pointer", s.Verify.Scheme)
		}
	}
	if pointer != "" {
		f, err := worker.MessageKeyFunc(worker.KeyConfig{From: worker.KeyFromBody, Pointer: pointer, HashMissing: s.HashMissing})
		if err != nil {
			return fmt.Errorf("key_pointer: %w", err)
		}
		s.key = func(_ http.Header, body []byte) (string, error) {
			key, _, err := f(types.Message{Body: aws.String(string(body))})
			return key, err
		}
	} else {
		if !isToken(header) {
			return fmt.Errorf("key_header %q is not a valid header name", header)
		}
		f, err := worker.MessageKeyFunc(worker.KeyConfig{From: worker.KeyFromAttribute, Attribute: keyAttribute, HashMissing: s.HashMissing})
		if err != nil {
			return fmt.Errorf("key_header: %w", err)
		}
		// Svix sends svix-id where Standard Webhooks say webhook-id.
		svix := header == headerWebhookID && s.Verify.Scheme == SchemeStandard
		s.key = func(h http.Header, body []byte) (string, error) {
			id, name := h.Get(header), header
			if id == "" && svix {
				id, name = h.Get(headerSvixID), headerSvixID
			}
			m := types.Message{Body: aws.String(string(body))}
			if id != "" {
				m.MessageAttributes = map[string]types.MessageAttributeValue{keyAttribute: {DataType: aws.String("String"), StringValue: aws.String(id)}}
			}
			key, _, err := f(m) // with HashMissing, no error
			if err != nil {
				if id == "" {
					return "", fmt.Errorf("%w: no %s header", worker.ErrNoKey, header)
				}
				return "", fmt.Errorf("%s header: %w", name, err)
			}
			return key, nil
		}
	}
	if s.GroupPointer != "" {
		f, err := worker.BodyKeyFunc(worker.KeyConfig{From: worker.KeyFromBody, Pointer: s.GroupPointer})
		if err != nil {
			return fmt.Errorf("group_pointer: %w", err)
		}
		s.group = func(body []byte) (string, error) {
			g, err := f(body)
			if err != nil {
				return "", fmt.Errorf("no message group: %w", err)
			}
			return g, nil
		}
	}
	return nil
}
