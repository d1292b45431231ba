package main

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// awsSecretVars are the variables through which the AWS SDK finds this
// process's credentials: the keys themselves, and the tokens, files and
// endpoints that yield them (a container's credentials endpoint, a web
// identity token).
var awsSecretVars = []string{
	"AWS_ACCESS_KEY_ID",
	"AWS_SECRET_ACCESS_KEY",
	"AWS_SESSION_TOKEN",
	"AWS_SECURITY_TOKEN",
	"AWS_CONTAINER_AUTHORIZATION_TOKEN",
	"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
	"AWS_CONTAINER_CREDENTIALS_FULL_URI",
	"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
	"AWS_WEB_IDENTITY_TOKEN_FILE",
}

// ownSecrets names the variables that hold secrets sqsonce itself uses
// with cfg, whichever of them are set: AWS credentials, the PostgreSQL
// password (PGPASSWORD, PGPASSFILE), the OTLP exporter's headers, the
// webhook secrets each [[ingest.source]] names in secret_env, and
// SQSONCE_LEDGER_URL when the ledger URL carries a password. An exec
// handler's command does not inherit them unless handler.env names them
// one by one.
func ownSecrets(cfg Config) []string {
	names := slices.Clone(awsSecretVars)
	names = append(names, "PGPASSWORD", "PGPASSFILE", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS")
	for _, src := range cfg.Ingest.Source {
		if src.SecretEnv != "" && !slices.Contains(names, src.SecretEnv) {
			names = append(names, src.SecretEnv)
		}
	}
	if hasPassword(cfg.Ledger.URL) {
		names = append(names, envPrefix+"LEDGER_URL")
	}
	return names
}

// passwordPair finds a password in a connection string of key=value pairs.
var passwordPair = regexp.MustCompile(`(^|\s)password\s*=`)

// hasPassword reports whether a PostgreSQL connection string carries a
// password: in a URL's user information or its password parameter, or as
// a password pair.
func hasPassword(conn string) bool {
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		u, err := url.Parse(conn)
		if err != nil {
			return true // cannot tell: the safe side
		}
		_, set := u.User.Password()
		return set || u.Query().Has("password")
	}
	return passwordPair.MatchString(conn)
}
