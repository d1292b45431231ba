package console

import "testing"

func TestShowBidi(t *testing.T) {
	t.Parallel()
	span := `<span class="bidi" title="` + bidiTitle + `">U+202E</span>`
	for _, tc := range []struct{ in, want string }{
		{"<p>plain</p>", "<p>plain</p>"},
		{"<p>a\u202eb</p>", "<p>a" + span + "b</p>"},
		{`<input name="key" value="a` + "\u202e" + `b">`, `<input name="key" value="a` + "\u202e" + `b">`},
		{"<title>K \u202e</title><p>\u202e</p>", "<title>K U+202E</title><p>" + span + "</p>"},
		{"<svg><g><title>x\u2066</title></g></svg>", "<svg><g><title>xU+2066</title></g></svg>"},
		{"<option value=\"\u200e\">\u200e</option>\u200e", "<option value=\"\u200e\">U+200E</option>" + `<span class="bidi" title="` + bidiTitle + `">U+200E</span>`},
		{"<pre class=\"text\">é\u061cü</pre>", "<pre class=\"text\">é" + `<span class="bidi" title="` + bidiTitle + `">U+061C</span>` + "ü</pre>"},
	} {
		if got := string(showBidi([]byte(tc.in))); got != tc.want {
			t.Errorf("showBidi(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
	if got := visibleText("orders/\u202egpj.exe"); got != "orders/U+202Egpj.exe" {
		t.Errorf("visibleText = %q", got)
	}
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"orders/1":             "orders/1",
		"a b":                  "'a b'",
		"it's":                 `'it'\''s'`,
		"orders/\u202egpj.exe": `$'orders/\xe2\x80\xaegpj.exe'`,
		"a\nb 'c' \\d":         `$'a\x0ab \'c\' \\d'`,
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
