package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sqsonce/sqsonce/internal/textcut"
)

// Limits of the http handler.
const (
	httpMaxResult    = 4096     // bytes of a response body kept as the result
	httpMaxDrain     = 64 << 10 // bytes of a response body read before closing it
	httpMaxErrorBody = 200      // bytes of a response body put in an error
)

// HTTPConfig configures an HTTPHandler.
type HTTPConfig struct {
	// URL is where each message is POSTed: an absolute http or https URL.
	URL string
	// Client sends the requests. Nil means a client with connect, TLS
	// handshake and idle-connection timeouts but no overall timeout: the
	// handler's context bounds each request. A given client is copied, and
	// the copy does not follow redirects.
	Client *http.Client
	// Logger is used for what cannot go into the returned error. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// HTTPHandler is a Handler that POSTs each message to a URL. It is safe for
// concurrent use.
//
// The request body is the message body, with Content-Type application/json
// when the body is valid JSON and application/octet-stream otherwise, and
// the headers Idempotency-Key (Message.Key), X-Sqsonce-Message-Id,
// X-Sqsonce-Attempt, X-Sqsonce-Receive-Count, X-Sqsonce-Queue-Url,
// X-Sqsonce-Group-Id (for a message with a group id), X-Sqsonce-Attr-<Name>
// for each of Message.Attributes (left out when the value holds a control
// character such as a line break, which no header can carry, or is longer
// than MaxAttrValue), traceparent and tracestate (Message.TraceParent and
// TraceState, W3C Trace Context, each when not empty) and User-Agent
// sqsonce. The endpoint should use Idempotency-Key to apply the operation
// once.
//
// Handle returns nil only for a 2xx response: the endpoint has taken the
// operation as done (a 202 Accepted counts, so answer 202 only once the
// operation is durably yours). The first 4096 bytes of a 2xx response body
// become Message.Result. Otherwise:
//
//   - 408, 429 and 5xx: the endpoint is down (Unavailable), made with
//     RetryAfter too when the response has a Retry-After header
//     (delay-seconds or an HTTP date; a date in the past means no delay);
//   - any other 4xx: a Permanent error;
//   - 1xx and 3xx (redirects are not followed), and any other status: a
//     retryable error;
//   - no response (connection refused or reset, the handler's timeout): the
//     endpoint is down (Unavailable); the context ending otherwise (the
//     worker stops, or lost the claim): a retryable error; each wraps
//     ctx.Err() when the context ended.
//
// Errors name the status and include the first 200 bytes of the response
// body. Up to 64 KiB of each response body is read before it is closed, so
// that the connection can be reused.
type HTTPHandler struct {
	url    string
	client *http.Client
	log    *slog.Logger
}

// NewHTTPHandler validates cfg and returns its handler.
func NewHTTPHandler(cfg HTTPConfig) (*HTTPHandler, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("http handler: url must be an absolute http or https URL, got %q", cfg.URL)
	}
	var c http.Client
	if cfg.Client != nil {
		c = *cfg.Client
	} else {
		c.Transport = httpTransport()
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &HTTPHandler{url: u.String(), client: &c, log: cmp.Or(cfg.Logger, slog.Default())}, nil
}

// httpTransport returns the transport of the default client.
func httpTransport() *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
	}
}

// MaxAttrValue is the longest attribute value that the exec and http
// handlers pass on (as a variable or a header): SQS allows values of up to
// 256 KiB, far more than a server takes in a header or Linux in one
// variable. A Go handler has every value in Message.Attributes.
const MaxAttrValue = 4096

// httpAttrPrefix starts the header of each message attribute.
const httpAttrPrefix = "X-Sqsonce-Attr-"

// validHeaderName reports whether the attribute name can end a header
// name: SQS and SNS allow letters, digits, "-", "_" and ".", all of them
// token characters.
func validHeaderName(name string) bool {
	return name != "" && !strings.ContainsFunc(name, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.')
	})
}

