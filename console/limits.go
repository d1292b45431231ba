package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/sqsonce/sqsonce/internal/textcut"
)

// Bounds of what a request may carry. No value the console takes is
// longer than maxValueLen: a key is at most ledger.MaxKeyLen (512) bytes,
// a reason filter ledger.MaxErrorLen (1024).
const (
	maxFormLen  = 1 << 20 // bytes of a POST's body
	maxValueLen = 4 << 10 // bytes of one value of the query or the form
)

// bound reads a request's query and form, the body at most maxFormLen
// bytes, before anything else reads them: a longer body is refused (413).
func (h *Handler) bound(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormLen)
		}
		// Other errors of a form (a bad escape) leave the values that
		// could be read, as FormValue always has.
		if _, ok := errors.AsType[*http.MaxBytesError](r.ParseForm()); ok {
			h.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("This form is longer than %d bytes: nothing was read.", maxFormLen))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// shortValues refuses a request with a value of its query or form longer
// than maxValueLen (400), with a short page that names the field and its
// length, never the value.
func (h *Handler) shortValues(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name, n := longestValue(r.Form); n > maxValueLen {
			h.count(actionOf(r), "refused")
			h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("The value of %q is %d bytes, longer than %d: nothing was read.", textcut.Mark(name, 40, "…"), n, maxValueLen))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// longestValue is the name and length of the longest value of v.
func longestValue(v url.Values) (name string, n int) {
	for k, vs := range v {
		for _, s := range vs {
			if len(s) > n {
				name, n = k, len(s)
			}
		}
	}
	return name, n
}
