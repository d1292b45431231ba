package console

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"
)

// isBidiControl reports whether r is a bidirectional control: a
// character that, shown as it is, reorders the text around it (U+202E
// writes the rest of a line backwards) while being invisible itself.
func isBidiControl(r rune) bool {
	return r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069 || r == 0x200E || r == 0x200F || r == 0x061C
}

// bidiMarker is how a bidirectional control is shown: its code point,
// U+202E say, in place of the character, so that an operator reads what
// is stored, in the order it is stored.
func bidiMarker(r rune) string { return fmt.Sprintf("U+%04X", r) }

// bidiTitle is the tooltip of a shown control.
const bidiTitle = "a bidirectional control character, shown here instead of applied"

// showBidi returns a page drawn by html/template with every bidirectional
// control of its text shown as a marker (see bidiMarker) instead of
// applied. Controls inside tags (attribute values, such as a form's
// hidden key) are kept: they are not shown as text, and a form must send
// the value as it is. In elements whose text cannot hold markup (title,
// option, textarea) the marker is plain text; elsewhere it is a span.
//
// It relies on what html/template writes: a '<' or '>' in a value is
// escaped, so each '<' of the page opens a tag and each '>' closes one.
func showBidi(page []byte) []byte {
	if !bytes.ContainsFunc(page, isBidiControl) {
		return page
	}
	var out bytes.Buffer
	out.Grow(len(page) + 256)
	inTag, plain := false, false
	tagStart := 0
	for i := 0; i < len(page); {
		c := page[i]
		switch {
		case c == '<' && !inTag:
			inTag, tagStart = true, i
		case c == '>' && inTag:
			inTag = false
			name, closing := tagName(page[tagStart+1 : i])
			if name == "title" || name == "option" || name == "textarea" {
				plain = !closing
			}
		case c >= utf8.RuneSelf && !inTag:
			r, n := utf8.DecodeRune(page[i:])
			if isBidiControl(r) {
				if plain {
					out.WriteString(bidiMarker(r))
				} else {
					fmt.Fprintf(&out, `<span class="bidi" title="%s">%s</span>`, bidiTitle, bidiMarker(r))
				}
				i += n
				continue
			}
		}
		out.WriteByte(c)
		i++
	}
	return out.Bytes()
}

// tagName is the lower-case name of the tag whose text between '<' and
// '>' is tag, and whether it is a closing tag.
func tagName(tag []byte) (name string, closing bool) {
	if len(tag) > 0 && tag[0] == '/' {
		closing, tag = true, tag[1:]
	}
	end := bytes.IndexAny(tag, " \t\n\r\f/")
	if end < 0 {
		end = len(tag)
	}
	return strings.ToLower(string(tag[:end])), closing
}

// visibleText is s with each bidirectional control written as its marker:
// the text an operator copies from a page.
func visibleText(s string) string {
	if !strings.ContainsFunc(s, isBidiControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if isBidiControl(r) {
			b.WriteString(bidiMarker(r))
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}