// Handle POSTs m to the handler's URL. See HTTPHandler for what it returns.
func (h *HTTPHandler) Handle(ctx context.Context, m *Message) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(m.Body))
	if err != nil {
		return fmt.Errorf("http: %w", err)
	}
	headers := [][2]string{
		{"Idempotency-Key", m.Key},
		{"X-Sqsonce-Message-Id", m.MessageID},
		{"X-Sqsonce-Attempt", strconv.Itoa(m.Attempt)},
		{"X-Sqsonce-Receive-Count", strconv.Itoa(m.ReceiveCount)},
		{"X-Sqsonce-Queue-Url", m.QueueURL},
	}
	for _, kv := range [][2]string{{"X-Sqsonce-Group-Id", m.GroupID}, {"traceparent", m.TraceParent}, {"tracestate", m.TraceState}} {
		if kv[1] != "" { // each only when the message has one
			headers = append(headers, kv)
		}
	}
	for _, kv := range headers {
		if !httpValidHeaderValue(kv[1]) {
			// The values come from the message, so every delivery fails alike.
			return Permanent(fmt.Errorf("http: header %s: value has a control character", kv[0]))
		}
		req.Header.Set(kv[0], kv[1])
	}
	for name, v := range m.Attributes {
		// An attribute's value may hold a line break, which a header
		// cannot: such an attribute is left out rather than failing work
		// that may not need it.
		if len(v) <= MaxAttrValue && httpValidHeaderValue(v) && validHeaderName(name) {
			req.Header.Set(httpAttrPrefix+name, v)
		}
	}
	if json.Valid(m.Body) {
		req.Header.Set("Content-Type", "application/json")
	} else {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	req.Header.Set("User-Agent", "sqsonce")

	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("http: no response: %w (%v)", handlerContextErr(ctx), err)
			if errors.Is(context.Cause(ctx), errHandlerTimeout) {
				return Unavailable(0, err)
			}
			return err // the worker stops, or lost the claim
		}
		return Unavailable(0, fmt.Errorf("http: no response: %w", err))
	}
	body, readErr := httpReadBody(resp.Body)

	code := resp.StatusCode
	if code >= 200 && code <= 299 {
		if readErr != nil {
			h.log.LogAttrs(ctx, slog.LevelWarn, "could not read the whole response body; the work is done",
				slog.String("key", m.Key), slog.String("message_id", m.MessageID),
				slog.Int("status", code), slog.String("error", readErr.Error()))
		}
		if len(body) > 0 {
			m.Result = body
		}
		return nil
	}

	status := cmp.Or(resp.Status, strconv.Itoa(code))
	if code >= 300 && code <= 399 {
		if loc := resp.Header.Get("Location"); loc != "" {
			status += " to " + strconv.Quote(textcut.Mark(loc, httpMaxErrorBody, "..."))
		}
		status += " (redirects are not followed)"
	}
	err = fmt.Errorf("http: status %s%s", status, httpBodyText(body))
	switch {
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || (code >= 500 && code <= 599):
		if d, ok := httpRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return RetryAfter(d, Unavailable(d, err))
		}
		return Unavailable(0, err)
	case code >= 400 && code <= 499:
		return Permanent(err)
	default:
		return err
	}
}

// httpReadBody reads up to httpMaxResult bytes of body, then discards up to
// httpMaxDrain bytes in all, and closes it.
func httpReadBody(body io.ReadCloser) ([]byte, error) {
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, httpMaxResult))
	if err != nil {
		return b, err
	}
	_, err = io.Copy(io.Discard, io.LimitReader(body, httpMaxDrain-int64(len(b))))
	return b, err
}

// httpRetryAfter parses a Retry-After value: delay-seconds or an HTTP date.
func httpRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		n, err := strconv.ParseUint(v, 10, 64)
		if errors.Is(err, strconv.ErrRange) || (err == nil && n > math.MaxInt64/uint64(time.Second)) {
			return time.Duration(math.MaxInt64), true
		}
		if err != nil {
			return 0, false
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// httpBodyText formats the start of a response body for an error.
func httpBodyText(b []byte) string {
	s := strings.TrimSpace(strings.ToValidUTF8(string(b[:min(len(b), httpMaxErrorBody+utf8.UTFMax)]), "\uFFFD"))
	if s == "" {
		return ""
	}
	return fmt.Sprintf(": body %q", textcut.Mark(s, httpMaxErrorBody, "..."))
}

// handlerContextErr returns ctx.Err(), joined with the context's cause when
// that says more (a handler timeout, a lost lease).
func handlerContextErr(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

// httpValidHeaderValue reports whether s can be sent as a header value.
func httpValidHeaderValue(s string) bool {
	return !strings.ContainsFunc(s, func(c rune) bool { return (c < ' ' && c != '\t') || c == 0x7f })
}
