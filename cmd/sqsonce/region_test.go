package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestHostRegion(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]string{
		"https://sqs.eu-west-1.amazonaws.com/123456789012/orders":                  "eu-west-1",
		"https://sqs.cn-north-1.amazonaws.com.cn/123456789012/orders":              "cn-north-1",
		"https://sqs-fips.us-gov-west-1.amazonaws.com/123456789012/orders":         "us-gov-west-1",
		"https://sqs.ap-southeast-2.api.aws/123456789012/orders":                   "ap-southeast-2",
		"https://vpce-0a1b2c3d4e5f-abcdefgh.sqs.eu-central-1.vpce.amazonaws.com":   "eu-central-1",
		"https://eu-west-2.queue.amazonaws.com/123456789012/orders":                "eu-west-2",
		"https://queue.amazonaws.com/123456789012/orders":                          "us-east-1",
		"http://sqs.us-east-1.localhost.localstack.cloud:4566/000000000000/orders": "us-east-1",
		"https://SQS.EU-WEST-3.AMAZONAWS.COM/123456789012/orders":                  "eu-west-3",
		"http://127.0.0.1:4566/000000000000/orders":                                "",
		"http://localhost:9324/queue/orders":                                       "",
		"https://sqs.amazonaws.com/123456789012/orders":                            "",
		"https://sqs.example.com/123456789012/orders":                              "",
		"https://orders.queue.amazonaws.com/123456789012/orders":                   "",
		"::not a url": "",
		"https://sqs.eusc-de-east-1.amazonaws.eu/123456789012/orders":                      "eusc-de-east-1",
		"https://vpce-0a1b2c3d4e5f-abcdefgh-us-east-1a.sqs.us-east-1.vpce.amazonaws.com/q": "us-east-1",
	} {
		if got := hostRegion(url); got != want {
			t.Errorf("hostRegion(%q) = %q, want %q", url, got, want)
		}
	}
}

// The region every AWS request is signed for: queue.region, else the
// queue URL's, else the SDK's chain (AWS_REGION, the profile); a
// queue.region that contradicts the URL, or no region anywhere, is a
// configuration error that says so.
func TestMain_Region(t *testing.T) {
	t.Parallel()
	// SQS's stand-in: it records the region of each request's signature
	// and refuses the request, so that `sqsonce send` stops at once.
	var mu sync.Mutex
	var signed []string
	scope := regexp.MustCompile(`Credential=[^/]+/[0-9]+/([^/]+)/sqs/aws4_request`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if m := scope.FindStringSubmatch(r.Header.Get("Authorization")); m != nil {
			signed = append(signed, m[1])
		} else {
			signed = append(signed, "unsigned: "+r.Header.Get("Authorization"))
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"__type":"com.amazonaws.sqs#InvalidAddress","message":"refused by the test"}`))
	}))
	defer srv.Close()
	profile := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(profile, []byte("[default]\nregion = ca-central-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const (
		awsURL   = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"
		localURL = "http://127.0.0.1:9/000000000000/orders"
	)
	// No region from the environment the tests run in.
	noRegion := []string{"AWS_REGION=", "AWS_DEFAULT_REGION=", "AWS_PROFILE=", "AWS_CONFIG_FILE=" + filepath.Join(t.TempDir(), "none"),
		"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(t.TempDir(), "none")}
	e := newEnv(t, false, "exit 0\n")
	for _, tc := range []struct {
		name   string
		env    []string
		code   int
		region string   // signed for, when code is exitFailure (the refusal)
		output []string // in the output otherwise
	}{
		{"URLOverSDK", []string{"SQSONCE_QUEUE_URL=" + awsURL, "AWS_REGION=us-west-2"}, exitFailure, "eu-west-1", nil},
		{"SDKEnvironment", []string{"SQSONCE_QUEUE_URL=" + localURL, "AWS_REGION=eu-west-1"}, exitFailure, "eu-west-1", nil},
		{"SDKProfile", []string{"SQSONCE_QUEUE_URL=" + localURL, "AWS_CONFIG_FILE=" + profile}, exitFailure, "ca-central-1", nil},
		{"ExplicitOverSDK", []string{"SQSONCE_QUEUE_URL=" + localURL, "SQSONCE_QUEUE_REGION=ap-south-1", "AWS_REGION=eu-west-1"}, exitFailure, "ap-south-1", nil},
		{"ExplicitAgreeing", []string{"SQSONCE_QUEUE_URL=" + awsURL, "SQSONCE_QUEUE_REGION=eu-west-1"}, exitFailure, "eu-west-1", nil},
		{"Contradiction", []string{"SQSONCE_QUEUE_URL=" + awsURL, "SQSONCE_QUEUE_REGION=us-east-1"}, exitUsage, "",
			[]string{`queue.region: is "us-east-1", but queue.url (` + awsURL + `) is in "eu-west-1"`}},
		{"None", []string{"SQSONCE_QUEUE_URL=" + localURL}, exitUsage, "", []string{"queue.region: no region", "AWS_REGION"}},
	} {
		mu.Lock()
		signed = nil
		mu.Unlock()
		env := append(append(append([]string{}, noRegion...), "SQSONCE_QUEUE_ENDPOINT="+srv.URL), tc.env...)
		code, out := e.run("send", `{"id":"r-1"}`+"\n", env...)
		mu.Lock()
		got := append([]string(nil), signed...)
		mu.Unlock()
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d:\n%s", tc.name, code, tc.code, out)
			continue
		}
		if tc.region != "" && (len(got) == 0 || slices.ContainsFunc(got, func(r string) bool { return r != tc.region })) {
			t.Errorf("%s: requests signed for %q, want %s:\n%s", tc.name, got, tc.region, out)
		}
		if tc.region == "" && len(got) > 0 {
			t.Errorf("%s: %d requests sent, want none", tc.name, len(got))
		}
		for _, want := range tc.output {
			if !strings.Contains(out, want) {
				t.Errorf("%s: no %q in:\n%s", tc.name, want, out)
			}
		}
	}
}
