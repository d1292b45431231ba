package ingest_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/sqsonce/sqsonce/ingest"
)

// BenchmarkVerifier_Verify measures one accepted Verify of a 2 KiB body per
// scheme, with one secret and with two (rotation, the request signed with
// the second).
//
//	go test -run '^$' -bench Verifier_Verify -benchmem ./ingest/
func BenchmarkVerifier_Verify(b *testing.B) {
	payload := bytes.Repeat([]byte(`{"k":"v"},`), 2048/10+1)[:2048]
	now := testNow.Unix()
	ts := strconv.FormatInt(now, 10)
	std := standardKey(b, standardSecret2)
	cases := []struct {
		name string
		cfg  ingest.VerifyConfig
		h    http.Header
	}{
		{"stripe", ingest.VerifyConfig{Scheme: ingest.SchemeStripe},
			header("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s,v0=%s", now, stripeSig(stripeSecret2, now, payload), stripeSig("x", now, payload)))},
		{"github", ingest.VerifyConfig{Scheme: ingest.SchemeGitHub},
			header("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac([]byte(stripeSecret2), string(payload))))},
		{"standard", ingest.VerifyConfig{Scheme: ingest.SchemeStandard},
			header("webhook-id", "msg_1", "webhook-timestamp", ts, "webhook-signature", standardSig(std, "msg_1", ts, payload))},
		{"hmac-sha256", ingest.VerifyConfig{Scheme: ingest.SchemeHMACSHA256, SignatureHeader: "X-Signature"},
			header("X-Signature", hex.EncodeToString(mac([]byte(stripeSecret2), string(payload))))},
	}
	for _, c := range cases {
		for _, n := range []int{1, 2} {
			cfg := c.cfg
			// The request is signed with the second secret of each
			// scheme: stripeSecret2 as it is, or standardSecret2.
			cfg.Secrets = secrets(stripeSecret, stripeSecret2)[2-n:]
			if cfg.Scheme == ingest.SchemeStandard {
				cfg.Secrets = secrets(standardSecret, standardSecret2)[2-n:]
			}
			v := newVerifier(b, cfg)
			b.Run(fmt.Sprintf("%s/secrets=%d", c.name, n), func(b *testing.B) {
				b.SetBytes(int64(len(payload)))
				b.ReportAllocs()
				for b.Loop() {
					if err := v.Verify(c.h, payload, testNow); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
