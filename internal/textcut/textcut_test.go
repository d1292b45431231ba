package textcut_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sqsonce/sqsonce/internal/textcut"
)

func TestCut(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 5, "hello"},
		{"hello", 3, "hel"},
		{"héllo", 2, "h"}, // é is two bytes: not split
		{"héllo", 3, "hé"},
		{"日本", 4, "日"},
		{"日本", 2, ""},
		{"x", -1, ""},
		{"", 0, ""},
	}
	for _, tc := range tests {
		if got := textcut.Cut(tc.s, tc.n); got != tc.want {
			t.Errorf("Cut(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
	if got := textcut.Mark("héllo", 2, "…"); got != "h…" {
		t.Errorf("Mark = %q", got)
	}
	if got := textcut.Mark("hi", 2, "…"); got != "hi" {
		t.Errorf("Mark of a fitting string = %q", got)
	}
}

func FuzzCut(f *testing.F) {
	f.Add("héllo wörld 日本語", 7)
	f.Add(strings.Repeat("€", 400), 1024)
	f.Fuzz(func(t *testing.T, s string, n int) {
		got := textcut.Cut(s, n)
		if !strings.HasPrefix(s, got) || len(got) > max(n, 0) && got != s {
			t.Fatalf("Cut(%q, %d) = %q: not a prefix within n", s, n, got)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Cut(%q, %d) = %q: split a character", s, n, got)
		}
		if utf8.ValidString(s) && len(s) > n && n >= 0 && len(got) < n-utf8.UTFMax+1 {
			t.Fatalf("Cut(%q, %d) = %q: cut more than one character short", s, n, got)
		}
	})
}
