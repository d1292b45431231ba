package postgres

import (
	"bytes"
	"testing"
)

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ in, want []byte }{
		{nil, nil},
		{[]byte("p"), []byte("q")},
		{[]byte("p/"), []byte("p0")},
		{[]byte("a\xff"), []byte("b")},
		{[]byte("\xff\xff"), nil},
	} {
		if got := prefixEnd(tc.in); !bytes.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("prefixEnd(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
