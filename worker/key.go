package worker

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/ledger"
)

// KeySource says where the operation key of a message comes from.
type KeySource string

// Key sources.
const (
	KeyFromBody            KeySource = "body"             // a JSON field of the body, by RFC 6901 pointer
	KeyFromAttribute       KeySource = "attribute"        // a message attribute
	KeyFromDeduplicationID KeySource = "deduplication_id" // the FIFO MessageDeduplicationId
)

// KeyConfig says how to derive the operation key of a message. The key is
// derived from what the message is, so every delivery of one operation gets
// the same key.
type KeyConfig struct {
	From      KeySource
	Pointer   string // RFC 6901 pointer into the JSON body, with From == KeyFromBody
	Attribute string // message attribute name, with From == KeyFromAttribute
	// SNS unwraps an SNS notification envelope (its Message field) before
	// the pointer is read and the payload fingerprinted.
	SNS bool
	// HashMissing keys a message whose key cannot be derived by a hash of
	// its payload instead of rejecting it. Senders that vary a payload
	// between retries defeat this: opt in only when they do not.
	HashMissing bool
	// Prefix is a namespace prepended to every key.
	Prefix string
}

// MaxPrefixLen is the longest key prefix, so that a prefixed key (even a
// hashed one) fits the ledger's key limit.
const MaxPrefixLen = 128

// ErrNoKey is wrapped by every reason a message has no usable key.
var ErrNoKey = errors.New("no operation key")

// keyer derives keys under one KeyConfig. It is safe for concurrent use.
type keyer struct {
	cfg    KeyConfig
	tokens []string // the pointer's reference tokens, unescaped
}

// newKeyer validates cfg and returns its keyer.
func newKeyer(cfg KeyConfig) (*keyer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	k := &keyer{cfg: cfg}
	if cfg.From == KeyFromBody {
		k.tokens, _ = parsePointer(cfg.Pointer)
	}
	return k, nil
}

// validate reports the problems of cfg as FieldErrors joined.
func (cfg KeyConfig) validate() error {
	var errs []error
	bad := func(field, got, want string) {
		errs = append(errs, &FieldError{Field: "Key." + field, Want: want, Got: got})
	}
	switch cfg.From {
	case KeyFromBody:
		switch p := cfg.Pointer; {
		case p == "":
			bad("Pointer", "", "is required when keys come from the body")
		case p[0] != '/':
			bad("Pointer", strconv.Quote(p), `must be a JSON pointer starting with "/"`)
		case !utf8.ValidString(p):
			bad("Pointer", strconv.Quote(p), "must be valid UTF-8")
		default:
			if _, err := parsePointer(p); err != nil {
				bad("Pointer", strconv.Quote(p), `must escape "~" as "~0" and "/" as "~1"`)
			}
		}
	case KeyFromAttribute:
		if cfg.Attribute == "" {
			bad("Attribute", "", "is required when keys come from a message attribute")
		} else if err := attributeName(cfg.Attribute); err != nil {
			bad("Attribute", strconv.Quote(cfg.Attribute), err.Error())
		}
	case KeyFromDeduplicationID:
	default:
		bad("From", strconv.Quote(string(cfg.From)), fmt.Sprintf("must be one of %s, %s, %s", KeyFromBody, KeyFromAttribute, KeyFromDeduplicationID))
	}
	switch p := cfg.Prefix; {
	case len(p) > MaxPrefixLen:
		bad("Prefix", fmt.Sprintf("%d bytes", len(p)), fmt.Sprintf("must be at most %d bytes", MaxPrefixLen))
	case !utf8.ValidString(p):
		bad("Prefix", strconv.Quote(p), "must be valid UTF-8")
	case strings.ContainsFunc(p, unicode.IsControl):
		bad("Prefix", strconv.Quote(p), "must not contain control characters")
	}
	return errors.Join(errs...)
}

// derived is what the keyer makes of a message.
type derived struct {
	key         string
	fingerprint []byte // sha256 of the payload
	hashed      bool   // the key is the payload hash (HashMissing)
}

