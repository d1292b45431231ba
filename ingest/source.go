package ingest

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/worker"
)

// Source is one sender's endpoint: where its requests arrive, how they are
// verified, where their event id is, and which queue they go to.
//
// The key of an event is taken only from what its signature covers, so
// that a captured request re-sent with other headers is the same
// operation, not a new one: KeyHeader may name only a header the scheme
// signs.
type Source struct {
	// Name names the source in logs, metrics and the attribute
	// AttrSource, and its keys (see KeyPrefix). Required, unique; letters,
	// digits, '-', '_' and '.'.
	Name string

	// Path is the URL path the sender posts to, such as /hooks/stripe.
	// Required, unique, starting with "/".
	Path string

	// Verify is how a request's signature is checked (see NewVerifier).
	Verify VerifyConfig

	// QueueURL is the queue the events go to. Required.
	QueueURL string

	// KeyPointer is an RFC 6901 pointer to the sender's event id in the
	// JSON body, which every scheme but none signs. KeyHeader names a
	// request header holding it, and may name only a header the scheme
	// signs: webhook-id for standard (svix-id is read in its place when
	// the request has the svix-* headers), or any header for none, which
	// signs nothing. github, stripe and hmac-sha256 sign no header that
	// holds an id: a key_header there is refused, since anyone holding one
	// signed request could re-send it under other ids, each a new event.
	// At most one of the two may be set. With neither, the scheme's own
	// is used: for github a SHA-256 of the body ("sha256:<hex>"; the
	// X-GitHub-Delivery header, which GitHub does not sign, travels in the
	// attribute AttrDeliveryID for support only), for standard the signed
	// webhook-id (or svix-id), for stripe /id in the body; hmac-sha256 and
	// none have none of their own and need KeyPointer (or, for none,
	// KeyHeader), or HashMissing to key every event by a SHA-256 of its
	// body.
	KeyHeader  string
	KeyPointer string

	// KeyPrefix, when not nil, is put before every key of the source, as
	// it is. Nil means the Name and a colon ("github:"), so that sources
	// whose event ids look alike (two senders that both count from 1)
	// never share a key, on one queue or in one ledger; names hold no
	// colon, so no two such prefixes begin one another. An empty prefix
	// keeps the bare event id. At most worker.MaxPrefixLen bytes of text
	// that SQS can carry, without control characters.
	KeyPrefix *string

	// GroupPointer is an RFC 6901 pointer to the value of the body that
	// is the MessageGroupId on a FIFO queue (a customer, an order), so
	// that the events of one group are handled in order. Empty: the key,
	// so that events are not held behind one another. Not for standard
	// queues.
	GroupPointer string

	// HashMissing keys a request without an event id by a SHA-256 of its
	// body ("sha256:<hex>" after the prefix) instead of refusing it with
	// 400; with neither KeyHeader nor KeyPointer, for hmac-sha256 and
	// none, it keys every request so. Only for senders that never vary a
	// body between retries.
	HashMissing bool
}

// Default event id places of the schemes, and the header GitHub names a
// delivery in.
const (
	headerGitHubDelivery = "X-GitHub-Delivery"
	pointerStripeID      = "/id"
)

// maxDeliveryID is the longest delivery id put in AttrDeliveryID.
const maxDeliveryID = 256

