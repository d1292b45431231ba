// Package textcut cuts text to a length in bytes without splitting a
// UTF-8 character: the one way sqsonce shortens error texts, reasons and
// stored strings.
package textcut

import "unicode/utf8"

// Cut returns the longest prefix of s that is at most n bytes long and does
// not end inside a UTF-8 sequence. A valid string stays valid; s itself is
// returned when it fits. n < 0 is taken as 0.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Mark is Cut followed by mark when s was cut: Mark("héllo", 2, "…") is
// "h…". The mark is not counted in n.
func Mark(s string, n int, mark string) string {
	if c := Cut(s, n); len(c) < len(s) {
		return c + mark
	}
	return s
}