// opened is a message as its key and its handler read it.
type opened struct {
	// payload is the SNS envelope's Message when KeyConfig.SNS is on, else
	// the body. When the envelope cannot be opened it is the body, and err
	// says why: a hashed key must never be the hash of nothing.
	payload []byte
	// attrs are the message's attributes and, for an SNS envelope, the
	// envelope's MessageAttributes beside them (the message's own win on a
	// name given in both).
	attrs map[string]types.MessageAttributeValue
	err   error
}

// open returns what the key and the handler read of a message.
func (k *keyer) open(body []byte, attrs map[string]types.MessageAttributeValue) opened {
	o := opened{payload: body, attrs: attrs}
	if !k.cfg.SNS {
		return o
	}
	env, err := openSNS(body)
	if err != nil {
		o.err = err
		return o
	}
	o.payload = env.message
	if len(env.attrs) > 0 {
		merged := make(map[string]types.MessageAttributeValue, len(attrs)+len(env.attrs))
		maps.Copy(merged, env.attrs)
		maps.Copy(merged, attrs)
		o.attrs = merged
	}
	return o
}

// derive returns the key and payload fingerprint of a message. The error
// wraps ErrNoKey and says why, without quoting the body.
func (k *keyer) derive(body []byte, attrs map[string]types.MessageAttributeValue, system map[string]string) (derived, error) {
	return k.deriveOpened(k.open(body, attrs), system)
}

// deriveOpened is derive of a message already opened.
func (k *keyer) deriveOpened(o opened, system map[string]string) (derived, error) {
	payload, attrs, err := o.payload, o.attrs, o.err
	var raw string
	if err == nil {
		switch k.cfg.From {
		case KeyFromBody:
			raw, err = lookupPointer(payload, k.tokens, k.cfg.Pointer)
		case KeyFromAttribute:
			raw, err = attributeKey(attrs, k.cfg.Attribute)
		case KeyFromDeduplicationID:
			raw = OriginalDeduplicationID(system, attrs)
			switch dedup := system[string(types.MessageSystemAttributeNameMessageDeduplicationId)]; {
			case dedup == "":
				err = errors.New("message has no MessageDeduplicationId (not a FIFO queue?)")
			case raw == "":
				err = fmt.Errorf("a copy made by sqsonce (deduplication id %s) without its original deduplication id in the attribute %s", dedup, AttrDeduplicationID)
			}
		}
	}
	if err == nil {
		err = checkKeyText(raw)
	}
	sum := sha256.Sum256(payload)
	d := derived{key: k.cfg.Prefix + raw, fingerprint: sum[:]}
	if err == nil {
		err = ledger.ValidateKey(d.key)
	}
	if err != nil {
		if !k.cfg.HashMissing {
			return derived{}, fmt.Errorf("%w: %v%s", ErrNoKey, err, k.snsHint(payload))
		}
		d.key, d.hashed = k.cfg.Prefix+"sha256:"+hex.EncodeToString(sum[:]), true
	}
	return d, nil
}

// snsHint says where the key is when a body read without KeyConfig.SNS,
// whose key could not be read, is an SNS notification envelope (a topic
// delivering to the queue without raw message delivery).
func (k *keyer) snsHint(payload []byte) string {
	if k.cfg.SNS || k.cfg.From != KeyFromBody {
		return ""
	}
	if _, err := openSNS(payload); err != nil {
		return ""
	}
	return "; the body is an SNS notification envelope: with key.sns = true the key is read from its Message (or turn on raw message delivery on the subscription)"
}

// checkKeyText refuses text that cannot travel as an environment variable
// or an HTTP header value: invalid UTF-8 and control characters.
func checkKeyText(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("key is not valid UTF-8")
	}
	if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
		return fmt.Errorf("key has a control character (%U) at byte %d", []rune(s[i:])[0], i)
	}
	return nil
}

func attributeKey(attrs map[string]types.MessageAttributeValue, name string) (string, error) {
	v, ok := attrs[name]
	if !ok {
		return "", fmt.Errorf("message has no attribute %q", name)
	}
	if v.StringValue == nil || *v.StringValue == "" {
		return "", fmt.Errorf("attribute %q has no string value", name)
	}
	return *v.StringValue, nil
}