// source is a Source made ready to serve.
type source struct {
	Source
	verifier *Verifier
	// key derives an event's key from the request's headers, its body and
	// the id its signature covers beside the body (see Verifier.verify).
	key       func(h http.Header, body []byte, signedID string) (string, error)
	keyFormat string                            // what key makes, for people
	group     func(body []byte) (string, error) // nil: the key
	delivery  string                            // the header put in AttrDeliveryID; "" for none
	queue     queueInfo                         // read when Run starts
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
	if _, err := s.keyPrefix(); err != nil {
		errs = append(errs, err)
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
	if s.Verify.Scheme == SchemeGitHub {
		src.delivery = headerGitHubDelivery
	}
	if err := src.keyFuncs(); err != nil {
		return nil, fmt.Errorf("source %q: %w: %w", s.Name, err, ErrInvalidConfig)
	}
	return src, nil
}

func nameRune(r rune) bool {
	return r == '-' || r == '_' || r == '.' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
}

// keyPrefix returns the prefix of s's keys: KeyPrefix, or the name and a
// colon.
func (s Source) keyPrefix() (string, error) {
	if s.KeyPrefix == nil {
		p := s.Name + ":"
		if len(p) > worker.MaxPrefixLen {
			return "", fmt.Errorf("the key prefix, the name and a colon when key_prefix is not set, is longer than %d bytes: shorten the name or set key_prefix", worker.MaxPrefixLen)
		}
		return p, nil
	}
	p := *s.KeyPrefix
	switch {
	case len(p) > worker.MaxPrefixLen:
		return "", fmt.Errorf("key_prefix of %d bytes: at most %d", len(p), worker.MaxPrefixLen)
	case invalidSQSChar([]byte(p)) >= 0 || strings.ContainsFunc(p, unicode.IsControl):
		return "", fmt.Errorf("key_prefix %q: must be text that SQS can carry, without control characters", p)
	}
	return p, nil
}

// KeyFormat says how s makes its keys, for people: the prefix and where
// the event id comes from, such as "github:sha256:<SHA-256 of the body>"
// or "stripe:<the body's /id>". It returns the error New would for s.
func (s Source) KeyFormat() (string, error) {
	src, err := s.prepare()
	if err != nil {
		return "", err
	}
	return src.keyFormat, nil
}

// signs says what a scheme's signature covers, for error texts.
var signs = map[string]string{
	SchemeGitHub:     "only the body (X-Hub-Signature-256)",
	SchemeStripe:     "only its timestamp and the body (Stripe-Signature)",
	SchemeHMACSHA256: "only the body",
	SchemeStandard:   "webhook-id (or svix-id), webhook-timestamp and the body",
}

// keyFuncs sets how keys and groups are found. Keys are derived by the
// worker's own rules (valid text, the ledger's limits, the hash when
// missing), so that a key accepted here is the key the worker reads back.
func (s *source) keyFuncs() error {
	prefix, _ := s.keyPrefix() // checked by prepare
	scheme := s.Verify.Scheme
	header, pointer := s.KeyHeader, s.KeyPointer
	signedID, digest := false, false
	switch {
	case header != "" && !isToken(header):
		return fmt.Errorf("key_header %q is not a valid header name", header)
	case header != "" && scheme == SchemeStandard && http.CanonicalHeaderKey(header) == http.CanonicalHeaderKey(headerWebhookID):
		signedID = true
	case header != "" && scheme != SchemeNone:
		instead := "set key_pointer to an id in the body"
		switch scheme {
		case SchemeGitHub:
			instead = "leave key_header empty to key each delivery by a SHA-256 of its body (X-GitHub-Delivery travels in the attribute " + AttrDeliveryID + " for support), or " + instead
		case SchemeStripe:
			instead = "leave key_header empty to key each event by the body's /id, or " + instead
		case SchemeStandard:
			instead = "leave key_header empty to key each event by the signed webhook-id, or " + instead
		case SchemeHMACSHA256:
			instead += `, or leave key_header empty with on_missing = "hash" to key each event by a SHA-256 of its body`
		}
		return fmt.Errorf("key_header %s: verify %s signs %s, not this header: anyone holding one signed request could re-send it under other ids, each taken as a new event; %s",
			header, scheme, signs[scheme], instead)
	case header == "" && pointer == "":
		switch {
		case scheme == SchemeGitHub:
			digest = true
		case scheme == SchemeStandard:
			signedID = true
		case scheme == SchemeStripe:
			pointer = pointerStripeID
		case s.HashMissing:
			digest = true
		case scheme == SchemeHMACSHA256:
			return errors.New(`verify hmac-sha256 has no event id of its own: set key_pointer to the id in the body, or on_missing = "hash" to key each event by a SHA-256 of its body`)
		default:
			return fmt.Errorf(`verify %s has no event id of its own: set key_header or key_pointer, or on_missing = "hash" to key each event by a SHA-256 of its body`, scheme)
		}
	}
	const hashed = "sha256:<SHA-256 of the body>"
	orHash := func(f string) string {
		if s.HashMissing {
			return f + ", else " + prefix + hashed
		}
		return f
	}
	switch {
	case digest || pointer != "":
		// Without a pointer, a message without the attribute: the
		// worker's hash of the body.
		cfg := worker.KeyConfig{From: worker.KeyFromAttribute, Attribute: keyAttribute, HashMissing: true, Prefix: prefix}
		s.keyFormat = prefix + hashed
		if pointer != "" {
			cfg = worker.KeyConfig{From: worker.KeyFromBody, Pointer: pointer, HashMissing: s.HashMissing, Prefix: prefix}
			s.keyFormat = orHash(prefix + "<the body's " + pointer + ">")
		}
		f, err := worker.MessageKeyFunc(cfg)
		if err != nil {
			return fmt.Errorf("key_pointer: %w", err)
		}
		s.key = func(_ http.Header, body []byte, _ string) (string, error) {
			key, _, err := f(types.Message{Body: aws.String(string(body))})
			return key, err
		}
	default:
		f, err := worker.MessageKeyFunc(worker.KeyConfig{From: worker.KeyFromAttribute, Attribute: keyAttribute, HashMissing: s.HashMissing, Prefix: prefix})
		if err != nil {
			return fmt.Errorf("key_header: %w", err)
		}
		name := header
		if signedID {
			name = headerWebhookID
			s.keyFormat = orHash(prefix + "<the signed webhook-id>")
		} else {
			s.keyFormat = orHash(prefix + "<the " + header + " header, not signed>")
		}
		s.key = func(h http.Header, body []byte, signed string) (string, error) {
			id := signed
			if !signedID {
				id = h.Get(header)
			}
			m := types.Message{Body: aws.String(string(body))}
			if id != "" {
				m.MessageAttributes = map[string]types.MessageAttributeValue{keyAttribute: {DataType: aws.String("String"), StringValue: aws.String(id)}}
			}
			key, _, err := f(m) // with HashMissing, no error
			if err != nil {
				if id == "" {
					return "", fmt.Errorf("%w: no %s header", worker.ErrNoKey, name)
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

// deliveryID returns the request's delivery id for AttrDeliveryID, or ""
// when the source names none, the request has none, or it is longer than
// maxDeliveryID bytes or not text SQS can carry.
func (s *source) deliveryID(h http.Header) string {
	if s.delivery == "" {
		return ""
	}
	id := h.Get(s.delivery)
	if len(id) > maxDeliveryID || invalidSQSChar([]byte(id)) >= 0 {
		return ""
	}
	return id
}
