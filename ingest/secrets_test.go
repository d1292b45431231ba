package ingest_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/sqsonce/sqsonce/ingest"
)

func TestSecretsFromFile_Lines(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		data string
		want []string
	}{
		{"One", "whsec_abc\n", []string{"whsec_abc"}},
		{"NoFinalNewline", "whsec_abc", []string{"whsec_abc"}},
		{"Rotation", "whsec_new\nwhsec_old\n", []string{"whsec_new", "whsec_old"}},
		{"CommentsBlanksAndSpaces", "# current\n\n  whsec_new  \n\t# previous, until May\n\twhsec_old\r\n\n", []string{"whsec_new", "whsec_old"}},
		{"CRLF", "a\r\nb\r\n", []string{"a", "b"}},
		{"ByteOrderMark", "\uFEFFwhsec_abc\n", []string{"whsec_abc"}},
		{"SpacesInsideKept", "It's a Secret to Everybody\n", []string{"It's a Secret to Everybody"}},
		{"HashInsideKept", "abc#def\n", []string{"abc#def"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := ingest.SecretsFromFile([]byte(c.data))
			if err != nil {
				t.Fatalf("SecretsFromFile = %v", err)
			}
			if !slices.EqualFunc(got, c.want, func(b []byte, s string) bool { return string(b) == s }) {
				t.Errorf("SecretsFromFile = %q, want %q", got, c.want)
			}
		})
	}
}

func TestSecretsFromFile_DoesNotShareMemory(t *testing.T) {
	t.Parallel()
	data := []byte("secret\n")
	got, err := ingest.SecretsFromFile(data)
	if err != nil {
		t.Fatal(err)
	}
	clear(data)
	if string(got[0]) != "secret" {
		t.Errorf("secret after clearing the file's contents = %q", got[0])
	}
}

func TestSecretsFromFile_Empty(t *testing.T) {
	t.Parallel()
	for name, data := range map[string]string{"Nothing": "", "Blank": " \n\t\r\n", "OnlyComments": "# whsec_abc\n  # x\n"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := ingest.SecretsFromFile([]byte(data))
			if !errors.Is(err, ingest.ErrInvalidConfig) {
				t.Fatalf("SecretsFromFile = %q, %v; want ErrInvalidConfig", got, err)
			}
		})
	}
}

func TestSecretsFromEnv_Fields(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, value string
		want        []string
	}{
		{"One", "whsec_abc", []string{"whsec_abc"}},
		{"Rotation", "whsec_new whsec_old", []string{"whsec_new", "whsec_old"}},
		{"AnyWhitespace", "\n whsec_new\t\twhsec_old\r\n third ", []string{"whsec_new", "whsec_old", "third"}},
		{"HashIsNotAComment", "#abc def", []string{"#abc", "def"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := ingest.SecretsFromEnv(c.value)
			if err != nil {
				t.Fatalf("SecretsFromEnv = %v", err)
			}
			if !slices.EqualFunc(got, c.want, func(b []byte, s string) bool { return string(b) == s }) {
				t.Errorf("SecretsFromEnv = %q, want %q", got, c.want)
			}
		})
	}
}

func TestSecretsFromEnv_Empty(t *testing.T) {
	t.Parallel()
	for name, value := range map[string]string{"Unset": "", "Blank": " \t\n"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := ingest.SecretsFromEnv(value)
			if !errors.Is(err, ingest.ErrInvalidConfig) {
				t.Fatalf("SecretsFromEnv = %q, %v; want ErrInvalidConfig", got, err)
			}
		})
	}
}

func TestSecretsFromFile_FeedNewVerifier(t *testing.T) {
	t.Parallel()
	s, err := ingest.SecretsFromFile([]byte("# GitHub\nIt's a Secret to Everybody\n"))
	if err != nil {
		t.Fatal(err)
	}
	v := newVerifier(t, ingest.VerifyConfig{Scheme: ingest.SchemeGitHub, Secrets: s})
	if err := v.Verify(header("X-Hub-Signature-256", githubDocSignature), []byte(githubDocPayload), testNow); err != nil {
		t.Fatalf("Verify with the secret read from a file = %v", err)
	}
}