// snsEnvelope is what the worker reads of an SNS notification envelope.
type snsEnvelope struct {
	message []byte
	attrs   map[string]types.MessageAttributeValue
}

// openSNS reads an SNS notification envelope: its Message, and its
// MessageAttributes as SQS message attributes. An attribute whose Binary
// value is not base64 is left out.
func openSNS(body []byte) (snsEnvelope, error) {
	var env struct {
		Type              string  `json:"Type"`
		Message           *string `json:"Message"`
		TopicArn          string  `json:"TopicArn"`
		MessageAttributes map[string]struct {
			Type  string `json:"Type"`
			Value string `json:"Value"`
		} `json:"MessageAttributes"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return snsEnvelope{}, fmt.Errorf("body is not an SNS envelope: %v", jsonProblem(err))
	}
	if env.Message == nil || env.Type != "Notification" {
		return snsEnvelope{}, errors.New("body is not an SNS notification envelope (no Type Notification with a Message)")
	}
	out := snsEnvelope{message: []byte(*env.Message)}
	if len(env.MessageAttributes) > 0 {
		out.attrs = make(map[string]types.MessageAttributeValue, len(env.MessageAttributes))
		for name, a := range env.MessageAttributes {
			v := types.MessageAttributeValue{DataType: aws.String(a.Type)}
			if strings.HasPrefix(a.Type, "Binary") {
				b, err := base64.StdEncoding.DecodeString(a.Value)
				if err != nil {
					continue
				}
				v.BinaryValue = b
			} else {
				v.StringValue = aws.String(a.Value)
			}
			out.attrs[name] = v
		}
	}
	return out, nil
}

// parsePointer splits an RFC 6901 pointer into unescaped reference tokens.
func parsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, fmt.Errorf("%q does not start with /", p)
	}
	parts := strings.Split(p[1:], "/")
	for i, s := range parts {
		for j := 0; j < len(s); j++ {
			if s[j] == '~' && (j+1 == len(s) || (s[j+1] != '0' && s[j+1] != '1')) {
				return nil, fmt.Errorf("%q: ~ must be followed by 0 or 1", p)
			}
		}
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return parts, nil
}

// lookupPointer returns the string or number at tokens in the JSON document
// doc. Numbers are returned as written.
//
// The document is validated whole first, so that a body that is not JSON
// has no key whatever comes before its fault; the walk then skips what is
// not on the pointer's way without decoding it (see jsonField and
// jsonElement). It finds what decoding each object into a
// map[string]json.RawMessage and each array into a []json.RawMessage finds:
// for a name given twice, the last.
func lookupPointer(doc []byte, tokens []string, pointer string) (string, error) {
	raw := bytes.TrimSpace(doc)
	if !json.Valid(raw) {
		return "", errors.New("body is not valid JSON")
	}
	for _, tok := range tokens {
		switch first(raw) {
		case '{':
			v, ok := jsonField(raw, tok)
			if !ok {
				return "", fmt.Errorf("pointer %s: no field %q", pointer, tok)
			}
			raw = v
		case '[':
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || (len(tok) > 1 && tok[0] == '0') {
				return "", fmt.Errorf("pointer %s: no array element %q", pointer, tok)
			}
			v, ok := jsonElement(raw, i)
			if !ok {
				return "", fmt.Errorf("pointer %s: no array element %q", pointer, tok)
			}
			raw = v
		default:
			return "", fmt.Errorf("pointer %s: %q is inside %s", pointer, tok, kind(raw))
		}
	}
	switch c := first(raw); {
	case c == '"':
		s, err := jsonString(bytes.TrimSpace(raw))
		if err != nil {
			return "", fmt.Errorf("pointer %s: %v", pointer, jsonProblem(err))
		}
		if s == "" {
			return "", fmt.Errorf("pointer %s: empty string", pointer)
		}
		// encoding/json turns invalid UTF-8 and lone surrogates into U+FFFD,
		// which would make different ids one key.
		if strings.ContainsRune(s, utf8.RuneError) && !writesReplacementChar(raw, s) {
			return "", fmt.Errorf("pointer %s: the id is not valid Unicode (invalid UTF-8 or a lone surrogate)", pointer)
		}
		return s, nil
	case c == '-' || (c >= '0' && c <= '9'):
		return string(bytes.TrimSpace(raw)), nil
	default:
		return "", fmt.Errorf("pointer %s: value is %s, not a string or number", pointer, kind(raw))
	}
}

// The walk of lookupPointer. Each function takes valid JSON (json.Valid
// has passed on the whole document) and so checks nothing: it only finds
// where values begin and end.

// jsonField returns the value of the last member named name of the object
// obj.
func jsonField(obj []byte, name string) (value []byte, ok bool) {
	i := skipSpace(obj, 1) // after '{'
	for i < len(obj) && obj[i] == '"' {
		end := skipString(obj, i)
		lit := obj[i:end]
		i = skipSpace(obj, skipSpace(obj, end)+1) // after ':'
		vend := skipValue(obj, i)
		if jsonNameIs(lit, name) {
			value, ok = obj[i:vend], true
		}
		i = skipSpace(obj, vend)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return value, ok
}

// jsonElement returns the element at index n of the array arr.
func jsonElement(arr []byte, n int) ([]byte, bool) {
	i := skipSpace(arr, 1) // after '['
	for k := 0; i < len(arr) && arr[i] != ']'; k++ {
		end := skipValue(arr, i)
		if k == n {
			return arr[i:end], true
		}
		i = skipSpace(arr, end)
		if i < len(arr) && arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
	return nil, false
}

// jsonNameIs reports whether the string literal lit (quotes included) is
// name once decoded as encoding/json decodes it.
func jsonNameIs(lit []byte, name string) bool {
	inner := lit[1 : len(lit)-1]
	if plainString(inner) {
		return string(inner) == name
	}
	s, err := jsonString(lit)
	return err == nil && s == name
}

// jsonString decodes the string literal lit as encoding/json does.
func jsonString(lit []byte) (string, error) {
	if inner := lit[1 : len(lit)-1]; plainString(inner) {
		return string(inner), nil
	}
	var s string
	err := json.Unmarshal(lit, &s)
	return s, err
}

// plainString reports whether the inside of a valid string literal decodes
// to itself: no escapes, and valid UTF-8 (encoding/json replaces invalid
// bytes).
func plainString(inner []byte) bool {
	ascii := true
	for _, c := range inner {
		if c == '\\' {
			return false
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	return ascii || utf8.Valid(inner)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string literal that starts at i.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index after the value that starts at i.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// writesReplacementChar reports whether every U+FFFD in the decoded string
// s is spelt in the JSON literal raw (as the character or a \ufffd escape),
// rather than made by encoding/json repairing invalid UTF-8 or a lone
// surrogate.
func writesReplacementChar(raw []byte, s string) bool {
	if !utf8.Valid(raw) {
		return false
	}
	spelt := bytes.Count(raw, []byte(string(utf8.RuneError))) + bytes.Count(bytes.ToLower(raw), []byte(`\ufffd`))
	return spelt == strings.Count(s, string(utf8.RuneError))
}

func first(raw []byte) byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

func kind(raw []byte) string {
	switch c := first(raw); {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	}
	return "a number"
}

// jsonProblem describes a JSON error without quoting the document.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("invalid JSON at offset %d", se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("JSON %s where %s was expected", te.Value, te.Type)
	}
	return "invalid JSON"
}

// DeduplicationID returns a FIFO MessageDeduplicationId (or MessageGroupId)
// for an operation key: the key itself when SQS accepts it (at most 128
// characters, ASCII letters, digits and punctuation), otherwise a SHA-256
// of the key. Either way it depends on the key alone.
func DeduplicationID(key string) string {
	ok := len(key) > 0 && len(key) <= 128
	for i := 0; ok && i < len(key); i++ {
		ok = key[i] > ' ' && key[i] < 0x7f
	}
	if ok {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256-" + hex.EncodeToString(sum[:])
}

// CopyDeduplicationID returns the FIFO MessageDeduplicationId of a copy that
// sqsonce sends of a message it received: to the dead-letter queue, or back
// from it by replay. It names the message copied (its SQS message id, which
// SQS never gives to another message), not the operation.
//
// The difference matters because SQS drops, within five minutes, every send
// whose deduplication id it has seen on that queue, and still answers it with
// success (and the first message's id). The operation key is the right
// deduplication id where operations are enqueued: a resend of the same
// operation is then dropped. It is wrong for copies: a dead-letter queue holds
// deliveries that failed, and two deliveries of one operation (two conflicting
// payloads, or a failure again soon after a replay) must both arrive. Named by
// the message copied, a copy can be dropped only when an earlier copy of the
// same message was accepted (its delete after the send failed, or the send's
// answer was lost): that copy is in the target, so deleting the original
// loses nothing.
//
// A copy carries the deduplication id of the message it stands for in the
// attribute AttrDeduplicationID, so that a key taken from the deduplication
// id (KeyFromDeduplicationID) stays the same on every copy.
func CopyDeduplicationID(messageID string) string {
	id := copyPrefix + messageID
	if DeduplicationID(id) != id {
		sum := sha256.Sum256([]byte(messageID))
		id = copyPrefix + "sha256-" + hex.EncodeToString(sum[:])
	}
	return id
}

// copyPrefix starts every deduplication id made by CopyDeduplicationID.
const copyPrefix = "sqsonce-copy-"

// AttrDeduplicationID is the message attribute in which a copy made by
// sqsonce carries the MessageDeduplicationId of the message it stands for.
const AttrDeduplicationID = "SqsonceDeduplicationId"

// OriginalDeduplicationID returns the deduplication id that a message with
// these system and message attributes stands for: its own, or, on a copy
// made by sqsonce, the one in AttrDeduplicationID ("" when that is
// missing).
func OriginalDeduplicationID(system map[string]string, attrs map[string]types.MessageAttributeValue) string {
	dedup := system[string(types.MessageSystemAttributeNameMessageDeduplicationId)]
	if !strings.HasPrefix(dedup, copyPrefix) {
		return dedup
	}
	if v, ok := attrs[AttrDeduplicationID]; ok && v.StringValue != nil {
		return *v.StringValue
	}
	return ""
}

// BodyKeyFunc returns the key derivation of cfg for a bare body, as a
// producer sees it before sending: only body keys (optionally SNS-wrapped)
// can be derived without a received message.
func BodyKeyFunc(cfg KeyConfig) (func(body []byte) (string, error), error) {
	if cfg.From != KeyFromBody {
		return nil, fmt.Errorf("keys from %q are not in the body: %w", cfg.From, ErrNoKey)
	}
	k, err := newKeyer(cfg)
	if err != nil {
		return nil, err
	}
	return func(body []byte) (string, error) {
		d, err := k.derive(body, nil, nil)
		return d.key, err
	}, nil
}

// MessageKeyFunc returns the key derivation of cfg for a received message,
// as the worker derives it: the operation key and the fingerprint of the
// payload that the ledger compares to tell a conflict, or an error wrapping
// ErrNoKey. It is safe for concurrent use.
func MessageKeyFunc(cfg KeyConfig) (func(m types.Message) (key string, fingerprint []byte, err error), error) {
	return MessageKeyFuncS3(cfg, nil, 0)
}

// attributeName checks a message attribute's name as SQS does, so that a
// name no message can carry (which would never match) is refused: up to
// 256 bytes of letters, digits, "-", "_" and ".", no "." first, last or twice in a
// row, and no "AWS." or "Amazon." prefix in any case.
func attributeName(name string) error {
	lower := strings.ToLower(name)
	switch {
	case len(name) > 256:
		return fmt.Errorf("must be at most 256 bytes, as SQS's attribute names are")
	case !utf8.ValidString(name) || strings.ContainsFunc(name, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '-' && r != '_' && r != '.'
	}):
		return fmt.Errorf("must be a name SQS allows for a message attribute: letters, digits, \"-\", \"_\" and \".\" only")
	case strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, ".."):
		return fmt.Errorf("must not start or end with \".\" nor hold \"..\", as SQS's attribute names do not")
	case strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon."):
		return fmt.Errorf("must not start with \"AWS.\" or \"Amazon.\": SQS keeps those names for itself")
	}
	return nil
}
